"""Text-only loading of multimodal checkpoints: decoder logits, which tensors are read, errors, round trip."""

from __future__ import annotations

import functools
import inspect
import json
import os
import shutil
import tempfile
import unittest
from dataclasses import dataclass
from unittest import mock

import torch
import transformers
from parameterized import parameterized
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import CONFIG_MAPPING, AutoModelForImageTextToText, LlamaConfig, PreTrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
from transformers.utils import is_accelerate_available

from support.traits import families_with, sampled
from vlmprep.models.text_only_rules import COHERE2_VISION, LANGUAGE_MODEL
from vlmprep.testing import TINY_CONFIG_BUILDERS, tiny_config, tiny_text_config, tiny_vision_config
from vlmprep.text_only import TEXT_ONLY_FAMILIES, AutoModelForCausalLM, decoder, load_text_decoder, logit_scale

FAMILIES = sorted(TEXT_ONLY_FAMILIES)
# One family per key layout and lm_head arrangement, for the error cases.
ERROR_FAMILIES = families_with(sampled("text_only_refusal"))

_TINY_TEXT = tiny_text_config(None, head_dim=16, max_position_embeddings=512)
_TINY_VISION = tiny_vision_config()
# Sizes the generic shrinking below does not reach (Idefics2's perceiver resampler).
_TINY_OVERRIDES = {
    "idefics2": {
        "perceiver_config": {
            "resampler_n_latents": 4,
            "resampler_depth": 1,
            "resampler_n_heads": 2,
            "resampler_head_dim": 16,
            "num_key_value_heads": 1,
        }
    },
}


def tiny_vlm_config(model_type: str) -> PreTrainedConfig:
    """The tiny config of a covered family: its drop-in's (`vlmprep.testing.tiny_config`) where it has one, else the
    defaults shrunk."""
    if model_type in TINY_CONFIG_BUILDERS:
        return tiny_config(model_type)
    config_class = CONFIG_MAPPING[model_type]
    config = config_class().to_dict()
    config.pop("model_type", None)
    # `layer_types` is sized by the default layer count; dropping it lets the text config derive it again.
    text_config = {k: v for k, v in config["text_config"].items() if k != "layer_types"} | _TINY_TEXT
    vision_config = dict(config["vision_config"])
    vision_config.update({k: v for k, v in _TINY_VISION.items() if k in vision_config})
    config.update(_TINY_OVERRIDES.get(model_type, {}))
    return config_class(**{**config, "text_config": text_config, "vision_config": vision_config})


@dataclass
class TinyCheckpoint:
    vlm: PreTrainedModel
    single_dir: str
    sharded_dir: str


_ROOT = tempfile.mkdtemp(prefix="vlmprep-text-only-")


def tearDownModule():
    shutil.rmtree(_ROOT, ignore_errors=True)


# Families whose decoder config states a `logit_scale` (Cohere2's decoders)
LOGIT_SCALED_FAMILIES = [
    model_type
    for model_type in FAMILIES
    if hasattr(tiny_vlm_config(model_type).get_text_config(decoder=True), "logit_scale")
]


@functools.cache
def tiny_checkpoint(model_type: str) -> TinyCheckpoint:
    """A tiny random VLM of a family, saved once per session as one file and as 20KB shards."""
    torch.manual_seed(0)
    vlm = AutoModelForImageTextToText.from_config(tiny_vlm_config(model_type)).eval()
    text_config = vlm.config.get_text_config(decoder=True)
    if any(getattr(text_config, key, None) for key in ("num_experts", "num_local_experts", "n_routed_experts")):
        # Upstream init leaves the MoE router and experts near zero, where a wrong routing rule cannot show.
        with torch.no_grad():
            for parameter in vlm.parameters():
                parameter.normal_(0.0, 0.2)
    vlm.generation_config.max_new_tokens = 7  # a non-default value, to see that it is carried over
    single_dir = os.path.join(_ROOT, model_type, "single")
    sharded_dir = os.path.join(_ROOT, model_type, "sharded")
    vlm.save_pretrained(single_dir)
    vlm.save_pretrained(sharded_dir, max_shard_size="20KB")
    return TinyCheckpoint(vlm, single_dir, sharded_dir)


