"""Pillow reference path of the decode face: headers and crop/resize/flip decodes, no extension."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, JpegImagePlugin

from fastloader.decode.record import Record
from fastloader.errors import DecodeError

# The image files an image tree's scan takes (pack/sources/scan) and that a folder given as a
# packed dataset is recognised by (format/not_packed): the formats Pillow reads here
IMAGE_EXTENSIONS = frozenset(
    {
        ".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".webp", ".bmp", ".gif",
        ".tif", ".tiff", ".ppm", ".pgm", ".pbm", ".pnm",
    }
)  # fmt: skip

# Pillow modes -> the colour-space names the native header uses.
_MODE_SPACES = {
    "L": "gray",
    "1": "gray",
    "RGB": "rgb",
    "RGBA": "rgba",
    "CMYK": "cmyk",
    "P": "palette",
}
_SAMPLING_NAMES = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}


@dataclass(frozen=True)
class ImageHeader:
    """What an encoded image says about itself, read without decoding pixels.

    Attributes:
        width: width in pixels.
        height: height in pixels.
        components: colour components (1, 3 or 4).
        color_space: "gray", "ycbcr", "rgb", "cmyk", "ycck" or Pillow's mode, lowercased.
        subsampling: "4:4:4", "4:2:2", "4:2:0", "gray" or "other".
        progressive: True for a progressive JPEG.
    """

    width: int
    height: int
    components: int
    color_space: str  # "gray" | "ycbcr" | "rgb" | "cmyk" | "ycck" | Pillow's mode, lowercased
    subsampling: str  # "4:4:4" | "4:2:2" | "4:2:0" | "gray" | "other"
    progressive: bool


def is_jpeg(data: Record) -> bool:
    """True when the bytes start as Pillow wants a JPEG to, SOI then a marker's 0xFF (the
    native path's gate; Pillow refuses other bytes after SOI, so they go to Pillow)."""
    return bytes(memoryview(data)[:3]) == b"\xff\xd8\xff"


def _open(data: Record) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except Exception as exc:  # Pillow raises many types for bad bytes
        raise DecodeError(f"cannot read image bytes ({len(data)} bytes): {exc}") from exc


def _jpeg_color_space(im: JpegImagePlugin.JpegImageFile) -> str:
    """Mirror libjpeg's guess (JFIF, Adobe transform, component ids) of the stored colour space."""
    if im.mode == "L":
        return "gray"
    transform = im.info.get("adobe_transform")
    if im.mode == "CMYK":
        return "cmyk" if "adobe" not in im.info or transform == 0 else "ycck"
    if "jfif" in im.info:
        return "ycbcr"
    if "adobe" in im.info:
        return "rgb" if transform == 0 else "ycbcr"
    ids = tuple(layer[0] for layer in getattr(im, "layer", []))
    return "rgb" if ids == (82, 71, 66) else "ycbcr"


def _jpeg_subsampling(im: JpegImagePlugin.JpegImageFile) -> str:
    if im.mode == "L":
        return "gray"
    if len(getattr(im, "layer", [])) != 3:
        return "other"
    return _SAMPLING_NAMES.get(JpegImagePlugin.get_sampling(im), "other")


def header_pillow(data: Record) -> ImageHeader:
    """ImageHeader of any format Pillow reads (JPEG fields mirror libjpeg's view)."""
    with _open(data) as im:
        width, height = im.size
        components = len(im.getbands())
        if isinstance(im, JpegImagePlugin.JpegImageFile):
            progressive = bool(im.info.get("progressive") or im.info.get("progression"))
            return ImageHeader(
                width, height, components, _jpeg_color_space(im), _jpeg_subsampling(im), progressive
            )
        space = _MODE_SPACES.get(im.mode, im.mode.lower())
        return ImageHeader(width, height, components, space, "other", False)


# PIL.ImageOps.exif_transpose's transpose of each EXIF orientation (others: none)
TRANSPOSES = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
              4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
              6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
              8: Image.Transpose.ROTATE_90}


class DamagedExifWarning(UserWarning):
    """An image's EXIF block could not be read whole: its orientation is taken as 1 (the
    pixels are not in doubt; pack time says so once per file)."""


