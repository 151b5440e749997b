"""`device_map` splits with transformers' own dispatch (accelerate hooks): vision tower, decoder layers, offload.

Each tiny drop-in is loaded with a `device_map` that puts the vision tower (and projector) on one device, the decoder
layers on others, and offloads part of the model; generation must give the tokens and per-step logits of the plain
transformers class on one device, encode the images once, and hand the decoder its image features on the decoder's
device. The devices come from the machine: on a CPU-only machine the split is CPU plus disk offload (accelerate's
`offload_folder`); with one GPU the vision tower stays on the CPU and the decoder goes to the GPU; with two GPUs
they sit on different GPUs.
"""

from __future__ import annotations

import pathlib
import tempfile

import pytest
import torch
from transformers.utils import is_accelerate_available

import vlmprep
from conftest import model_pair
from support.registry import FAMILY_CASES
from support.traits import families_with, sampled
from vlmprep.testing import IMAGE, VisionRunCounter

ATOL = 1e-5
MAX_NEW_TOKENS = 4
SEGMENTS = [[5, 6, 7], IMAGE, [8, 9], IMAGE, [10]]
IMAGE_SEEDS = [0, 1]
FAMILIES = families_with(sampled("mainstream"))


def vision_modules(family: str) -> list[str]:
    """Where the family keeps its vision side: the base model's parts other than the decoder (its tower and
    projector); everything else in the map is the decoder and the head."""
    _, ours = model_pair(family)
    return [f"model.{name}" for name, _ in ours.model.named_children() if name != "language_model"]


pytestmark = pytest.mark.skipif(not is_accelerate_available(), reason="transformers' device_map needs accelerate")


def machine_devices() -> tuple[str, str, str]:
    """(vision device, decoder device, device of the offloaded decoder layer) this machine can give."""
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        return "cuda:0", "cuda:1", "cpu"  # "cpu" in a map with GPUs is CPU offload
    if gpus == 1:
        return "cpu", "cuda:0", "disk"
    return "disk", "cpu", "disk"


def split_device_map(family: str, config) -> dict[str, str]:
    vision, decoder, offload = machine_devices()
    device_map = dict.fromkeys(vision_modules(family), vision)
    layers = config.text_config.num_hidden_layers
    for name in ("embed_tokens", "norm", "rotary_emb", *(f"layers.{i}" for i in range(layers - 1))):
        device_map[f"model.language_model.{name}"] = decoder
    device_map[f"model.language_model.layers.{layers - 1}"] = offload
    device_map["lm_head"] = decoder
    return device_map


def execution_device(device_map: dict[str, str], device: str) -> torch.device:
    """Where accelerate runs a module mapped to `device`: offloaded ones run on the main (first accelerator) device."""
    if device not in ("cpu", "disk"):
        return torch.device(device)
    accelerators = [value for value in device_map.values() if value not in ("cpu", "disk")]
    return torch.device(accelerators[0] if accelerators else "cpu")


class SavedModel:
    """A tiny upstream model saved with `save_pretrained`, its prompt, and the single-device reference generation."""

    def __init__(self, family: str, directory: pathlib.Path):
        case = FAMILY_CASES[family]
        self.config = case.make_config()
        if family == "gemma3":
            # Gemma3 checkpoints have no SigLIP pooling head: its `probe` parameter is read outside any hooked
            # forward, so upstream itself cannot offload it.
            self.config.vision_config.vision_use_head = False
        torch.manual_seed(0)
        model = case.upstream_class(self.config).eval()
        if family == "gemma3":
            # Upstream init leaves the projector too small for images to move the greedy tokens: make them matter.
            torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight, std=0.5)
        model.save_pretrained(directory)
        self.directory = directory
        self.inputs = case.build_inputs(self.config, SEGMENTS, IMAGE_SEEDS)
        upstream = case.upstream_class.from_pretrained(directory).eval()
        with torch.no_grad():
            self.reference = upstream.generate(
                **self.inputs,
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
            )
            other = case.build_inputs(self.config, SEGMENTS, [seed + 7 for seed in IMAGE_SEEDS])
            self.images_matter = not torch.allclose(
                upstream(**self.inputs).logits[:, -1], upstream(**other).logits[:, -1], atol=1e-3
            )


@pytest.fixture(scope="module")
def saved_models() -> dict[str, SavedModel]:
    root = pathlib.Path(tempfile.mkdtemp(prefix="vlmprep-device-map-"))
    return {family: SavedModel(family, root / family) for family in FAMILIES}


def load_split(saved: SavedModel, family: str):
    device_map = split_device_map(family, saved.config)
    offload_folder = tempfile.mkdtemp(prefix="vlmprep-offload-")
    model = vlmprep.AutoModelForImageTextToText.from_pretrained(
        saved.directory, device_map=device_map, offload_folder=offload_folder
    ).eval()
    return model, device_map


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_depends_on_images(saved_models, family):
    """The tiny model can fail: other images change the reference logits, so equal tokens mean something."""
    assert saved_models[family].images_matter


@pytest.mark.parametrize("family", FAMILIES)
def test_split_is_dispatched_as_mapped(saved_models, family):
    model, device_map = load_split(saved_models[family], family)
    assert type(model).__module__.startswith("vlmprep.")
    assert model.hf_device_map == device_map
    assert hasattr(model, "_hf_hook")  # transformers dispatched it with accelerate's hooks


@pytest.mark.parametrize("family", FAMILIES)
def test_split_generates_the_tokens_of_one_device(saved_models, family):
    saved = saved_models[family]
    model, _ = load_split(saved, family)
    with torch.no_grad(), VisionRunCounter(model) as runs:
        out = model.generate(
            **saved.inputs,
            max_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    assert torch.equal(out.sequences.cpu(), saved.reference.sequences)
    torch.testing.assert_close(torch.stack(out.logits).cpu(), torch.stack(saved.reference.logits), atol=ATOL, rtol=0)
    assert (runs.calls, runs.images) == (1, len(IMAGE_SEEDS))


@pytest.mark.parametrize("family", FAMILIES)
def test_features_reach_the_decoder_on_its_device(saved_models, family):
    """The vision tower runs on its device; the decoder receives the image features on the embeddings' device."""
    saved = saved_models[family]
    model, device_map = load_split(saved, family)
    seen = {}
    vision = model.get_submodule(vision_modules(family)[0])
    decoder = model.model.language_model

    def record_vision(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else getattr(output, "last_hidden_state", output)
        seen.setdefault("vision", hidden.device)

    def record_decoder(module, args, kwargs):
        seen.setdefault("decoder", kwargs["inputs_embeds"].device)

    hooks = [
        vision.register_forward_hook(record_vision),
        decoder.register_forward_pre_hook(record_decoder, with_kwargs=True),
    ]
    try:
        with torch.no_grad():
            model.generate(**saved.inputs, max_new_tokens=1, do_sample=False)
    finally:
        for hook in hooks:
            hook.remove()
    vision_device = device_map[vision_modules(family)[0]]
    assert seen["vision"] == execution_device(device_map, vision_device)
    decoder_device = device_map["model.language_model.embed_tokens"]
    assert seen["decoder"] == execution_device(device_map, decoder_device)
