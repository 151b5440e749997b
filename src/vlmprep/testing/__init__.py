"""Tiny random-weight models for tests, demos and benchmarks: configs, weights, prompts, pixels and work counters.

- `configs`: the tiny config of every drop-in family (2 decoder layers, hidden size 32, 8-32 px images), its parts
  (a tiny decoder, tiny vision towers) and their shared special token ids; `tiny_config(model_type)` looks a family's
  up in the registry;
- `weights`: `tiny_model`, upstream's initialisation with the image path's vanishing tensors redrawn
  (`make_image_sensitive`), so that every image changes the logits, and a hybrid decoder's recurrent layers made to
  matter (`make_state_sensitive`);
- `prompts`: token ids with image runs (`build_prompt`, `IMAGE`; `VIDEO` marks a video) and deterministic random
  pixels;
- `counters`: the one vision-run counter (`VisionRunCounter`) and the one prefill counter (`PrefillCounter`).

Example:

```python
>>> from vlmprep.testing import IMAGE, build_prompt, tiny_gemma3_config
>>> build_prompt(tiny_gemma3_config(mm_tokens_per_image=4), [[5], IMAGE])[0]
[5, 120, 122, 122, 122, 122, 121]

```
"""

from .configs import TINY_CONFIG_BUILDERS, tiny_config, tiny_gemma3_config, tiny_llava_config, tiny_paligemma_config
from .configs.parts import (
    TINY_AUDIO_TOKEN_ID,
    TINY_BOA_TOKEN_ID,
    TINY_BOI_TOKEN_ID,
    TINY_EOA_TOKEN_ID,
    TINY_EOI_TOKEN_ID,
    TINY_IMAGE_SIZE,
    TINY_IMAGE_TOKEN_ID,
    TINY_VIDEO_TOKEN_ID,
    TINY_VOCAB_SIZE,
    tiny_text_config,
    tiny_vision_config,
)
from .counters import PrefillCounter, VisionRunCounter
from .prompts import AUDIO, IMAGE, VIDEO, build_prompt, random_pixels, tokens_per_image
from .weights import IMAGE_PATH_INIT_STD, make_image_sensitive, make_state_sensitive, tiny_model

__all__ = [
    "AUDIO",
    "IMAGE",
    "IMAGE_PATH_INIT_STD",
    "TINY_AUDIO_TOKEN_ID",
    "TINY_BOA_TOKEN_ID",
    "TINY_BOI_TOKEN_ID",
    "TINY_CONFIG_BUILDERS",
    "TINY_EOA_TOKEN_ID",
    "TINY_EOI_TOKEN_ID",
    "TINY_IMAGE_SIZE",
    "TINY_IMAGE_TOKEN_ID",
    "TINY_VIDEO_TOKEN_ID",
    "TINY_VOCAB_SIZE",
    "PrefillCounter",
    "VIDEO",
    "VisionRunCounter",
    "build_prompt",
    "make_image_sensitive",
    "make_state_sensitive",
    "random_pixels",
    "tiny_config",
    "tiny_gemma3_config",
    "tiny_llava_config",
    "tiny_model",
    "tiny_paligemma_config",
    "tiny_text_config",
    "tiny_vision_config",
    "tokens_per_image",
]