@functools.cache
def tiny_text_checkpoint() -> str:
    """A tiny random `LlamaForCausalLM`, saved once per session: a plain text checkpoint."""
    torch.manual_seed(0)
    model_dir = os.path.join(_ROOT, "llama-text")
    transformers.AutoModelForCausalLM.from_config(LlamaConfig(**_TINY_TEXT)).save_pretrained(model_dir)
    return model_dir


def vlm_text_logits(vlm: PreTrainedModel, ids: torch.Tensor) -> torch.Tensor:
    """The multimodal model's logits of a text-only prompt: its forward, or, where that needs pixels (BLIP-2's), its
    language model's, which is what computes a text prompt there (upstream's `generate` decodes with it alone)."""
    pixels = inspect.signature(vlm.forward).parameters.get("pixel_values")
    if pixels is not None and pixels.default is inspect.Parameter.empty:
        return vlm.language_model(input_ids=ids).logits
    return vlm(input_ids=ids).logits


def _text_ids() -> torch.Tensor:
    return torch.randint(3, 100, (2, 11), generator=torch.Generator().manual_seed(0))


def _copy_config_files(source_dir: str, target_dir: str) -> None:
    os.makedirs(target_dir, exist_ok=True)
    for name in os.listdir(source_dir):
        if name.endswith(".json") and "index" not in name:
            shutil.copy(os.path.join(source_dir, name), target_dir)


class _RecordingSafeOpen:
    """Stands in for `safetensors.safe_open`: records opened files and the tensor names read from them."""

    def __init__(self):
        self.opened: list[str] = []
        self.read: list[str] = []

    def __call__(self, filename, *args, **kwargs):
        self.opened.append(os.path.basename(filename))
        return _RecordingHandle(safe_open(filename, *args, **kwargs), self.read)


class _RecordingHandle:
    def __init__(self, handle, read: list[str]):
        self._handle, self._read = handle, read

    def __enter__(self):
        self._handle.__enter__()
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)

    def keys(self):
        return self._handle.keys()

    def metadata(self):
        return self._handle.metadata()

    def get_tensor(self, name):
        self._read.append(name)
        return self._handle.get_tensor(name)

    def get_slice(self, name):
        self._read.append(name)
        return self._handle.get_slice(name)


