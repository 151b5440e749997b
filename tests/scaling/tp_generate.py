"""Greedy generation of a saved tiny VLM with transformers' tensor parallelism: the script the scaling tests launch.

Run under `torchrun --nproc-per-node N` (gloo on CPU). For each `--model-dir` (a `save_pretrained` directory that
also holds `inputs.pt`, a `torch.save`d dict of model inputs), every rank loads the vlmprep drop-in with
`DistributedConfig(tp_plan="auto")`, generates greedily from those inputs, counts its vision-encoder runs, and writes
`<out-dir>/<model dir name>/rank{RANK}.json`: the tokens, the per-step logits, the encoder counts and the local shape
of one sharded weight (proof that the decoder really is split). The test compares these against one process of the
plain transformers class. Several models share one launch because starting the ranks costs most of the time.

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29511 tests/scaling/tp_generate.py \
        --model-dir /tmp/tiny-llava /tmp/tiny-gemma3 --out-dir /tmp/tp-out
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib

import torch
from transformers import DistributedConfig

import vlmprep
from vlmprep.testing import VisionRunCounter


def local_shape(weight: torch.Tensor) -> list[int]:
    """The shape this rank holds: a DTensor's local shard, or the tensor itself once transformers localised it."""
    to_local = getattr(weight, "to_local", None)
    return list((to_local() if to_local is not None else weight).shape)


def first_sharded_weight(model: torch.nn.Module) -> tuple[str, torch.Tensor]:
    """The first q_proj weight of the text decoder: column-wise sharded by every plan these tests use."""
    for name, parameter in model.named_parameters():
        if name.endswith("self_attn.q_proj.weight") and "vision" not in name and "visual" not in name:
            return name, parameter
    raise ValueError(f"{type(model).__name__} has no decoder q_proj weight to check the sharding on")


def generate_sharded(model_dir: pathlib.Path, out_dir: pathlib.Path, max_new_tokens: int) -> None:
    """Load one saved model tensor-parallel, generate from its `inputs.pt`, and write this rank's report."""
    model = vlmprep.AutoModelForImageTextToText.from_pretrained(
        model_dir, distributed_config=DistributedConfig(tp_plan="auto")
    ).eval()
    inputs = torch.load(model_dir / "inputs.pt", weights_only=True)
    with VisionRunCounter(model) as runs, torch.no_grad():
        out = model.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, output_logits=True, return_dict_in_generate=True
        )
    weight_name, weight = first_sharded_weight(model)
    rank = torch.distributed.get_rank()
    report = {
        "rank": rank,
        "world_size": torch.distributed.get_world_size(),
        "class": f"{type(model).__module__}.{type(model).__name__}",
        "sequences": out.sequences.tolist(),
        "logits": [step.tolist() for step in out.logits],
        "vision_calls": runs.calls,
        "vision_images": runs.images,
        "sharded_weight": weight_name,
        "sharded_weight_local_shape": local_shape(weight),
    }
    model_out = out_dir / model_dir.name
    model_out.mkdir(parents=True, exist_ok=True)
    (model_out / f"rank{rank}.json").write_text(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", nargs="+", required=True, help="save_pretrained directories with inputs.pt")
    parser.add_argument("--out-dir", required=True, help="where each rank writes <model dir name>/rank{RANK}.json")
    parser.add_argument("--max-new-tokens", type=int, default=4)
    args = parser.parse_args()
    for model_dir in args.model_dir:
        generate_sharded(pathlib.Path(model_dir), pathlib.Path(args.out_dir), args.max_new_tokens)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # N ranks share this machine's cores
    main()
