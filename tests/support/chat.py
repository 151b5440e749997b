"""A multi-turn chat through a drop-in with a `PrefixCache`, each turn checked against the plain transformers class."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from support.references import Prompt, assert_close, generate_logits, uncached_logits
from vlmprep import PrefixCache
from vlmprep.testing import IMAGE, PrefillCounter, VisionRunCounter


def turn_image_seeds(user_turns: list[list]) -> list[list[int]]:
    """Each turn's image seeds for `run_chat`: `100 + turn` for every image of the turn (a new image each turn)."""
    return [[100 + turn] * sum(1 for segment in user if segment is IMAGE) for turn, user in enumerate(user_turns)]


@dataclass
class ChatRun:
    """What a chat fed and encoded.

    Args:
        fed: tokens passed to the decoder over the whole chat.
        minimum: the least any cache can feed: per turn, the prompt tokens no earlier forward computed (its tokens
            after the longest prefix it shares with an earlier call's fed tokens: new user text, items, a re-sent
            answer from where it parts from the generated one, the last answer token), then one token per decode step.
        encoded: items per encoder call, in call order.
        last_prompt: the last turn's prompt.
    """

    fed: int
    minimum: int
    encoded: list[int]
    last_prompt: Prompt


def run_chat(
    upstream,
    ours,
    turns: list[list],
    turn_seeds: list[list[int]],
    store: PrefixCache,
    new_tokens: int,
    resend: Callable[[int, list[int]], list[int]] | None = None,
    **answer,
) -> ChatRun:
    """Runs a chat whose every turn re-sends the whole conversation (earlier answers included) with `prefix_cache=store`.

    Each turn's first logits must equal one uncached forward of the whole prompt by `upstream` (the plain class, same
    weights), and each decode step must feed one token.

    Args:
        upstream: the plain transformers model.
        ours: the drop-in with the same weights.
        turns: each turn's user segments (token lists and item markers).
        turn_seeds: each turn's seeds of the items it adds.
        store: the prefix cache the chat uses.
        new_tokens: tokens each answer has.
        resend: `(turn, answer) -> tokens` the next turns re-send in the answer's place (a chat template re-rendering
            it: thinking stripped, a token replaced); defaults to the answer as generated.
        answer: more `generate` kwargs (which ids an answer may not hold).

    Returns:
        `ChatRun`
    """
    segments, seeds, encoded, seen = [], [], [], []
    fed = minimum = 0
    for turn, (user, new_seeds) in enumerate(zip(turns, turn_seeds, strict=True)):
        segments += user
        seeds += new_seeds
        prompt = Prompt(ours.config, segments, image_seeds=seeds)
        with VisionRunCounter(ours) as runs, PrefillCounter(ours) as counter:
            sequences, logits = generate_logits(
                ours, prompt.inputs(), max_new_tokens=new_tokens, prefix_cache=store, **answer
            )
        encoded += runs.batch_sizes
        decode_steps = len(logits) - 1
        assert counter.lengths[len(counter.lengths) - decode_steps :] == [1] * decode_steps
        assert_close(logits[0], uncached_logits(upstream, prompt.inputs()))
        fed += sum(counter.lengths)
        # Same ids at the same positions are the same tokens here: a turn's items are the same images at the same
        # places in every later prompt, so positions and item contents follow from the ids
        ids = prompt.input_ids[0].tolist()
        known = max((_common_prefix(ids, earlier) for earlier in seen), default=0)
        minimum += prompt.length - min(known, prompt.length - 1) + decode_steps
        seen.append(sequences[0, :-1].tolist())  # fed: prompt and answer, except the answer's last token
        generated = sequences[0, prompt.length :].tolist()
        segments.append(resend(turn, generated) if resend is not None else generated)
    return ChatRun(fed, minimum, encoded, prompt)


def _common_prefix(first: list[int], second: list[int]) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), min(len(first), len(second))
    )
