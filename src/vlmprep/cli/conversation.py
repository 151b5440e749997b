"""One turn of a conversation: the user's message (images placed at `<image>` markers) and the model's answer,
streamed as its tokens come.
"""

from __future__ import annotations

from typing import IO

from .errors import CLIError

IMAGE_MARKER = "<image>"  # where an image goes in a `generate --prompt`; without markers, images come first


def user_message(prompt: str, images: list) -> dict:
    """A chat message with `images` and `prompt`: at the prompt's `<image>` markers, else images first.

    Args:
        prompt (`str`): the text, optionally with one `<image>` marker per image.
        images (`list[PIL.Image.Image]`): the images.

    Returns:
        `dict`: `{"role": "user", "content": [...]}`.

    Raises:
        `CLIError`: the prompt has markers, but not one per image.
    """
    pieces = prompt.split(IMAGE_MARKER)
    markers = len(pieces) - 1
    if markers == 0:
        content = [{"type": "image", "image": image} for image in images]
        content.append({"type": "text", "text": prompt})
        return {"role": "user", "content": content}
    if markers != len(images):
        raise CLIError(
            f"the prompt has {markers} {IMAGE_MARKER} marker(s) but {len(images)} image(s) were given; "
            f"pass one --image per marker, or no markers to put the images first"
        )
    content = []
    for index, piece in enumerate(pieces):
        if piece.strip():
            content.append({"type": "text", "text": piece.strip()})
        if index < len(images):
            content.append({"type": "image", "image": images[index]})
    return {"role": "user", "content": content}


class AnswerStreamer:
    """A `generate` streamer writing the answer to `stream` as tokens come, prompt and special tokens skipped.

    transformers' `TextStreamer` decodes (it knows when a piece of text is final); this class only redirects its output
    from `print` to `stream`. It wraps rather than subclasses, so that importing the CLI does not import transformers.
    Leading whitespace is not written, so the streamed text is the stripped answer; the stream ends with a newline.

    Args:
        tokenizer (`PreTrainedTokenizerBase` or `ProcessorMixin`): decodes the new tokens.
        stream (`IO[str]`): where the text goes (flushed after every piece).
    """

    def __init__(self, tokenizer, stream: IO[str]):
        from transformers import TextStreamer

        self.decoder = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.decoder.on_finalized_text = self.on_finalized_text
        self.stream = stream
        self.text = ""  # what was written so far, without the final newline
        self.line_open = False  # some text written and no newline after it yet

    def put(self, value) -> None:
        """Called by `generate` with the prompt, then with each new token."""
        self.decoder.put(value)

    def end(self) -> None:
        """Called by `generate` when the answer is complete."""
        self.decoder.end()

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Write a piece of the answer that will not change any more."""
        if not self.text:
            text = text.lstrip()
        if text:
            self.stream.write(text)
            self.text += text
            self.line_open = True
        if stream_end:
            self.close_line()
        self.stream.flush()

    def close_line(self) -> None:
        """End the streamed line (at the end of the answer, or when generation fails part-way)."""
        self.stream.write("\n")
        self.line_open = False


def answer(
    model, processor, messages: list[dict], max_new_tokens: int, stream: IO[str] | None = None
) -> tuple[str, dict[str, int]]:
    """Generate the model's next turn for a conversation, re-sending all of it (caches skip what was computed).

    Args:
        model (`PreTrainedModel`): a vlmprep drop-in model.
        processor (`ProcessorMixin`): its processor, with a chat template.
        messages (`list[dict]`): the conversation so far, ending with the user's message.
        max_new_tokens (`int`): answer length.
        stream (`IO[str]`, *optional*): where to write the answer as its tokens come (an `AnswerStreamer`, ending
            with a newline); nothing is written when `None`.

    Returns:
        `tuple[str, dict[str, int]]`: the answer, and `images_encoded`, `prompt_tokens`, `tokens_reused`.
    """
    import torch

    inputs = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_tensors="pt", add_generation_prompt=True
    ).to(model.device)
    if inputs.get("pixel_values") is not None and inputs["pixel_values"].is_floating_point():
        inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
    encoder_before = model.encoder_cache.stats.misses if model.encoder_cache is not None else 0
    prefix_before = model.prefix_cache.stats.tokens_reused if model.prefix_cache is not None else 0
    prompt_length = inputs["input_ids"].shape[1]
    streamer = AnswerStreamer(getattr(processor, "tokenizer", processor), stream) if stream is not None else None
    try:
        with torch.inference_mode():
            sequences = model.generate(**inputs, max_new_tokens=max_new_tokens, streamer=streamer)
    except BaseException:
        if streamer is not None and streamer.line_open:
            streamer.close_line()  # the error line that follows starts on a line of its own
            stream.flush()
        raise
    text = processor.decode(sequences[0, prompt_length:], skip_special_tokens=True).strip()
    stats = {
        "images_encoded": (model.encoder_cache.stats.misses - encoder_before) if model.encoder_cache else 0,
        "prompt_tokens": int(prompt_length),
        "tokens_reused": (model.prefix_cache.stats.tokens_reused - prefix_before) if model.prefix_cache else 0,
    }
    return text, stats
