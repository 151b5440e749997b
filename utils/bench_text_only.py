"""Side-by-side: text-only loading of a multimodal checkpoint vs transformers' `AutoModelForCausalLM`.

A thin wrapper: the benchmark lives in `vlmprep.bench.text_only` (the installed `vlmprep bench` command runs it too).

    python utils/bench_text_only.py [--full] [--workdir DIR] [--out bench_out/text_only.json]
"""

from vlmprep.bench.text_only import build_checkpoint, format_table, main, run_text_only_benchmark

__all__ = ["build_checkpoint", "format_table", "main", "run_text_only_benchmark"]

if __name__ == "__main__":
    main()
