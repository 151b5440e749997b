"""Config types that transformers builds as another model type's class under their own name (`shieldgemma2` is
`Gemma3ForConditionalGeneration`) load that type's drop-in, and it generates as the plain class with the same weights.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

import vlmprep
from support.references import assert_same_steps, generate_logits
from support.registry import FAMILY_CASES
from vlmprep.models.registry import ALIAS, FAMILY_SPECS
from vlmprep.testing import IMAGE, tiny_config, tiny_model

ALIASES = sorted(model_type for model_type, spec in FAMILY_SPECS.items() if spec.status == ALIAS)


def test_every_config_type_built_as_a_drop_in_class_is_an_alias():
    # transformers' own mapping: a type whose class is a drop-in's class, under another config type
    drop_in_types = {spec.class_name: model_type for model_type, spec in FAMILY_SPECS.items() if spec.drop_in}
    built_as_drop_in = {
        model_type: drop_in_types[class_name]
        for model_type, class_name in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.items()
        if class_name in drop_in_types and drop_in_types[class_name] != model_type
    }
    assert built_as_drop_in == {model_type: FAMILY_SPECS[model_type].alias_of for model_type in ALIASES}
    assert len(ALIASES) >= 3, "transformers builds ShieldGemma 2, PP-Chart2Table and GLM-GA as drop-in classes"


def _alias_config(alias: str):
    """The aliased type's tiny config, under the alias's own config class."""
    fields = tiny_config(FAMILY_SPECS[alias].alias_of).to_dict()
    for key in ("model_type", "transformers_version", "architectures"):
        fields.pop(key, None)
    return CONFIG_MAPPING[alias](**fields)


@pytest.mark.parametrize("alias", ALIASES)
def test_alias_loads_the_drop_in(alias, tmp_path):
    config = _alias_config(alias)
    upstream_class = transformers.AutoModelForImageTextToText._model_mapping[type(config)]
    upstream_class(config).save_pretrained(tmp_path)
    ours = vlmprep.AutoModelForImageTextToText.from_pretrained(tmp_path)
    assert type(ours) is FAMILY_SPECS[FAMILY_SPECS[alias].alias_of].drop_in_class()
    assert type(ours.config) is type(config)  # the checkpoint's own config class, as transformers loads it
    assert type(vlmprep.AutoModelForImageTextToText.from_config(config)) is type(ours)


@pytest.mark.parametrize("alias", ALIASES)
def test_alias_drop_in_generates_as_the_plain_class(alias):
    base = FAMILY_SPECS[alias].alias_of
    config = _alias_config(alias)
    upstream_class = transformers.AutoModelForImageTextToText._model_mapping[type(config)]
    # Weights handed over in memory: transformers 5.24 itself does not reload a saved `shieldgemma2` checkpoint
    # (its language-model weights come back missing), for its own class as for the drop-in.
    upstream = tiny_model(upstream_class, config, seed=0).eval()
    ours = vlmprep.AutoModelForImageTextToText.from_config(config).eval()
    ours.load_state_dict(upstream.state_dict())

    # The processor of an alias type is its base type's: the same ids and per-token inputs
    inputs = FAMILY_CASES[base].build_inputs(tiny_config(base), [[2, 10, 11, 12], IMAGE, [13, 14]], [0])
    expected_ids, expected = generate_logits(upstream, inputs)
    ids, logits = generate_logits(ours, inputs, prefill_chunk_size=5)
    assert torch.equal(ids, expected_ids)
    assert_same_steps(logits, expected)
