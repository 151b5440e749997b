"""GLM-5-Next: GLM-4.6V's vision inputs, 1D positions, a hybrid decoder of linear-attention and indexed-attention
layers.

Images and videos come as GLM-4V's do (flattened patches with one `(t, h, w)` grid row per item); an image is one run
of `t * h * w / spatial_merge_size**2` placeholders between `<|begin_of_image|>` and `<|end_of_image|>`, and a video
is one run per frame, of image placeholders, inside `<|begin_of_video|>...<|end_of_video|>` (the processor's
`mm_token_type_ids` tell frames from images). The decoder's positions are plain 1D; its linear-attention layers keep
a running state, which chunked prefill carries from chunk to chunk in transformers' own cache layers.

Upstream tells frames from images inside each forward by the video start and end tokens it sees; a forward that begins
inside a video (a prefill chunk, or a cache ending mid-video) sees no start token and takes the frames for images.
Each forward's feature rows are therefore handed over as upstream will read them (`prepare_inputs_for_generation`).
"""

from typing import Any

import torch
import transformers
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .base import VisionPrepMixin
from .layouts.patch_grid import PATCH_GRID_SHARED_PLACEHOLDER_FACTS, PatchGridLayout


class Glm5NextForConditionalGeneration(
    PatchGridLayout, VisionPrepMixin, transformers.Glm5NextForConditionalGeneration
):
    """Drop-in `transformers.Glm5NextForConditionalGeneration` whose vision tower runs once, in input preparation.

    Example:

    ```python
    >>> import torch
    >>> from vlmprep.models.glm5_next import Glm5NextForConditionalGeneration
    >>> from vlmprep.testing.configs import tiny_glm5_next_config
    >>> model = Glm5NextForConditionalGeneration(tiny_glm5_next_config()).eval()
    >>> model.item_token_counts({"video_grid_thw": torch.tensor([[2, 4, 4]])}, "video")  # one run per frame
    [[4, 4]]

    ```
    """

    multimodal_positions = False
    video_runs_per_frame = True

    vision_facts = PATCH_GRID_SHARED_PLACEHOLDER_FACTS

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, *args, **kwargs) -> dict[str, Any]:
        """The mixin's inputs of one forward, with the feature rows of image and frame placeholders grouped as
        upstream's forward will read them.

        Args:
            input_ids (`torch.LongTensor`): the sequence so far.
            args, kwargs (`Any`): as `GenerationMixin.prepare_inputs_for_generation`.

        Returns:
            `dict[str, Any]`: the forward's inputs.
        """
        inputs = super().prepare_inputs_for_generation(input_ids, *args, **kwargs)
        ids, outputs, token_types = (
            inputs.get(key) for key in ("input_ids", "mm_encoder_outputs", "mm_token_type_ids")
        )
        if ids is not None and outputs and token_types is not None:
            inputs["mm_encoder_outputs"] = self._rows_as_upstream_reads(ids, outputs, token_types)
        return inputs

    def _rows_as_upstream_reads(
        self, input_ids: torch.Tensor, outputs: dict[str, Any], token_types: torch.Tensor
    ) -> dict[str, Any]:
        """Image and frame rows regrouped by upstream's own test (inside a start/end video pair, in this forward)."""
        config = self.config
        placeholders = input_ids == config.image_token_id
        is_frame = token_types[:, -input_ids.shape[1] :] == 2  # 2: a video frame, as the processor marks it
        read_as_frame = (input_ids == config.video_start_token_id).cumsum(-1) > (
            input_ids == config.video_end_token_id
        ).cumsum(-1)
        if torch.equal(is_frame[placeholders], read_as_frame[placeholders]):
            return outputs
        rows = {name: torch.cat(list(output.pooler_output)).flatten(0, -2) for name, output in outputs.items()}
        dim = next(iter(rows.values())).shape[-1]
        ordered = next(iter(rows.values())).new_empty(int(placeholders.sum()), dim)  # every placeholder, row-major
        frames = is_frame[placeholders]
        for name, selected in (("image", ~frames), ("video", frames)):
            if bool(selected.any()):
                ordered[selected] = rows[name]
        regrouped = {}
        for name, selected in (("image", ~read_as_frame[placeholders]), ("video", read_as_frame[placeholders])):
            if bool(selected.any()):
                regrouped[name] = BaseModelOutputWithPooling(pooler_output=[ordered[selected]])
        return regrouped

    def cached_key_shape(self) -> tuple[int, int]:
        """Its attention layers cache the compressed key-value latent, one shared head of `kv_lora_rank`.

        Returns:
            `tuple[int, int]`
        """
        return 1, self.config.text_config.kv_lora_rank
