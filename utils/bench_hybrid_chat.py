"""A 5-turn chat with 2 images on a Qwen3.5-architecture model (Gated DeltaNet + attention): vlmprep's drop-in with a
`PrefixCache` (snapshots of the recurrent states) next to transformers' class re-reading the whole conversation.

The model is the bench size (`vlmprep.bench`): 4 text layers (3 Gated DeltaNet, 1 attention), hidden 512, a 4-layer
vision tower at 224x224 px (64 tokens per image), random weights, float32. Each turn re-sends the whole conversation
with all its images, as a chat app does; 8 answer tokens per turn, greedy. With `--resend template` (the default) the
earlier answers are re-sent as a chat template re-renders them, not as generated: Qwen3.5's template strips their
thinking (here an answer's first 2 tokens become an empty thinking block) in turns 1 and 3, and an answer re-tokenized
from its text differs near its end (its second-to-last token replaced) in turns 2 and 4; `--resend generated` re-sends
them as generated. Reported per turn: time to first token (a streamer's first generated token) of each library,
whether both generated the same tokens, the prompt tokens vlmprep prefilled against the least any cache can (those no
earlier forward saw) and transformers' (all), and the store's snapshot bytes per stored token.

Usage:

    python utils/bench_hybrid_chat.py [--repeats 3] [--resend template|generated] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import transformers
from transformers.generation.streamers import BaseStreamer

import vlmprep
from vlmprep import PrefixCache
from vlmprep.testing import tiny_model

IMAGE_TOKEN, VISION_START, VISION_END = 122, 110, 111
# A turn's user segments: a system prompt and an image in turn 1, another image in turn 3
TURNS = [
    [[2, *range(300, 340)], "image", list(range(340, 346))],
    [list(range(346, 356))],
    [[356], "image", list(range(357, 361))],
    [list(range(361, 373))],
    [list(range(373, 381))],
]
NEW_TOKENS = 8
EMPTY_THINKING, REPLACED = [200, 201], 202  # kept out of answers: a re-sent answer parts from the generated one there


def resent_by_a_template(turn: int, answer: list[int]) -> list[int]:
    """An earlier answer as a chat template re-sends it: thinking stripped (turns 1, 3), a token replaced near its end
    (turns 2, 4)."""
    if turn % 2 == 0:
        return [*EMPTY_THINKING, *answer[2:]]
    return [*answer[:-2], REPLACED, answer[-1]]


def bench_qwen3_5_config() -> transformers.Qwen3_5Config:
    text = {"vocab_size": 16384, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4}
    text |= {"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 4096}
    text |= {"layer_types": ["linear_attention"] * 3 + ["full_attention"], "linear_conv_kernel_dim": 4}
    text |= {"linear_key_head_dim": 64, "linear_value_head_dim": 64, "linear_num_key_heads": 4}
    text |= {"linear_num_value_heads": 8, "pad_token_id": 0, "eos_token_id": 1}
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]}
    text["rope_parameters"] |= {"mrope_interleaved": True, "partial_rotary_factor": 0.5}
    vision = {"depth": 4, "hidden_size": 384, "intermediate_size": 1536, "num_heads": 6, "patch_size": 14}
    vision |= {
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 512,
        "num_position_embeddings": 256,
    }
    return transformers.Qwen3_5Config(
        text_config=text,
        vision_config=vision,
        image_token_id=IMAGE_TOKEN,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        video_token_id=123,
    )


class _FirstToken(BaseStreamer):
    """Records when `generate` hands over its first generated token (the second `put`: the first is the prompt)."""

    def __init__(self):
        self.puts, self.first = 0, None

    def put(self, value):
        self.puts += 1
        if self.puts == 2:
            self.first = time.perf_counter()

    def end(self):
        pass


def _conversation(segments: list, images: list[int]) -> dict:
    ids, types = [], []
    for segment in segments:
        if segment == "image":
            ids += [VISION_START, *[IMAGE_TOKEN] * 64, VISION_END]
            types += [0, *[1] * 64, 0]
        else:
            ids += segment
            types += [0] * len(segment)
    pixels = [torch.randn(256, 3 * 2 * 14 * 14, generator=torch.Generator().manual_seed(seed)) for seed in images]
    return {
        "input_ids": torch.tensor([ids]),
        "mm_token_type_ids": torch.tensor([types]),
        "pixel_values": torch.cat(pixels),
        "image_grid_thw": torch.tensor([[1, 16, 16]] * len(images)),
    }


def _turn(model, inputs: dict, **kwargs) -> tuple[float, torch.Tensor]:
    streamer, start = _FirstToken(), time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            streamer=streamer,
            suppress_tokens=[0, IMAGE_TOKEN, VISION_START, VISION_END, *EMPTY_THINKING, REPLACED],
            **kwargs,
        )
    return streamer.first - start, out


def _common_prefix(first: list[int], second: list[int]) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), min(len(first), len(second))
    )


def run_chat(ours, theirs, resend: str = "template") -> list[dict]:
    store = PrefixCache(max_bytes=2**30)
    ours.encoder_cache.clear()
    segments, images, rows, seen = [], [], [], []
    for turn, user in enumerate(TURNS):
        segments += user
        images += [turn] * user.count("image")
        inputs = _conversation(segments, images)
        before = store.stats
        ttft_ours, answer = _turn(ours, inputs, prefix_cache=store)
        ttft_theirs, expected = _turn(theirs, inputs)
        stats = store.stats
        ids, length = inputs["input_ids"][0].tolist(), inputs["input_ids"].shape[1]
        # Same ids at the same places are the same tokens here (each image stays where it was)
        known = max((_common_prefix(ids, earlier) for earlier in seen), default=0)
        rows.append(
            {
                "turn": turn + 1,
                "prompt_tokens": length,
                "ttft_vlmprep_ms": 1000 * ttft_ours,
                "ttft_transformers_ms": 1000 * ttft_theirs,
                "same_tokens": bool(torch.equal(answer, expected)),
                "prefilled_vlmprep": stats.tokens_prefilled - before.tokens_prefilled,
                "prefilled_minimum": length - min(known, length - 1),
                "tokens_shared": stats.tokens_shared - before.tokens_shared,
                "tokens_reused": stats.tokens_reused - before.tokens_reused,
                "snapshot_bytes_per_stored_token": stats.snapshot_bytes / max(stats.tokens, 1),
                "snapshot_bytes": stats.snapshot_bytes / max(stats.snapshots, 1),
                "snapshots": stats.snapshots,
            }
        )
        seen.append(answer[0, :-1].tolist())  # fed: prompt and answer, except the answer's last token
        generated = answer[0, length:].tolist()
        segments.append(resent_by_a_template(turn, generated) if resend == "template" else generated)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resend", choices=["template", "generated"], default="template")
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    config = bench_qwen3_5_config()
    theirs = tiny_model(transformers.Qwen3_5ForConditionalGeneration, config, seed=0)
    ours = vlmprep.Qwen3_5ForConditionalGeneration(config).eval()
    ours.load_state_dict(theirs.state_dict())
    runs = [run_chat(ours, theirs, args.resend) for _ in range(args.repeats)]
    table = []
    for turn_rows in zip(*runs, strict=True):
        row = dict(turn_rows[0])
        for key in ("ttft_vlmprep_ms", "ttft_transformers_ms"):
            row[key] = statistics.median(r[key] for r in turn_rows)
        row["same_tokens"] = all(r["same_tokens"] for r in turn_rows)
        table.append(row)
    print(
        f"{'turn':>4} {'prompt':>6} {'TTFT vlmprep ms':>16} {'TTFT transformers ms':>21} {'ratio':>6} "
        f"{'same':>5} {'prefilled (min)':>16} {'shared/resumed':>15} {'snapshot B/token':>17}"
    )
    for row in table:
        ratio = row["ttft_vlmprep_ms"] / row["ttft_transformers_ms"]
        prefilled = f"{row['prefilled_vlmprep']} ({row['prefilled_minimum']})"
        shared = f"{row['tokens_shared']}/{row['tokens_reused']}"
        print(
            f"{row['turn']:>4} {row['prompt_tokens']:>6} {row['ttft_vlmprep_ms']:>16.1f} "
            f"{row['ttft_transformers_ms']:>21.1f} {ratio:>6.2f} {str(row['same_tokens']):>5} "
            f"{prefilled:>16} {shared:>15} {row['snapshot_bytes_per_stored_token']:>17.0f}"
        )
    print(f"bytes per snapshot: {table[-1]['snapshot_bytes']:.0f}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(table, handle, indent=2)


if __name__ == "__main__":
    main()
