"""MiniMax M3 VL: flattened patches on a (t, h, w) grid, 1D positions, a decoder with sparse attention layers.

Images come as Qwen2-VL's do (`pixel_values` rows, one `image_grid_thw` row per image), each image one run of
`t * h * w / spatial_merge_size**2` placeholders between `]<]start of image[>[` and `]<]end of image[>[`
(`MiniMaxM3VLProcessor.replace_image_token`); a video is one run of video placeholders per frame, each between the
same start and end tokens after the frame's timestamp (`replace_video_token`). The decoder's positions are plain 1D.
Its sparse layers' lightning indexer keeps a key per token in a cache layer of its own
(`MiniMaxM3VLSparseCacheLayer`), which the prefix store holds per token next to the K/V
(`vlmprep.cache.layer_extras`).

The indexer scores every cached key, padding included, so a left-padded row's logits follow its pad tokens' states
(upstream too). Under SDPA a pad token attends to nothing and its state is the same in every forward; under any other
attention (eager: uniformly over every key of the forward) it depends on which tokens the forward holds. So for a batch
with padding the drop-in refuses what it cannot make equal to upstream's `generate` on the same batch
(`_check_padded_batch_call`): a caller's cache holding the padding from another call, and chunked prefill without
SDPA. The prefix store neither stores nor resumes such a batch (its indexer keys are restored into one unpadded row
only), so it prefills the whole batch.
"""

from typing import Any

import torch
import transformers

from .base import VisionPrepMixin
from .layouts.patch_grid import PatchGridLayout, PatchGridVisionNames


class MiniMaxM3SparseForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.MiniMaxM3SparseForConditionalGeneration
):
    """Drop-in `transformers.MiniMaxM3SparseForConditionalGeneration` whose vision tower runs once, in input
    preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.minimax_m3_vl import MiniMaxM3SparseForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_minimax_m3_vl_config
    >>> model = MiniMaxM3SparseForConditionalGeneration(tiny_minimax_m3_vl_config()).eval()
    >>> model.item_token_counts({"image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 4]])})
    [4, 2]

    ```
    """

    multimodal_positions = False
    video_runs_per_frame = True

    vision_config_names = PatchGridVisionNames(channels="num_channels")

    def generate(self, *args: Any, **kwargs: Any):
        """`transformers.MiniMaxM3SparseForConditionalGeneration.generate` through the mixin; for a batch with padding,
        the calls that could not equal upstream's `generate` on the same batch are refused (`_check_padded_batch_call`).

        Args:
            args, kwargs: everything the mixin's `generate` takes.

        Returns:
            What upstream's `generate` returns.
        """
        self._check_padded_batch_call(args[0] if args else kwargs.get("input_ids"), kwargs)
        return super().generate(*args, **kwargs)

    def _check_padded_batch_call(self, input_ids: torch.Tensor | None, kwargs: dict[str, Any]) -> None:
        # A pad token's state reaches the real tokens through the sparse layers' indexer (upstream scores pad keys
        # too). Under SDPA a pad query attends to nothing, so its state is the same in any forward; under eager
        # attention it attends uniformly to every key of its forward, so chunks give pad states unlike one forward
        # (upstream's own chunked prefill too: ~0.1 on tiny models). A caller's cache holds pad states of another
        # call (another prompt length, maybe another attention), which upstream's `generate` would recompute. The
        # prefix store never resumes a padded batch of this family (`generation.prefix`: indexer keys are restored
        # into one unpadded row only), so it is no cache here.
        config = kwargs.get("generation_config") or self.generation_config
        mask = kwargs.get("attention_mask")
        if mask is None and isinstance(input_ids, torch.Tensor) and config.pad_token_id is not None:
            mask = input_ids != config.pad_token_id  # upstream's `generate` infers the padding the same way
        if not isinstance(mask, torch.Tensor) or bool(mask.all()):
            return
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        chunk_size = kwargs.get("prefill_chunk_size", getattr(config, "prefill_chunk_size", None))
        attention = self.config.get_text_config()._attn_implementation
        if cache is not None and cache.get_seq_length() > 0:
            reason = "a cache holding its pad tokens from another call"
        elif chunk_size is not None and attention != "sdpa":
            reason = f"chunked prefill under {attention!r} attention (a pad token's state depends on its chunk)"
        else:
            return
        raise ValueError(
            f"MiniMax M3 VL cannot run this left-padded batch exactly with {reason}: its sparse indexer scores "
            "pad tokens' keys, so padded rows follow the pad tokens' states (upstream too). Pass the whole prompts "
            "without `cache` (a `prefix_cache` may stay), prefill padded batches in one forward or under "
            "`attn_implementation='sdpa'`, or generate one row at a time (no padding)."
        )
