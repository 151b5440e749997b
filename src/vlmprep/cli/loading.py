"""Loading what a command needs: the device, a local checkpoint (model and processor) and image files.

Every check the user can fail (an unknown device, a missing directory or file, an unsupported model type) raises
`CLIError` naming the fix, before anything slow runs where possible. torch, transformers and PIL are imported inside
the functions, so that building the parser (every `vlmprep` run, `--help` included) stays fast.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import PROG, CLIError


@contextlib.contextmanager
def quiet_transformers(enabled: bool = True) -> Iterator[None]:
    """Silence transformers' progress bars and informational logs (the command prints its own output)."""
    if not enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def resolve_device(device: str | None) -> str:
    """Check a `--device` value before anything is loaded: it must name a device this machine has.

    Args:
        device (`str`, *optional*): a torch device string (`cpu`, `cuda`, `cuda:1`, `mps`, ...); `None` picks `cuda`
            when available, else `cpu`.

    Returns:
        `str`: the device to load the model on.

    Raises:
        `CLIError` (exit code 2): the device is unknown to torch, or not available on this machine.
    """
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise CLIError(
            f"unknown device {device!r}; pass --device cpu, cuda, cuda:N or mps (or leave --device out: cuda when "
            "available, else cpu)",
            exit_code=2,
        ) from None
    if parsed.type == "cpu":
        return device
    if parsed.type == "meta":
        raise CLIError("--device meta holds no weights and cannot generate; pass --device cpu or cuda", exit_code=2)
    # mps has no device_count; the other accelerators (cuda, xpu, npu, ...) have a torch.<type> module with both.
    backend = torch.backends.mps if parsed.type == "mps" else getattr(torch, parsed.type, None)
    is_available = getattr(backend, "is_available", None)
    if not callable(is_available) or not is_available():
        raise CLIError(
            f"device {device!r} is not available: this torch build or machine has no {parsed.type} device; "
            "pass --device cpu (or leave --device out: cuda when available, else cpu)",
            exit_code=2,
        )
    device_count = getattr(backend, "device_count", None)
    count = device_count() if callable(device_count) else 1
    if parsed.index is not None and parsed.index >= count:
        raise CLIError(
            f"device {device!r} is not available: {count} {parsed.type} device(s) visible; pass --device "
            f"{parsed.type}:0{f' to {parsed.type}:{count - 1}' if count > 1 else ''}",
            exit_code=2,
        )
    return device


def load_model_and_processor(path: str, device: str | None = None, progress: IO[str] | None = None) -> tuple[Any, Any]:
    """Load a local checkpoint of a supported family: `AutoProcessor` and `vlmprep.AutoModelForImageTextToText`.

    Args:
        path (`str`): a checkpoint directory.
        device (`str`, *optional*): torch device; defaults to `cuda` when available, else `cpu`.
        progress (`IO[str]`, *optional*): where to report loading (a line before, transformers' weight-loading
            progress bar, a line after); nothing is reported when `None`.

    Returns:
        `tuple[PreTrainedModel, ProcessorMixin]`

    Raises:
        `CLIError`: the device is unknown or unavailable, the directory or its config is missing, or the model type
            has no vlmprep drop-in class.
    """
    from transformers import AutoConfig, AutoProcessor

    from ..models.auto import DROP_IN_CLASSES, AutoModelForImageTextToText

    device = resolve_device(device)
    if not Path(path).is_dir():
        raise CLIError(f"model directory not found: {path} (pass a local checkpoint directory)")
    if not (Path(path) / "config.json").is_file():
        raise CLIError(f"no config.json in {path}: not a transformers checkpoint directory")
    config = AutoConfig.from_pretrained(path)
    if config.model_type not in DROP_IN_CLASSES:
        raise CLIError(
            f"unsupported model type {config.model_type!r} in {path}; vlmprep supports: "
            f"{', '.join(sorted(DROP_IN_CLASSES))}"
        )
    started = time.perf_counter()
    if progress is not None:
        print(f"{PROG}: loading {path} ({config.model_type}) on {device} ...", file=progress, flush=True)
    processor = AutoProcessor.from_pretrained(path)
    if getattr(processor, "chat_template", None) is None:
        raise CLIError(f"the processor in {path} has no chat template; vlmprep chat/generate need one")
    with progress_bars(enabled=progress is not None):
        model = AutoModelForImageTextToText.from_pretrained(path, config=config, dtype="auto").to(device).eval()
    if progress is not None:
        print(f"{PROG}: loaded in {time.perf_counter() - started:.1f} s", file=progress, flush=True)
    return model, processor


def loading_progress() -> IO[str] | None:
    """Where to report loading: stderr when a person watches it; piped or captured runs keep stderr for errors only.

    Returns:
        `IO[str]` or `None`
    """
    return sys.stderr if sys.stderr.isatty() else None


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """Turn transformers' progress bars ("Loading weights") on for the block, whatever `quiet_transformers` did."""
    from transformers.utils import logging as hf_logging

    if not enabled or hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.enable_progress_bar()
    try:
        yield
    finally:
        hf_logging.disable_progress_bar()


def load_image(path: str):
    """Open an image file as RGB.

    Args:
        path (`str`): the file.

    Returns:
        `PIL.Image.Image`

    Raises:
        `CLIError`: the file is missing or is not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    if not os.path.isfile(path):
        raise CLIError(f"image file not found: {path}")
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as error:
        reason = "not an image file PIL can read" if isinstance(error, UnidentifiedImageError) else error
        raise CLIError(f"cannot read image {path}: {reason}") from error