class TextOnlyLoadingTest(unittest.TestCase):
    @parameterized.expand(FAMILIES)
    def test_logits_match_vlm_text_forward(self, model_type):
        checkpoint = tiny_checkpoint(model_type)
        model = AutoModelForCausalLM.from_pretrained(checkpoint.single_dir)
        ids = _text_ids()
        with torch.no_grad():
            expected = vlm_text_logits(checkpoint.vlm, ids)
            logits = model(input_ids=ids).logits
        torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)
        self.assertEqual(model.generation_config.max_new_tokens, 7)

    @parameterized.expand(FAMILIES)
    def test_only_decoder_parameters(self, model_type):
        checkpoint = tiny_checkpoint(model_type)
        family = TEXT_ONLY_FAMILIES[model_type]
        model = AutoModelForCausalLM.from_pretrained(checkpoint.single_dir)
        vlm_params = dict(checkpoint.vlm.named_parameters())
        # The VLM's text parameters, under the decoder's names (tied lm_head is deduplicated on both sides). A rule
        # written for checkpoint names that are not the module names (Inkling2's original `model.llm.*`) leaves the
        # modules, named as the LLaVA-like families', to that family's rule.
        if not any(family.decoder_key(name) for name in vlm_params):
            family = LANGUAGE_MODEL
        expected = {family.decoder_key(name): name for name in vlm_params if family.decoder_key(name) is not None}
        params = dict(model.named_parameters())
        self.assertEqual(set(params), set(expected))
        self.assertEqual(model.num_parameters(), sum(vlm_params[name].numel() for name in expected.values()))
        self.assertLess(model.num_parameters(), checkpoint.vlm.num_parameters())
        for name, param in params.items():
            torch.testing.assert_close(param, vlm_params[expected[name]], atol=0, rtol=0, msg=name)
        for name in params:
            self.assertFalse(any(word in name for word in ("vision", "visual", "projector", "connector", "image")))

    @parameterized.expand(FAMILIES)
    def test_single_file_reads_decoder_tensors_only(self, model_type):
        checkpoint = tiny_checkpoint(model_type)
        family = TEXT_ONLY_FAMILIES[model_type]
        recorder, upstream = _RecordingSafeOpen(), _RecordingSafeOpen()
        with (
            mock.patch.object(decoder, "safe_open", recorder),
            mock.patch.object(transformers.modeling_utils, "safe_open", upstream),
        ):
            AutoModelForCausalLM.from_pretrained(checkpoint.single_dir)
        with safe_open(os.path.join(checkpoint.single_dir, "model.safetensors"), framework="pt") as f:
            all_keys = f.keys()
        decoder_keys = {key for key in all_keys if family.decoder_key(key) is not None}
        self.assertGreater(len(all_keys), len(decoder_keys))  # the file does hold vision tensors
        self.assertEqual(set(recorder.opened), {"model.safetensors"})
        self.assertEqual(sorted(recorder.read), sorted(decoder_keys))
        self.assertEqual(upstream.opened, [])

    @parameterized.expand(FAMILIES)
    def test_sharded_never_opens_vision_only_shards(self, model_type):
        checkpoint = tiny_checkpoint(model_type)
        family = TEXT_ONLY_FAMILIES[model_type]
        with open(os.path.join(checkpoint.sharded_dir, "model.safetensors.index.json")) as f:
            weight_map = json.load(f)["weight_map"]
        decoder_keys = {key for key in weight_map if family.decoder_key(key) is not None}
        decoder_shards = {weight_map[key] for key in decoder_keys}
        vision_only_shards = set(weight_map.values()) - decoder_shards
        self.assertTrue(vision_only_shards, "the test needs at least one shard without decoder tensors")

        recorder = _RecordingSafeOpen()
        with mock.patch.object(decoder, "safe_open", recorder):
            model = AutoModelForCausalLM.from_pretrained(checkpoint.sharded_dir)
        self.assertEqual(sorted(recorder.opened), sorted(decoder_shards))  # each decoder shard once, no other
        self.assertEqual(sorted(recorder.read), sorted(decoder_keys))
        ids = _text_ids()
        with torch.no_grad():
            torch.testing.assert_close(
                model(input_ids=ids).logits, vlm_text_logits(checkpoint.vlm, ids), atol=1e-5, rtol=0
            )

    @parameterized.expand(FAMILIES)
    def test_round_trip_through_transformers(self, model_type):
        checkpoint = tiny_checkpoint(model_type)
        model = AutoModelForCausalLM.from_pretrained(checkpoint.single_dir)
        with tempfile.TemporaryDirectory() as text_dir:
            model.save_pretrained(text_dir)
            # transformers' AutoModelForCausalLM lists Llama 3.2 Vision's `MllamaForCausalLM` under the multimodal
            # type only, not under its own text config: such a decoder reloads through its class
            listed = type(model.config) in MODEL_FOR_CAUSAL_LM_MAPPING
            loader = transformers.AutoModelForCausalLM if listed else type(model)
            reloaded, info = loader.from_pretrained(text_dir, output_loading_info=True)
        self.assertIs(type(reloaded), type(model))
        for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info[kind], kind)
        ids = _text_ids()
        with torch.no_grad():
            torch.testing.assert_close(reloaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5, rtol=0)

    @parameterized.expand(ERROR_FAMILIES)
    def test_missing_decoder_tensor_raises(self, model_type):
        checkpoint = tiny_checkpoint(model_type)
        family = TEXT_ONLY_FAMILIES[model_type]
        tensors = load_file(os.path.join(checkpoint.single_dir, "model.safetensors"))
        removed = next(
            key for key in tensors if (family.decoder_key(key) or "").endswith("layers.1.mlp.down_proj.weight")
        )
        del tensors[removed]
        with tempfile.TemporaryDirectory() as broken_dir:
            _copy_config_files(checkpoint.single_dir, broken_dir)
            save_file(tensors, os.path.join(broken_dir, "model.safetensors"), metadata={"format": "pt"})
            with self.assertRaisesRegex(
                ValueError, r"Missing decoder keys: \['model\.layers\.1\.mlp\.down_proj\.weight'\]"
            ):
                AutoModelForCausalLM.from_pretrained(broken_dir)

    def test_missing_untied_lm_head_raises(self):
        checkpoint = tiny_checkpoint("llava")  # LLaVA does not tie its lm_head: it must be in the checkpoint
        tensors = load_file(os.path.join(checkpoint.single_dir, "model.safetensors"))
        del tensors["language_model.lm_head.weight"]
        with tempfile.TemporaryDirectory() as broken_dir:
            _copy_config_files(checkpoint.single_dir, broken_dir)
            save_file(tensors, os.path.join(broken_dir, "model.safetensors"), metadata={"format": "pt"})
            with self.assertRaisesRegex(ValueError, r"lm_head\.weight"):
                load_text_decoder(broken_dir)

    def test_unexpected_decoder_tensor_raises(self):
        checkpoint = tiny_checkpoint("gemma3")
        tensors = load_file(os.path.join(checkpoint.single_dir, "model.safetensors"))
        tensors["language_model.model.layers.5.mlp.up_proj.weight"] = torch.zeros(64, 32)
        with tempfile.TemporaryDirectory() as broken_dir:
            _copy_config_files(checkpoint.single_dir, broken_dir)
            save_file(tensors, os.path.join(broken_dir, "model.safetensors"), metadata={"format": "pt"})
            with self.assertRaisesRegex(ValueError, r"Unexpected decoder keys: .*model\.layers\.5\.mlp\.up_proj"):
                AutoModelForCausalLM.from_pretrained(broken_dir)

    def test_corrupt_file_error_names_file(self):
        checkpoint = tiny_checkpoint("gemma3")
        with tempfile.TemporaryDirectory() as broken_dir:
            _copy_config_files(checkpoint.single_dir, broken_dir)
            weights_file = os.path.join(broken_dir, "model.safetensors")
            with open(weights_file, "wb") as f:
                f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00not a safetensors header")
            with self.assertRaisesRegex(OSError, "model.safetensors"):
                AutoModelForCausalLM.from_pretrained(broken_dir)

    def test_missing_decoder_shard_error_names_file(self):
        checkpoint = tiny_checkpoint("llava")
        with open(os.path.join(checkpoint.sharded_dir, "model.safetensors.index.json")) as f:
            weight_map = json.load(f)["weight_map"]
        with tempfile.TemporaryDirectory() as broken_dir:
            shutil.copytree(checkpoint.sharded_dir, broken_dir, dirs_exist_ok=True)
            lost_shard = weight_map["language_model.lm_head.weight"]
            os.remove(os.path.join(broken_dir, lost_shard))
            with self.assertRaisesRegex(OSError, lost_shard):
                AutoModelForCausalLM.from_pretrained(broken_dir)

    def test_dtype_and_attn_implementation_pass_through(self):
        checkpoint = tiny_checkpoint("gemma3")
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint.sharded_dir, dtype=torch.bfloat16, attn_implementation="eager"
        )
        self.assertEqual({p.dtype for p in model.parameters()}, {torch.bfloat16})
        self.assertEqual(model.config._attn_implementation, "eager")

    def test_uncovered_model_type_raises(self):
        with self.assertRaisesRegex(ValueError, "not covered"):
            load_text_decoder(tiny_text_checkpoint())

    @unittest.skipUnless(is_accelerate_available(), "transformers needs accelerate for any `device_map`")
    def test_device_map_passes_through(self):
        checkpoint = tiny_checkpoint("gemma3")
        model = AutoModelForCausalLM.from_pretrained(checkpoint.sharded_dir, device_map="cpu")
        self.assertEqual({p.device.type for p in model.parameters()}, {"cpu"})

    def test_from_config_builds_decoder_only(self):
        config = tiny_vlm_config("paligemma")
        model = AutoModelForCausalLM.from_config(config)
        self.assertEqual(type(model).__name__, "GemmaForCausalLM")
        self.assertEqual(model.config.model_type, "gemma")


