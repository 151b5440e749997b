"""Loading the text decoder of a multimodal checkpoint alone (`vlmprep.AutoModelForCausalLM`), in `decoder`."""

from .decoder import TEXT_ONLY_FAMILIES, AutoModelForCausalLM, TextOnlyFamily, load_text_decoder, text_decoder_config

__all__ = ["TEXT_ONLY_FAMILIES", "AutoModelForCausalLM", "TextOnlyFamily", "load_text_decoder", "text_decoder_config"]
