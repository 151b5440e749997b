"""Positions of decoded tokens for multimodal rope whose text after an item starts past the item's largest position.

transformers' `generate` numbers each decoded token as the previous token's position + 1, on every rope row. That is
what the model's own `get_rope_index` gives the same tokens in one forward of the whole sequence when the prompt ends
on text (all rows equal there), but not when it ends on a token placed inside an item's canvas (MiniCPM-V 4.7's
`</image>` sits on the canvas's far corner): `get_rope_index` puts text after a canvas at the canvas's largest
position + 1 on every row. A layout whose positions work so renumbers the decoded tokens with `text_after_items`.
"""

from __future__ import annotations

import torch


def text_after_items(previous: torch.Tensor, updated: torch.Tensor, num_new_tokens: int) -> torch.Tensor:
    """`updated` (upstream's positions extended by `num_new_tokens`) with the new tokens' rope rows renumbered as
    `get_rope_index` numbers text: the row's largest position so far + 1, then one more per token, on every rope row.

    Row 0 of 4-row positions holds the 1D text positions (used for the attention mask), kept as upstream extends them.

    Args:
        previous (`torch.Tensor` of shape `(rows, batch, seq)`): the positions before the new tokens.
        updated (`torch.Tensor` of shape `(rows, batch, seq + num_new_tokens)`): the same, extended by upstream.
        num_new_tokens (`int`): how many tokens were appended.

    Returns:
        `torch.Tensor` of shape `(rows, batch, seq + num_new_tokens)`
    """
    first_rope_row = 1 if previous.shape[0] == 4 else 0
    rope_rows = previous[first_rope_row:]  # (3, batch, seq): t, h, w
    steps = torch.arange(1, num_new_tokens + 1, dtype=updated.dtype, device=updated.device)
    renumbered = updated.clone()
    # (batch, 1) + (new,) -> (batch, new), the same on the t, h and w rows
    renumbered[first_rope_row:, :, -num_new_tokens:] = rope_rows.amax(dim=(0, 2)).unsqueeze(-1) + steps
    return renumbered
