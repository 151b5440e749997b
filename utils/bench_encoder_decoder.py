"""Florence-2's task prompts on one image: vlmprep's drop-in against transformers' class, side by side.

A random-weight Florence-2 of the bench size (a 4-stage DaViT tower at 384x384 px, 145 features per image; a BART
encoder-decoder of 4 + 4 layers, hidden 512, vocabulary 16,384), float32, one torch thread. Three task prompts
(caption-, detection- and OCR-like: different text) on one image, 8 answer tokens each, greedy. vlmprep keeps the
image's features in its encoder cache (cleared at the start of each repetition); transformers runs the whole encoder
every call. Repetitions alternate the two sides; reported are medians, the vision-tower runs (a forward hook) and
whether both generated the same tokens.

    python utils/bench_encoder_decoder.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

import vlmprep
from vlmprep.testing import tiny_model

IMAGE_SIZE = 384
IMAGE_TOKEN_ID = 16_000
TASKS = {"caption": [5, 6, 7], "detection": [8, 9, 10, 11, 12], "ocr": [13, 14]}
MAX_NEW_TOKENS = 8


def bench_config() -> transformers.Florence2Config:
    vision = {
        "depths": [1, 1, 3, 1],
        "embed_dim": [64, 128, 256, 512],
        "num_heads": [2, 4, 8, 16],
        "num_groups": [2, 4, 8, 16],
        "window_size": 12,
        "drop_path_rate": 0.0,
        "projection_dim": 512,
    }
    text = {
        "model_type": "bart",
        "vocab_size": 16_384,
        "d_model": 512,
        "encoder_layers": 4,
        "decoder_layers": 4,
        "encoder_attention_heads": 8,
        "decoder_attention_heads": 8,
        "encoder_ffn_dim": 2048,
        "decoder_ffn_dim": 2048,
        "max_position_embeddings": 1024,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        "forced_eos_token_id": None,
    }
    return transformers.Florence2Config(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN_ID)


def tower_runs(model) -> list[int]:
    runs: list[int] = []
    model.model.vision_tower.register_forward_hook(lambda module, args, output: runs.append(args[0].shape[0]))
    return runs


def run_tasks(model, pixel_values: torch.Tensor, image_tokens: int, config) -> tuple[list[float], list[list[int]]]:
    """Each task's `generate` wall time (s) and answer."""
    times, answers = [], []
    text = config.text_config
    for task in TASKS.values():
        ids = torch.tensor([[IMAGE_TOKEN_ID] * image_tokens + [text.bos_token_id, *task, text.eos_token_id]])
        start = time.perf_counter()
        output = model.generate(
            input_ids=ids,
            pixel_values=pixel_values,
            max_new_tokens=MAX_NEW_TOKENS,
            min_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
        )
        times.append(time.perf_counter() - start)
        answers.append(output[0].tolist())
    return times, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = bench_config()
    directory = tempfile.mkdtemp(prefix="vlmprep-bench-florence2-")
    tiny_model(transformers.Florence2ForConditionalGeneration, config).save_pretrained(directory)
    upstream = transformers.Florence2ForConditionalGeneration.from_pretrained(directory).eval()
    ours = vlmprep.AutoModelForImageTextToText.from_pretrained(directory).eval()
    pixel_values = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(0))
    image_tokens = ours.item_token_counts({"pixel_values": pixel_values})
    runs = {"vlmprep": tower_runs(ours), "transformers": tower_runs(upstream)}
    models = {"vlmprep": ours, "transformers": upstream}
    times: dict[str, list[list[float]]] = {name: [] for name in models}
    answers: dict[str, list[list[int]]] = {}
    with torch.no_grad():
        run_tasks(ours, pixel_values, image_tokens, config)  # warm-up, both sides
        run_tasks(upstream, pixel_values, image_tokens, config)
        for repeat in range(args.repeats):
            order = ("vlmprep", "transformers") if repeat % 2 == 0 else ("transformers", "vlmprep")
            for name in order:
                ours.encoder_cache.clear()
                del runs[name][:]
                per_task, answers[name] = run_tasks(models[name], pixel_values, image_tokens, config)
                times[name].append(per_task)
    print(f"image: {IMAGE_SIZE}x{IMAGE_SIZE} px, {image_tokens} placeholders; {MAX_NEW_TOKENS} answer tokens per task")
    print(f"{'task':<10} {'vlmprep ms':>11} {'transformers ms':>16} {'ratio':>6}")
    for index, task in enumerate(TASKS):
        ours_ms = statistics.median(t[index] for t in times["vlmprep"]) * 1000
        theirs_ms = statistics.median(t[index] for t in times["transformers"]) * 1000
        print(f"{task:<10} {ours_ms:>11.1f} {theirs_ms:>16.1f} {ours_ms / theirs_ms:>6.2f}")
    ours_total = statistics.median(sum(t) for t in times["vlmprep"]) * 1000
    theirs_total = statistics.median(sum(t) for t in times["transformers"]) * 1000
    print(f"{'all three':<10} {ours_total:>11.1f} {theirs_total:>16.1f} {ours_total / theirs_total:>6.2f}")
    print(
        f"vision-tower runs per repetition: vlmprep {len(runs['vlmprep'])}, transformers {len(runs['transformers'])}"
    )
    print(f"same tokens: {answers['vlmprep'] == answers['transformers']}")


if __name__ == "__main__":
    main()