def read_orientation(image: Image.Image) -> tuple[int, str | None]:
    """The EXIF orientation exif_transpose would apply to an open image (its EXIF tag, else
    XMP's tiff:Orientation, as Image.getexif reads them), 1-8, and why it was taken as 1 when
    the EXIF block is damaged (None when it reads cleanly or there is none).

    Pillow's own warnings about the block are kept in that reason, never loose: a load reads
    it again per decode."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            exif = image.getexif()
            value = exif.get(0x0112)
        except Exception as exc:  # Pillow raises many types for a damaged EXIF block
            return 1, f"{type(exc).__name__}: {exc}"
    pillow = "; ".join(dict.fromkeys(str(w.message).strip() for w in said))
    if isinstance(value, int) and 1 <= value <= 8:
        return value, None
    if 0x0112 in exif:  # present, but no orientation (a string, a fraction, 9 ...)
        return 1, f"its Orientation tag is {value!r}, not an integer in 1..8"
    if pillow or (len(image.info.get("exif", b"")) > 6 and not exif):  # unreadable, no tags
        return 1, pillow or "no tag in it could be read"
    return 1, None


def image_orientation(image: Image.Image, warn: bool = False) -> int:
    """read_orientation's orientation (1 when none or unreadable: a broken EXIF block turns
    nothing); with warn, a damaged block is a DamagedExifWarning naming what is wrong."""
    orientation, damage = read_orientation(image)
    if warn and damage is not None:
        warnings.warn(f"its EXIF block gives no orientation ({damage}): the orientation is "
                      "taken as 1, the pixels are packed as stored", DamagedExifWarning,
                      stacklevel=2)
    return orientation


def exif_orientation(data: Record) -> int:
    """image_orientation of image bytes (read from the header; every pixel of a non-JPEG is
    loaded first, as exif_transpose does: a PNG may keep its EXIF after the pixels)."""
    with _open(data) as im:
        if im.format != "JPEG":
            try:
                im.load()
            except Exception as exc:
                raise DecodeError(f"cannot decode image ({len(data)} bytes): {exc}") from exc
        return image_orientation(im)


# Modes of 16-bit single-channel images (a 16-bit grey PNG or TIFF opens as one of these);
# Pillow's convert("RGB") clips them at 255, so almost every pixel comes out white.
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")


def to_rgb(image: Image.Image) -> Image.Image:
    """An open image as 8-bit RGB: convert("RGB"), except a 16-bit grey image, which keeps its
    high byte (value >> 8) as the 8-bit grey, as Pillow reads a 16-bit RGB PNG and as OpenCV
    and torchvision reduce 16 bits to 8."""
    if image.mode in SIXTEEN_BIT_MODES or (image.mode == "I" and image.format == "PNG"):
        high = (np.asarray(image).astype(np.uint32) >> 8).astype(np.uint8)  # "I": PNG's 16 bits
        return Image.fromarray(high, "L").convert("RGB")
    return image.convert("RGB")


class BitDepthWarning(UserWarning):
    """An image holds more than 8 bits a sample: what the loader makes of it (pack time says
    so once per file)."""


def depth_note(image: Image.Image) -> str | None:
    """What the loader does with an opened (not yet loaded) image deeper than 8 bits, or None:
    16 bits keep their high byte (to_rgb; Pillow does the same to a 16-bit RGB PNG), 32-bit
    integer or float samples are clipped to 0..255 as Pillow's convert("RGB") clips them."""
    raw = " ".join(str(t.args) for t in getattr(image, "tile", None) or [])
    if image.mode in SIXTEEN_BIT_MODES or (image.mode == "I" and image.format == "PNG") or (
            ";16" in raw):
        return (f"a 16-bit {image.format} ({image.mode}): loaded as 8 bits "
                "by each sample's high byte (value >> 8)")
    if image.mode in ("I", "F"):
        kind = "integer" if image.mode == "I" else "float"
        return (f"a 32-bit {kind} {image.format} ({image.mode}): loaded as Pillow's "
                "convert('RGB') makes it, each sample clipped to 0..255; scale it to 8 bits "
                "before packing if its values run higher")
    return None


def decode_whole(data: Record, orientation: int = 1) -> Image.Image:
    """The whole image as 8-bit RGB, turned by the EXIF orientation as exif_transpose turns
    it: what decode_pillow crops (and decode_views_into's Pillow path crops every view from)."""
    with _open(data) as im:
        try:
            rgb = to_rgb(im)
        except Exception as exc:
            raise DecodeError(f"cannot decode image ({len(data)} bytes): {exc}") from exc
    if orientation in TRANSPOSES:
        rgb = rgb.transpose(TRANSPOSES[orientation])
    return rgb


def decode_pillow(
    data: Record,
    crop: tuple[int, int, int, int] | None,
    size: tuple[int, int] | None,
    flip: bool,
    orientation: int = 1,
) -> np.ndarray:
    """Decode to RGB uint8 (H, W, 3): turned by the EXIF orientation as exif_transpose turns
    it, then crop (top, left, h, w), resize BILINEAR to size, mirror.

    A crop that does not fit inside the image raises DecodeError (the bytes disagree with
    what the caller believed about the image).
    """
    rgb = decode_whole(data, orientation)
    if crop is not None:
        top, left, height, width = crop
        if top + height > rgb.height or left + width > rgb.width:
            raise DecodeError(
                f"crop (top={top}, left={left}, height={height}, width={width}) does not fit in "
                f"the {rgb.height}x{rgb.width} image; the index or the planned crop is wrong"
            )
        rgb = rgb.crop((left, top, left + width, top + height))
    if size is not None and (rgb.height, rgb.width) != tuple(size):
        rgb = rgb.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    if flip:
        rgb = rgb.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    # np.array, not asarray: Pillow's array view is read-only, the native path's is writable,
    # and decode() must hand back the same kind of array either way.
    return np.array(rgb, dtype=np.uint8)


def to_planar(
    pixels: np.ndarray, out: np.ndarray, scale: np.ndarray | None, shift: np.ndarray | None
) -> None:
    """One (H, W, 3) uint8 sample -> out (3, H, W): a copy for uint8, else float32
    x * scale[c] + shift[c] as a float32 multiply then add (the native kernels' arithmetic)."""
    chw = pixels.transpose(2, 0, 1)
    if out.dtype == np.uint8:
        out[...] = chw
        return
    if scale is None:
        out[...] = chw
    else:
        np.multiply(chw, scale[:, None, None], out=out)
    if shift is not None:
        out += shift[:, None, None]
