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
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

DEMO_CHECKPOINT_NAME = "demo-gemma3"
# Bumped whenever the checkpoint layout changes, so an old cached build is rebuilt rather than misread.
DEMO_CHECKPOINT_VERSION = "2"
_VERSION_FILE = "vlmprep_demo_version.txt"

SPECIAL_TOKENS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
]
# A small fixed vocabulary: every word of the scripted chat, plus enough others that random weights "speak" words.
_WORDS = """
a an the this that these those it its is are was be do does you i we they me my your what which how why where when
here there and or but not no yes so because than as of in on at with from to for by about like more most less very
quite only also just then first second one two three both same different another other picture pictures image images
photo color colors see look looks show shows describe compare think tell red blue green yellow orange purple black
white gray dark light bright soft sky sea sun moon cloud tree grass house road car cat dog bird flower left right top
bottom middle center corner edge small large big round square line lines circle circles stripe stripes pattern
gradient shape shapes noise smooth sharp warm cool nice good
"""
DEMO_WORDS = ["\n", *".,?!':", *_WORDS.split()]

# Gemma-style chat template: one `<start_of_turn>role\n...<end_of_turn>\n` per message; each image is a single
# `<start_of_image>` that Gemma3Processor expands to the full image sequence.
DEMO_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] | trim }}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def demo_cache_dir() -> Path:
    """The directory the demo checkpoint lives in: `$VLMPREP_CACHE/demo-gemma3`, else `~/.cache/vlmprep/demo-gemma3`.

    Returns:
        `Path`
    """
    root = os.environ.get("VLMPREP_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "vlmprep")
    return Path(root) / DEMO_CHECKPOINT_NAME


def build_demo_tokenizer():
    """A word-level fast tokenizer over `DEMO_WORDS` with Gemma3's special tokens and the attributes a processor reads

    Returns:
        `transformers.PreTrainedTokenizerFast`: with `boi_token`, `eoi_token`, `image_token` (and their `_id`s).
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *dict.fromkeys(DEMO_WORDS)])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[^\S\n]+"), behavior="removed"),  # spaces go, newlines stay tokens
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    backend.add_special_tokens(SPECIAL_TOKENS)  # never split, dropped by `skip_special_tokens`
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
    )


def adopt_demo_tokenizer(config, tokenizer):
    """Give a tiny config the vocabulary, special token ids and image placeholders of the demo tokenizer (in place).

    Args:
        config (`PreTrainedConfig`): a tiny image-text config from `vlmprep.testing`.
        tokenizer (`PreTrainedTokenizerFast`): from `build_demo_tokenizer`.

    Returns:
        `PreTrainedConfig`: `config`.
    """
    text = config.text_config
    text.vocab_size = len(tokenizer)
    text.pad_token_id, text.bos_token_id, text.eos_token_id = (
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
    )
    config.image_token_id = tokenizer.image_token_id
    if hasattr(config, "boi_token_id"):  # Gemma3's image start and end (its `*_token_index` fields)
        config.boi_token_id = tokenizer.boi_token_id
        config.eoi_token_id = tokenizer.eoi_token_id
    return config


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


def write_chat_checkpoint(
    directory: str | os.PathLike, model_class: type, config, build_processor: Callable, seed: int = 0
) -> Path:
    """Save a random-weight model on the demo tokenizer with its processor; answers end at the end of a chat turn.

    `config` gets the demo tokenizer's vocabulary and special token ids (`adopt_demo_tokenizer`). The weights are
    `vlmprep.testing.tiny_model`'s: random, with the images reaching the logits (upstream's init zeroes some
    projectors, Gemma3's among them), so a "same answer" check on images can fail; the caller's random state is left
    as it was.

    Args:
        directory (`str` or `os.PathLike`): where to write; created (with parents) when missing.
        model_class (`type`): the transformers model class.
        config (`PreTrainedConfig`): its tiny config, from `vlmprep.testing` (changed in place).
        build_processor (`Callable[[PreTrainedConfig, PreTrainedTokenizerFast], ProcessorMixin]`):
            The processor of the adopted config on the demo tokenizer: an image processor sized to its vision tower,
            a chat template.
        seed (`int`, *optional*, defaults to 0): seed of the random weights.

    Returns:
        `Path`: `directory`.
    """
    from ..testing import tiny_model

    tokenizer = build_demo_tokenizer()
    config = adopt_demo_tokenizer(config, tokenizer)
    processor = build_processor(config, tokenizer)
    directory = Path(directory)
    model = tiny_model(model_class, config, seed=seed)
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end_of_turn]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


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
