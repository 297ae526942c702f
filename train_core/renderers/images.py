"""Image parts of messages, as Hugging Face chat templates and tinker-cookbook accept them
(`{"type": "image", "image": PIL.Image | path | data URL}`), turned into image chunks.

The number of positions an image fills is a pure function of its size and the model's image
processor settings (`VisionSpec`): Qwen-VL processors resize an image to multiples of
`patch_size * merge_size` pixels within [min_pixels, max_pixels] ("smart resize"), cut it into
patches and merge `merge_size x merge_size` patches into one token. The renderer computes that
count; the backend's image processor computes it again from the pixels and refuses a mismatch.
Images are stored as PNG (lossless), so the backend sees exactly the pixels the renderer saw.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from train_core.renderers.errors import RendererError
from train_core.types import ImageChunk

if TYPE_CHECKING:
    from PIL import Image


class ImagePartError(RendererError):
    """An image part whose image cannot be read (not a PIL image, an existing file or a base64
    `data:` URL), or a part of an unknown type."""


@dataclass(frozen=True)
class VisionSpec:
    """The image processor settings that decide how many tokens an image becomes; the defaults
    are Qwen3-VL's published `preprocessor_config.json` (patch 16, merge 2, at least 65,536 and at
    most 16,777,216 pixels)."""

    patch_size: int = 16
    merge_size: int = 2
    min_pixels: int = 65_536
    max_pixels: int = 16_777_216

    def resized(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) after the processor's resize: multiples of patch * merge, the aspect
        ratio kept, the area within [min_pixels, max_pixels]."""
        factor = self.patch_size * self.merge_size
        if max(height, width) / min(height, width) > 200:
            raise ImagePartError(f"an image of {width}x{height} pixels is too elongated (aspect ratio above 200)")
        h_bar = max(factor, round(height / factor) * factor)
        w_bar = max(factor, round(width / factor) * factor)
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        return h_bar, w_bar

    def image_tokens(self, height: int, width: int) -> int:
        h_bar, w_bar = self.resized(height, width)
        return (h_bar // self.patch_size) * (w_bar // self.patch_size) // (self.merge_size**2)


QWEN3_VL_VISION = VisionSpec()


def load_image(image: Any) -> Image.Image:
    """An RGB PIL image from a PIL image, a path (str or Path, `file://` allowed) or a base64
    `data:image/...` URL; remote URLs are refused (fetch them into files first: training data must
    not depend on the network)."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, bytes):
        raw = image
    elif isinstance(image, str) and image.startswith("data:"):
        header, _, payload = image.partition(",")
        if ";base64" not in header:
            raise ImagePartError(f"a data URL image must be base64-encoded, got {header!r}")
        try:
            raw = base64.b64decode(payload, validate=True)
        except binascii.Error as exc:
            raise ImagePartError(f"the data URL image is not valid base64 ({exc})") from None
    elif isinstance(image, str | Path):
        text = str(image)
        if "://" in text and not text.startswith("file://"):
            raise ImagePartError(f"image {text!r:.80}: remote URLs are not fetched; download the image to a file")
        path = Path(text.removeprefix("file://")).expanduser()
        if not path.is_file():
            raise ImagePartError(f"image file {str(path)!r} does not exist")
        raw = path.read_bytes()
    else:
        raise ImagePartError(
            f"an image part's 'image' must be a PIL image, a file path or a data: URL, got {type(image).__name__}"
        )
    try:
        with Image.open(io.BytesIO(raw)) as opened:
            return opened.convert("RGB")
    except UnidentifiedImageError:
        raise ImagePartError("the image data is not an image format PIL can read") from None


def image_chunk(image: Any, spec: VisionSpec) -> ImageChunk:
    """The image as a PNG chunk filling `spec.image_tokens` positions."""
    pil = load_image(image)
    buffer = io.BytesIO()
    pil.save(buffer, format="PNG")
    return ImageChunk(buffer.getvalue(), "png", spec.image_tokens(pil.height, pil.width))


def image_of_part(part: Mapping[str, Any]) -> Any:
    """What an image part holds: `image` (HF, the cookbook), or an OpenAI-style `image_url`."""
    if "image" in part:
        return part["image"]
    url = part.get("image_url")
    if isinstance(url, Mapping):
        url = url.get("url")
    if url is None:
        raise ImagePartError("an image part needs an 'image' (a PIL image, a file path or a data: URL)")
    return url


def data_url(image: Image.Image) -> str:
    """A PIL image as a base64 PNG `data:` URL, the form image parts take in JSONL data."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
