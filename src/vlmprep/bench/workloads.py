"""The workloads of `vlmprep.bench`: one pair of models (vlmprep's and transformers' Gemma3, same weights) and one
method per workload. Work is counted with `vlmprep.testing`'s `VisionRunCounter` and `PrefillCounter`.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Callable
from itertools import pairwise

import torch
import transformers

from .. import Gemma3ForConditionalGeneration, PrefixCache
from ..cache.hashing import hash_item_inputs
from ..testing import (
    IMAGE,
    TINY_BOI_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    PrefillCounter,
    VisionRunCounter,
    build_prompt,
    random_pixels,
)
from .measure import median_ms, paired_times, peak_tensor_bytes
from .settings import BenchSettings

__all__ = ["BenchRunner"]

FIRST_TEXT_TOKEN = 200  # random text ids are drawn from 200..vocab-1, clear of the special ids below 128


class BenchRunner:
    """Runs the workloads on one pair of models loaded from the same checkpoint.

    Args:
        checkpoint (`str`): a saved Gemma3 checkpoint.
        settings (`BenchSettings`): the mode's sizes.
        tick (`Callable[[str], None]`): called after every measured run with the workload's name.
    """

    def __init__(self, checkpoint: str, settings: BenchSettings, tick: Callable[[str], None]):
        self.settings = settings
        self.tick = tick
        self.ours = Gemma3ForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32).eval()
        self.theirs = transformers.Gemma3ForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32)
        self.theirs.eval()
        self.config = self.ours.config
        self.image_size = self.config.vision_config.image_size
        self.rng = random.Random(0)

    # -- prompts and generation ------------------------------------------------------------------------------------

    def text(self, length: int) -> list[int]:
        return [self.rng.randrange(FIRST_TEXT_TOKEN, self.config.text_config.vocab_size) for _ in range(length)]

    def inputs(self, segments: list, image_seeds: list[int]) -> dict:
        ids, types = build_prompt(self.config, segments)
        inputs = {"input_ids": torch.tensor([ids]), "token_type_ids": torch.tensor([types])}
        if image_seeds:
            pixels = [random_pixels(1, seed, size=self.image_size) for seed in image_seeds]
            inputs["pixel_values"] = torch.cat(pixels)  # (num_images, 3, size, size)
        return inputs

    def generate(self, model, inputs: dict, new_tokens: int, **kwargs):
        # A fixed answer length (no early EOS) and no image special tokens in answers, which become later prompts.
        suppress = [self.config.image_token_id, TINY_BOI_TOKEN_ID, TINY_EOI_TOKEN_ID]
        return model.generate(
            **inputs,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            suppress_tokens=suppress,
            return_dict_in_generate=True,
            output_logits=True,
            **kwargs,
        )

    def interleaved(self, name: str, runs: dict[str, Callable[[], dict]]) -> dict[str, list[dict]]:
        """`settings.repeats` rounds of every run, the order alternating between rounds."""
        results: dict[str, list[dict]] = {key: [] for key in runs}
        for repeat in range(self.settings.repeats):
            for key in list(runs) if repeat % 2 == 0 else list(runs)[::-1]:
                results[key].append(runs[key]())
                self.tick(name)
        return results

    def paired(self, name: str, run: Callable[..., dict]) -> tuple[list[dict], list[dict]]:
        """`interleaved` rounds of `run(model, use_vlmprep)` on vlmprep's model and on transformers'."""
        runs = self.interleaved(
            name, {"vlmprep": lambda: run(self.ours, True), "transformers": lambda: run(self.theirs, False)}
        )
        return runs["vlmprep"], runs["transformers"]

    def prefix_cache_kwargs(self, model, use_vlmprep: bool) -> dict:
        """`generate` kwargs of a cold vlmprep run (empty encoder cache, fresh prefix cache); none for transformers."""
        if not use_vlmprep:
            return {}
        model.encoder_cache.clear()
        return {"prefix_cache": PrefixCache(block_size=16)}

    def warm_up(self) -> None:
        inputs = self.inputs([self.text(8), IMAGE, self.text(4)], [999])
        for model in (self.ours, self.theirs):
            self.generate(model, inputs, 2)
        self.ours.encoder_cache.clear()

    # -- 1. multi-turn chat ----------------------------------------------------------------------------------------

    def multi_turn_chat(self) -> dict:
        settings = self.settings
        user_turns = [
            [self.text(32), IMAGE, self.text(12)],
            [self.text(12)],
            [self.text(8), IMAGE, self.text(8)],
            [self.text(12)],
            [self.text(12)],
        ]

        def converse(model, use_vlmprep: bool) -> dict:
            extra = self.prefix_cache_kwargs(model, use_vlmprep)
            segments, seeds, answers = [], [], []
            with MeasuredRun(self, model, settings.chat_answer_tokens) as run:
                for turn, user in enumerate(user_turns):
                    segments += user
                    seeds += [100 + turn] * sum(1 for segment in user if segment is IMAGE)
                    inputs = self.inputs(segments, seeds)  # the whole conversation, every image
                    output = run.generate(inputs, **extra)
                    answer = output.sequences[0, inputs["input_ids"].shape[1] :].tolist()
                    segments.append(answer)
                    answers.append(answer)
            return run.result(answers=answers, tokens=len(build_prompt(self.config, segments)[0]))

        ours, theirs = self.paired("multi-turn chat", converse)
        return {
            "turns": len(user_turns),
            "images_in_conversation": 2,
            "answer_tokens_per_turn": settings.chat_answer_tokens,
            "conversation_tokens": ours[0]["tokens"],
            **side_by_side(ours, theirs, images_encoded="images", tokens_prefilled="prefilled"),
        }

    # -- 2. N questions about one image, and the cost of hashing -------------------------------------------------

    def questions_one_image(self) -> dict:
        settings = self.settings
        context = self.text(16)
        prompts = [self.inputs([context, IMAGE, self.text(10)], [7]) for _ in range(settings.questions)]

        def ask(model, use_vlmprep: bool) -> dict:
            if use_vlmprep:
                model.encoder_cache.clear()  # each repetition starts cold: the first question encodes the image
            with MeasuredRun(self, model, settings.question_answer_tokens, count_prefill=False) as run:
                answers = [run.generate(inputs).sequences[0].tolist() for inputs in prompts]
            return run.result(answers=answers)

        ours, theirs = self.paired("questions about one image", ask)
        result = {"questions": settings.questions, **side_by_side(ours, theirs, vision_runs="images")}
        result["hashing"] = self.hashing_cost()
        self.tick("questions about one image")
        return result

    def hashing_cost(self) -> dict:
        """Milliseconds to hash one image's float32 pixels (what every call pays) vs one vision-encoder run."""
        runs = max(5, self.settings.repeats)
        pixels = random_pixels(1, 0, size=self.image_size)
        with torch.no_grad():
            vision_ms = median_ms(lambda: self.ours.model.get_image_features(pixel_values=pixels), runs)
        result = {
            "compared": (
                f"sha256 of one float32 (3, side, side) pixel tensor (`hash_item_inputs`) vs one call of the bench "
                f"model's vision tower + projector (`get_image_features`) on one {self.image_size}x{self.image_size} "
                "image"
            ),
            "vision_forward_ms": round(vision_ms, 2),
        }
        for side in sorted({self.image_size, *self.settings.hash_sizes}):
            image = {"pixel_values": random_pixels(1, 0, size=side)[0]}
            hash_ms = median_ms(lambda image=image: hash_item_inputs(image), runs)
            result[f"hash_{side}px_ms"] = round(hash_ms, 3)
            result[f"hash_{side}px_over_vision_forward"] = round(hash_ms / vision_ms, 4)
        return result

    # -- 3. shared system prompt, different images ---------------------------------------------------------------

    def shared_system_prompt(self) -> dict:
        settings = self.settings
        system = self.text(settings.system_tokens)
        prompts = [
            self.inputs([system, IMAGE, self.text(8)], [200 + request]) for request in range(settings.shared_requests)
        ]

        def serve(model, use_vlmprep: bool) -> dict:
            extra = self.prefix_cache_kwargs(model, use_vlmprep)
            with MeasuredRun(self, model, settings.question_answer_tokens) as run:
                answers = [run.generate(inputs, **extra).sequences[0].tolist() for inputs in prompts]
            reused = extra["prefix_cache"].stats.tokens_reused if extra else 0
            return run.result(reused=reused, answers=answers)

        ours, theirs = self.paired("shared system prompt", serve)
        return {
            "requests": settings.shared_requests,
            "system_prompt_tokens": settings.system_tokens,
            "prompt_tokens": sum(inputs["input_ids"].shape[1] for inputs in prompts),
            "vlmprep_tokens_reused": ours[0]["reused"],
            **side_by_side(ours, theirs, tokens_prefilled="prefilled", images_encoded="images"),
        }

    # -- 4. decode speed -------------------------------------------------------------------------------------------

    def decode_speed(self) -> dict:
        settings = self.settings
        inputs = self.inputs([self.text(32), IMAGE, self.text(16)], [300])

        def decode(model, use_vlmprep: bool) -> dict:
            if use_vlmprep:
                model.encoder_cache.clear()
            with PrefillCounter(model) as prefill:
                output = self.generate(model, inputs, settings.decode_tokens)
            # Intervals between consecutive decode forwards: each is one whole decode step (forward, logits processors,
            # token selection and the generation loop's bookkeeping); prefill is excluded. The median step is
            # reported: on a shared CPU a few steps stall for many milliseconds whenever a thread is descheduled.
            steps = [after - before for before, after in pairwise(prefill.times[1:])]
            step_s = statistics.median(steps)
            return {"time_s": step_s, "tokens_per_s": 1 / step_s, "answer": output.sequences.tolist()}

        ours, theirs = self.paired("decode speed", decode)
        times = paired_times(ours, theirs)
        return {
            "new_tokens": settings.decode_tokens,
            "prompt_tokens": inputs["input_ids"].shape[1],
            "vlmprep_tokens_per_s": round(statistics.median(run["tokens_per_s"] for run in ours), 2),
            "transformers_tokens_per_s": round(statistics.median(run["tokens_per_s"] for run in theirs), 2),
            "vlmprep_ms_per_token": round(1000 * times["vlmprep_time_s"], 3),
            "transformers_ms_per_token": round(1000 * times["transformers_time_s"], 3),
            "time_per_token_ratio": times["time_ratio"],
            "tokens_identical": same_answers(ours, theirs, key="answer"),
        }

    # -- 5. chunked vs unchunked prefill ---------------------------------------------------------------------------

    def chunked_prefill(self) -> dict:
        """Chunked vs unchunked prefill of a long, text-heavy prompt, for vlmprep and for transformers.

        Returns:
            `dict`: times, peak activation memory, images encoded and prefill forwards of each of the four runs, and
            how far the chunked logits are from the unchunked ones (transformers' chunking included).
        """
        settings = self.settings
        # Text-heavy, so that prefill (not the vision encoder) holds the peak memory, as in long real prompts.
        segments = [self.text(settings.long_text_tokens)]
        for _ in range(settings.long_images):
            segments += [IMAGE, self.text(settings.long_text_tokens)]
        inputs = self.inputs(segments, [400 + image for image in range(settings.long_images)])
        new_tokens = 2
        configs = {
            "vlmprep_unchunked": (self.ours, None),
            "vlmprep_chunked": (self.ours, settings.chunk_size),
            "transformers_unchunked": (self.theirs, None),
            "transformers_chunked": (self.theirs, settings.chunk_size),
        }

        def prefill(model, chunk_size: int | None) -> dict:
            if model is self.ours:
                model.encoder_cache.clear()  # every run encodes its images: only chunking differs
            with VisionRunCounter(model) as vision, PrefillCounter(model) as prefill:
                start = time.perf_counter()
                output = self.generate(model, inputs, new_tokens, prefill_chunk_size=chunk_size)
                elapsed = time.perf_counter() - start
            return {
                "time_s": elapsed,
                "images": vision.images,
                "prefill_forwards": prefill.forwards - (new_tokens - 1),
                "logits": output.logits[0][0],  # the prompt's last-position logits
                "answer": output.sequences.tolist(),
            }

        runs = self.interleaved(
            "chunked prefill", {name: lambda c=config: prefill(*c) for name, config in configs.items()}
        )
        peak_mib = {}
        for name, config in configs.items():
            peak = peak_tensor_bytes(lambda config=config: prefill(*config))
            peak_mib[name] = round(peak / 2**20, 2) if peak is not None else None
            self.tick("chunked prefill")

        def max_diff(first: str, second: str) -> float:
            return float((runs[first][0]["logits"] - runs[second][0]["logits"]).abs().max())

        def median_s(name: str) -> float:
            return round(statistics.median(run["time_s"] for run in runs[name]), 4)

        reference = runs["transformers_unchunked"][0]["answer"]
        return {
            "prompt_tokens": inputs["input_ids"].shape[1],
            "images": settings.long_images,
            "chunk_size": settings.chunk_size,
            "new_tokens": new_tokens,
            "memory_method": (
                "peak bytes of CPU tensors alive at once during the generate call, from torch.profiler memory events "
                "(activations only: weights and allocator slack are not counted)"
            ),
            "peak_mib": peak_mib,
            "time_s": {name: median_s(name) for name in configs},
            "runs_s": {name: [round(run["time_s"], 4) for run in runs[name]] for name in configs},
            "images_encoded": {name: runs[name][0]["images"] for name in configs},
            "prefill_forwards": {name: runs[name][0]["prefill_forwards"] for name in configs},
            "chunked_time_ratio": round(median_s("vlmprep_chunked") / median_s("transformers_chunked"), 3),
            "unchunked_time_ratio": round(median_s("vlmprep_unchunked") / median_s("transformers_unchunked"), 3),
            "logits_max_abs_diff": {
                "transformers_chunked_vs_unchunked": max_diff("transformers_chunked", "transformers_unchunked"),
                "vlmprep_chunked_vs_unchunked": max_diff("vlmprep_chunked", "vlmprep_unchunked"),
                "vlmprep_chunked_vs_transformers_unchunked": max_diff("vlmprep_chunked", "transformers_unchunked"),
            },
            "tokens_identical": all(
                run["answer"] == reference for name in configs if name != "transformers_chunked" for run in runs[name]
            ),
            "transformers_chunked_tokens_identical": all(
                run["answer"] == reference for run in runs["transformers_chunked"]
            ),
        }


