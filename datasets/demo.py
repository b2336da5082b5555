"""Small, real sample data for ``datamount demo``: PNG images in four classes and French-English pairs."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

CLASSES = ("stripes", "bars", "checks", "rings")

TRANSLATION_PAIRS = [
    ("L'inflation, en Europe, a dérapé sur l'alimentation", "Food: where European inflation slipped up"),
    ("Le chat dort sur le canapé.", "The cat is sleeping on the sofa."),
    ("Il pleut depuis ce matin.", "It has been raining since this morning."),
    ("Nous partons en vacances demain.", "We are going on holiday tomorrow."),
    ("Ce livre est plus intéressant que le film.", "This book is more interesting than the film."),
    ("Où se trouve la gare, s'il vous plaît ?", "Where is the station, please?"),
    ("Les données sont stockées sur plusieurs serveurs.", "The data is stored on several servers."),
    ("Le modèle apprend à partir de millions d'exemples.", "The model learns from millions of examples."),
    ("Elle a couru le marathon en moins de quatre heures.", "She ran the marathon in under four hours."),
    ("Le prix du pain a augmenté.", "The price of bread has gone up."),
    ("Je voudrais un café, s'il vous plaît.", "I would like a coffee, please."),
    ("La réunion est reportée à jeudi.", "The meeting has been moved to Thursday."),
    ("Les enfants jouent dans le jardin.", "The children are playing in the garden."),
    ("Il faut sauvegarder les fichiers chaque jour.", "The files must be backed up every day."),
    ("Le train a vingt minutes de retard.", "The train is twenty minutes late."),
    ("Merci pour votre aide.", "Thank you for your help."),
]


def png_bytes(pixels: np.ndarray) -> bytes:
    """Encode an ``(height, width, 3)`` uint8 array as a PNG file (8-bit RGB, no filtering)."""
    height, width, _ = pixels.shape
    scanlines = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(scanlines, 6))
        + chunk(b"IEND", b"")
    )


def _pattern(label: int, size: int, rng: np.random.Generator) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size]
    period = rng.integers(4, 12)
    shapes = [
        (y // period) % 2,
        (x // period) % 2,
        ((x // period) + (y // period)) % 2,
        (np.hypot(x - size / 2, y - size / 2) // period) % 2,
    ]
    colour = rng.integers(40, 255, size=3)
    image = shapes[label][..., None] * colour + rng.integers(0, 40, size=(size, size, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def write_demo_lists(folder: str | Path, *, images: int = 200, size: int = 64, seed: int = 0) -> tuple[Path, Path]:
    """Write the demo's image files with their ``.list`` and a translation-pair ``.list`` into ``folder``.

    Returns the image list's path and the translation list's path.
    """
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(images):
        label = index % len(CLASSES)
        name = f"images/{CLASSES[label]}-{index:04d}.png"
        (folder / name).write_bytes(png_bytes(_pattern(label, size, rng)))
        rows.append(f"./{name}\t{label}\n")
    image_list = folder / "images.list"
    image_list.write_text("".join(rows), encoding="utf-8")
    text_list = folder / "translation.list"
    text_list.write_text("".join(f"{fr}\t{en}\n" for fr, en in TRANSLATION_PAIRS), encoding="utf-8")
    return image_list, text_list
