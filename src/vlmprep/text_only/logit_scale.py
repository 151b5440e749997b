"""Whether a multimodal class multiplies its logits by its text config's `logit_scale`, probed on a tiny model.

Cohere2's causal LM always multiplies its logits by `logit_scale` (1/16 in Aya Vision's checkpoints). The multimodal
classes around the same decoder do so or not depending on the transformers release: Aya Vision's does from 5.25 on,
not in 5.24; Cohere2 Vision's does not in either. The text-only decoder must return the multimodal model's logits, so
it keeps the scale only where the installed multimodal class applies it. That is decided by what the class does (two
tiny models that differ only in `logit_scale`), once per model type and process, not by a version string.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING

__all__ = ["multimodal_class_scales_logits"]

# The two scales probed: far enough from each other and from 1 that neither answer can pass for the other.
_PROBE_SCALES = (1.0, 4.0)
# model_type -> whether the installed multimodal class scales its logits (the probe runs once per process).
_PROBED: dict[str, bool] = {}


def multimodal_class_scales_logits(model_type: str, probe_config: tuple[tuple[str, Any], ...]) -> bool:
    """Whether transformers' multimodal class of `model_type` multiplies its logits by `text_config.logit_scale`.

    Two tiny models of the class with the same weights, whose text configs differ only in `logit_scale`, run the same
    text prompt: logits in the ratio of the scales mean the class applies it, equal logits that it does not. The
    global random state is left as it was.

    Args:
        model_type (`str`): the multimodal model type (`"aya_vision"`).
        probe_config (`tuple[tuple[str, Any], ...]`): keyword arguments of a tiny config of that type (the family's
            `TextOnlyFamily.logit_scale_probe`).

    Returns:
        `bool`: `True` where the class scales its logits, `False` where it returns its `lm_head`'s output as it is.

    Raises:
        `RuntimeError`: the logits are in neither relation (the class changed in a way this probe cannot read).
    """
    if model_type not in _PROBED:
        _PROBED[model_type] = _probe(model_type, _as_kwargs(probe_config))
    return _PROBED[model_type]


def _as_kwargs(pairs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    # `(name, value)` pairs to keyword arguments; a value made of pairs is a sub-config's
    def is_pairs(value: Any) -> bool:
        return isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 2 for v in value)

    return {name: _as_kwargs(value) if is_pairs(value) else value for name, value in pairs}


def _probe(model_type: str, probe_config: dict[str, Any]) -> bool:
    config_class = CONFIG_MAPPING[model_type]
    model_class = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING[config_class]
    text_config = probe_config.pop("text_config")
    ids = torch.tensor([[3, 4, 5, 6]])
    logits, weights = [], None
    # Forked: building a model draws its initial weights from the global generator, which the caller may have seeded
    with torch.random.fork_rng(devices=[]), torch.device("cpu"), torch.no_grad():
        for scale in _PROBE_SCALES:
            config = config_class(**probe_config, text_config={**text_config, "logit_scale": scale})
            model = model_class(config).float().eval()
            if weights is None:
                weights = model.state_dict()
            else:  # the same weights: only the scale differs
                model.load_state_dict(weights)
            logits.append(model(input_ids=ids).logits)
    unscaled, scaled = logits
    ratio = _PROBE_SCALES[1] / _PROBE_SCALES[0]
    if unscaled.abs().max() > 0 and torch.allclose(scaled, ratio * unscaled):
        return True
    if unscaled.abs().max() > 0 and torch.allclose(scaled, unscaled):
        return False
    raise RuntimeError(
        f"Cannot tell whether transformers' {model_class.__name__} multiplies its logits by `logit_scale`: the text "
        "decoder alone would not match it. Load the multimodal model instead."
    )
