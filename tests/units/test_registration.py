"""`vlmprep.register()`: transformers' auto classes and `pipeline` load the drop-ins, and `unregister()` undoes it."""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

import vlmprep
from vlmprep.cli.demo_checkpoint import demo_images, ensure_demo_checkpoint
from vlmprep.models import DROP_IN_CLASSES
from vlmprep.registration import AUTO_CLASSES


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    # the demo's tiny Gemma3: config, weights, tokenizer, image processor and processor, saved with save_pretrained
    directory, _ = ensure_demo_checkpoint(tmp_path_factory.mktemp("registration") / "gemma3")
    return str(directory)


@pytest.fixture
def registered():
    try:
        yield vlmprep.register()
    finally:
        vlmprep.unregister()


def _mapped_classes() -> dict[tuple[str, str], type]:
    mapped = {}
    for class_name, mapping_name in AUTO_CLASSES.items():
        mapping = getattr(modeling_auto, mapping_name, None)
        if mapping is None:
            continue
        for model_type in DROP_IN_CLASSES:
            mapped[class_name, model_type] = mapping.get(CONFIG_MAPPING[model_type], None)
    return mapped


def _chat(image) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "describe it"}]}]


def test_register_maps_every_drop_in_and_unregister_restores():
    before = _mapped_classes()
    try:
        registered_types = vlmprep.register()
        assert vlmprep.register() == registered_types  # a second call changes nothing
        # An alias type (`shieldgemma2`) stays transformers' class there: `register` takes a class under its own
        # config class only (`vlmprep.AutoModelForImageTextToText` loads its drop-in)
        own_types = sorted(
            model_type for model_type, cls in DROP_IN_CLASSES.items() if cls.config_class.model_type == model_type
        )
        assert sorted(registered_types["AutoModelForImageTextToText"]) == own_types
        assert sorted(registered_types["AutoModelForMultimodalLM"]) == own_types
        for (class_name, model_type), upstream in _mapped_classes().items():
            if model_type in registered_types.get(class_name, []):
                assert upstream is DROP_IN_CLASSES[model_type], (class_name, model_type)
            else:  # an auto class that did not load this model type still does not
                assert upstream is before[class_name, model_type], (class_name, model_type)
    finally:
        vlmprep.unregister()
    assert _mapped_classes() == before


def test_pipeline_from_path_runs_the_drop_in(checkpoint, registered):
    image = demo_images()[0]
    generate_kwargs = {"max_new_tokens": 4, "do_sample": False}
    vlmprep.unregister()
    torch.manual_seed(0)
    upstream = transformers.pipeline("image-text-to-text", model=checkpoint, dtype=torch.float32)
    assert type(upstream.model) is transformers.Gemma3ForConditionalGeneration
    expected = upstream(text=_chat(image), generate_kwargs=generate_kwargs)

    vlmprep.register()
    pipe = transformers.pipeline("image-text-to-text", model=checkpoint, dtype=torch.float32)
    assert type(pipe.model) is vlmprep.Gemma3ForConditionalGeneration
    first = pipe(text=_chat(image), generate_kwargs=generate_kwargs)
    assert pipe.model.encoder_cache.stats.misses == 1 and pipe.model.encoder_cache.stats.hits == 0
    second = pipe(text=_chat(image), generate_kwargs=generate_kwargs)
    assert pipe.model.encoder_cache.stats.hits == 1  # the same image, not encoded again
    # the answers are transformers' own
    assert first[0]["generated_text"] == expected[0]["generated_text"] == second[0]["generated_text"]


def test_auto_class_from_pretrained_after_register(checkpoint, registered):
    model = transformers.AutoModelForMultimodalLM.from_pretrained(checkpoint)
    assert type(model) is vlmprep.Gemma3ForConditionalGeneration
