"""Tiny random-weight model configs for tests, demos and benchmarks.

Every builder returns a transformers config small enough to run on a CPU in milliseconds (2 decoder layers,
hidden size 32, 16x16 images). Token ids above 100 are reserved for special tokens so that random text ids
(drawn from 3..99) never collide with them.
"""

from __future__ import annotations

import functools

import torch
from transformers import Gemma3Config, LlavaConfig, PaliGemmaConfig, PreTrainedConfig

# Special token ids shared by every tiny config.
TINY_VOCAB_SIZE = 128
TINY_IMAGE_TOKEN_ID = 122
TINY_BOI_TOKEN_ID = 120
TINY_EOI_TOKEN_ID = 121
TINY_IMAGE_SIZE = 16

_SIGLIP_VISION = {
    "model_type": "siglip_vision_model",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": TINY_IMAGE_SIZE,
    "patch_size": 4,
    "num_channels": 3,
}


def tiny_gemma3_config(sliding_window: int = 6, mm_tokens_per_image: int = 16) -> Gemma3Config:
    """A tiny Gemma3 config: one sliding and one full attention layer, `mm_tokens_per_image` tokens per image.

    Args:
        sliding_window (`int`, *optional*, defaults to 6):
            Window of the sliding-attention layer; keep it shorter than prompts so the sliding path is exercised.
        mm_tokens_per_image (`int`, *optional*, defaults to 16):
            Placeholder tokens per image: 16 or 4 (a square dividing the 4x4 patch grid of a 16x16 image); 16
            makes an image span longer than the default sliding window.

    Returns:
        `Gemma3Config`
    """
    return Gemma3Config(
        text_config={
            "model_type": "gemma3_text",
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "sliding_window": sliding_window,
            "layer_types": ["sliding_attention", "full_attention"],
            "max_position_embeddings": 1024,
        },
        vision_config=dict(_SIGLIP_VISION),
        mm_tokens_per_image=mm_tokens_per_image,
        boi_token_index=TINY_BOI_TOKEN_ID,
        eoi_token_index=TINY_EOI_TOKEN_ID,
        image_token_index=TINY_IMAGE_TOKEN_ID,
    )


def tiny_paligemma_config() -> PaliGemmaConfig:
    """A tiny PaliGemma config: 16 placeholder tokens per 16x16 image, Gemma text decoder.

    Returns:
        `PaliGemmaConfig`
    """
    return PaliGemmaConfig(
        text_config={
            "model_type": "gemma",
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
        },
        vision_config={**_SIGLIP_VISION, "projection_dim": 32},
        image_token_index=TINY_IMAGE_TOKEN_ID,
        projection_dim=32,
    )


def tiny_llava_config() -> LlavaConfig:
    """A tiny LLaVA config: CLIP vision tower, Llama decoder, 16 placeholder tokens per 16x16 image.

    Returns:
        `LlavaConfig`
    """
    return LlavaConfig(
        text_config={
            "model_type": "llama",
            "vocab_size": TINY_VOCAB_SIZE,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
        },
        vision_config={
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": TINY_IMAGE_SIZE,
            "patch_size": 4,
            "projection_dim": 32,
        },
        image_token_index=TINY_IMAGE_TOKEN_ID,
        vision_feature_layer=-1,
    )


TINY_CONFIG_BUILDERS = {
    "gemma3": tiny_gemma3_config,
    "paligemma": tiny_paligemma_config,
    "llava": tiny_llava_config,
}


def tiny_config(model_type: str) -> PreTrainedConfig:
    """The tiny config of a model type (`"gemma3"`, `"paligemma"`, `"llava"`, ...).

    Args:
        model_type (`str`): a key of `TINY_CONFIG_BUILDERS`.

    Returns:
        `PreTrainedConfig`
    """
    if model_type not in TINY_CONFIG_BUILDERS:
        raise ValueError(f"No tiny config for model type {model_type!r}; known: {sorted(TINY_CONFIG_BUILDERS)}")
    return TINY_CONFIG_BUILDERS[model_type]()


# -- Weights under which images matter -------------------------------------------------------------------------------