class PlainTextCheckpointTest(unittest.TestCase):
    def test_loads_as_transformers_does(self):
        model_dir = tiny_text_checkpoint()
        ours, our_info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True)
        theirs, their_info = transformers.AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True)
        self.assertIs(type(ours), type(theirs))
        self.assertEqual(our_info, their_info)
        self.assertEqual(ours.config.to_dict(), theirs.config.to_dict())
        ours_state, theirs_state = ours.state_dict(), theirs.state_dict()
        self.assertEqual(list(ours_state), list(theirs_state))
        for name, tensor in ours_state.items():
            torch.testing.assert_close(tensor, theirs_state[name], atol=0, rtol=0)

    def test_from_config_as_transformers_does(self):
        config = LlamaConfig(**_TINY_TEXT)
        self.assertIs(
            type(AutoModelForCausalLM.from_config(config)), type(transformers.AutoModelForCausalLM.from_config(config))
        )

    def test_not_instantiable(self):
        with self.assertRaises(OSError):
            AutoModelForCausalLM()


class QwenVLDecoderConfigTest(unittest.TestCase):
    @parameterized.expand(
        [
            ("qwen2_vl", transformers.Qwen2VLConfig, "qwen2"),
            ("qwen2_5_vl", transformers.Qwen2_5_VLConfig, "qwen2"),
            ("qwen3_vl", transformers.Qwen3VLConfig, "qwen3"),
            ("qwen3_vl_moe", transformers.Qwen3VLMoeConfig, "qwen3_moe"),
        ]
    )
    def test_published_mrope_config_becomes_1d_rope(self, _, config_class, decoder_type):
        # Published Qwen-VL configs state `rope_scaling: {"type": "mrope", "mrope_section": [...]}`.
        text_config = {"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "rope_theta": 1e6}
        decoder_config = decoder.text_decoder_config(config_class(text_config=text_config))
        self.assertEqual(decoder_config.model_type, decoder_type)
        self.assertEqual(decoder_config.rope_parameters, {"rope_type": "default", "rope_theta": 1e6})


class LogitScaleTest(unittest.TestCase):
    """Cohere2's causal LM multiplies its logits by `logit_scale`; transformers 5.25's Aya Vision class does too (5.24's
    did not), Cohere2 Vision's does not: the decoder alone returns the logits of the installed multimodal class."""

    @parameterized.expand([(model_type, scale) for model_type in LOGIT_SCALED_FAMILIES for scale in (4.0, 0.25)])
    def test_decoder_logits_are_the_multimodal_class_logits(self, model_type, scale):
        config = tiny_vlm_config(model_type)
        config.text_config.logit_scale = scale
        torch.manual_seed(0)
        vlm = AutoModelForImageTextToText.from_config(config).eval()
        directory = os.path.join(_ROOT, model_type, f"logit-scale-{scale}")
        vlm.save_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory)
        ids = _text_ids()
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids=ids).logits, vlm(input_ids=ids).logits, atol=1e-5, rtol=0)
        # Sampling reads the logits' scale (a temperature of its own): the same draws as the multimodal model
        sampling = {"max_new_tokens": 4, "do_sample": True, "top_k": 0, "output_logits": True}
        torch.manual_seed(1)
        expected = vlm.generate(input_ids=ids, return_dict_in_generate=True, **sampling)
        torch.manual_seed(1)
        actual = model.generate(input_ids=ids, return_dict_in_generate=True, **sampling)
        self.assertTrue(torch.equal(actual.sequences, expected.sequences))

    def test_probe_leaves_the_random_state_alone(self):
        logit_scale._PROBED.clear()  # the probe runs again, once
        torch.manual_seed(3)
        expected = torch.rand(4)
        torch.manual_seed(3)
        scales = logit_scale.multimodal_class_scales_logits("aya_vision", COHERE2_VISION.logit_scale_probe)
        self.assertTrue(torch.equal(torch.rand(4), expected))
        self.assertIs(logit_scale.multimodal_class_scales_logits("aya_vision", ()), scales)  # not probed again
