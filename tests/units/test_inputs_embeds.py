"""`generate(inputs_embeds=...)` works on a drop-in wherever it works on the transformers class, with equal outputs.

transformers' `generate` accepts `inputs_embeds` only when `prepare_inputs_for_generation` names it in its signature;
the mixin's override must keep naming it (transformers' own `test_generate_from_inputs_embeds*` tests rely on it).
"""

from __future__ import annotations

import pytest
import torch
import transformers

import vlmprep
from vlmprep.testing import IMAGE, build_prompt
from vlmprep.testing.configs import tiny_llava_config


@pytest.fixture(scope="module")
def llava_pair():
    torch.manual_seed(0)
    config = tiny_llava_config()
    upstream = transformers.LlavaForConditionalGeneration(config).eval()
    ours = vlmprep.LlavaForConditionalGeneration(config).eval()
    ours.load_state_dict(upstream.state_dict())
    return config, upstream, ours


def _generate(model, **inputs):
    return model.generate(
        **inputs, max_new_tokens=4, do_sample=False, output_scores=True, return_dict_in_generate=True
    )


@pytest.mark.parametrize("with_ids", [False, True], ids=["embeds_only", "ids_and_embeds"])
@pytest.mark.parametrize("with_image", [False, True], ids=["text", "image"])
def test_generate_from_inputs_embeds_equals_upstream(llava_pair, with_ids, with_image):
    config, upstream, ours = llava_pair
    parts = [[2, 10], IMAGE, [12, 13]] if with_image else [[2, 10, 11, 12, 13]]
    input_ids = torch.tensor([build_prompt(config, parts)[0]])
    inputs = {"inputs_embeds": upstream.get_input_embeddings()(input_ids)}
    if with_ids:
        inputs["input_ids"] = input_ids
    if with_image:
        size = config.vision_config.image_size
        inputs["pixel_values"] = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    expected, actual = _generate(upstream, **inputs), _generate(ours, **inputs)
    assert torch.equal(expected.sequences, actual.sequences)
    for theirs, mine in zip(expected.scores, actual.scores, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
