"""transformers' chat-completions handler, answering a client's errors in the request with HTTP 400."""

from __future__ import annotations

from transformers.cli.serving.chat_completion import ChatCompletionHandler
from transformers.cli.serving.utils import BaseHandler, Modality

from .errors import bad_request

__all__ = ["VisionPrepChatCompletionHandler", "raised_while_reading_request"]


class VisionPrepChatCompletionHandler(ChatCompletionHandler):
    """transformers' chat-completions handler; a request whose images cannot be read or do not match its
    placeholders gets HTTP 400 naming the problem."""

    @staticmethod
    def get_processor_inputs_from_messages(messages: list[dict], modality: Modality) -> list[dict]:
        """Upstream's conversion, with every image URL read here (data URLs, `http(s)://`, `file://` URLs and paths),
        so that an undecodable one is the client's error.

        Args:
            messages (`list[dict]`): OpenAI-format chat messages.
            modality (`Modality`): the model's modality.

        Returns:
            `list[dict]`: processor messages; images as decoded PIL images.
        """
        from transformers.image_utils import load_image

        processor_messages = BaseHandler.get_processor_inputs_from_messages(messages, modality)
        image_number = 0
        for message in processor_messages:
            content = message["content"]
            for item in content if isinstance(content, list) else ():
                if item.get("type") != "image" or "url" not in item:
                    continue
                image_number += 1
                try:
                    item["image"] = load_image(_local_path_of_file_url(item.pop("url")))
                except Exception as error:  # PIL, base64 and file errors alike: the URL is what is wrong
                    raise bad_request(
                        f"Image {image_number} of the request could not be read ({type(error).__name__}: {error}). "
                        "Send a base64 data URL (`data:image/png;base64,...`) or a URL of a PNG/JPEG image."
                    ) from error
        return processor_messages

    async def handle_request(self, body: dict, request_id: str):
        """Upstream's handling; a `ValueError` raised while the processor reads the request (e.g. more placeholders
        written in the text than images sent) becomes HTTP 400. Any other error (loading the model, generating) is the
        server's and stays one (HTTP 500).

        Args:
            body (`dict`): the OpenAI chat-completion request.
            request_id (`str`): the request's id.

        Returns:
            `StreamingResponse | JSONResponse`
        """
        try:
            return await super().handle_request(body, request_id)
        except ValueError as error:
            if not raised_while_reading_request(error):
                raise
            raise bad_request(f"The request cannot run: {error}") from error


# The upstream call that turns a request's messages into model inputs (the processor's chat template, tokenizer and
# image processor run inside it): a `ValueError` from within it is about the request.
_REQUEST_READING_CALL = "apply_chat_template"


def raised_while_reading_request(error: BaseException) -> bool:
    """Whether `error` was raised inside the processor's `apply_chat_template` call, which reads the request.

    Upstream's handler does everything in one method (model loading, reading the request, generating), so the place an
    error was raised is what tells a bad request from a server fault.

    Args:
        error (`BaseException`): a caught exception.

    Returns:
        `bool`
    """
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_name == _REQUEST_READING_CALL:
            return True
        traceback = traceback.tb_next
    return False


def _local_path_of_file_url(url: str) -> str:
    """`file:///path/image.png` -> `/path/image.png` (transformers' `load_image` reads paths, not file URLs)."""
    if not url.startswith("file://"):
        return url
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    return url2pathname(urlparse(url).path)
