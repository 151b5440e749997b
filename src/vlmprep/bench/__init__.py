"""Side-by-side benchmarks of vlmprep and transformers on one random-weight Gemma3 checkpoint (`vlmprep bench`).

- `settings`: the sizes of each mode and the bench model's config (`bench_model_config`);
- `workloads`: the pair of models and one method per workload; `measure`: memory and timing measurements;
- `text_only`: text-only loading of the multimodal checkpoint, one subprocess per load;
- `report`: the summary rows, the text table and the PNG chart; `runner`: `run_bench`, which runs them all.

`vlmprep bench [--quick]` runs them from the command line; `run_bench`'s docstring shows the call from Python.
"""

from .report import format_bench_table
from .runner import run_bench
from .settings import BenchSettings, bench_model_config

__all__ = ["BenchSettings", "bench_model_config", "format_bench_table", "run_bench"]