# Upstream initialisation leaves some multimodal weights zero or vanishing: Gemma3's `mm_input_projection_weight`
# (zeros), DeepSeek-VL-Hybrid's `high_res_vision_alpha` (zero), the SAM towers of GOT-OCR2 and DeepSeek-VL-Hybrid
# (`initializer_range` 1e-10). With them, image content never reaches the logits and a test of image handling passes
# whatever features are used. Such tensors are drawn again from N(0, IMAGE_PATH_INIT_STD). Additive tensors (biases,
# position tables, class tokens) stay as upstream left them: at zero they pass image content through, while random
# values can drown it (Aria's projector biases at 0.02 make images change its logits 50x less).
IMAGE_PATH_INIT_STD = 0.02
_VANISHING = 1e-6  # a tensor whose largest entry is below this carries (next to) nothing
_ADDITIVE = ("bias", "pos_embed", "position_embedding", "rel_pos", "cls_token")  # parts of additive tensors' names


def make_image_sensitive(model: torch.nn.Module, seed: int = 0) -> list[str]:
    """Re-draws, in place, every multimodal parameter that upstream initialisation leaves zero or vanishing.

    Every weight outside the text decoder and the output embeddings (vision towers, projectors, gates) whose largest
    absolute entry is below 1e-6 is drawn from a normal distribution with standard deviation 0.02, with a generator
    seeded by `seed` (the global random state is not touched), so the result is deterministic. Additive tensors
    (biases, position tables, class tokens) are left as they are: at zero they block nothing.

    Args:
        model (`torch.nn.Module`): a transformers image-text-to-text model, freshly initialised.
        seed (`int`, *optional*, defaults to 0): seed of the re-drawn values.

    Returns:
        `list[str]`: names of the re-drawn parameters.

    Example:

    ```python
    >>> import transformers
    >>> model = transformers.Gemma3ForConditionalGeneration(tiny_gemma3_config())
    >>> "model.multi_modal_projector.mm_input_projection_weight" in make_image_sensitive(model)
    True

    ```
    """
    text_parameters = {id(parameter) for parameter in model.get_decoder().parameters()}
    output_embeddings = model.get_output_embeddings()
    if output_embeddings is not None:
        text_parameters |= {id(parameter) for parameter in output_embeddings.parameters()}
    generator = torch.Generator().manual_seed(seed)
    redrawn = []
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if id(parameter) in text_parameters or not parameter.is_floating_point() or parameter.numel() == 0:
                continue
            if any(part in name.rsplit(".", 1)[-1] for part in _ADDITIVE):
                continue
            if parameter.abs().max().item() < _VANISHING:
                values = torch.randn(parameter.shape, generator=generator) * IMAGE_PATH_INIT_STD
                parameter.copy_(values.to(parameter.dtype))
                redrawn.append(name)
    return redrawn


