"""A drop-in has transformers' encoder methods exactly where transformers' class has them: code that checks
`hasattr(model, "get_image_features")` (transformers' own `test_get_image_features_*`) then calls upstream's method
with upstream's inputs, and finds none where upstream has none (Llama 3.2 Vision and IDEFICS, whose drop-ins encode
with their own `encode_image_items`)."""

import pytest

from vlmprep.generation.encoding import encoder_name
from vlmprep.models import DROP_IN_CLASSES

MODALITIES = ("image", "video", "audio")


def upstream_class(drop_in: type) -> type:
    return next(base for base in drop_in.__mro__ if base.__module__.startswith("transformers.models."))


DROP_INS = sorted(set(DROP_IN_CLASSES.values()), key=lambda cls: cls.__name__)


@pytest.mark.parametrize("drop_in", DROP_INS, ids=lambda cls: cls.__name__)
def test_encoder_methods_are_upstream_s(drop_in):
    upstream = upstream_class(drop_in)
    for modality in MODALITIES:
        name = f"get_{modality}_features"
        assert hasattr(drop_in, name) == hasattr(upstream, name), name


OWN_ENCODERS = [cls for cls in DROP_INS if encoder_name(cls, "image") != "get_image_features"]


def test_the_own_encoders_are_found():
    names = {cls.__name__ for cls in OWN_ENCODERS}
    assert {"MllamaForConditionalGeneration", "IdeficsForVisionText2Text"} <= names


@pytest.mark.parametrize("drop_in", OWN_ENCODERS, ids=lambda cls: cls.__name__)
def test_own_encoder_only_where_upstream_has_none(drop_in):
    assert not hasattr(upstream_class(drop_in), "get_image_features")
