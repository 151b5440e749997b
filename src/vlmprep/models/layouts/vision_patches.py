"""Vision patches (LLaVA, VipLLaVA, Video-LLaVA, DeepSeek-VL): a fixed-resolution image fills one run, a token per patch.

The count is the vision tower's patch grid, `(image_size // patch_size) ** 2`, read off the vision config (the
processors' `num_image_tokens` is not in the model config). A CLIP tower also emits a CLS token, which LLaVA-like
models keep only with the `"full"` feature select strategy.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedConfig

from ...generation.hooks import FamilyHooks
from . import Layout

__all__ = ["VisionPatchesLayout", "vision_patch_count"]


class VisionPatchesLayout(FamilyHooks):
    """Family hooks of one run of vision patch tokens per image (images only).

    A family whose model keeps the CLS token under the `"full"` feature select strategy sets `counts_cls_token`.
    """

    layout = Layout("vision_patches", "one fixed-resolution image, one run of its vision patch tokens")

    # Whether the `"full"` feature select strategy (from the call or the config) adds the CLS token to the count.
    counts_cls_token: bool = False

    def item_token_counts(self, model_kwargs: dict[str, Any], modality: str = "image") -> int:
        """Patches per image, plus the CLS token when the family keeps it (`counts_cls_token`, `"full"` strategy).

        Args:
            model_kwargs (`dict[str, Any]`): the call's inputs (`vision_feature_select_strategy`, if passed).
            modality (`str`, *optional*, defaults to `"image"`): the layout's items are images (a family with videos,
                Video-LLaVA, counts those itself).

        Returns:
            `int`
        """
        patches = vision_patch_count(self.config)
        if not self.counts_cls_token:
            return patches
        strategy = model_kwargs.get("vision_feature_select_strategy") or self.config.vision_feature_select_strategy
        return patches + (1 if strategy == "full" else 0)


def vision_patch_count(config: PreTrainedConfig) -> int:
    """Patches of one image in the vision tower: `(image_size // patch_size) ** 2` of `config.vision_config`."""
    vision_config = config.vision_config
    return (vision_config.image_size // vision_config.patch_size) ** 2