def tiny_model(model_class: type, config: PreTrainedConfig, seed: int = 0) -> torch.nn.Module:
    """A model of `model_class` with random weights under which every image changes the logits.

    The weights are upstream's initialisation with `torch.manual_seed(seed)` (the caller's random state is left as
    it was), then `make_image_sensitive`. A random-weight model that checks image handling (a test model, a demo or
    benchmark checkpoint) should be built here: with upstream's initialisation alone, some families ignore images.

    Args:
        model_class (`type`): a transformers (or vlmprep) model class.
        config (`PreTrainedConfig`): its config, e.g. from `tiny_config`.
        seed (`int`, *optional*, defaults to 0): seed of the weights.

    Returns:
        `torch.nn.Module`: the model, in eval mode.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    make_image_sensitive(model, seed)
    return model.eval()


# -- Prompts and images for tests and demos --------------------------------------------------------------------------

IMAGE = "<image>"  # marks where an image goes in a prompt built by `build_prompt`


def tokens_per_image(config: PreTrainedConfig) -> int:
    """Placeholder tokens of one image for a tiny config of a fixed-resolution family.

    Args:
        config (`PreTrainedConfig`): a config from this module.

    Returns:
        `int`
    """
    if config.model_type == "gemma3":
        return config.mm_tokens_per_image
    vision = config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2
    if config.model_type == "llava" and config.vision_feature_select_strategy == "full":
        patches += 1
    return patches


def build_prompt(config: PreTrainedConfig, segments: list) -> tuple[list[int], list[int] | None]:
    """Token ids (and the token types the family's processor would return) for text pieces and images.

    Args:
        config (`PreTrainedConfig`): a config from this module.
        segments (`list`): items are lists of text token ids, or `IMAGE`.

    Returns:
        `tuple[list[int], list[int] | None]`: the ids, and token types for Gemma3/PaliGemma (`None` otherwise).

    Example:

    ```python
    >>> ids, types = build_prompt(tiny_gemma3_config(mm_tokens_per_image=4), [[5, 6], IMAGE, [7]])
    >>> ids
    [5, 6, 120, 122, 122, 122, 122, 121, 7]
    >>> types
    [0, 0, 0, 1, 1, 1, 1, 0, 0]

    ```
    """
    ids: list[int] = []
    image_run = [config.image_token_id] * tokens_per_image(config)
    for segment in segments:
        if segment is IMAGE:
            if config.model_type == "gemma3":
                ids += [TINY_BOI_TOKEN_ID, *image_run, TINY_EOI_TOKEN_ID]
            else:
                ids += image_run
        else:
            ids += list(segment)
    if config.model_type == "gemma3":
        return ids, [int(token == config.image_token_id) for token in ids]
    if config.model_type == "paligemma":
        return ids, [0] * len(ids)
    return ids, None


def random_pixels(num_images: int, seed: int = 0, size: int = TINY_IMAGE_SIZE) -> torch.Tensor:
    """Deterministic random `(num_images, 3, size, size)` pixel values.

    Args:
        num_images (`int`): how many images.
        seed (`int`, *optional*, defaults to 0): images with different seeds differ.
        size (`int`, *optional*, defaults to 16): height and width.

    Returns:
        `torch.Tensor`
    """
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_images, 3, size, size, generator=generator)


class VisionRunCounter:
    """Counts a model's vision-encoder calls and the images (or videos) each call encoded.

    It wraps the model's own `get_image_features` / `get_video_features` (on this model instance only) and counts
    items with the family's `count_images`, so tiles, crops and flattened patches count as the images they belong to.

    Example:

    ```python
    >>> from vlmprep import Gemma3ForConditionalGeneration
    >>> model = Gemma3ForConditionalGeneration(tiny_gemma3_config()).eval()
    >>> with VisionRunCounter(model) as runs:
    ...     _ = model.model.get_image_features(random_pixels(2))
    >>> runs.calls, runs.images
    (1, 2)

    ```
    """

    MODALITIES = ("image", "video")

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.encoder_owner = getattr(model, "model", model)
        self.batch_sizes: list[int] = []
        self._wrapped: list[str] = []

    def _counting(self, modality: str, encode):
        @functools.wraps(encode)  # keeps the signature the mixin inspects
        def wrapper(*args, **kwargs):
            if args:
                kwargs = {"pixel_values" if modality == "image" else "pixel_values_videos": args[0], **kwargs}
            self.batch_sizes.append(self._count(modality, kwargs))
            return encode(**kwargs)

        return wrapper

    def _count(self, modality: str, kwargs: dict) -> int:
        count_images = getattr(self.model, "count_images", None)
        if count_images is None:
            pixels = next(iter(kwargs.values()))
            return int(pixels.shape[0])
        count = count_images(kwargs) if modality == "image" else count_images(kwargs, modality=modality)
        return int(count or 0)

    def __enter__(self) -> VisionRunCounter:
        for modality in self.MODALITIES:
            name = f"get_{modality}_features"
            encode = getattr(self.encoder_owner, name, None)
            if encode is not None:
                setattr(self.encoder_owner, name, self._counting(modality, encode))
                self._wrapped.append(name)
        return self

    def __exit__(self, *exc) -> None:
        for name in self._wrapped:
            delattr(self.encoder_owner, name)  # the instance attribute; the class method shows through again
        self._wrapped = []

    @property
    def calls(self) -> int:
        return len(self.batch_sizes)

    @property
    def images(self) -> int:
        return sum(self.batch_sizes)
