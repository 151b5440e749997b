"""Hypothesis strategies for the differential test: random conversations of `generate` calls, as plain data.

An example is a `Conversation`: a first call and up to two continuations, each continuing every row of the previous
call with its generated answer, then more text and images. Every call draws its own generation options (chunk size,
cache salt, prefix store on/off, a cached prefix filled by the caller, hidden states and attentions returned, assisted
decoding) and an optional weight change made before it.
The plans are plain data (segments and seeds), so a failing example prints as a readable, replayable plan; the test
builds the tensors with the family's own `build_inputs`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

from vlmprep.testing import AUDIO, IMAGE, VIDEO

# Random text ids: 3..99 never collide with the tiny models' special tokens (`vlmprep.testing`).
TEXT_IDS = st.integers(min_value=3, max_value=99)
# A few image seeds, so images repeat across rows, calls and examples (encoder- and prefix-cache hits); the
# families derive image sizes (and so placeholder counts) from the seed.
IMAGE_SEEDS = st.integers(min_value=0, max_value=7)
# A shared opening, so prompts of different examples share prefix-store blocks.
SYSTEM_PROMPT = [2, 10, 11, 12, 13, 14, 15, 16]
SALTS = st.sampled_from([None, None, "tenant-a", "tenant-b"])
# Assisted decoding: drafts by prompt lookup, by the drop-in itself or by the transformers model (batches of one only).
ASSISTANTS = st.sampled_from(["prompt_lookup", None, "drop_in_assistant", None, "upstream_assistant"])
# Weight scale factors; 1.0 restores the original weight.
WEIGHT_FACTORS = st.sampled_from([0.5, 0.9, 1.0, 1.1, 2.0])


@dataclass(frozen=True)
class Row:
    """One prompt: segments (text id lists, `IMAGE`, `VIDEO` or `AUDIO`) and the seed of each item, in order."""

    segments: tuple
    image_seeds: tuple[int, ...]

    @property
    def num_images(self) -> int:
        return len(self.image_seeds)

    def __repr__(self) -> str:  # valid Python (with `IMAGE` imported), so a falsifying example can be replayed
        markers = {IMAGE: "IMAGE", VIDEO: "VIDEO", AUDIO: "AUDIO"}
        shown = ", ".join(
            markers[segment] if isinstance(segment, str) else repr(list(segment)) for segment in self.segments
        )
        return f"Row(segments=({shown},), image_seeds={tuple(self.image_seeds)!r})"


@dataclass(frozen=True)
class WeightChange:
    """Scale the `index`-th parameter (by sorted name, modulo the count) to `factor` times its original value."""

    index: int
    factor: float


@dataclass(frozen=True)
class CallOptions:
    """How one `generate` call is made.

    Args:
        max_new_tokens: tokens to generate (every row generates exactly this many: specials are suppressed).
        chunk_size: `prefill_chunk_size`, or `None` for one prefill.
        salt: `cache_salt`, or `None` for none.
        use_prefix_store: pass the family's `PrefixCache` kept across examples.
        cached_fraction: fill a caller's `DynamicCache` with the upstream model over this fraction of the prompt
            (at least one token, never the whole prompt); `None`: no caller cache.
        reuse_returned_cache: on a continuation, pass the cache the previous call returned (takes precedence over
            `cached_fraction`).
        weight_change: a weight change made (on both models) before the call.
        output_hidden_states: return the hidden states of every step (`output_hidden_states=True`).
        output_attentions: return the attentions of every step (`output_attentions=True`, eager attention).
        assistant: assisted decoding: `"prompt_lookup"`, `"drop_in_assistant"`, `"upstream_assistant"`, or `None`.
        train_part: `"decoder"` or `"vision"`: that part of both models is in train mode during the call (the top
            module stays in eval mode), `None` for none. The caches must neither store nor serve such a call.
    """

    max_new_tokens: int
    chunk_size: int | None
    salt: str | None
    use_prefix_store: bool
    cached_fraction: float | None
    reuse_returned_cache: bool
    weight_change: WeightChange | None
    output_hidden_states: bool = False
    output_attentions: bool = False
    assistant: str | None = None
    train_part: str | None = None


@dataclass(frozen=True)
class Conversation:
    """A first call over `rows`, then continuations: each appends the answer and `extension` to every row."""

    rows: tuple[Row, ...]
    first: CallOptions
    continuations: tuple[tuple[Row, CallOptions], ...] = field(default_factory=tuple)


@st.composite
def text_segment(draw, min_size: int = 1, max_size: int = 6) -> list[int]:
    return draw(st.lists(TEXT_IDS, min_size=min_size, max_size=max_size))


@st.composite
def rows(draw, min_images: int = 0, max_images: int = 3, opening: bool = True, media: tuple = (IMAGE,)) -> Row:
    """A prompt with `min_images..max_images` items, adjacent or with text between, text anywhere.

    Args:
        min_images: fewest items.
        max_images: most items.
        opening: may start with the shared system prompt (a first prompt, not an extension).
        media: the markers an item is drawn from (`IMAGE`; `VIDEO` and `AUDIO` for families with videos or audio).
    """
    num_images = draw(st.integers(min_value=min_images, max_value=max_images))
    segments: list = []
    if opening and draw(st.booleans()):
        segments.append(list(SYSTEM_PROMPT))
    for _ in range(num_images):
        if draw(st.booleans()):  # no text before this image: adjacent to the previous image or the prompt start
            segments.append(draw(text_segment()))
        segments.append(draw(st.sampled_from(media)))
    if num_images == 0 or draw(st.booleans()):
        segments.append(draw(text_segment()))
    if not segments:  # an extension without images still adds text
        segments.append(draw(text_segment()))
    seeds = tuple(draw(IMAGE_SEEDS) for _ in range(num_images))
    return Row(tuple(segments), seeds)


@st.composite
def call_options(draw, continuation: bool, salt: str | None = None, batch: int = 1) -> CallOptions:
    """Options of one call; `salt` is the conversation's, which a call keeps more often than not (another salt hides
    the blocks the conversation stored). Assisted decoding is drawn for a batch of one only (transformers' limit); a
    drop-in assistant gets no caller's cache (it reads the main model's features, which leave out cached images)."""
    assistant = draw(ASSISTANTS) if batch == 1 else None
    callers_cache = assistant != "drop_in_assistant"
    return CallOptions(
        max_new_tokens=draw(st.integers(min_value=1, max_value=3)),
        chunk_size=draw(st.one_of(st.none(), st.integers(min_value=1, max_value=24))),
        salt=draw(st.one_of(st.just(salt), st.just(salt), SALTS)),
        use_prefix_store=draw(st.sampled_from([True, True, False])),  # mostly on, so later calls meet stored blocks
        cached_fraction=draw(st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0))) if callers_cache else None,
        reuse_returned_cache=continuation and callers_cache and draw(st.booleans()),
        weight_change=draw(
            st.one_of(
                st.none(),
                st.builds(WeightChange, st.integers(min_value=0, max_value=10_000), WEIGHT_FACTORS),
            )
        ),
        output_hidden_states=draw(st.sampled_from([False, False, True])),
        output_attentions=draw(st.sampled_from([False, False, True])),
        assistant=assistant,
        train_part=draw(st.sampled_from([None, None, None, "decoder", "vision"])),
    )


@st.composite
def conversations(draw, max_batch: int = 3, max_continuations: int = 2, media: tuple = (IMAGE,)) -> Conversation:
    """A random conversation: a batch of 1..`max_batch` rows and up to `max_continuations` continuations.

    In a batch of several rows either every row has items or none has; each row draws its own media, so one row's
    videos may sit next to another's images (the `collate` helpers concatenate each input over the rows that have it). A continuation appends the same extension to every row, so a batch stays
    aligned with its left padding and the returned cache can be passed back.
    """
    batch = draw(st.integers(min_value=1, max_value=max_batch))
    if batch == 1:
        first_rows = (draw(rows(media=media)),)
    else:
        with_images = draw(st.booleans())
        first_rows = tuple(
            draw(rows(min_images=1 if with_images else 0, max_images=3 if with_images else 0, media=media))
            for _ in range(batch)
        )
    salt = draw(SALTS)
    continuations = tuple(
        (
            draw(rows(max_images=2, opening=False, media=media)),
            draw(call_options(continuation=True, salt=salt, batch=batch)),
        )
        for _ in range(draw(st.integers(min_value=0, max_value=max_continuations)))
    )
    return Conversation(first_rows, draw(call_options(continuation=False, salt=salt, batch=batch)), continuations)


def _store_options(**changes) -> CallOptions:
    options = {
        "max_new_tokens": 2,
        "chunk_size": None,
        "salt": None,
        "use_prefix_store": True,
        "cached_fraction": None,
        "reuse_returned_cache": False,
        "weight_change": None,
    }
    return CallOptions(**{**options, **changes})


# Run on every family besides the drawn ones: each call resumes from blocks the previous one stored (prompt and
# answer), with adjacent images and a chunked call; the last call changes a weight first, so the stored blocks are stale.
STORE_HIT_CONVERSATION = Conversation(
    rows=(Row((list(SYSTEM_PROMPT), IMAGE, IMAGE, [30, 31, 32]), (1, 2)),),
    first=_store_options(),
    continuations=(
        (Row(([40, 41, 42], IMAGE, [43]), (3,)), _store_options(chunk_size=5)),
        (Row(([50, 51, 52, 53],), ()), _store_options(weight_change=WeightChange(index=0, factor=1.1))),
    ),
)


def store_hit_conversation(media: tuple) -> Conversation:
    """`STORE_HIT_CONVERSATION` with its items taken in turn from `media` (a video first, then an image, for a family
    whose prompts mix them), so stored blocks holding those items are met as well."""
    markers = itertools.cycle(media)

    def with_media(row: Row) -> Row:
        return Row(tuple(next(markers) if segment is IMAGE else segment for segment in row.segments), row.image_seeds)

    conversation = STORE_HIT_CONVERSATION
    rows = tuple(map(with_media, conversation.rows))  # in order: the first item is `media[0]`
    continuations = tuple((with_media(row), options) for row, options in conversation.continuations)
    return replace(conversation, rows=rows, continuations=continuations)


# What a family's drop-in may refuse that the conversations draw (`FamilyCase.differential_refusals`): a caller's cache
# cropped to a token count, passing back the cache a call returned, the prefix store, assisted decoding, and a batch
# whose rows hold different numbers of items.
REFUSABLE = ("callers_cache", "returned_cache", "prefix_store", "assisted_decoding", "uneven_item_counts")


def within_refusals(conversation: Conversation, refused: frozenset[str]) -> Conversation:
    """The conversation without what the family refuses (`REFUSABLE`): each refused option off in every call, and a
    batch of uneven item counts cut to the rows holding as many as the first. The refusals themselves are tested with
    the family; transforming (not rejecting) an example keeps every family's example count.

    Args:
        conversation (`Conversation`): a drawn conversation.
        refused (`frozenset[str]`): names from `REFUSABLE`.

    Returns:
        `Conversation`
    """
    unknown = refused - set(REFUSABLE)
    if unknown:
        raise ValueError(f"Unknown refusals {sorted(unknown)}: the differential test knows {REFUSABLE}.")
    off: dict = {}
    if "callers_cache" in refused:
        off["cached_fraction"] = None
    if "returned_cache" in refused:
        off["reuse_returned_cache"] = False
    if "prefix_store" in refused:
        off["use_prefix_store"] = False
    if "assisted_decoding" in refused:
        off["assistant"] = None
    rows = conversation.rows
    if "uneven_item_counts" in refused:
        rows = tuple(row for row in rows if row.num_images == rows[0].num_images)
    return Conversation(
        rows,
        replace(conversation.first, **off),
        tuple((extension, replace(options, **off)) for extension, options in conversation.continuations),
    )
