"""Test image trees with every awkward kind of file: modes, formats, odd sizes, broken files."""

from __future__ import annotations

from pathlib import Path

from imagegen import encode, photo_like

# relpath -> (height, width, Pillow format, mode, save options)
MIXED_SPECS: dict[str, tuple[int, int, str, str, dict[str, object]]] = {
    "cat/baseline.jpg": (48, 64, "JPEG", "RGB", {"quality": 90}),
    "cat/gray.JPG": (40, 30, "JPEG", "L", {"quality": 85}),
    "cat/cmyk.jpeg": (33, 21, "JPEG", "CMYK", {"quality": 90}),
    "cat/nested/deeper/progressive.jpg": (64, 48, "JPEG", "RGB", {"progressive": True}),
    "cat/one_pixel.jpg": (1, 1, "JPEG", "RGB", {}),
    "dog/odd_7x13.jpg": (7, 13, "JPEG", "RGB", {"quality": 95}),
    "dog/plain.png": (20, 31, "PNG", "RGB", {}),
    "dog/alpha.png": (17, 9, "PNG", "RGBA", {}),
    "dog/palette.gif": (12, 12, "GIF", "P", {}),
    "dog/pic.bmp": (9, 5, "BMP", "RGB", {}),
    "dog/pic.webp": (16, 24, "WEBP", "RGB", {"quality": 80}),
    "dog/big.jpg": (150, 200, "JPEG", "RGB", {"quality": 90}),
    "eel/only.jpg": (13, 7, "JPEG", "RGB", {"subsampling": 0}),
}
CLASSES = ["cat", "dog", "eel"]


def make_mixed_tree(root: Path, seed: int = 0) -> dict[str, bytes]:
    """Write the MIXED_SPECS images plus ignorable files; return relpath -> bytes of images."""
    written: dict[str, bytes] = {}
    for k, (relpath, (height, width, fmt, mode, options)) in enumerate(MIXED_SPECS.items()):
        data = encode(photo_like(height, width, seed * 100 + k), fmt, mode, **options)
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written[relpath] = data
    # Ignored: hidden files and folders, non-image files, files outside class folders.
    (root / "cat" / ".hidden.jpg").write_bytes(written["cat/baseline.jpg"])
    (root / "dog" / ".cache").mkdir()
    (root / "dog" / ".cache" / "x.jpg").write_bytes(written["cat/baseline.jpg"])
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / "README.md").write_text("loose file outside the class folders")
    return written


def add_broken_files(root: Path) -> dict[str, str]:
    """Add unreadable images to root; return relpath -> what is wrong with it."""
    good = encode(photo_like(40, 40, 7), "JPEG", quality=90)
    broken = {
        "cat/truncated.jpg": good[: len(good) // 2],
        "dog/empty.jpg": b"",
        "eel/garbage.jpg": b"this is not a JPEG at all" * 10,
        "eel/bad_png.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 30,
    }
    for relpath, data in broken.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_bytes(data)
    return {
        "cat/truncated.jpg": "truncated",
        "dog/empty.jpg": "empty",
        "eel/garbage.jpg": "garbage",
        "eel/bad_png.png": "bad header",
    }


def make_flat_tree(root: Path, classes: int, per_class: int, size: int = 32) -> dict[str, bytes]:
    """Many small baseline JPEGs (for sharding, resume and speed tests); relpath -> bytes."""
    written: dict[str, bytes] = {}
    for c in range(classes):
        for i in range(per_class):
            relpath = f"c{c:02d}/img_{i:04d}.jpg"
            data = encode(photo_like(size + i % 5, size + c % 3, c * 10_000 + i), quality=85)
            (root / relpath).parent.mkdir(parents=True, exist_ok=True)
            (root / relpath).write_bytes(data)
            written[relpath] = data
    return written
