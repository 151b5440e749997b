"""What vlmprep needs from transformers, checked once at import.

The mixin overrides private hooks of `transformers.GenerationMixin`; a release that renames them or changes their
parameters would make vlmprep silently fall back to upstream behaviour, so it fails loudly instead.
"""

from __future__ import annotations

import inspect
import os
import warnings

import transformers
from packaging import version

# The transformers releases the whole suite has passed on (`.ci/run` runs it on the first and the last). The range
# pyproject.toml declares is exactly these: from the first, up to the next minor release after the last
# (`utils/check_transformers_range.py` fails otherwise). Bringing up a new release: docs/contributing.md.
TESTED_TRANSFORMERS = ("5.24.0", "5.25.0")
MIN_TRANSFORMERS = TESTED_TRANSFORMERS[0]
MAX_TRANSFORMERS_EXCLUSIVE = "5.26.0"
# `vlmprep serve` extends transformers 5.25's server (each model in an engine process of its own). 5.24's was another
# design altogether: keeping both would be a second copy of the serving code, so the `serving` extra requires this
# range and `vlmprep serve` refuses any other release; the library itself keeps the whole tested range.
SERVING_MIN_TRANSFORMERS = "5.25.0"
# Set to 1 to import vlmprep on a transformers release outside the tested range (bringing up a new release): a
# warning then replaces the `ImportError`; the hook checks still run.
ALLOW_UNTESTED_ENV = "VLMPREP_ALLOW_UNTESTED_TRANSFORMERS"

# Upstream method -> the parameters vlmprep's code passes or declares: the hooks `generation/mixin.py` overrides, the
# upstream hook whose `is_first_iteration` decides that multimodal inputs reach only prefill's forwards, and the
# static-cache constructor the prefix store calls (`generation/prefix.py`). Hooks that only the tests patch are checked
# by the tests themselves (`tests/scenarios/test_upstream_fidelity.py`): `import vlmprep` does not depend on them.
REQUIRED_GENERATION_HOOKS: dict[str, tuple[str, ...]] = {
    "_validate_model_kwargs": ("model_kwargs",),
    # Where assisted decoding on a decoder with a recurrent state is refused (`generation/assisted.py`)
    "_validate_generation_mode": ("generation_mode", "generation_config", "generation_mode_kwargs"),
    "_maybe_prepare_encoder_kwargs_for_generation": (
        "inputs_tensor",
        "model_kwargs",
        "model_input_name",
        "generation_config",
    ),
    # Called, not overridden: an encoder-decoder's prompt is encoded by it on the embeddings holding its items'
    # features (`generation/encoder_prompt.py`), as Florence-2's own override calls it
    "_prepare_text_encoder_decoder_kwargs_for_generation": (
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
    # Extended by `layouts/multi_run.py`'s multimodal-rope layout (decoded tokens' positions), replaced by IDEFICS's
    # drop-in (`models/idefics.py`: its image mask grows by a row per decoded token)
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


def untested_transformers_message(installed: str | None = None) -> str | None:
    """Why the installed transformers is outside the tested range, or `None` when it is inside.

    Args:
        installed (`str`, *optional*): a version string; defaults to the installed transformers'.

    Returns:
        `str` or `None`
    """
    installed = installed or transformers.__version__
    if version.parse(MIN_TRANSFORMERS) <= version.parse(installed) < version.parse(MAX_TRANSFORMERS_EXCLUSIVE):
        return None
    return (
        f"vlmprep was tested with transformers {', '.join(TESTED_TRANSFORMERS)} and needs transformers>="
        f"{MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE}; transformers {installed} is installed. vlmprep overrides "
        "private transformers hooks whose meaning can change in any release. Run `pip install "
        f"'transformers>={MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE}'`."
    )


def serving_unsupported_message(installed: str | None = None) -> str | None:
    """Why `vlmprep serve` cannot run on the installed transformers, or `None` when it can.

    Args:
        installed (`str`, *optional*): a version string; defaults to the installed transformers'.

    Returns:
        `str` or `None`
    """
    installed = installed or transformers.__version__
    if version.parse(installed) >= version.parse(SERVING_MIN_TRANSFORMERS):
        return None
    return (
        f"`vlmprep serve` extends transformers' server as {SERVING_MIN_TRANSFORMERS} rewrote it (each model in an "
        f"engine process of its own); transformers {installed}'s server is another design, which vlmprep does not "
        'extend. Install the server\'s transformers: `pip install "vlmprep[serving]"` (it requires transformers>='
        f"{SERVING_MIN_TRANSFORMERS}). Generation with vlmprep's classes works on {installed}."
    )


def check_transformers_version() -> None:
    """Raise `ImportError` naming the installed transformers version when it cannot host the mixin.

    A release outside the tested range is refused too (with a warning instead when
    `VLMPREP_ALLOW_UNTESTED_TRANSFORMERS=1` is set, to bring up a new release): a private hook can keep its name and
    change its meaning.
    """
    untested = untested_transformers_message()
    if untested is not None:
        if os.environ.get(ALLOW_UNTESTED_ENV) != "1":
            raise ImportError(untested + f" (Set {ALLOW_UNTESTED_ENV}=1 to try it anyway.)")
        warnings.warn(untested, stacklevel=2)
    problems = missing_generation_hooks()
    if problems:
        raise ImportError(
            f"transformers {transformers.__version__} lacks generation hooks vlmprep overrides: "
            + "; ".join(problems)
            + f". Install transformers>={MIN_TRANSFORMERS},<{MAX_TRANSFORMERS_EXCLUSIVE}."
        )
