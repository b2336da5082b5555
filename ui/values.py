"""How one value of a row is shown: images as images (their type found from their bytes), text as text, the rest
described; and the thumbnails of large images.

Only the raster formats a browser shows are ever served as images (:data:`BROWSER_IMAGES`): an SVG is a document
that can hold scripts, so stored bytes are never served as one, nor as HTML.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

#: Raster formats browsers show, by their first bytes. (BMP's two-byte mark is weak, but the bytes are an image
#: column's: a wrong guess shows a broken image, never anything else.)
BROWSER_IMAGES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),
    (b"ftypavif", 4, "image/avif"),
    (b"BM", 0, "image/bmp"),
)
#: An image this small is its own thumbnail; a larger one is scaled to fit :data:`THUMBNAIL_PIXELS` square.
THUMBNAIL_FROM_BYTES = 48 << 10
THUMBNAIL_PIXELS = 160
#: A thumbnail may be made from a JPEG decoded this much smaller than the thumbnail's size (then it is that size).
DRAFT_SHARE = 0.75
#: Characters of a text value shown on a page (the whole value is one click away).
TEXT_SHOWN = 500


def image_type(data: bytes | bytearray | memoryview) -> str | None:
    """The content type of ``data`` when it is an image file a browser shows (found from its first bytes), else
    None."""
    head = bytes(data[:16])
    for mark, offset, content_type in BROWSER_IMAGES:
        if head[offset : offset + len(mark)] == mark and (mark != b"WEBP" or head[:4] == b"RIFF"):
            return content_type
    return None


@dataclass(frozen=True)
class Cell:
    """One value as a page shows it.

    ``kind`` is ``image`` (its bytes are served by the value page), ``text``, ``bytes`` (not an image a browser
    shows), ``array`` or ``value``; ``text`` is what is written (escaped by the templates), ``size`` a byte count.
    """

    kind: str
    text: str = ""
    size: int = 0
    shortened: bool = False


def cell(value: Any) -> Cell:
    """How ``value`` (a row's value of any column) is shown."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = len(value)
        found = image_type(value)
        if found is not None:
            return Cell("image", found.removeprefix("image/").upper(), size)
        return Cell("bytes", f"{size:,} bytes: " + bytes(value[:12]).hex(" ") + (" …" if size > 12 else ""), size)
    if isinstance(value, str):
        return Cell("text", value[:TEXT_SHOWN], len(value), shortened=len(value) > TEXT_SHOWN)
    if isinstance(value, np.ndarray):
        shown = np.array2string(value, threshold=12, edgeitems=3, max_line_width=80)
        return Cell("array", f"{value.dtype}{list(value.shape)} {shown}")
    text = "null" if value is None else str(value)
    return Cell("value", text[:TEXT_SHOWN], shortened=len(text) > TEXT_SHOWN)


def thumbnail(data: bytes) -> tuple[bytes, str] | None:
    """A small image of ``data`` and its content type: ``data`` itself when it is a small image a browser shows, else
    a JPEG (a PNG for an image with transparency) that fits :data:`THUMBNAIL_PIXELS` square; None when Pillow cannot
    read it."""
    found = image_type(data)
    if found is not None and len(data) <= THUMBNAIL_FROM_BYTES:
        return data, found
    try:
        with Image.open(io.BytesIO(data)) as image:
            # A JPEG is decoded at a reduced scale (1/2 to 1/8: the smallest that keeps 3/4 of the thumbnail's size),
            # then scaled to the thumbnail: a 500x375 one in 4.7 ms rather than 15 decoded whole.
            scale = min(1.0, THUMBNAIL_PIXELS / max(image.size)) * DRAFT_SHARE
            image.draft("RGB", (max(1, round(image.width * scale)), max(1, round(image.height * scale))))
            image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS), reducing_gap=None)
            keep_alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
            small = image.convert("RGBA" if keep_alpha else "RGB")
            out = io.BytesIO()
            if keep_alpha:
                small.save(out, "PNG")
                return out.getvalue(), "image/png"
            small.save(out, "JPEG", quality=80)
            return out.getvalue(), "image/jpeg"
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None
