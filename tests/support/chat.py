"""A multi-turn chat through a drop-in with a `PrefixCache`, each turn checked against the plain transformers class."""

from __future__ import annotations

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
        minimum: the least any cache can feed: per turn, the tokens no earlier call computed (new user text, items,
            the previous answer's last token), then one token per decode step.
        encoded: items per encoder call, in call order.
        last_prompt: the last turn's prompt.
    """

    fed: int
    minimum: int
    encoded: list[int]
    last_prompt: Prompt


def run_chat(
    upstream, ours, turns: list[list], turn_seeds: list[list[int]], store: PrefixCache, new_tokens: int, **answer
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
        answer: more `generate` kwargs (which ids an answer may not hold).

    Returns:
        `ChatRun`
    """
    segments, seeds, encoded = [], [], []
    fed = minimum = known = 0
    for user, new_seeds in zip(turns, turn_seeds, strict=True):
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
        minimum += prompt.length - known + decode_steps
        known = sequences.shape[1] - 1  # KV of prompt and answer, except the answer's last token
        segments.append(sequences[0, prompt.length :].tolist())
    return ChatRun(fed, minimum, encoded, prompt)
