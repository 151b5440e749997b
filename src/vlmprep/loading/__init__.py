"""Loading multimodal checkpoints in part: the text decoder alone (`text_only`)."""

from .text_only import TEXT_ONLY_FAMILIES, AutoModelForCausalLM, TextOnlyFamily, load_text_decoder, text_decoder_config

__all__ = ["TEXT_ONLY_FAMILIES", "AutoModelForCausalLM", "TextOnlyFamily", "load_text_decoder", "text_decoder_config"]
