"""Discrete-code layouts: a tokenizer turns each item into vocabulary codes, embedded by the decoder's own table.

The family states its counts itself (from `image_sizes` and the audio mask), so the layout has no hook code: a
`Layout` the family states (`layout = CODE_ROWS_AND_AUDIO`), as `stated_counts`' layouts.
"""

from __future__ import annotations

from . import Layout

__all__ = ["CODE_ROWS_AND_AUDIO"]

# An image of any size (padded to the batch's largest) is one run per row of its grid of codes, the rows split by
# end-of-line tokens; an audio clip is one run of its codes (Apertus 1.5).
CODE_ROWS_AND_AUDIO = Layout(
    "code_rows_and_audio",
    "an image of any size is one run per row of its discrete codes (split by end-of-line tokens); an audio clip one "
    "run of its codes",
)
