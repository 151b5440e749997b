"""Smoke test of the benchmark driver: every workload runs on the tiny bench model and reports the expected counts."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from support.references import gemma3_image_effect
from vlmprep.bench import bench_model_config, format_bench_table, run_bench
from vlmprep.bench.text_only import build_checkpoint


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("bench")
    return run_bench(out_dir=str(out_dir), progress=False, _tiny=True)


def test_writes_json_and_png(summary):
    with open(summary["json_path"]) as f:
        written = json.load(f)
    assert written["mode"] == "tiny"
    assert written["rows"] == summary["rows"]
    assert os.path.dirname(summary["png_path"]) == os.path.dirname(summary["json_path"])
    with Image.open(summary["png_path"]) as image:
        assert image.format == "PNG" and image.width > 400 and image.height > 200


def test_counts_of_every_workload(summary):
    workloads = summary["workloads"]
    chat = workloads["multi_turn_chat"]
    # transformers re-encodes every image of the conversation each turn: 1 + 1 + 2 + 2 + 2
    assert (chat["vlmprep_images_encoded"], chat["transformers_images_encoded"]) == (2, 8)
    assert chat["vlmprep_tokens_prefilled"] < chat["transformers_tokens_prefilled"]

    questions = workloads["questions_one_image"]
    assert questions["vlmprep_vision_runs"] == 1
    assert questions["transformers_vision_runs"] == questions["questions"] == summary["settings"]["questions"]
    assert {"vision_forward_ms", "hash_448px_ms", "compared"} <= set(questions["hashing"])

    shared = workloads["shared_system_prompt"]
    assert shared["vlmprep_images_encoded"] == shared["transformers_images_encoded"] == shared["requests"]
    assert shared["vlmprep_tokens_reused"] > 0
    reused_prompts = shared["requests"] - 1  # the first request fills the store
    assert shared["vlmprep_tokens_prefilled"] + shared["vlmprep_tokens_reused"] == shared["prompt_tokens"]
    assert shared["transformers_tokens_prefilled"] == shared["prompt_tokens"] and reused_prompts > 0

    chunked = workloads["chunked_prefill"]
    assert chunked["logits_max_abs_diff"]["vlmprep_chunked_vs_transformers_unchunked"] <= 1e-5
    assert set(chunked["peak_mib"]) == set(chunked["time_s"])

    text_only = workloads["text_only_load"]["by_dtype"]["float32"]
    assert text_only["vlmprep"]["class"] == "Gemma3ForCausalLM"
    assert text_only["params_ratio"] < 1


def test_vlmprep_and_transformers_generate_the_same_tokens(summary):
    workloads = summary["workloads"]
    names = ["multi_turn_chat", "questions_one_image", "shared_system_prompt", "decode_speed", "chunked_prefill"]
    assert {name: workloads[name]["tokens_identical"] for name in names} == dict.fromkeys(names, True)


def test_table_lists_every_workload(summary):
    table = format_bench_table(summary)
    for number in range(1, 7):
        assert f"\n{number} " in table
    assert all(row["ratio"] is None or row["ratio"] >= 0 for row in summary["rows"])


def test_bench_checkpoint_is_image_sensitive(tmp_path):
    import transformers

    checkpoint = build_checkpoint(str(tmp_path / "bench"), bench_model_config(tiny=True))
    model = transformers.Gemma3ForConditionalGeneration.from_pretrained(checkpoint["path"]).eval()
    assert gemma3_image_effect(model) > 1e-3
