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

# Upstream method -> the parameters vlmprep's override calls it with (see generation/mixin.py).
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
    "_prefill": ("input_ids", "generation_config", "model_kwargs", "is_first_iteration"),
    "prepare_inputs_for_generation": ("input_ids", "is_first_iteration"),
    "_valid_auto_compile_criteria": ("model_kwargs", "generation_config"),
    "get_compiled_call": ("compile_config",),
}


def missing_generation_hooks() -> list[str]:
    """Descriptions of the hooks (or hook parameters) the installed transformers lacks; empty when all are there.

    Returns:
        `list[str]`
    """
    from transformers import GenerationMixin, PreTrainedModel

    problems = []
    for name, parameters in REQUIRED_GENERATION_HOOKS.items():
        method = getattr(GenerationMixin, name, None) or getattr(PreTrainedModel, name, None)
        problems += method_problems(f"GenerationMixin.{name}", method, parameters)
    return problems


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
