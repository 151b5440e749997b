"""The scripted chat of `vlmprep demo`, run through vlmprep and transformers, and its side-by-side table.

The chat re-sends the whole conversation every turn, as chat apps do. vlmprep (with a `PrefixCache` and its default
encoder cache) and transformers (a fresh, uncached call each turn) get the very same prompts; the demo counts the
images each one encodes and the tokens each one prefills.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..testing import PrefillCounter, VisionRunCounter
from .demo_checkpoint import demo_images

# The scripted chat: (user text, indices into `demo_images()` attached before the text).
DEMO_TURNS: list[tuple[str, list[int]]] = [
    ("Describe this picture.", [0]),
    ("What colors do you see in it?", []),
    ("Here is another picture. How is it different from the first one?", [1]),
    ("Which of the two pictures do you like more, and why?", []),
]


@dataclass
class GenerateStats:
    """What one `generate` call cost.

    Args:
        answer (`str`): the decoded answer.
        new_tokens (`int`): tokens generated.
        images_encoded (`int`): images the vision tower ran on.
        tokens_prefilled (`int`): prompt tokens the language model computed.
        seconds (`float`): wall-clock time of the call.
        token_ids (`list[int]`): the generated ids.
    """

    answer: str
    new_tokens: int
    images_encoded: int
    tokens_prefilled: int
    seconds: float
    token_ids: list[int] = field(default_factory=list)


def measured_generate(model, processor, inputs: dict, **generate_kwargs) -> GenerateStats:
    """Run `model.generate(**inputs, **generate_kwargs)` once, counting images encoded, tokens prefilled and time.

    Args:
        model (`PreTrainedModel`): a VLM, transformers' or vlmprep's (counted with `vlmprep.testing`'s counters).
        processor (`ProcessorMixin`): decodes the answer.
        inputs (`dict`): the processor's outputs for one prompt (batch of one).
        generate_kwargs: passed to `generate`.

    Returns:
        `GenerateStats`
    """
    prompt_length = inputs["input_ids"].shape[1]
    with torch.inference_mode(), VisionRunCounter(model) as vision, PrefillCounter(model) as prefill:
        start = time.perf_counter()
        sequences = model.generate(**inputs, **generate_kwargs)
        seconds = time.perf_counter() - start
    new_ids = sequences[0, prompt_length:].tolist()
    answer = processor.decode(new_ids, skip_special_tokens=True).strip()
    return GenerateStats(
        answer=answer,
        new_tokens=len(new_ids),
        images_encoded=vision.images,
        tokens_prefilled=prefill.prefilled(len(new_ids)),
        seconds=seconds,
        token_ids=new_ids,
    )


@dataclass
class DemoTurn:
    """One turn of the scripted chat, run by both libraries on the same prompt.

    Args:
        user (`str`): the user's text.
        images_in_prompt (`int`): images in the whole re-sent conversation.
        prompt_tokens (`int`): tokens of the whole re-sent conversation.
        vlmprep (`GenerateStats`): the vlmprep run.
        transformers (`GenerateStats`): the transformers run.
    """

    user: str
    images_in_prompt: int
    prompt_tokens: int
    vlmprep: GenerateStats
    transformers: GenerateStats


def run_demo_conversation(
    checkpoint: str | os.PathLike, max_new_tokens: int = 8, on_turn: Callable[[DemoTurn], None] | None = None
) -> list[DemoTurn]:
    """Run `DEMO_TURNS` through vlmprep and transformers, re-sending the whole conversation each turn.

    Both get the same prompt each turn (the conversation so far, with vlmprep's earlier answers). vlmprep runs with a
    `PrefixCache` and its default encoder cache; transformers gets a fresh call without any cache, exactly as a user
    would make it.

    Args:
        checkpoint (`str` or `os.PathLike`): a directory from `build_demo_checkpoint`.
        max_new_tokens (`int`, *optional*, defaults to 8): answer length (greedy decoding).
        on_turn (`Callable[[DemoTurn], None]`, *optional*): called after each turn, e.g. to print it.

    Returns:
        `list[DemoTurn]`
    """
    import transformers
    from transformers import AutoProcessor

    from .. import AutoModelForImageTextToText, PrefixCache

    processor = AutoProcessor.from_pretrained(checkpoint)
    ours = AutoModelForImageTextToText.from_pretrained(checkpoint).eval()
    theirs = transformers.Gemma3ForConditionalGeneration.from_pretrained(checkpoint).eval()
    generate_kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False}

    images = demo_images()
    # One untimed call each first: the first forward of a fresh model pays one-off setup costs that are no part of
    # either library's per-turn work. The caches are emptied afterwards so the chat starts cold.
    warm_up_content = [{"type": "image", "image": images[0].rotate(90)}, {"type": "text", "text": "look"}]
    warm_up = [{"role": "user", "content": warm_up_content}]
    warm_up_inputs = processor.apply_chat_template(
        warm_up, tokenize=True, return_dict=True, return_tensors="pt", add_generation_prompt=True
    )
    for model in (ours, theirs):
        measured_generate(model, processor, dict(warm_up_inputs), **generate_kwargs)
    ours.encoder_cache.clear()
    ours.prefix_cache = PrefixCache()

    messages: list[dict] = []
    turns: list[DemoTurn] = []
    for user_text, image_indices in DEMO_TURNS:
        content = [{"type": "image", "image": images[index]} for index in image_indices]
        messages.append({"role": "user", "content": [*content, {"type": "text", "text": user_text}]})
        inputs = processor.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_tensors="pt", add_generation_prompt=True
        )
        ours_stats = measured_generate(ours, processor, inputs, **generate_kwargs)
        # transformers: a new call with the whole conversation and no cache of any kind, as a user would make it.
        theirs_stats = measured_generate(theirs, processor, dict(inputs), **generate_kwargs)
        pixel_values = inputs.get("pixel_values")
        turn = DemoTurn(
            user=user_text,
            images_in_prompt=0 if pixel_values is None else int(pixel_values.shape[0]),
            prompt_tokens=int(inputs["input_ids"].shape[1]),
            vlmprep=ours_stats,
            transformers=theirs_stats,
        )
        turns.append(turn)
        if on_turn is not None:
            on_turn(turn)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": ours_stats.answer}]})
    return turns


def format_demo_table(turns: list[DemoTurn]) -> str:
    """The side-by-side table of a demo run: per turn and in total, images encoded, tokens prefilled and time.

    Args:
        turns (`list[DemoTurn]`): from `run_demo_conversation`.

    Returns:
        `str`
    """
    groups = ("images encoded", "tokens prefilled", "time (ms)")
    width = 12  # one column per library in each group
    header = (f"{'':4}  {'prompt':^15}" + "".join(f"  {group:^{2 * width + 1}}" for group in groups)).rstrip()
    names = f"{'turn':4}  {'images':>6} {'tokens':>8}" + f"  {'vlmprep':>{width}} {'transformers':>{width}}" * 3
    rule = "-" * len(names)

    def row(label: str, images: str, tokens: str, ours: list[GenerateStats], theirs: list[GenerateStats]) -> str:
        cells = []
        for name, scale, spec in (("images_encoded", 1, "d"), ("tokens_prefilled", 1, "d"), ("seconds", 1000, ".1f")):
            for stats in (ours, theirs):
                cells.append(format(scale * sum(getattr(s, name) for s in stats), f">{width}{spec}"))
        pairs = [f"  {cells[i]} {cells[i + 1]}" for i in range(0, len(cells), 2)]
        return f"{label:4}  {images:>6} {tokens:>8}" + "".join(pairs)

    lines = [header, names, rule]
    for index, turn in enumerate(turns, start=1):
        lines.append(
            row(str(index), str(turn.images_in_prompt), str(turn.prompt_tokens), [turn.vlmprep], [turn.transformers])
        )
    lines += [rule, row("all", "", "", [t.vlmprep for t in turns], [t.transformers for t in turns])]
    return "\n".join(lines)
