"""The sizes of each `vlmprep bench` mode and the bench model's config, shared by the runner and the workloads."""

from __future__ import annotations

from dataclasses import dataclass

import transformers

from ..testing import TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID, TINY_IMAGE_TOKEN_ID

TINY_ENV = "VLMPREP_BENCH_TINY"  # set to 1: run the smoke-test sizes (what `run_bench(_tiny=True)` does)


@dataclass(frozen=True)
class BenchSettings:
    """Sizes of one benchmark mode.

    Args:
        repeats (`int`): interleaved repetitions of each timed run (medians are reported).
        chat_answer_tokens (`int`): tokens generated per chat turn (workload 1).
        questions (`int`): questions about one image (workload 2).
        question_answer_tokens (`int`): tokens generated per question (workload 2).
        system_tokens (`int`): length of the shared system prompt (workload 3).
        shared_requests (`int`): requests sharing it, each with its own image (workload 3).
        decode_tokens (`int`): tokens generated in the decode workload (workload 4).
        long_images (`int`): images in the long prompt (workload 5).
        long_text_tokens (`int`): text tokens before, between and after its images (workload 5).
        chunk_size (`int`): `prefill_chunk_size` of the chunked runs (workload 5).
        hash_sizes (`tuple[int, ...]`): image sides whose pixel hashing is timed (workload 2).
        text_only_dtypes (`tuple[str, ...]`): dtypes the text-only loads use (workload 6).
        text_only_quick (`bool`): one load per loader and dtype instead of the median of three (workload 6).
    """

    repeats: int
    chat_answer_tokens: int
    questions: int
    question_answer_tokens: int
    system_tokens: int
    shared_requests: int
    decode_tokens: int
    long_images: int
    long_text_tokens: int
    chunk_size: int
    hash_sizes: tuple[int, ...] = (448, 896)
    text_only_dtypes: tuple[str, ...] = ("float32", "bfloat16")
    text_only_quick: bool = True


SETTINGS = {
    "full": BenchSettings(5, 16, 8, 8, 384, 4, 128, 6, 320, 256, text_only_quick=False),
    "quick": BenchSettings(3, 8, 4, 4, 192, 3, 48, 3, 192, 128),
    # For the smoke test only: a 2-layer model, one repetition, one text-only dtype.
    "tiny": BenchSettings(1, 3, 3, 2, 24, 2, 6, 3, 24, 27, hash_sizes=(448,), text_only_dtypes=("float32",)),
}


def bench_model_config(tiny: bool = False) -> transformers.Gemma3Config:
    """The bench model: Gemma3 with a 4-layer SigLIP tower at 224x224 (64 tokens per image), 4 text layers.

    Sized so that on a CPU the vision tower and prefill dominate, as in real use: one image's encoder run costs about
    as much as prefilling its 64 placeholder tokens (in Gemma3-4B the tower costs somewhat more).

    Args:
        tiny (`bool`, *optional*, defaults to `False`): a 2-layer, hidden-64 model with 32x32 images instead.

    Returns:
        `Gemma3Config`
    """
    text = {"model_type": "gemma3_text", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64}
    text |= {"vocab_size": 16384, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4}
    text |= {"sliding_window": 128, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 384, "intermediate_size": 1536}
    vision |= {"num_hidden_layers": 4, "num_attention_heads": 6, "image_size": 224, "patch_size": 14}
    tokens_per_image = 64  # the 16x16 patch grid pooled 2x2
    if tiny:
        text |= {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
        text |= {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "sliding_window": 8}
        text["layer_types"] = ["sliding_attention", "full_attention"]
        vision |= {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
        vision |= {"image_size": 32, "patch_size": 8}
        tokens_per_image = 4  # the 4x4 patch grid pooled 2x2
    return transformers.Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=tokens_per_image,
        boi_token_index=TINY_BOI_TOKEN_ID,  # the special ids `vlmprep.testing.build_prompt` writes
        eoi_token_index=TINY_EOI_TOKEN_ID,
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )
