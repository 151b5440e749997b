"""Reference computations shared by the behavioural tests."""

from __future__ import annotations

import contextlib
import functools
import tempfile
from collections.abc import Iterator, Sequence

import torch
import transformers

import vlmprep
from support.registry import FAMILY_CASES
from vlmprep import EncoderCache
from vlmprep.generation.items import join_item_inputs
from vlmprep.models.registry import FAMILY_SPECS
from vlmprep.testing import IMAGE, TINY_VOCAB_SIZE, VisionRunCounter, random_pixels
from vlmprep.testing import VIDEO as VIDEO  # re-exported: tests import the video marker from here too

ATOL = 1e-5
# Ids above 100 are special tokens (placeholders, image and vision start/end): a random model must not answer with
# them, or the prompt continued with its answer is no longer valid (`generate(..., **NO_SPECIAL_TOKENS)`).
NO_SPECIAL_TOKENS = {"suppress_tokens": list(range(100, TINY_VOCAB_SIZE))}


class Prompt:
    """A tiny prompt as the family's processor would return it: ids, per-token inputs and pixel inputs."""

    def __init__(self, config, segments: list, seed: int = 0, image_seeds: list[int] | None = None):
        self.case = FAMILY_CASES[config.model_type]
        self.config = config
        num_images = sum(1 for segment in segments if not isinstance(segment, list))
        seeds = image_seeds if image_seeds is not None else [seed + i for i in range(num_images)]
        self.full_inputs = self.case.build_inputs(config, segments, seeds)
        self.input_ids = self.full_inputs["input_ids"]
        self.token_type_ids = self.full_inputs.get("token_type_ids")
        self.pixel_values = self.full_inputs.get("pixel_values")

    def inputs(self, length: int | None = None, with_pixels: bool = True) -> dict:
        """Model inputs, optionally truncated to the first `length` tokens."""
        end = length if length is not None else self.length
        inputs = {}
        for key, value in self.full_inputs.items():
            if key in self.case.pixel_keys:
                if with_pixels:
                    inputs[key] = value
            elif key in self.case.per_token_axes:
                inputs[key] = value.narrow(self.case.per_token_axes[key], 0, min(end, self.length))
            elif key == "input_ids" or key in self.case.per_token_keys:
                inputs[key] = value[..., :end]
            else:
                inputs[key] = value
        return inputs

    @property
    def length(self) -> int:
        return self.input_ids.shape[1]

    @property
    def answer_start(self) -> int:
        """Where the answer starts in `generate`'s sequences of this prompt alone: after the prompt, or, for an
        encoder-decoder (whose sequences are the decoder's), after the decoder's start token."""
        return 1 if self.config.is_encoder_decoder else self.length


def decoder_start_id(config) -> int:
    """The token an encoder-decoder's `generate` starts the decoder with (its BOS where none is stated)."""
    generation_config = transformers.GenerationConfig.from_model_config(config)
    start = generation_config.decoder_start_token_id
    return int(start if start is not None else generation_config.bos_token_id)


def collate(prompts: list[Prompt], pad_token_id: int) -> dict:
    """A left-padded batch of prompts, as a processor with `padding_side="left"` returns it: per-token inputs
    left-padded, each modality's inputs joined as the family's item schema says (`join_item_inputs`: crops padded to
    the largest count, flat rows and columns along their axis, indices rebased past the rows before them)."""
    case = prompts[0].case
    width = max(prompt.length for prompt in prompts)

    def left_pad(value: torch.Tensor, fill: int) -> torch.Tensor:
        return torch.nn.functional.pad(value, (width - value.shape[-1], 0), value=fill)

    batch = {
        "input_ids": torch.cat([left_pad(p.input_ids, pad_token_id) for p in prompts]),
        "attention_mask": torch.cat([left_pad(torch.ones_like(p.input_ids), 0) for p in prompts]),
    }
    keys = dict.fromkeys(key for prompt in prompts for key in prompt.full_inputs)  # rows without images lack pixels
    for key in keys:
        if key in case.per_token_axes:
            batch[key] = _left_padded_along(
                [prompt.full_inputs.get(key) for prompt in prompts], case.per_token_axes[key], width
            )
        elif key in case.per_token_keys:
            values = [left_pad(prompt.full_inputs[key], 0) for prompt in prompts]
            batch[key] = torch.cat(values, dim=1 if values[0].ndim == 3 else 0)  # 3D: (3, batch, seq) positions
    model = _schema_host(prompts[0].config)
    parts = [prompt.full_inputs for prompt in prompts]
    joined = set()
    for modality in model.vision_facts.modalities:
        schema = model.item_schema(modality.name)
        batch.update(join_item_inputs(schema, parts))
        joined.update(schema.keys)
    for key in keys:  # the rest of the items' inputs (positions): one entry per item
        if key in case.pixel_keys and key not in joined:
            values = [part[key] for part in parts if key in part]
            tensors = all(isinstance(value, torch.Tensor) for value in values)
            batch[key] = torch.cat(values) if tensors else [entry for value in values for entry in value]
    return batch


def _left_padded_along(values: list, axis: int, width: int) -> torch.Tensor:
    # Rows of an input whose sequence runs along `axis` (not the last): left-padded there to `width`, zero-padded at
    # the end of every other axis to the largest (more images in another row); a row without it is all zeros.
    present = [value for value in values if value is not None]
    shape = [max(value.shape[dim] for value in present) for dim in range(present[0].ndim)]
    shape[axis] = width
    rows = []
    for value in values:
        row = present[0].new_zeros([1, *shape[1:]])
        if value is not None:
            offset = width - value.shape[axis]
            index = [slice(0, size) for size in value.shape]
            index[axis] = slice(offset, width)
            row[tuple(index)] = value
        rows.append(row)
    return torch.cat(rows)


def _schema_host(config):
    # The family's hooks read only the config: a drop-in without weights states its item schemas
    drop_in = FAMILY_SPECS[config.model_type].drop_in_class()
    model = drop_in.__new__(drop_in)
    model.config = config
    return model


def reference_next_logits(upstream, prompt: Prompt, new_tokens: Sequence[int] = ()) -> torch.Tensor:
    """Last-position logits of one uncached forward of the whole prompt: the exactness reference.

    `new_tokens` (generated text) are appended to the prompt first, with the per-token inputs of answer tokens.
    """
    with torch.no_grad():
        return upstream(**continued(prompt, new_tokens), use_cache=False).logits[:, -1]


def continued(prompt: Prompt, new_tokens: Sequence[int]) -> dict:
    """The prompt's inputs with `new_tokens` appended, as `generate` continues a prompt with its answer."""
    inputs = prompt.inputs()
    new_tokens = [int(token) for token in new_tokens]
    if prompt.config.is_encoder_decoder:  # the answer is the decoder's, after its start token
        inputs["decoder_input_ids"] = torch.tensor([[decoder_start_id(prompt.config), *new_tokens]])
        return inputs
    if not new_tokens:
        return inputs
    inputs["input_ids"] = torch.cat([inputs["input_ids"], torch.tensor([new_tokens])], dim=-1)
    for key in prompt.case.per_token_keys:
        if key in inputs and key in prompt.case.per_token_axes:  # the last row repeated, as `generate` extends it
            axis = prompt.case.per_token_axes[key]
            last = inputs[key].narrow(axis, inputs[key].shape[axis] - 1, 1)
            inputs[key] = torch.cat([inputs[key], *[last] * len(new_tokens)], dim=axis)
        elif key in inputs:
            value = prompt.case.answer_token_types.get(key, 0)
            inputs[key] = torch.nn.functional.pad(inputs[key], (0, len(new_tokens)), value=value)
    return inputs


def assert_steps_match_upstream(upstream, prompt: Prompt, fed_tokens: torch.Tensor, logits, row: int = 0) -> None:
    """Each step's logits of a generation equal upstream's: one uncached forward of the prompt and the answer.

    The answer's tokens are causal text, so the forward's logits at the prompt's last position and at each answer
    token are those of one uncached forward of the prompt and the answer up to there.

    Args:
        prompt: the row's own prompt (unpadded).
        fed_tokens: the tokens generated after the prompt (for a batch, the row's part of `sequences` after the
            padded prompt), in order; step `k`'s logits follow the prompt and `fed_tokens[:k]`.
        logits: per-step logits of the generation, `(batch, vocab)` each.
        row: the row of the batch that `prompt` is.
    """
    steps = len(logits)
    with torch.no_grad():
        forward = upstream(**continued(prompt, fed_tokens[: steps - 1].tolist()), use_cache=False)
    expected = forward.logits[0, prompt.answer_start - 1 :]
    for step, step_logits in enumerate(logits):
        diff = (step_logits[row] - expected[step]).abs().max().item()
        assert diff <= ATOL, f"row {row}, step {step}: max abs diff {diff:.3e} > {ATOL} against transformers"


def assert_batch_matches_upstream(upstream, prompts: list[Prompt], sequences: torch.Tensor, logits) -> None:
    """Every row of a left-padded batch's generation equals upstream's uncached forward of that row's prompt alone."""
    width = sequences.shape[1] - len(logits)
    for row, prompt in enumerate(prompts):
        assert_steps_match_upstream(upstream, prompt, sequences[row, width:], logits, row=row)


def generate_batch_matching_upstream(upstream, ours, prompts: list[Prompt], max_new_tokens: int = 2, **kwargs):
    """Greedy `generate` of the drop-in on the left-padded batch of `prompts`, each row checked against upstream's
    uncached forward of that row's prompt alone (`assert_batch_matches_upstream`).

    Special tokens are suppressed (`NO_SPECIAL_TOKENS`), so every answer continues its prompt validly.

    Returns:
        `(sequences, per-step logits)` of the drop-in's generation.
    """
    batch = collate(prompts, ours.generation_config.pad_token_id)
    sequences, logits = generate_logits(ours, batch, max_new_tokens=max_new_tokens, **NO_SPECIAL_TOKENS, **kwargs)
    assert_batch_matches_upstream(upstream, prompts, sequences, logits)
    return sequences, logits


def generate_new_image_turn(upstream, ours, turn_1: list, image_seeds: list[int], cache_from, counter):
    """The drop-in continues a conversation whose first turn is in a caller's cache with a turn holding a new image;
    each step equals upstream's `generate` of the whole conversation without a cache.

    Args:
        turn_1: the first turn's segments, with one image or video (seed `image_seeds[0]`).
        image_seeds: the seeds of the first turn's medium and of the new image.
        cache_from: `(upstream, inputs) -> cache`, how the caller filled the cache of the first turn.
        counter: `counter(ours)`, a context manager counting the drop-in's encoder runs.

    Returns:
        The counter, to check what the drop-in encoded (the new image only).
    """
    conversation = Prompt(ours.config, [*turn_1, [40, 41], IMAGE, [42]], image_seeds=image_seeds)
    cache = cache_from(upstream, Prompt(ours.config, turn_1, image_seeds=image_seeds[:1]).inputs())
    with counter(ours) as runs:
        _, logits = generate_logits(ours, conversation.inputs(), cache=cache)
    _, expected_logits = generate_logits(upstream, conversation.inputs())
    assert_same_steps(logits, expected_logits)
    return runs


@contextlib.contextmanager
def eager_attention(*models):
    """Eager attention on the models for the duration (SDPA returns no attention weights)."""
    # Per sub-config: a tower without SDPA (Gemma 4's audio tower) runs eager under an SDPA model, and is put back so
    before = [_attn_implementations(model.config) for model in models]
    for model in models:
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        for model, implementation in zip(models, before, strict=True):
            model.set_attn_implementation(implementation)


def _attn_implementations(config) -> dict[str, str]:
    implementations = {"": config._attn_implementation}
    for name in getattr(config, "sub_configs", {}):
        sub_config = getattr(config, name, None)
        # A sub-config no module reads an implementation of (IDEFICS's perceiver) has none to put back
        if sub_config is not None and sub_config._attn_implementation is not None:
            implementations[name] = sub_config._attn_implementation
    return implementations


def uncached_logits(upstream, inputs: dict) -> torch.Tensor:
    """The last position's logits of one uncached forward of the whole prompt: what every cached path must equal."""
    if upstream.config.is_encoder_decoder and "decoder_input_ids" not in inputs:
        # The first answer token's logits: the decoder fed its start token alone
        start = torch.full((inputs["input_ids"].shape[0], 1), decoder_start_id(upstream.config))
        inputs = {**inputs, "decoder_input_ids": start}
    with torch.no_grad():
        return upstream(**inputs, use_cache=False).logits[:, -1]


def no_placeholder_answers(model) -> dict:
    """`generate` kwargs that keep placeholder, vision start/end and padding ids out of an answer.

    An answer becomes part of the next turn's prompt: a placeholder id there would make it invalid, and `generate`
    infers an attention mask from the padding id, so an answer holding it would mask its own token out of the next
    prompt, which the reference forward would attend to.
    """
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", "pad_token_id")
    ids = [getattr(model.config, name, None) for name in names] + [model.generation_config.pad_token_id]
    return {"suppress_tokens": sorted({i for i in ids if i is not None})}


def greedy_output(model, inputs: dict, max_new_tokens: int = 3, **kwargs):
    """The output of a greedy generate, with its per-step logits."""
    return model.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        **kwargs,
    )


def generate_logits(model, inputs: dict, max_new_tokens: int = 3, **kwargs):
    """(sequences, per-step logits) of a greedy generate."""
    out = greedy_output(model, inputs, max_new_tokens, **kwargs)
    return out.sequences, out.logits


def next_logits(model, inputs: dict, **kwargs) -> torch.Tensor:
    """The logits of a greedy `generate`'s first new token, `(batch, vocab)`."""
    return generate_logits(model, inputs, max_new_tokens=1, **kwargs)[1][0]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = ATOL) -> None:
    diff = (actual - expected).abs().max().item()
    assert torch.allclose(actual, expected, atol=atol), f"max abs diff {diff:.3e} > {atol}"


def assert_same_steps(actual, expected) -> None:
    """Per-step logits of two generations are allclose."""
    for step_actual, step_expected in zip(actual, expected, strict=True):
        assert_close(step_actual, step_expected)


def gemma3_image_effect(model, seeds: tuple[int, int] = (0, 28)) -> float:
    """Max abs difference of a Gemma3 model's logits after an image between two different images (0: images never
    reach the logits). The prompt uses the model's own special token ids, so it suits any Gemma3 checkpoint."""
    config = model.config
    text = [10, 11, 12]
    ids = [
        *text,
        config.boi_token_id,
        *[config.image_token_id] * config.mm_tokens_per_image,
        config.eoi_token_id,
        *text,
    ]
    input_ids = torch.tensor([ids])
    inputs = {"input_ids": input_ids, "token_type_ids": (input_ids == config.image_token_id).long()}
    size = config.vision_config.image_size
    with torch.no_grad():
        logits = [
            model(**inputs, pixel_values=random_pixels(1, seed, size=size), use_cache=False).logits[0, -len(text) :]
            for seed in seeds
        ]
    return (logits[0] - logits[1]).abs().max().item()


@functools.cache
def strong_image_gemma3_pair(std: float) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A Gemma3 (transformers, drop-in) pair whose projector is drawn with `std`, so images move the logits a lot."""
    torch.manual_seed(0)
    case = FAMILY_CASES["gemma3"]
    model = case.upstream_class(case.make_config())
    torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight, std=std)
    directory = tempfile.mkdtemp(prefix="vlmprep-gemma3-strong-")
    model.save_pretrained(directory)
    upstream = case.upstream_class.from_pretrained(directory).eval()
    return upstream, vlmprep.AutoModelForImageTextToText.from_pretrained(directory).eval()


# Prompt segments shared by the scenarios: a system prompt and a user turn.
SYSTEM = [2, 10, 11, 12, 13, 14, 15, 16]
USER = [20, 21, 22]


@contextlib.contextmanager
def with_encoder_cache(model, max_bytes: int = 2**24) -> Iterator:
    """A fresh encoder cache on `model` inside the block (for a drop-in made without one, or counts of cache hits that
    no earlier test may have filled); the model's own cache is put back after."""
    saved, model.encoder_cache = model.encoder_cache, EncoderCache(max_bytes=max_bytes)
    try:
        yield model.encoder_cache
    finally:
        model.encoder_cache = saved


@contextlib.contextmanager
def encoder_runs(model, encoder_cache_off: bool = True) -> Iterator:
    """Items per vision-encoder call (`.batch_sizes`).

    Args:
        model (`torch.nn.Module`): a vlmprep drop-in.
        encoder_cache_off (`bool`, *optional*, defaults to `True`): turn the model's encoder cache off inside the
            block, so every item the prompt needs is really encoded.

    Counted by `vlmprep.testing.VisionRunCounter` (an encoder calling another, as Qwen3-VL's videos do, counts once).
    """
    saved = model.encoder_cache
    if encoder_cache_off:
        model.encoder_cache = None
    try:
        with VisionRunCounter(model) as runs:
            yield runs
    finally:
        model.encoder_cache = saved
