"""vlmprep: drop-in transformers vision-language models whose vision encoder runs once, in input preparation."""

__version__ = "0.1.0"
