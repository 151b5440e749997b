"""A drop-in whose `forward` wraps upstream's keeps upstream's annotations, not only its signature: transformers' own
model tests read the output type from `forward.__annotations__` (`test_moe_models_record_router_logits`)."""

import pytest
import transformers

from vlmprep.models.blip_2 import Blip2ForConditionalGeneration
from vlmprep.models.gemma4 import Gemma4ForConditionalGeneration
from vlmprep.models.instructblip import InstructBlipForConditionalGeneration
from vlmprep.models.instructblipvideo import InstructBlipVideoForConditionalGeneration
from vlmprep.models.qwen2_5_omni import Qwen2_5OmniThinkerForConditionalGeneration
from vlmprep.models.qwen3_omni_moe import Qwen3OmniMoeThinkerForConditionalGeneration


@pytest.mark.parametrize(
    "drop_in",
    [
        Gemma4ForConditionalGeneration,
        Qwen2_5OmniThinkerForConditionalGeneration,
        Qwen3OmniMoeThinkerForConditionalGeneration,
        Blip2ForConditionalGeneration,
        InstructBlipForConditionalGeneration,
        InstructBlipVideoForConditionalGeneration,
    ],
)
def test_forward_keeps_upstream_annotations(drop_in):
    upstream = getattr(transformers, drop_in.__name__)
    assert drop_in.forward is not upstream.forward  # the drop-in wraps it
    assert drop_in.forward.__annotations__ == upstream.forward.__annotations__
    assert drop_in.forward.__annotations__["return"] is not None