class MeasuredRun:
    """One model's `generate` calls over one run of a workload: their summed time, vision runs and prefilled tokens.

    Args:
        runner (`BenchRunner`): whose `generate` is called.
        model: the model.
        new_tokens (`int`): the answer length of every call.
        count_prefill (`bool`, *optional*, defaults to `True`): also count the prefilled tokens (`PrefillCounter`).
    """

    def __init__(self, runner: BenchRunner, model, new_tokens: int, count_prefill: bool = True):
        self.runner, self.model, self.new_tokens = runner, model, new_tokens
        self.vision = VisionRunCounter(model)
        self.prefill = PrefillCounter(model) if count_prefill else None
        self.elapsed, self.calls = 0.0, 0

    def __enter__(self) -> MeasuredRun:
        self._counters = contextlib.ExitStack()
        for counter in (self.vision, self.prefill):
            if counter is not None:
                self._counters.enter_context(counter)
        return self

    def __exit__(self, *exc) -> None:
        self._counters.close()

    def generate(self, inputs: dict, **kwargs):
        """`BenchRunner.generate`, timed (only the call itself)."""
        start = time.perf_counter()
        output = self.runner.generate(self.model, inputs, self.new_tokens, **kwargs)
        self.elapsed += time.perf_counter() - start
        self.calls += 1
        return output

    def result(self, **extra) -> dict:
        """`time_s`, `images` (vision runs' items), `prefilled` (when counted), then `extra`."""
        result = {"time_s": self.elapsed, "images": self.vision.images}
        if self.prefill is not None:
            result["prefilled"] = self.prefill.prefilled(self.new_tokens, calls=self.calls)
        return {**result, **extra}


def same_answers(ours: list[dict], theirs: list[dict], key: str = "answers") -> bool:
    """Whether every repetition's answer tokens (`run[key]`) are the same for both libraries."""
    return all(a[key] == b[key] for a, b in zip(ours, theirs, strict=True))


def side_by_side(ours: list[dict], theirs: list[dict], **counts: str) -> dict:
    """Per `name=key`, `vlmprep_<name>` and `transformers_<name>` (the first repetition's `run[key]`: counts do not
    change between repetitions), then the paired times and whether the answers are identical."""
    result = {}
    for name, key in counts.items():
        result[f"vlmprep_{name}"] = ours[0][key]
        result[f"transformers_{name}"] = theirs[0][key]
    return {**result, **paired_times(ours, theirs), "tokens_identical": same_answers(ours, theirs)}
