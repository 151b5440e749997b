"""The audio families' items and forward as data: clip schemas with their families' trims, Gemma 4's videos split by
their frame counts, and one shared forward that places encoded audio by the audio facts' `AudioPlacement`."""

import ast
import inspect
import pathlib
from dataclasses import replace

import pytest
import torch
import transformers

import vlmprep.models
from support.traits import families_with, takes
from vlmprep.generation.facts import AudioPlacement
from vlmprep.models.layouts.audio import EncodedAudioForward
from vlmprep.models.registry import drop_in_class_of
from vlmprep.testing import tiny_model
from vlmprep.testing.configs import tiny_dots3_note_config, tiny_gemma4_config, tiny_muse_spark_config

AUDIO_FAMILIES = families_with(takes("audio"))
MODELS = pathlib.Path(vlmprep.models.__file__).parent
ITEM_OVERRIDES = {"forward", "count_items", "select_item_inputs", "select_audio_inputs", "count_audio_clips"}


def _upstream_class(drop_in: type) -> type:
    return next(
        base for base in drop_in.__mro__ if base.__module__.startswith("transformers.") and "forward" in vars(base)
    )


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_the_forward_keeps_upstreams_interface_and_places_audio_by_the_facts(family):
    drop_in = drop_in_class_of(family)
    upstream = _upstream_class(drop_in)
    assert inspect.signature(drop_in.forward) == inspect.signature(upstream.forward)
    assert drop_in.forward.__annotations__ == upstream.forward.__annotations__
    assert issubclass(drop_in, EncodedAudioForward)
    assert "audio" in drop_in.vision_facts.modality("audio").placement.placed


def test_no_audio_family_file_defines_a_forward_or_counts_and_selects_items_itself():
    paths = [MODELS / "layouts" / name for name in ("audio.py", "patch_grid_audio.py", "patch_items_and_audio.py")]
    paths += [MODELS / f"{drop_in_class_of(family).__module__.rsplit('.', 1)[-1]}.py" for family in AUDIO_FAMILIES]
    for path in paths:
        classes = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]
        defined = {node.name for cls in classes for node in cls.body if isinstance(node, ast.FunctionDef)}
        assert not defined & ITEM_OVERRIDES, (path.name, defined & ITEM_OVERRIDES)


def test_a_drop_in_without_an_audio_placement_is_refused_when_its_class_is_made():
    facts = drop_in_class_of("gemma4").vision_facts
    audio = facts.modality("audio")
    unplaced = replace(facts, other_modalities=(facts.modality("video"), replace(audio, placement=None)))
    with pytest.raises(TypeError, match="state no `placement`"):
        type(
            "Unplaced", (EncodedAudioForward, transformers.Gemma4ForConditionalGeneration), {"vision_facts": unplaced}
        )


def test_placeholders_embedded_as_an_id_or_a_config_path():
    config = tiny_gemma4_config()
    assert AudioPlacement(("audio",), placeholders_embedded_as=0).embedded_as(config) == 0
    pad = config.get_text_config().pad_token_id
    assert AudioPlacement(("audio",), placeholders_embedded_as="text_config.pad_token_id").embedded_as(config) == pad
    assert AudioPlacement(("audio",)).embedded_as(config) is None


def test_gemma4_videos_are_their_frames_split_by_num_frames_per_video():
    model = drop_in_class_of("gemma4")(tiny_gemma4_config()).eval()
    frames = torch.tensor([2, 1, 3])
    pixels = torch.arange(6.0)[:, None, None].expand(6, 4, 12)
    positions = torch.arange(6)[:, None, None].expand(6, 4, 2)
    inputs = {"pixel_values_videos": pixels, "video_position_ids": positions, "num_frames_per_video": frames}
    assert model.count_items(inputs, modality="video") == 3
    selected = model.select_item_inputs(inputs, [2, 0], modality="video")
    assert selected["pixel_values_videos"][:, 0, 0].tolist() == [3.0, 4.0, 5.0, 0.0, 1.0]
    assert selected["video_position_ids"][:, 0, 0].tolist() == [3, 4, 5, 0, 1]
    assert torch.equal(selected["num_frames_per_video"], torch.tensor([3, 2]))
    # Frame counts alone stand for videos the cache holds: they count none
    assert model.count_items({"num_frames_per_video": frames}, modality="video") is None
    with pytest.raises(ValueError, match="without `num_frames_per_video`: it splits the frames"):
        model.check_pixel_inputs({"pixel_values_videos": pixels, "video_position_ids": positions}, modality="video")


def test_dots3_note_chunks_are_cut_after_their_longest_ones_last_token():
    config = tiny_dots3_note_config()
    model = drop_in_class_of("dots3_note")(config).eval()
    per_token, hop = config.audio_config.samples_per_token, config.audio_config.hop_length
    features = torch.randn(3, config.audio_config.feature_size, 4 * per_token // hop)
    inputs = {"input_features": features, "chunk_sample_lengths": torch.tensor([4 * per_token, per_token + 1, 1])}
    selected = model.select_item_inputs(inputs, [2, 1], modality="audio")
    assert selected["input_features"].shape[-1] == 2 * per_token // hop  # 2 tokens: the longer chunk's
    assert torch.equal(selected["input_features"], features[[2, 1], :, : 2 * per_token // hop])
    assert selected["chunk_sample_lengths"].tolist() == [1, per_token + 1]
    assert model.count_items({"chunk_sample_lengths": inputs["chunk_sample_lengths"]}, modality="audio") is None


def test_muse_spark_clips_are_cut_to_whole_tokens_of_their_longest_real_clip():
    config = tiny_muse_spark_config()
    model = drop_in_class_of("muse_spark")(config).eval()
    per_token = config.audio_config.samples_per_token
    values = torch.randn(2, 4 * per_token)
    mask = torch.zeros(2, 4 * per_token, dtype=torch.long)
    mask[0, : 3 * per_token], mask[1, : per_token + 1] = 1, 1
    selected = model.select_item_inputs({"input_values": values, "input_values_mask": mask}, [1], modality="audio")
    # The last token's padding samples stay: the causal tower reads them
    assert torch.equal(selected["input_values"], values[[1], : 2 * per_token])
    assert torch.equal(selected["input_values_mask"], mask[[1], : 2 * per_token])
    assert torch.equal(
        model.select_item_inputs({"input_values": values}, [1], modality="audio")["input_values"], values[[1]]
    )


def test_the_shared_forward_places_encoded_audio_as_upstreams_forward_with_the_raw_clips():
    upstream = tiny_model(transformers.MuseSparkForConditionalGeneration, tiny_muse_spark_config()).eval()
    ours = drop_in_class_of("muse_spark")(upstream.config).eval()
    ours.load_state_dict(upstream.state_dict())
    per_token = upstream.config.audio_config.samples_per_token
    input_ids = torch.tensor([[2, 10, *[upstream.config.audio_token_id] * 3, 11]])
    values = torch.randn(1, 3 * per_token)
    with torch.no_grad():
        expected = upstream(input_ids=input_ids, input_values=values).logits
        encoded = ours.model.get_audio_features(input_values=values)
        logits = ours(input_ids=input_ids, mm_encoder_outputs={"audio": encoded}).logits
    torch.testing.assert_close(logits, expected)
    with pytest.raises(ValueError, match="Pass either `input_values` or encoded audio"):
        ours(input_ids=input_ids, input_values=values, mm_encoder_outputs={"audio": encoded})
