"""A tiny Gemma 4 chat checkpoint with audio, for `vlmprep serve`'s audio tests: model, tokenizer, image processor,
audio feature extractor and processor, written with `save_pretrained`.

transformers' `Gemma4Processor` needs a video processor, and every video processor of transformers needs torchvision,
which vlmprep does not depend on. `TinyGemma4Processor` is Gemma 4's processor with no video processor (everything
else is upstream's: its placeholder expansion, its audio and image processing); a process that loads the checkpoint
with `AutoProcessor` calls `register_tiny_processors` first (the serve tests start the server through
`python -m vlmprep.testing.configs.serve`, which does that and runs `vlmprep serve`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import transformers
from transformers import Gemma4Processor, ProcessorMixin

from ..checkpoints import adopt_demo_tokenizer, build_demo_tokenizer, gemma_chat_template, save_chat_checkpoint
from .audio_frames import GEMMA4_MEL_BINS, GEMMA4_PATCH_SIZE, GEMMA4_POOLING, tiny_gemma4_config

__all__ = [
    "GEMMA4_AUDIO_CHAT_TEMPLATE",
    "TinyGemma4Processor",
    "build_gemma4_audio_checkpoint",
    "register_tiny_processors",
]

# The smallest image budget Gemma 4's image processor takes (70 soft tokens): a 16 px image becomes 64 soft tokens.
GEMMA4_MIN_SOFT_TOKENS = 70
# The demo template with Gemma 4's item placeholders, which its processor expands (`<boi>` soft tokens `<eoi>`, ...).
GEMMA4_AUDIO_CHAT_TEMPLATE = gemma_chat_template({"image": "<image_soft_token>", "audio": "<audio_soft_token>"})
_AUDIO_TOKENS = {"audio_token": "<audio_soft_token>", "boa_token": "<start_of_audio>", "eoa_token": "<end_of_audio>"}
_VIDEO_TOKEN = "<|video|>"  # added by Gemma4Processor itself; added here first so that the vocabulary holds it


class _WithoutVideoProcessor(ProcessorMixin):
    # Sits between Gemma4Processor and ProcessorMixin: drops the `video_processor` Gemma4Processor passes on
    def __init__(self, *args, video_processor=None, **kwargs):
        super().__init__(*args, **kwargs)


class TinyGemma4Processor(Gemma4Processor, _WithoutVideoProcessor):
    """`Gemma4Processor` without a video processor (see the module docstring); images and audio as upstream's.

    Args:
        feature_extractor (`Gemma4AudioFeatureExtractor`), image_processor (`Gemma4ImageProcessorPil`),
        tokenizer (`PreTrainedTokenizerFast`), chat_template (`str`, *optional*): as `Gemma4Processor`'s.
    """

    def __init__(self, feature_extractor, image_processor, tokenizer, chat_template=None, **kwargs):
        # A tokenizer read back from disk declares `max_length`/`pad_to_multiple_of` as None, which the processor
        # would hand the feature extractor as its own (`truncation` without `max_length` fails): its defaults hold
        for name in ("max_length", "pad_to_multiple_of"):
            if tokenizer.init_kwargs.get(name, 0) is None:
                tokenizer.init_kwargs.pop(name)
        super().__init__(feature_extractor, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


class _TinyAudioChatConfig(transformers.PreTrainedConfig):
    # A model type of its own, only to register `TinyGemma4Processor` by name with `AutoProcessor`
    model_type = "vlmprep_tiny_gemma4_audio_chat"


def register_tiny_processors() -> None:
    """Lets `AutoProcessor.from_pretrained` load `TinyGemma4Processor` checkpoints in this process (idempotent)."""
    transformers.AutoProcessor.register(_TinyAudioChatConfig, TinyGemma4Processor, exist_ok=True)


def build_gemma4_audio_checkpoint(directory: str | os.PathLike, seed: int = 0, global_head_dim: int = 32) -> Path:
    """Write a tiny Gemma 4 checkpoint (images and audio; model, tokenizer, processors) to `directory`.

    The weights are `vlmprep.testing.tiny_model`'s; the caller checks that its answers depend on the audio clip.

    Args:
        directory (`str` or `os.PathLike`): where to write; created (with parents) when missing.
        seed (`int`, *optional*, defaults to 0): seed of the random weights.
        global_head_dim (`int`, *optional*, defaults to 32):
            Head dimension of the full-attention layer (`tiny_gemma4_config`'s); 16, the sliding layer's, gives a
            config transformers' paged cache (`--continuous-batching`) can hold.

    Returns:
        `Path`: `directory`.
    """
    from ..weights import tiny_model

    tokenizer = build_demo_tokenizer(_AUDIO_TOKENS, [_VIDEO_TOKEN])
    processor = TinyGemma4Processor(
        transformers.Gemma4AudioFeatureExtractor(feature_size=GEMMA4_MEL_BINS),
        transformers.Gemma4ImageProcessorPil(
            patch_size=GEMMA4_PATCH_SIZE, max_soft_tokens=GEMMA4_MIN_SOFT_TOKENS, pooling_kernel_size=GEMMA4_POOLING
        ),
        tokenizer,
        chat_template=GEMMA4_AUDIO_CHAT_TEMPLATE,
    )
    config = adopt_demo_tokenizer(
        tiny_gemma4_config(global_head_dim=global_head_dim), tokenizer
    )  # its vocabulary, image and special token ids
    config.text_config.vocab_size_per_layer_input = len(tokenizer)
    config.audio_token_id, config.boa_token_id = tokenizer.audio_token_id, tokenizer.boa_token_id
    config.eoa_token_index = tokenizer.eoa_token_id
    config.video_token_id = processor.video_token_id
    model = tiny_model(transformers.Gemma4ForConditionalGeneration, config, seed=seed)
    return save_chat_checkpoint(directory, model, processor, tokenizer)


if __name__ == "__main__":  # `python -m vlmprep.testing.configs.serve <vlmprep serve arguments>`
    from ...serving.command import main

    register_tiny_processors()
    sys.exit(main())
