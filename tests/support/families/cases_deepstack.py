"""Families whose vision features are summed in at several decoder layers as `(decoder layer, features)` pairs,
placeholders zeroed: Granite 4 Vision (any-res crops, as LLaVA-NeXT's).

Token ids follow `vlmprep.testing`; placeholder counts follow each processor's own arithmetic, never the drop-in.
"""

from __future__ import annotations

import transformers

from support.cases import FamilyCase, register
from support.families.cases_llava_anyres import anyres_inputs, processor_features
from support.llava_like_inputs import collate_padded_patches


def granite4_vision_tokens(config, image_size: tuple[int, int]) -> int:
    """`Granite4VisionProcessor`'s count: LLaVA-NeXT's over crops downsampled by `downsample_rate` (CLIP's CLS token
    counted, then dropped by the "default" feature strategy)."""
    attributes = {
        "patch_size": config.vision_config.patch_size,
        "num_additional_image_tokens": 1,
        "downsample_rate": config.downsample_rate,
    }
    return processor_features(transformers.Granite4VisionProcessor, config, image_size, **attributes)


# Upstream's beams with two images in a row are wrong for these families: checked in tests/scenarios/test_deepstack_pairs.py
UPSTREAM_BEAM_SKIP = {
    "generate_matches_transformers": (
        "transformers 5.24's `_expand_multimodal_outputs` of the deepstack pairs repeats a row's features image by "
        "image ([A, A, B, B]) instead of copy by copy, so upstream's beams and num_return_sequences with two images "
        "in a prompt are wrong; greedy and sampling parity and exact beams are checked in "
        "tests/scenarios/test_deepstack_pairs.py"
    ),
}

register(
    FamilyCase(
        "granite4_vision",
        anyres_inputs(granite4_vision_tokens),
        per_token_keys=(),
        pixel_keys=("pixel_values", "image_sizes"),
        collate=collate_padded_patches,
        skip=UPSTREAM_BEAM_SKIP,
    )
)
