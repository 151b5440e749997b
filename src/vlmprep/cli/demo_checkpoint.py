"""The demo checkpoint of `vlmprep demo`: a tiny random-weight Gemma3, built offline, and its two synthetic images.

The checkpoint is a real one as far as loading goes: a Gemma3 config, a `tokenizers` word-level tokenizer with Gemma3's
special tokens, a `Gemma3ImageProcessor` sized to the tiny vision tower and a `Gemma3Processor` with a Gemma-style chat
template, all written with `save_pretrained` and read back with `from_pretrained`. It is built once into the user
cache directory (`$VLMPREP_CACHE/demo-gemma3`, by default `~/.cache/vlmprep/demo-gemma3`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from ..testing.checkpoints import DEMO_CHAT_TEMPLATE, write_chat_checkpoint

DEMO_CHECKPOINT_NAME = "demo-gemma3"
# Bumped whenever the checkpoint layout changes, so an old cached build is rebuilt rather than misread.
DEMO_CHECKPOINT_VERSION = "2"
_VERSION_FILE = "vlmprep_demo_version.txt"


def demo_cache_dir() -> Path:
    """The directory the demo checkpoint lives in: `$VLMPREP_CACHE/demo-gemma3`, else `~/.cache/vlmprep/demo-gemma3`.

    Returns:
        `Path`
    """
    root = os.environ.get("VLMPREP_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "vlmprep")
    return Path(root) / DEMO_CHECKPOINT_NAME


def build_demo_checkpoint(directory: str | os.PathLike, seed: int = 0) -> Path:
    """Write a tiny random-weight Gemma3 checkpoint (model, tokenizer, image processor, processor) to `directory`.

    Args:
        directory (`str` or `os.PathLike`): where to write; created (with parents) when missing.
        seed (`int`, *optional*, defaults to 0): seed of the random weights.

    Returns:
        `Path`: `directory`.
    """
    import transformers

    from ..testing import tiny_gemma3_config

    # A sliding window shorter than the later turns' prompts, as Gemma3's 1024 is shorter than long chats.
    config = tiny_gemma3_config(sliding_window=32)
    model_class = transformers.Gemma3ForConditionalGeneration
    directory = write_chat_checkpoint(directory, model_class, config, _gemma3_processor, seed)
    (directory / _VERSION_FILE).write_text(DEMO_CHECKPOINT_VERSION + "\n")
    return directory


def _gemma3_processor(config, tokenizer):
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    vision_size = config.vision_config.image_size
    return Gemma3Processor(
        image_processor=Gemma3ImageProcessor(size={"height": vision_size, "width": vision_size}),
        tokenizer=tokenizer,
        chat_template=DEMO_CHAT_TEMPLATE,
        image_seq_length=config.mm_tokens_per_image,
    )


def ensure_demo_checkpoint(directory: str | os.PathLike | None = None) -> tuple[Path, bool]:
    """The demo checkpoint, built first when missing (written to a temporary directory, then moved into place).

    Args:
        directory (`str` or `os.PathLike`, *optional*): defaults to `demo_cache_dir()`.

    Returns:
        `tuple[Path, bool]`: the checkpoint directory, and whether it was built by this call.
    """
    directory = Path(directory) if directory is not None else demo_cache_dir()
    version_file = directory / _VERSION_FILE
    if version_file.is_file() and version_file.read_text().strip() == DEMO_CHECKPOINT_VERSION:
        return directory, False
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        build_demo_checkpoint(staging)
        if directory.exists():
            shutil.rmtree(directory)  # an older or half-written build
        try:
            staging.rename(directory)
        except OSError:
            if not version_file.is_file():  # not a concurrent `vlmprep demo` that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory, True


def demo_images(size: int = 64) -> list[Image.Image]:
    """Two synthetic RGB images: a sunset-like gradient and a checkerboard with a circle.

    Args:
        size (`int`, *optional*, defaults to 64): height and width in pixels.

    Returns:
        `list[PIL.Image.Image]`
    """
    y, x = np.mgrid[0:size, 0:size] / (size - 1)
    gradient = np.stack([0.9 - 0.4 * y, 0.3 + 0.4 * y * x, 0.8 * (1 - y)], axis=-1)
    checker = ((np.floor(x * 8) + np.floor(y * 8)) % 2)[..., None] * np.array([0.2, 0.6, 0.3])
    circle = ((x - 0.5) ** 2 + (y - 0.5) ** 2 < 0.08)[..., None] * np.array([0.9, 0.8, 0.1])
    pictures = [gradient, np.clip(checker + circle, 0, 1)]
    return [Image.fromarray((picture * 255).astype(np.uint8), mode="RGB") for picture in pictures]
