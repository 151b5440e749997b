"""A family's case in the conformance suite: how its processor builds prompts (`FamilyCase`), and `register`.

The case modules of `support.families` register their cases here; `support.registry` imports every one of them, so
import `FAMILY_CASES` from `support.registry` (here it holds only the cases registered so far).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import transformers
from transformers import PreTrainedConfig, PreTrainedModel

from vlmprep.models.registry import FAMILY_SPECS, NEWER_FAMILY_SPECS
from vlmprep.testing import tiny_config


@dataclass
class FamilyCase:
    """How the conformance suite builds one family's prompts; its tiny config and reference class come from the
    registry (`vlmprep.models.registry.FAMILY_SPECS`).

    Args:
        name: the model type (a key of vlmprep's drop-in registry).
        build_inputs: `(config, segments, image_seeds) -> dict` with `input_ids`, the per-token inputs and the
            pixel inputs the family's processor would return; segments are lists of text ids or `IMAGE`.
        per_token_keys: inputs that run along the sequence (truncated with `input_ids`).
        per_token_axes: per-token input -> its sequence axis, where it is not the last (Llama 3.2 Vision's
            `cross_attention_mask`, `(batch, seq, images, tiles)`: axis 1); such an input continues into the answer
            with its last row repeated, as the family's `generate` extends it.
        pixel_keys: inputs that describe the images (dropped by `Prompt.inputs(with_pixels=False)`).
        skip: scenario name -> reason, for scenarios this family cannot run (stated in the families table).
        answer_token_types: per-token input -> its value at generated (text) tokens, where it is not 0: what the
            family's `generate` appends, so an uncached forward of a prompt and its answer is the reference of each
            step (PaliGemma's suffix tokens are 1, causal; its prompt is one bidirectional prefix of 0s).
        refused_train_parts: parts (`"decoder"`, `"vision"`) whose train mode the drop-in refuses in `generate` with a
            clear error (Emu3's VQ-VAE, whose BatchNorm makes an image's codes depend on the images encoded with it):
            the differential test draws no call with them in train mode.
        one_row_with_items: whether the drop-in refuses a batch with items in more than one row (HunYuanVL numbers
            images across the batch upstream): the differential test then draws such batches without items.
        upstream_needs_items: whether transformers' class runs only calls with items (BLIP-2: its `generate` and
            forward need `pixel_values`): the differential test then draws calls with items, and no transformers
            assistant (whose forwards get none).
        upstream_decode_positions_differ: whether transformers' `generate` numbers decoded tokens unlike its own
            forward of the whole sequence after some prompts (MiniCPM-V 4.7 after `</image>`, docs/migration.md), where
            the drop-in follows the forward: the differential test then checks every step against one uncached
            forward of the prompt and the answer so far, not against upstream's `generate`.
        padding_moves_upstream: whether transformers' own logits of a left-padded row differ from that row alone
            (Inkling scales queries by each token's place in the cache, padding included): the differential test then
            checks padded rows against upstream's uncached forward of the same padded batch instead of each row alone.
        padded_rows_follow_pad_states: whether transformers' logits of a left-padded row follow its pad tokens' states
            (MiniMax M3's indexer scores pad keys) and its uncached forward of a padded batch numbers positions unlike
            its `generate`: the differential test checks padded rows against upstream's `generate` on the same batch
            only, and draws padded batches without the calls the drop-in refuses for them (a caller's cache, chunks
            under eager attention; the refusal: tests/scenarios/test_indexed_families.py).
        videos_apart_from_images: why a prompt holds videos or images, never both, where transformers' class fails on
            both (empty: a prompt may hold both): the differential test then draws video conversations without images.
        differential_refusals: what the drop-in refuses that the differential test draws (a name of
            `support.differential_strategies.REFUSABLE` -> why): its conversations are drawn without it.
        slow: scenario name -> why it is slow for this family (its prompts are long: DeepSeek-OCR-2's views fill 145
            placeholders whatever the config): the scenario runs, whole, under `make test-slow` only (marked slow).
        samples: the samples of families this family stands in, for tests that run a few representative families
            rather than every one (`support.traits.sampled`): `"foundation"` (the fixtures' first families),
            `"chat"` (multi-turn prefix-cache conversations), `"mainstream"` (device maps, tensor parallelism, ...), ...
        unread_inputs: parameters the drop-in's forward takes but never reads once features are supplied (they reach
            only the encoder's `**kwargs`, or nothing), and inputs of a modality vlmprep does not prepare (refused by
            name): what a request need not carry (tests/units/test_request_inputs.py).
        rope_input_names: `get_rope_index` parameter -> the forward's input it is filled from, where named otherwise
            (`None`: an option the engine refuses).
    """

    name: str
    build_inputs: Callable[[PreTrainedConfig, list, list[int]], dict[str, torch.Tensor]]
    per_token_keys: tuple[str, ...] = ("token_type_ids",)
    per_token_axes: dict[str, int] = field(default_factory=dict)
    pixel_keys: tuple[str, ...] = ("pixel_values",)
    skip: dict[str, str] = field(default_factory=dict)
    answer_token_types: dict[str, int] = field(default_factory=dict)
    refused_train_parts: tuple[str, ...] = ()
    one_row_with_items: bool = False
    upstream_needs_items: bool = False
    upstream_decode_positions_differ: bool = False
    padding_moves_upstream: bool = False
    padded_rows_follow_pad_states: bool = False
    videos_apart_from_images: str = ""
    differential_refusals: dict[str, str] = field(default_factory=dict)
    slow: dict[str, str] = field(default_factory=dict)
    samples: tuple[str, ...] = ()
    unread_inputs: frozenset[str] = frozenset()
    rope_input_names: dict[str, str | None] = field(default_factory=dict)

    @property
    def builds_audio(self) -> bool:
        """Whether the case builds audio clips: log-mel features (`input_features`), waveforms (`input_values`) or
        audio codes (`audio_input_ids`)."""
        return any(key in self.pixel_keys for key in ("input_features", "input_values", "audio_input_ids"))

    @property
    def builds_videos(self) -> bool:
        """Whether the case builds videos (`VIDEO` segments) as inputs of their own (`pixel_values_videos`)."""
        return "pixel_values_videos" in self.pixel_keys

    @property
    def upstream_class(self) -> type[PreTrainedModel]:
        """The transformers class the drop-in replaces (the drop-in has its name)."""
        return getattr(transformers, FAMILY_SPECS[self.name].class_name)

    def make_config(self) -> PreTrainedConfig:
        """A fresh tiny config: the builder the registry names for this model type (`vlmprep.testing.tiny_config`)."""
        return tiny_config(self.name)


FAMILY_CASES: dict[str, FamilyCase] = {}
# model type -> why its case is not in `FAMILY_CASES`: the installed transformers is older than the type.
CASES_FOR_NEWER_TRANSFORMERS: dict[str, str] = {}


def register(case: FamilyCase) -> FamilyCase:
    """Add a family's case to the suite (a case module of `support.families` calls it once per family).

    A case of a model type that the installed transformers lacks (its spec's `since` is newer: `NEWER_FAMILY_SPECS`)
    is left out, with the reason in `CASES_FOR_NEWER_TRANSFORMERS`: there is no class to build or compare with.
    """
    if case.name in NEWER_FAMILY_SPECS:
        CASES_FOR_NEWER_TRANSFORMERS[case.name] = (
            f"{case.name} needs transformers>={NEWER_FAMILY_SPECS[case.name].since} (installed: "
            f"{transformers.__version__})"
        )
        return case
    FAMILY_CASES[case.name] = case
    return case
