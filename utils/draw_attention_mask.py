"""Print the attention mask of a Gemma3-style prompt with two images as an ASCII grid, with the chunks vlmprep plans.

Usage: python utils/draw_attention_mask.py [--chunk-size N]

`#` marks a key a query attends to; rows are queries, columns keys. Image tokens (`I`) attend to every token of their
own image (the bidirectional block), text tokens (`t`) causally. `|` marks where vlmprep ends prefill chunks.
"""

from __future__ import annotations

import argparse

import torch

from vlmprep.generation.spans import blocks_from_runs, merge_blocks, plan_prefill_chunks

PROMPT = "tttIIIItttIIIItt"


def attention_grid(prompt: str) -> list[list[bool]]:
    is_image = torch.tensor([[c == "I" for c in prompt]])
    blocks = blocks_from_runs(is_image)
    block_of = {p: i for i, b in enumerate(blocks) for p in range(b.start, b.end)}
    n = len(prompt)
    return [[k <= q or (q in block_of and block_of.get(k) == block_of[q]) for k in range(n)] for q in range(n)]


def render(prompt: str, chunk_size: int) -> str:
    is_image = torch.tensor([[c == "I" for c in prompt]])
    intervals = merge_blocks(blocks_from_runs(is_image))
    cuts = {end for _, end in plan_prefill_chunks(0, len(prompt), chunk_size, intervals)}
    header = "      " + "".join(c + ("|" if i + 1 in cuts else "") for i, c in enumerate(prompt))
    lines = [header]
    for q, row in enumerate(attention_grid(prompt)):
        cells = "".join(("#" if v else ".") + ("|" if k + 1 in cuts else "") for k, v in enumerate(row))
        lines.append(f"{q:>3} {prompt[q]} {cells}")
    lines.append(f"chunks (chunk size {chunk_size}): {plan_prefill_chunks(0, len(prompt), chunk_size, intervals)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk-size", type=int, default=5)
    args = parser.parse_args()
    print(render(PROMPT, args.chunk_size))


if __name__ == "__main__":
    main()
