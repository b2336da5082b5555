"""How one value of a row is shown: images as images (their type found from their bytes), text as text, the rest
described; and the thumbnails of large images.

Only the raster formats a browser shows are ever served as images (:data:`BROWSER_IMAGES`): an SVG is a document
that can hold scripts, so stored bytes are never served as one, nor as HTML.

An image is made small only when its header (read without decoding it: Pillow opens lazily) says it decodes to at
most :data:`MAX_DECODED_PIXELS` (a JPEG counted at the reduced scale it is decoded at); a larger one is shown as a
placeholder naming its size, and its stored bytes are one click away. The images being decoded at any moment, over
every thread of the process, add up to at most :data:`DECODING_PIXELS`: a page of large images waits its turn
rather than holding them all decoded at once. A page draws every image in a cell of a fixed size, scaled up or down
to fit it with its aspect kept (:func:`drawn_size`).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
#: An image this small (and of at most :data:`MAX_DECODED_PIXELS`) is its own thumbnail; a larger one is scaled to
#: fit :data:`THUMBNAIL_PIXELS` square.
THUMBNAIL_FROM_BYTES = 48 << 10
THUMBNAIL_PIXELS = 160
#: A thumbnail may be made from a JPEG decoded this much smaller than the thumbnail's size (then it is that size).
DRAFT_SHARE = 0.75
#: Characters of a text value shown on a page (the whole value is one click away).
TEXT_SHOWN = 500
#: An image is made small (or served as its own thumbnail) only when it decodes to at most this many pixels:
#: 4096 x 4096, 64 MiB as Pillow holds RGB. Pillow itself only refuses more than twice its
#: ``MAX_IMAGE_PIXELS`` (179 M pixels, 716 MB decoded), and a PNG of one colour that decodes to 144 M pixels is 420 KB.
MAX_DECODED_PIXELS = 4096 * 4096
#: Pixels being decoded at once in this process, every thread together.
DECODING_PIXELS = 2 * MAX_DECODED_PIXELS
#: The sides of the square cells images are drawn in: a sample's card, and a row of a table.
CARD_CELL = 144
ROW_CELL = 96


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

    ``kind`` is ``image`` (its bytes are served by the value page, its thumbnail drawn), ``large-image`` (an image that
    decodes to more than :data:`MAX_DECODED_PIXELS`: described by its size, its bytes one click away), ``text``,
    ``bytes`` (not an image a browser shows), ``array`` or ``value``; ``text`` is what is written (escaped by the
    templates), ``size`` a byte count, ``width`` and ``height`` an image's pixels as its header says (0: unknown).
    """

    kind: str
    text: str = ""
    size: int = 0
    shortened: bool = False
    width: int = 0
    height: int = 0


def cell(value: Any) -> Cell:
    """How ``value`` (a row's value of any column) is shown."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = len(value)
        found = image_type(value)
        if found is not None:
            name = found.removeprefix("image/").upper()
            width, height, pixels = _header_size(bytes(value))
            kind = "large-image" if pixels > MAX_DECODED_PIXELS else "image"
            return Cell(kind, name, size, width=width, height=height)
        return Cell("bytes", f"{size:,} bytes: " + bytes(value[:12]).hex(" ") + (" …" if size > 12 else ""), size)
    if isinstance(value, str):
        return Cell("text", value[:TEXT_SHOWN], len(value), shortened=len(value) > TEXT_SHOWN)
    if isinstance(value, np.ndarray):
        shown = np.array2string(value, threshold=12, edgeitems=3, max_line_width=80)
        return Cell("array", f"{value.dtype}{list(value.shape)} {shown}")
    text = "null" if value is None else str(value)
    return Cell("value", text[:TEXT_SHOWN], shortened=len(text) > TEXT_SHOWN)


def drawn_size(width: int, height: int, side: int) -> tuple[int, int]:
    """The size an image of ``width`` x ``height`` pixels is drawn at in a square cell of side ``side``: scaled up or
    down until it fills the cell one way, its aspect kept (the cell itself when its size is unknown)."""
    if width <= 0 or height <= 0:
        return side, side
    scale = side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def describe_pixels(shown: Cell) -> str:
    """An image's size as a placeholder names it: ``12,000 × 12,000 pixels``."""
    if shown.width and shown.height:
        return f"{shown.width:,} × {shown.height:,} pixels"
    return f"more than {_PILLOW_LIMIT:,} pixels"


