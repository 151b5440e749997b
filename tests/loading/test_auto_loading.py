"""`vlmprep.AutoModelForImageTextToText.from_pretrained` takes every keyword transformers' auto class takes, and each
one acts where it acts in transformers (`subfolder=` used to be lost when the auto class read the config)."""

from __future__ import annotations

import pytest
import torch
import transformers

import vlmprep
from vlmprep.testing import tiny_gemma3_config


@pytest.fixture(scope="module")
def checkpoint_root(tmp_path_factory) -> str:
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("auto-loading")
    transformers.Gemma3ForConditionalGeneration(tiny_gemma3_config()).save_pretrained(root / "weights")
    return str(root)


def _text_logits(model) -> torch.Tensor:
    input_ids = torch.tensor([[2, 5, 9, 14, 3, 7]])
    with torch.no_grad():
        return model(input_ids=input_ids).logits


def test_subfolder_reaches_config_and_weights(checkpoint_root):
    upstream = transformers.AutoModelForImageTextToText.from_pretrained(checkpoint_root, subfolder="weights").eval()
    ours = vlmprep.AutoModelForImageTextToText.from_pretrained(checkpoint_root, subfolder="weights").eval()
    assert type(ours) is vlmprep.Gemma3ForConditionalGeneration
    torch.testing.assert_close(_text_logits(ours), _text_logits(upstream), atol=1e-5, rtol=0)


def test_loading_keywords_act_as_in_transformers(checkpoint_root):
    kwargs = {
        "subfolder": "weights",
        "revision": "main",
        "trust_remote_code": False,
        "local_files_only": True,
        "cache_dir": checkpoint_root + "/hub-cache",
        "dtype": torch.bfloat16,
        "attn_implementation": "eager",
        "initializer_range": 0.5,  # a config attribute override
    }
    upstream, upstream_info = transformers.AutoModelForImageTextToText.from_pretrained(
        checkpoint_root, output_loading_info=True, **kwargs
    )
    ours, info = vlmprep.AutoModelForImageTextToText.from_pretrained(
        checkpoint_root, output_loading_info=True, **kwargs
    )
    assert type(ours) is vlmprep.Gemma3ForConditionalGeneration
    assert info == upstream_info
    assert ours.dtype == upstream.dtype == torch.bfloat16
    assert ours.config._attn_implementation == upstream.config._attn_implementation == "eager"
    assert ours.config.initializer_range == upstream.config.initializer_range == 0.5


def _outcome(load, *args, **kwargs) -> tuple[str, str]:
    try:
        model = load(*args, **kwargs)
    except (OSError, ValueError) as error:
        return type(error).__name__, str(error)
    return "loaded", str(model.device)


@pytest.mark.parametrize(
    "kwargs",
    [{"subfolder": "absent"}, {"subfolder": "weights", "device_map": "cpu"}],
    ids=["missing-subfolder", "device-map"],
)
def test_same_outcome_as_transformers(checkpoint_root, kwargs):
    # device_map: loaded on the device where `accelerate` is installed, the same error where it is not
    expected = _outcome(transformers.AutoModelForImageTextToText.from_pretrained, checkpoint_root, **kwargs)
    assert _outcome(vlmprep.AutoModelForImageTextToText.from_pretrained, checkpoint_root, **kwargs) == expected
