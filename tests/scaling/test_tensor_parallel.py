"""Tensor parallelism with transformers' own engine: `tp_plan="auto"` under torchrun (gloo, CPU, loopback).

One `torchrun --nproc-per-node 2` launch of `tp_generate.py` loads each tiny drop-in sharded over two ranks and
generates greedily; every rank must produce the tokens (and per-step logits) of ONE process of the plain transformers
class with the same weights, and encode the prompt's images exactly once.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile

import pytest
import torch
from transformers.utils import is_accelerate_available

import vlmprep
from support.registry import FAMILY_CASES
from support.traits import families_with, sampled
from vlmprep.testing import IMAGE

ATOL = 1e-5
WORLD_SIZE = 2
MAX_NEW_TOKENS = 4
LAUNCH_TIMEOUT_S = 420  # three models on two ranks take ~50 s on 2 shared cores; the bound only stops a hang
SCRIPT = pathlib.Path(__file__).with_name("tp_generate.py")
# Families whose text decoder has a tensor-parallel plan in transformers (Llama, Gemma3 text, Qwen2-VL text).
FAMILIES = families_with(sampled("mainstream"))
SEGMENTS = [[5, 6, 7], IMAGE, [8, 9], IMAGE, [10]]
IMAGE_SEEDS = [0, 1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not is_accelerate_available(), reason="transformers' tp_plan loading needs accelerate"),
    pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without torch.distributed"),
]


def tensor_parallel_config(family: str):
    """The family's tiny config with as many key/value heads as ranks: column-wise sharding splits heads."""
    config = FAMILY_CASES[family].make_config()
    config.text_config.num_key_value_heads = WORLD_SIZE
    assert config.text_config.num_attention_heads % WORLD_SIZE == 0
    return config


def save_tiny_model(family: str, directory: pathlib.Path) -> dict:
    """Save a tiny upstream model and its prompt inputs under `directory`; return the inputs."""
    case = FAMILY_CASES[family]
    config = tensor_parallel_config(family)
    torch.manual_seed(0)
    model = case.upstream_class(config)
    if family == "gemma3":
        # Upstream init leaves the projector too small for images to move the greedy tokens: make them matter.
        torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight, std=0.5)
    model.save_pretrained(directory)
    inputs = case.build_inputs(config, SEGMENTS, IMAGE_SEEDS)
    torch.save(inputs, directory / "inputs.pt")
    return inputs


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_torchrun(model_dirs: list[pathlib.Path], out_dir: pathlib.Path) -> None:
    """Run `tp_generate.py` on `WORLD_SIZE` local ranks over loopback; fail with the log tail on error or hang."""
    env = dict(os.environ)
    source_root = str(pathlib.Path(vlmprep.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source_root, env.get("PYTHONPATH")]))
    env.update(MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc-per-node={WORLD_SIZE}", "--master-addr=127.0.0.1", f"--master-port={free_loopback_port()}",
        str(SCRIPT), "--model-dir", *map(str, model_dirs), "--out-dir", str(out_dir),
        "--max-new-tokens", str(MAX_NEW_TOKENS),
    ]  # fmt: skip
    # A new session, so a hang is stopped with every rank torchrun started, not just torchrun itself.
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        log, _ = process.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        log, _ = process.communicate()
        pytest.fail(f"torchrun did not finish within {LAUNCH_TIMEOUT_S} s:\n{log[-4000:]}")
    assert process.returncode == 0, f"torchrun exited with {process.returncode}:\n{log[-4000:]}"


@pytest.fixture(scope="module")
def runs() -> dict:
    """family -> (upstream single-process reference, [report of each rank])."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="vlmprep-tp-"))
    references, model_dirs = {}, []
    for family in FAMILIES:
        directory = root / family
        inputs = save_tiny_model(family, directory)
        upstream = FAMILY_CASES[family].upstream_class.from_pretrained(directory).eval()
        with torch.no_grad():
            out = upstream.generate(
                **inputs,
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
            )
            uncached = upstream(**inputs, use_cache=False).logits[:, -1]
        references[family] = {"sequences": out.sequences, "logits": torch.stack(out.logits), "uncached": uncached}
        model_dirs.append(directory)
    launch_torchrun(model_dirs, root / "out")
    results = {}
    for family in FAMILIES:
        reports = [json.loads((root / "out" / family / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)]
        results[family] = (references[family], reports)
    return results


@pytest.mark.parametrize("family", FAMILIES)
def test_tensor_parallel_tokens_equal_one_process(runs, family):
    reference, reports = runs[family]
    for report in reports:
        assert report["class"].startswith("vlmprep."), report["class"]
        assert report["world_size"] == WORLD_SIZE
        assert torch.equal(torch.tensor(report["sequences"]), reference["sequences"]), f"rank {report['rank']}"
        logits = torch.tensor(report["logits"])
        torch.testing.assert_close(logits, reference["logits"], atol=ATOL, rtol=0)
        # The first step also equals one uncached forward of the whole prompt through the plain class.
        torch.testing.assert_close(logits[0], reference["uncached"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_tensor_parallel_encodes_each_image_once_per_rank(runs, family):
    _, reports = runs[family]
    for report in reports:
        assert (report["vision_calls"], report["vision_images"]) == (1, len(IMAGE_SEEDS)), f"rank {report['rank']}"


@pytest.mark.parametrize("family", FAMILIES)
def test_decoder_is_really_sharded(runs, family):
    _, reports = runs[family]
    config = tensor_parallel_config(family).text_config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    full_rows = config.num_attention_heads * head_dim
    for report in reports:
        assert report["sharded_weight_local_shape"] == [full_rows // WORLD_SIZE, config.hidden_size], report


@pytest.mark.parametrize("family", FAMILIES)
def test_images_move_the_reference(family):
    """The tiny model can fail: other images change the single-process logits, so equal tokens mean something."""
    with tempfile.TemporaryDirectory() as directory:
        inputs = save_tiny_model(family, pathlib.Path(directory))
        upstream = FAMILY_CASES[family].upstream_class.from_pretrained(directory).eval()
    other = FAMILY_CASES[family].build_inputs(upstream.config, SEGMENTS, [seed + 7 for seed in IMAGE_SEEDS])
    with torch.no_grad():
        logits = upstream(**inputs, use_cache=False).logits[:, -1]
        other_logits = upstream(**other, use_cache=False).logits[:, -1]
    assert not torch.allclose(logits, other_logits, atol=1e-3)