def thumbnail(data: bytes) -> tuple[bytes, str] | None:
    """A small image of ``data`` and its content type: ``data`` itself when it is a small image a browser shows, else
    a JPEG (a PNG for an image with transparency) that fits :data:`THUMBNAIL_PIXELS` square; None when it would
    decode to more than :data:`MAX_DECODED_PIXELS`, or when it is not small and Pillow cannot read it."""
    found = image_type(data)
    as_is = (data, found) if found is not None and len(data) <= THUMBNAIL_FROM_BYTES else None
    try:
        with Image.open(io.BytesIO(data)) as image:
            if as_is is not None and image.width * image.height <= MAX_DECODED_PIXELS:
                return as_is
            pixels = _reduced_pixels(image)
            if pixels > MAX_DECODED_PIXELS:
                return None
            with _decoding.held(pixels):
                image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS), reducing_gap=None)
            return _encoded(image)
    except Image.DecompressionBombError:
        return None
    except (UnidentifiedImageError, OSError, ValueError):
        return as_is


def _encoded(image: Image.Image) -> tuple[bytes, str]:
    """``image`` (a thumbnail) as a JPEG, or as a PNG when it has transparency."""
    keep_alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    converted = image.convert("RGBA" if keep_alpha else "RGB")
    out = io.BytesIO()
    if keep_alpha:
        converted.save(out, "PNG")
        return out.getvalue(), "image/png"
    converted.save(out, "JPEG", quality=80)
    return out.getvalue(), "image/jpeg"


def _reduced_pixels(image: Image.Image) -> int:
    """The pixels ``image`` (opened, not decoded) decodes to for its thumbnail. A JPEG is decoded at a reduced scale
    (1/2 to 1/8: the smallest that keeps 3/4 of the thumbnail's size), then scaled to the thumbnail: a 500x375 one in
    4.7 ms rather than 15 decoded whole."""
    scale = min(1.0, THUMBNAIL_PIXELS / max(image.size)) * DRAFT_SHARE
    image.draft("RGB", (max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    return image.width * image.height


def _header_size(data: bytes) -> tuple[int, int, int]:
    """The width and height of the image ``data`` as its header says, and the pixels it decodes to for its thumbnail:
    zeros when Pillow cannot read it (a browser may), unknown sides and more pixels than :data:`MAX_DECODED_PIXELS`
    when Pillow refuses to open it (more than :data:`_PILLOW_LIMIT` pixels)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            return width, height, _reduced_pixels(image)
    except Image.DecompressionBombError:
        return 0, 0, _PILLOW_LIMIT + 1
    except (UnidentifiedImageError, OSError, ValueError):
        return 0, 0, 0


class _PixelBudget:
    """Pixels that may be decoded at once: :meth:`held` waits until the pixels asked for fit beside those held."""

    def __init__(self, pixels: int) -> None:
        self._free = self._total = pixels
        self._changed = threading.Condition()

    @contextmanager
    def held(self, pixels: int) -> Iterator[None]:
        asked = min(pixels, self._total)  # no more than the whole budget: one larger would never fit
        with self._changed:
            while self._free < asked:
                self._changed.wait(timeout=1.0)
            self._free -= asked
        try:
            yield
        finally:
            with self._changed:
                self._free += asked
                self._changed.notify_all()


#: What Pillow refuses to open (twice its ``MAX_IMAGE_PIXELS``, as it was when this module was imported).
_PILLOW_LIMIT = 2 * (Image.MAX_IMAGE_PIXELS or 0)
_decoding = _PixelBudget(DECODING_PIXELS)
