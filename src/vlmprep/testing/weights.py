"""Random weights under which images matter: upstream's initialisation, vanishing image-path tensors redrawn."""

from __future__ import annotations

import torch
from transformers import PreTrainedConfig

# Upstream initialisation leaves some multimodal weights zero or vanishing: Gemma3's `mm_input_projection_weight`
# (zeros), DeepSeek-VL-Hybrid's `high_res_vision_alpha` (zero), the SAM towers of GOT-OCR2 and DeepSeek-VL-Hybrid
# (`initializer_range` 1e-10). With them, image content never reaches the logits and a test of image handling passes
# whatever features are used. Such tensors are drawn again from N(0, IMAGE_PATH_INIT_STD). Additive tensors (biases,
# position tables, class tokens) stay as upstream left them: at zero they pass image content through, while random
# values can drown it (Aria's projector biases at 0.02 make images change its logits 50x less).
IMAGE_PATH_INIT_STD = 0.02
_VANISHING = 1e-6  # a tensor whose largest entry is below this carries (next to) nothing
_CODEBOOK_BUFFER = "codebook.embed"  # a codebook's vectors, a buffer, compared with the encoder's outputs
# A decoder's gated cross-attention layers (Llama 3.2 Vision's `cross_attn_attn_gate`, `cross_attn_mlp_gate`) start
# closed (zero): images reach no logit until they are drawn too, wider than other weights (at 0.02 another image moves
# the logits by 1e-4 only).
_DECODER_GATE_SUFFIX = "_gate"
_DECODER_GATE_STD = 0.5
_ADDITIVE = ("bias", "pos_embed", "position_embedding", "rel_pos", "cls_token")  # parts of additive tensors' names
# Molmo2's adapter is a chain of products of small projections (attention pooling, then a gated MLP) whose output is
# added onto the placeholders' embeddings: at upstream's 0.02 its features are ~1e-9 and images move the logits by
# ~1e-7. Its weight matrices are scaled up (to ~0.3) so that images show in the logits.
_PRODUCT_CHAIN_SCALES = (
    ("multi_modal_projector.image_pooling_2d.", 15.0),
    ("multi_modal_projector.image_projector.", 15.0),
)


def make_image_sensitive(model: torch.nn.Module, seed: int = 0) -> list[str]:
    """Re-draws, in place, every multimodal parameter that upstream initialisation leaves zero or vanishing.

    Every weight outside the text decoder and the output embeddings (vision towers, projectors, gates), and every
    gate of the decoder's cross-attention layers (a parameter named `*_gate`), whose largest
    absolute entry is below 1e-6 is drawn from a normal distribution with standard deviation 0.02, with a generator
    seeded by `seed` (the global random state is not touched), so the result is deterministic. Additive tensors
    (biases, position tables, class tokens) are left as they are: at zero they block nothing. A zero codebook buffer
    (`*codebook.embed`) is drawn the same way, so that its codes follow the input. Molmo2's adapter, a chain of
    products of small projections, has its weight matrices scaled up (`_PRODUCT_CHAIN_SCALES`).

    Args:
        model (`torch.nn.Module`): a transformers image-text-to-text model, freshly initialised.
        seed (`int`, *optional*, defaults to 0): seed of the re-drawn values.

    Returns:
        `list[str]`: names of the re-drawn (or scaled) parameters.

    Example:

    ```python
    >>> import transformers
    >>> from vlmprep.testing import tiny_gemma3_config
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
            if not parameter.is_floating_point() or parameter.numel() == 0:
                continue
            if id(parameter) in text_parameters and not name.endswith(_DECODER_GATE_SUFFIX):
                continue
            if any(part in name.rsplit(".", 1)[-1] for part in _ADDITIVE):
                continue
            if parameter.abs().max().item() < _VANISHING:
                std = _DECODER_GATE_STD if id(parameter) in text_parameters else IMAGE_PATH_INIT_STD
                values = torch.randn(parameter.shape, generator=generator) * std
                parameter.copy_(values.to(parameter.dtype))
                redrawn.append(name)
            elif parameter.ndim == 2 and any(part in name for part, _ in _PRODUCT_CHAIN_SCALES):
                parameter.mul_(next(scale for part, scale in _PRODUCT_CHAIN_SCALES if part in name))
                redrawn.append(name)
        # A vector-quantizer codebook kept as a buffer (WavTokenizer's, in Apertus 1.5) is all zeros: every input
        # then gets code 0. Drawn at the scale of the encoder's outputs, the nearest code follows the input.
        for name, buffer in model.named_buffers():
            if name.endswith(_CODEBOOK_BUFFER) and buffer.is_floating_point() and buffer.abs().max() < _VANISHING:
                values = torch.randn(buffer.shape, generator=generator) * IMAGE_PATH_INIT_STD
                buffer.copy_(values.to(buffer.dtype))
                redrawn.append(name)
    return redrawn


# Upstream initialises a Gated DeltaNet's decay rates `A` uniformly in (0.01, 16): most heads forget their state within a
# token or two, so a tiny model resumed from a wrong recurrent state still gives the right logits to 1e-5. Rates are
# drawn in (0.01, 0.1) instead (a state lasts tens of tokens). LFM2's short convolution is a product of three small
# projections (zeroing it moves the logits by 2e-4): its weights are scaled up until its state shows in the logits.
_SLOW_DECAY = (0.01, 0.1)
_SHORT_CONV_SCALES = (("conv", 20.0), ("in_proj", 4.0))
# Upstream draws Inkling2's residual short convolutions at ~0.016: their window moved the logits by ~4e-5, below the
# tolerance a missing restored window must exceed
_RESIDUAL_CONV_SCALE = 20.0


def make_state_sensitive(model: torch.nn.Module, seed: int = 0) -> list[str]:
    """Makes a hybrid decoder's recurrent layers matter, in place: slow Gated DeltaNet decays, stronger short convolutions.

    Args:
        model (`torch.nn.Module`): a freshly initialised transformers model.
        seed (`int`, *optional*, defaults to 0): seed of the drawn decay rates.

    Returns:
        `list[str]`: names of the changed parameters (empty for a decoder without such layers).
    """
    generator = torch.Generator().manual_seed(seed)
    changed = []
    with torch.no_grad():
        for name, module in model.get_decoder().named_modules():  # the text decoder's layers only
            if isinstance(getattr(module, "A_log", None), torch.nn.Parameter):
                low, high = _SLOW_DECAY
                rates = torch.rand(module.A_log.shape, generator=generator) * (high - low) + low
                module.A_log.copy_(rates.log().to(module.A_log.dtype))
                changed.append(f"{name}.A_log")
            elif type(module).__name__.endswith("ShortConv"):
                for child, scale in _SHORT_CONV_SCALES:
                    getattr(module, child).weight.mul_(scale)
                    changed.append(f"{name}.{child}.weight")
            elif type(module).__name__.endswith("ShortConvolution") and hasattr(module, "conv1d"):
                # Inkling2's short convolutions: a residual around a depthwise convolution
                module.conv1d.weight.mul_(_RESIDUAL_CONV_SCALE)
                changed.append(f"{name}.conv1d.weight")
    return changed


def tiny_model(model_class: type, config: PreTrainedConfig, seed: int = 0) -> torch.nn.Module:
    """A model of `model_class` with random weights under which every image changes the logits.

    The weights are upstream's initialisation with `torch.manual_seed(seed)` (the caller's random state is left as
    it was), then `make_image_sensitive` and `make_state_sensitive`. A random-weight model that checks image handling (a test model, a demo or
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
    make_state_sensitive(model, seed)
    return model.eval()
