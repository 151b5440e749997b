"""What vlmprep needs from transformers, checked once at import.

The mixin overrides private hooks of `transformers.GenerationMixin`; a release that renames them or changes their
parameters would make vlmprep silently fall back to upstream behaviour, so it fails loudly instead.
"""

from __future__ import annotations

import inspect

import transformers
from packaging import version

MIN_TRANSFORMERS = "5.24.0"
MAX_TRANSFORMERS_EXCLUSIVE = "6.0.0"

# Upstream method -> the parameters vlmprep's code passes or declares: the hooks `generation/mixin.py` overrides, the
# upstream hook whose `is_first_iteration` decides that multimodal inputs reach only prefill's forwards, and the
# static-cache constructor the prefix store calls (`generation/prefix.py`). Hooks that only the tests patch are checked
# by the tests themselves (`tests/scenarios/test_upstream_fidelity.py`): `import vlmprep` does not depend on them.
REQUIRED_GENERATION_HOOKS: dict[str, tuple[str, ...]] = {
    "_validate_model_kwargs": ("model_kwargs",),
    "_maybe_prepare_encoder_kwargs_for_generation": (
        "inputs_tensor",
        "model_kwargs",
        "model_input_name",
        "generation_config",
    ),
    "_prepare_position_ids_for_generation": ("inputs_tensor", "model_kwargs"),
    "_expand_inputs_for_generation": ("expand_size", "is_encoder_decoder", "input_ids"),
    "_supports_logits_to_keep": (),
    "_prefill": ("input_ids", "generation_config", "model_kwargs", "is_first_iteration"),
    "prepare_inputs_for_generation": ("input_ids", "is_first_iteration"),
    # Extended by `layouts/multi_run.py`'s multimodal-rope layout (decoded tokens' positions)
    "_update_model_kwargs_for_generation": ("outputs", "model_kwargs", "is_encoder_decoder", "num_new_tokens"),
    "_prepare_static_cache": (
        "cache_implementation",
        "batch_size",
        "max_cache_len",
        "prefill_chunk_size",
        "model_kwargs",
    ),
}

# Upstream code that vlmprep repeats rather than calls: `generation/prefix.py`'s `_new_cache` builds the static cache
# `generate` would build (its steps 6 and 7) before `generate` runs. Upstream method -> the source lines the copy
# follows; a release that changes one must be followed there. Checked by `utils/check_upstream_hooks.py`, not at
# import (reading source is slow, and a copy that drifted sizes a cache wrongly rather than breaking every call).
COPIED_UPSTREAM_SOURCE: dict[str, tuple[str, ...]] = {
    "_prepare_generated_length": (
        "generation_config.max_length = generation_config.max_new_tokens + input_ids_length",
    ),
    "generate": ("max_cache_length = generation_config.max_length - 1",),
    "_prepare_cache_for_generation": (
        "max_cache_length = max(max_cache_length, generation_config.max_cache_len)",
        "max_cache_len=max_cache_length",
        "prefill_chunk_size=generation_config.prefill_chunk_size",
    ),
}


def missing_generation_hooks() -> list[str]:
    """Descriptions of the hooks (or hook parameters) the installed transformers lacks; empty when all are there.

    Returns:
        `list[str]`
    """
    problems = []
    for name, parameters in REQUIRED_GENERATION_HOOKS.items():
        problems += method_problems(f"GenerationMixin.{name}", _generation_method(name), parameters)
    return problems


def changed_copied_sources() -> list[str]:
    """Descriptions of the upstream lines in `COPIED_UPSTREAM_SOURCE` the installed transformers no longer has.

    Returns:
        `list[str]`: empty when every line vlmprep's copies follow is still upstream, unchanged.
    """
    problems = []
    for name, lines in COPIED_UPSTREAM_SOURCE.items():
        method = _generation_method(name)
        if method is None:
            problems.append(f"GenerationMixin.{name} is missing")
            continue
        # Whitespace-insensitive: a reformatted line is the same code
        source = " ".join(inspect.getsource(method).split())
        problems += [
            f"GenerationMixin.{name} no longer has `{line}` (generation/prefix.py `_new_cache` copies it)"
            for line in lines
            if " ".join(line.split()) not in source
        ]
    return problems


def _generation_method(name: str):
    from transformers import GenerationMixin, PreTrainedModel

    return getattr(GenerationMixin, name, None) or getattr(PreTrainedModel, name, None)


def method_problems(qualified_name: str, method, parameters: tuple[str, ...]) -> list[str]:
    """What is wrong with an upstream method vlmprep overrides or calls: missing, or lacking some of `parameters`.

    Args:
        qualified_name (`str`): how the method is named in the message (e.g. `"GenerationMixin._prefill"`).
        method (`Callable`, *optional*): the method found upstream, `None` when there is none.
        parameters (`tuple[str, ...]`): the parameter names vlmprep passes or declares.

    Returns:
        `list[str]`: empty when the method is there with every parameter.
    """
    if method is None:
        return [f"{qualified_name} is missing"]
    present = set(inspect.signature(method).parameters)
    absent = [parameter for parameter in parameters if parameter not in present]
    return [f"{qualified_name} lacks parameter(s) {absent}"] if absent else []


def check_transformers_version() -> None:
    """Raise `ImportError` naming the installed transformers version when it cannot host the mixin."""
    installed = version.parse(transformers.__version__)
    if not version.parse(MIN_TRANSFORMERS) <= installed < version.parse(MAX_TRANSFORMERS_EXCLUSIVE):
        raise ImportError(
            f"vlmprep needs transformers>={MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE}; transformers "
            f"{transformers.__version__} is installed. Run `pip install 'transformers>={MIN_TRANSFORMERS},"
            f"<{MAX_TRANSFORMERS_EXCLUSIVE}'`."
        )
    problems = missing_generation_hooks()
    if problems:
        raise ImportError(
            f"transformers {transformers.__version__} lacks generation hooks vlmprep overrides: "
            + "; ".join(problems)
            + f". Install transformers>={MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE}."
        )
