"""What a `PrefixCache` hit costs next to the prefill it saves, and a chat turn's time to first token.

1. For prompts of 1k, 8k and 32k tokens: the prompt is stored by one call, then asked again. Reported: the time of the
   lookup and restore (`PrefixRequest.restore`: the model identity the keys start from, key material, tree walk,
   handing the stored KV to the call's cache; not building the empty cache object, which `generate` does in any call),
   the part of it the model identity takes (`cache_identity(model, part="model")`), the time of storing a finished
   row (`PrefixRequest.finish`), and the prefill time the hit saves (the decoder forward of the whole prompt minus that
   of its one recomputed token, both timed with forward hooks). Two decoder sizes (`--decoders`): the bench model's
   text size (`bench`) and its tiny text size (`tiny`, where a prefill costs so little that a lookup's fixed cost
   weighs most).
2. A 5-turn chat with 2 images on the bench model: the last turn's time to first token (median over repetitions).
   Run this script once against each store to compare them (e.g. `PYTHONPATH=<other checkout>/src`).

Usage:

    python utils/bench_prefix_cache.py [--lengths 1024 8192 32768] [--decoders tiny bench] [--repeats 3]
        [--clock wall|cpu] [--out FILE]

`--clock cpu` times both workloads with the CPU time of the calling thread (`time.thread_time`) instead of wall time:
with one torch thread, all of `generate` runs on that thread, and time the thread spent preempted by other processes
on a shared machine is left out.
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
from vlmprep.bench import bench_model_config
from vlmprep.generation import prefix as prefix_module
from vlmprep.generation.prefix import PrefixRequest
from vlmprep.testing import IMAGE, build_prompt, random_pixels, tiny_llava_config

# The clock (`--clock`): wall time, or the calling thread's CPU time.
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["wall"]


class _Timed:
    """Time (`clock`) of every call of a function of `owner` (a class or module) while installed."""

    def __init__(self, name: str, owner=PrefixRequest):
        self.name, self.owner, self.seconds = name, owner, []

    def __enter__(self) -> _Timed:
        self.original = getattr(self.owner, self.name)

        def timed(*args, **kwargs):
            start = clock()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.seconds.append(clock() - start)

        setattr(self.owner, self.name, timed)
        return self

    def __exit__(self, *exc) -> None:
        setattr(self.owner, self.name, self.original)


class _DecoderForwards:
    """Time (`clock`) of each decoder forward."""

    def __init__(self, model):
        self.decoder, self.seconds = model.get_decoder(), []

    def __enter__(self) -> _DecoderForwards:
        def before(module, args, kwargs):
            self._start = clock()

        def after(module, args, kwargs, output):
            self.seconds.append(clock() - self._start)

        self._handles = [
            self.decoder.register_forward_pre_hook(before, with_kwargs=True),
            self.decoder.register_forward_hook(after, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def _load(config, directory: str):
    torch.manual_seed(0)
    transformers.AutoModelForImageTextToText.from_config(config).save_pretrained(directory)
    return vlmprep.AutoModelForImageTextToText.from_pretrained(directory).eval()


# Decoder sizes of the long-prompt workload, from the bench model (`bench_model_config`): its text size, and its tiny
# text size, where a prefill costs so little that the fixed cost of a lookup weighs most.
DECODERS = {
    "bench": {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 16384},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "head_dim": 32},
}  # fmt: skip


def long_prompt_costs(lengths: list[int], repeats: int, decoder: str = "tiny") -> list[dict]:
    """Lookup + restore time next to the prefill time a hit saves, per prompt length (a LLaVA, text prompts)."""
    config = tiny_llava_config()
    text = config.text_config
    for name, value in DECODERS[decoder].items():
        setattr(text, name, value)
    text.max_position_embeddings = max(lengths) + 16
    with tempfile.TemporaryDirectory() as directory:
        model = _load(config, directory)
    generator = torch.Generator().manual_seed(0)
    warm_up = torch.randint(10, 20, (1, 64), generator=generator)
    model.generate(input_ids=warm_up, max_new_tokens=2, do_sample=False, prefix_cache=PrefixCache())
    rows = []
    for length in lengths:
        ids = torch.randint(10, config.text_config.vocab_size, (1, length), generator=generator)
        ids[ids == config.image_token_id] = 10  # text only
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        full, one, restore, store_time, identity = [], [], [], [], []
        for _ in range(1 if length > 8192 else repeats):
            store = PrefixCache(max_bytes=2**33)
            with torch.no_grad(), _DecoderForwards(model) as miss, _Timed("finish") as finish:
                model.generate(**inputs, max_new_tokens=1, do_sample=False, prefix_cache=store)
            with (
                torch.no_grad(),
                _DecoderForwards(model) as hit,
                _Timed("restore") as restored,
                _Timed("_new_cache", prefix_module) as new_cache,
                _Timed("cache_identity", prefix_module) as identities,
            ):
                model.generate(**inputs, max_new_tokens=1, do_sample=False, prefix_cache=store)
            full.append(miss.seconds[0])
            one.append(hit.seconds[0])
            # The empty cache object is built inside `restore`, but `generate` builds one in any call: not counted
            restore.append(restored.seconds[0] - new_cache.seconds[0])
            store_time.append(finish.seconds[0])
            # The prefix cache's (`part="model"`), inside `restore`: text prompts encode nothing, so no vision part
            identity.append(sum(identities.seconds))
            assert store.stats.tokens_reused == length - 1
        saved = statistics.median(full) - statistics.median(one)
        rows.append(
            {
                "decoder": decoder,
                "prompt_tokens": length,
                "prefill_ms": 1e3 * statistics.median(full),
                "prefill_saved_ms": 1e3 * saved,
                "lookup_restore_ms": 1e3 * statistics.median(restore),
                "store_ms": 1e3 * statistics.median(store_time),
                "model_identity_ms": 1e3 * statistics.median(identity),
                "lookup_restore_over_saved": statistics.median(restore) / saved,
            }
        )
    return rows


def chat_last_turn_ttft(repeats: int, answer_tokens: int = 8) -> dict:
    """The last turn's time to first token of a 5-turn chat with 2 images (the bench model, a `PrefixCache`)."""
    config = bench_model_config()
    with tempfile.TemporaryDirectory() as directory:
        model = _load(config, directory)
    generator = torch.Generator().manual_seed(1)

    def text(count: int) -> list[int]:
        return torch.randint(10, 1000, (count,), generator=generator).tolist()

    turns = [[text(32), IMAGE, text(12)], [text(12)], [text(8), IMAGE, text(8)], [text(12)], [text(12)]]
    suppress = [config.image_token_id, config.boi_token_id, config.eoi_token_id]
    times, prefilled = [], []
    for _ in range(repeats):
        store, segments, seeds = PrefixCache(max_bytes=2**30), [], []
        model.encoder_cache.clear()
        for turn, user in enumerate(turns):
            segments += user
            seeds += [100 + turn] * sum(1 for segment in user if segment is IMAGE)
            ids, types = build_prompt(config, segments)
            pixels = torch.cat([random_pixels(1, seed=seed, size=config.vision_config.image_size) for seed in seeds])
            inputs = {
                "input_ids": torch.tensor([ids]),
                "token_type_ids": torch.tensor([types]),
                "pixel_values": pixels,
            }
            last = turn == len(turns) - 1
            with torch.no_grad(), _DecoderForwards(model) as forwards:
                start = clock()
                output = model.generate(
                    **inputs,
                    max_new_tokens=1 if last else answer_tokens,
                    do_sample=False,
                    prefix_cache=store,
                    suppress_tokens=suppress,
                )
                elapsed = clock() - start
            segments.append(output[0, len(ids) :].tolist())
        times.append(elapsed)
        prefilled.append(store.stats.tokens_prefilled)
        del forwards
    return {
        "store": "radix tree" if hasattr(PrefixCache, "token_keys") else "16-token blocks",
        "last_turn_ttft_ms": 1e3 * statistics.median(times),
        "tokens_prefilled_5_turns": statistics.median(prefilled),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192, 32768])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decoders", nargs="+", choices=sorted(DECODERS), default=["tiny", "bench"])
    parser.add_argument("--skip-lengths", action="store_true", help="run only the chat workload")
    parser.add_argument("--skip-chat", action="store_true", help="run only the long-prompt workload")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one keeps timings steady)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall time or the thread's CPU time")
    parser.add_argument("--out", default=None)
    arguments = parser.parse_args()
    global clock
    clock = CLOCKS[arguments.clock]
    hf_logging.set_verbosity_error()
    torch.set_num_threads(arguments.threads)
    torch.manual_seed(0)
    results = {"torch_threads": torch.get_num_threads(), "clock": arguments.clock}
    if not arguments.skip_lengths:
        results["long_prompts"] = [
            row
            for decoder in arguments.decoders
            for row in long_prompt_costs(arguments.lengths, arguments.repeats, decoder)
        ]
    if not arguments.skip_chat:
        results["chat"] = chat_last_turn_ttft(max(arguments.repeats, 5))
    print(json.dumps(results, indent=2))
    if arguments.out:
        with open(arguments.out, "w") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
