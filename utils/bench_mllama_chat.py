"""A 5-turn, 2-image chat on a Llama 3.2 Vision (mllama) model: vlmprep's drop-in with a `PrefixCache` next to
transformers' class re-sending the conversation, in one run.

Each turn re-sends the whole conversation with every image (as a chat app does); the images come in turns 1 and 3.
transformers runs the tower on every image and prefills the whole conversation each turn; the drop-in encodes each image
once (encoder cache), restores the conversation's KV from the prefix cache and feeds the rest. Two prompt styles:
`image_first` (the processor puts a leading `<|image|>` before the BOS token) and `chat_template` (text before the
first image, as Llama 3.2's chat template writes it: that text attends to every image, so the turn adding an image is
recomputed whole). Reported per style and side: turn 5's time to first token (median of `--repeats`), vision-tower
images and prompt tokens prefilled over the 5 turns, and whether every answer equals transformers'.

Usage:

    python utils/bench_mllama_chat.py [--repeats 5] [--clock wall|cpu] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
import transformers
from transformers.utils import logging as hf_logging

import vlmprep
from vlmprep import PrefixCache
from vlmprep.testing import PrefillCounter, make_image_sensitive

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
IMAGE_TOKEN, BOS, ANSWER = 16_384, 1, 8  # the image token is past the vocabulary, as in the checkpoints
TEXT = 1_000  # text ids from here on


def bench_mllama_config() -> transformers.MllamaConfig:
    """The bench model's text size (4 layers, hidden 512; layers 1 and 3 cross-attend) with a small tiled tower:
    112 px tiles of 14 px patches (65 positions each, class token included), up to 2 tiles per image."""
    vision = {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_global_layers": 2,
        "attention_heads": 4,
        "intermediate_size": 1024,
        "vision_output_dim": 512,  # hidden 256, plus the one intermediate layer's
        "image_size": 112,
        "patch_size": 14,
        "max_num_tiles": 2,
        "intermediate_layers_indices": [1],
        "supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]],
    }
    text = {
        "vocab_size": 16_384,
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "cross_attention_layers": [1, 3],
        "pad_token_id": 0,
        "bos_token_id": BOS,
        "eos_token_id": 2,
    }
    return transformers.MllamaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN)


def conversation_inputs(config, segments: list, seeds: list[int]) -> dict:
    """The Mllama processor's outputs for text segments and images (`None`), one tile per image."""
    ids, starts = [], []
    for segment in segments:
        if segment is None:
            starts.append(len(ids))
            ids.append(IMAGE_TOKEN)
        else:
            ids += segment
    vision = config.vision_config
    pixels = torch.zeros(1, len(seeds), vision.max_num_tiles, 3, vision.image_size, vision.image_size)
    for index, seed in enumerate(seeds):
        generator = torch.Generator().manual_seed(seed)
        pixels[0, index, 0] = torch.randn(3, vision.image_size, vision.image_size, generator=generator)
    mask = torch.zeros(1, len(ids), len(seeds), vision.max_num_tiles, dtype=torch.long)
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(ids)
        mask[0, start:end, index, 0] = 1
    return {
        "input_ids": torch.tensor([ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "pixel_values": pixels,
        "aspect_ratio_ids": torch.ones(1, len(seeds), dtype=torch.long),
        "aspect_ratio_mask": torch.tensor([[[1] + [0] * (vision.max_num_tiles - 1)] * len(seeds)]),
        "cross_attention_mask": mask,
    }


def chat(model, style: str, use_vlmprep: bool, clock) -> dict:
    """The 5 turns; returns turn 5's time to first token (its whole one-token call), tower images, prompt tokens
    prefilled and every answer."""
    config = model.config
    history = [] if style == "image_first" else [[BOS, TEXT, TEXT + 1, TEXT + 2, TEXT + 3]]
    seeds, answers, prefilled = [], [], 0
    store = PrefixCache() if use_vlmprep else None
    if use_vlmprep:
        model.encoder_cache.clear()
    images = []
    hook = model.model.vision_model.register_forward_hook(
        lambda module, args, kwargs, output: images.append(kwargs["pixel_values"].shape[1]), with_kwargs=True
    )
    try:
        for turn in range(5):
            with_image = turn in (0, 2)
            question = [TEXT + 10 * turn + offset for offset in range(12)]
            if style == "image_first" and turn == 0:
                question = [BOS, *question]
            history = [*history, *([None] if with_image else []), question]
            seeds += [turn + 1] if with_image else []
            inputs = conversation_inputs(config, history, seeds)
            kwargs = {"prefix_cache": store} if use_vlmprep else {}
            # Turn 5 is timed to its first token (a one-token answer); the turns before answer ANSWER tokens
            new_tokens = 1 if turn == 4 else ANSWER
            start = clock()
            with PrefillCounter(model) as prefill, torch.no_grad():
                output = model.generate(
                    **inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, **kwargs
                )
            ttft = clock() - start
            prefilled += prefill.prefilled(new_tokens=new_tokens)
            answer = output[0, inputs["input_ids"].shape[1] :].tolist()
            answers.append(answer)
            history.append(answer)
    finally:
        hook.remove()
    return {"turn_5_ttft_s": ttft, "tower_images": sum(images), "prefilled": prefilled, "answers": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    clock = CLOCKS[args.clock]
    directory = tempfile.mkdtemp(prefix="vlmprep-bench-mllama-")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.MllamaForConditionalGeneration(bench_mllama_config())
    make_image_sensitive(model)
    model.save_pretrained(directory)
    theirs = transformers.MllamaForConditionalGeneration.from_pretrained(directory).eval()
    ours = vlmprep.AutoModelForImageTextToText.from_pretrained(directory).eval()
    report = {}
    for style in ("image_first", "chat_template"):
        runs = {"vlmprep": [], "transformers": []}
        for _ in range(args.repeats):  # alternated, so that both sides see the same machine
            runs["vlmprep"].append(chat(ours, style, True, clock))
            runs["transformers"].append(chat(theirs, style, False, clock))
        report[style] = {
            side: {
                "turn_5_ttft_ms": 1000 * statistics.median(run["turn_5_ttft_s"] for run in side_runs),
                "tower_images": side_runs[0]["tower_images"],
                "prefilled": side_runs[0]["prefilled"],
            }
            for side, side_runs in runs.items()
        }
        report[style]["same_answers"] = all(
            ours_run["answers"] == theirs_run["answers"]
            for ours_run, theirs_run in zip(runs["vlmprep"], runs["transformers"], strict=True)
        )
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as file:
            file.write(text)


if __name__ == "__main__":
    main()
