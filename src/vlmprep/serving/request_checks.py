"""The checks a chat-completion request passes before the server does any work for it: each failure an HTTP 4xx.

transformers' handler reads the request's fields as it goes (`int(body["max_tokens"])`, `message["role"]`, ...), so a
malformed field there is a `KeyError` or `TypeError` and an HTTP 500. Here every field the handler reads is checked
first, and the work a request may ask for is bounded (images, audio clips, new tokens).

A media part may carry a client-chosen `uuid` (vLLM's convention): with its data, the server remembers the data under
that id; with its data `null` or absent, the part names an item an earlier part sent (`vlmprep.serving.item_refs`).
Such a reference passes these checks as the item it names (it counts towards the request's images or clips), and
`resolve_item_references` fills its data in afterwards: `request_image_urls` and `request_audio_parts` read resolved
messages only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from numbers import Real

from .audio import AUDIO_FORMATS
from .errors import bad_request, client_error, shorten
from .policy import ServingPolicy

__all__ = [
    "AUDIO_PART_TYPES",
    "IMAGE_PART_TYPES",
    "MAX_ITEM_UUID_CHARS",
    "MEDIA_FIELDS",
    "REFUSED_PART_TYPES",
    "check_chat_request",
    "check_template_kwargs",
    "is_item_reference",
    "request_audio_parts",
    "request_image_urls",
]

ROLES = ("system", "developer", "user", "assistant", "tool")
TEXT_PART_TYPES = ("text", "input_text", "output_text")
IMAGE_PART_TYPES = ("image_url", "input_image")
AUDIO_PART_TYPES = ("input_audio", "audio_url")
# Parts transformers' server would load from a URL or path through code that has no media policy (its video loader):
# refused until they go through `vlmprep.serving.media`.
REFUSED_PART_TYPES = ("video_url",)
# The field of each media part type that holds its data (a URL, or base64 audio): what a part with a `uuid` sends once.
MEDIA_FIELDS = {
    "image_url": "image_url",
    "input_image": "image_url",
    "video_url": "video_url",
    "input_audio": "input_audio",
    "audio_url": "audio_url",
}
# The longest `uuid` of a media part (as long as a `cache_salt`): an id, not a place to send data in.
MAX_ITEM_UUID_CHARS = 256
MAX_LOGIT_BIAS_ENTRIES = 300
MAX_STOP_SEQUENCES = 4
# apply_chat_template's own arguments and the processor's inputs: a request's `chat_template_kwargs` never sets them.
RESERVED_TEMPLATE_KWARGS = frozenset(
    [
        "conversation",
        "messages",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "padding",
        "truncation",
        "max_length",
        "processor_kwargs",
        "load_audio_from_video",
        "images",
        "videos",
        "audio",
        "text",
        "num_frames",
    ]
)


def check_chat_request(
    body: object, policy: ServingPolicy, allowed_fields: Iterable[str], item_references: bool = False
) -> None:
    """Checks a chat-completion request's shape and bounds.

    Args:
        body (`object`): the parsed JSON body.
        policy (`ServingPolicy`): the server's limits.
        allowed_fields (`Iterable[str]`): the top-level fields the endpoint accepts.
        item_references (`bool`, *optional*, defaults to `False`): whether the caller resolves media parts that name
            an item by `uuid` alone (`resolve_item_references`); when not, such a part is refused (a part's `uuid`
            with its data is accepted either way).

    Raises:
        `fastapi.HTTPException`: 400 (422 for fields the endpoint does not know) naming the first problem.
    """
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    unknown = sorted(str(key) for key in body if key not in set(allowed_fields))
    if unknown:
        raise client_error(422, f"unexpected fields in the request: {shorten(', '.join(unknown[:5]), 100)}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("`messages` must be a non-empty list of messages")
    images = clips = 0
    for number, message in enumerate(messages, 1):
        message_images, message_clips = _checked_message_media(number, message, item_references)
        images, clips = images + message_images, clips + message_clips
    if images > policy.max_images_per_request:
        raise bad_request(
            f"{images} images in the request, over --max-images-per-request ({policy.max_images_per_request})"
        )
    if clips > policy.max_audio_per_request:
        raise bad_request(
            f"{clips} audio clips in the request, over --max-audio-per-request ({policy.max_audio_per_request})"
        )
    _check_generation_fields(body, policy)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise bad_request("`chat_template_kwargs` must be an object")
    if body.get("tools") is not None and not (
        isinstance(body["tools"], list) and all(isinstance(tool, dict) for tool in body["tools"])
    ):
        raise bad_request("`tools` must be a list of objects")


def _checked_message_media(number: int, message: object, item_references: bool) -> tuple[int, int]:
    where = f"message {number}"
    if not isinstance(message, dict):
        raise bad_request(f"{where} must be an object")
    if message.get("role") not in ROLES:
        raise bad_request(f"{where}: `role` must be one of {', '.join(ROLES)}")
    if "tool_call_id" in message and not isinstance(message["tool_call_id"], str):
        raise bad_request(f"{where}: `tool_call_id` must be a string")
    _check_tool_calls(where, message.get("tool_calls"))
    content = message.get("content")
    if content is None or isinstance(content, str):
        return 0, 0
    if not isinstance(content, list):
        raise bad_request(f"{where}: `content` must be a string or a list of parts")
    images = clips = 0
    for part_number, part in enumerate(content, 1):
        part_where = f"{where}, part {part_number}"
        part_type = part.get("type") if isinstance(part, dict) else None
        if part_type in REFUSED_PART_TYPES:
            raise bad_request(f"{part_where}: `{part_type}` parts are not accepted by this server")
        if part_type in TEXT_PART_TYPES:
            if not isinstance(part.get("text"), str):
                raise bad_request(f"{part_where}: `text` must be a string")
        elif part_type in IMAGE_PART_TYPES:
            if not _checked_item_uuid(part_where, part, item_references):
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                if not isinstance(url, str):
                    raise bad_request(f"{part_where}: `image_url` must be a string or an object with a string `url`")
            images += 1
        elif part_type in AUDIO_PART_TYPES:
            if not _checked_item_uuid(part_where, part, item_references):
                _check_audio_part(part_where, part)
            clips += 1
        else:
            types = ", ".join((*TEXT_PART_TYPES, *IMAGE_PART_TYPES, *AUDIO_PART_TYPES))
            raise bad_request(f"{part_where}: `type` must be one of {types}")
    return images, clips


def _checked_item_uuid(where: str, part: dict, item_references: bool) -> bool:
    """Checks a media part's `uuid` (vLLM's: a string, `null` for none); whether the part is a reference to an item
    sent before (a uuid and no data), whose data `resolve_item_references` fills in."""
    uuid = part.get("uuid")
    if uuid is None:
        return False
    if not isinstance(uuid, str) or not 0 < len(uuid) <= MAX_ITEM_UUID_CHARS:
        raise bad_request(f"{where}: `uuid` must be a non-empty string of at most {MAX_ITEM_UUID_CHARS} characters")
    field = MEDIA_FIELDS[part["type"]]
    data = part.get(field)
    if data is None:
        if not item_references:
            raise bad_request(f"{where}: this server takes no item by `uuid` alone: send `{field}` with it")
        return True
    # The server keeps this object under the uuid: plain values only, so that what it holds is what it counts
    plain = isinstance(data, str) or (
        isinstance(data, dict)
        and all(value is None or isinstance(value, (str, int, float)) for value in data.values())
    )
    if not plain:
        raise bad_request(f"{where}: with a `uuid`, `{field}` must be a string, an object of plain values, or null")
    return False


def is_item_reference(part: object) -> bool:
    """Whether a content part names an item sent before by its `uuid` alone (its data `null` or absent).

    Args:
        part (`object`): a content part of a message that passed `check_chat_request`.

    Returns:
        `bool`
    """
    return (
        isinstance(part, dict)
        and part.get("type") in MEDIA_FIELDS
        and part.get("uuid") is not None
        and part.get(MEDIA_FIELDS[part["type"]]) is None
    )


def _check_audio_part(where: str, part: dict) -> None:
    if part["type"] == "audio_url":  # transformers' message conversion reads `audio_url["url"]`: an object only
        url = part.get("audio_url")
        if not isinstance(url, dict) or not isinstance(url.get("url"), str):
            raise bad_request(f"{where}: `audio_url` must be an object with a string `url`")
        return
    audio = part.get("input_audio")
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
        formats = ", ".join(f'"{name}"' for name in AUDIO_FORMATS)
        raise bad_request(f"{where}: `input_audio` must be an object with base64 `data` and a `format` ({formats})")
    if audio.get("format") is not None and not isinstance(audio["format"], str):
        raise bad_request(f"{where}: `input_audio.format` must be a string")


def _check_tool_calls(where: str, tool_calls: object) -> None:
    if not tool_calls:
        return
    if not isinstance(tool_calls, list):
        raise bad_request(f"{where}: `tool_calls` must be a list")
    for call in tool_calls:
        function = call.get("function", call) if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        if not isinstance(arguments, dict):
            raise bad_request(f"{where}: each tool call needs a `function` with JSON object `arguments`")


def _number(body: dict, name: str, low: float, high: float, integer: bool = False) -> None:
    value = body.get(name)
    if value is None:
        return
    kind = int if integer else Real
    if isinstance(value, bool) or not isinstance(value, kind) or not low <= value <= high:
        what = "an integer" if integer else "a number"
        raise bad_request(f"`{name}` must be {what} from {low:g} to {high:g}")


def _check_generation_fields(body: dict, policy: ServingPolicy) -> None:
    for name in ("max_tokens", "max_completion_tokens"):
        _number(body, name, 1, policy.max_tokens_limit, integer=True)
    _number(body, "temperature", 0, 100)
    _number(body, "top_p", 0, 1)
    _number(body, "frequency_penalty", -2, 2)
    _number(body, "seed", -(2**63), 2**64 - 1, integer=True)
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise bad_request("`stream` must be true or false")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad_request("`model` must be a string")
    bias = body.get("logit_bias")
    if bias is not None:
        valid = isinstance(bias, dict) and len(bias) <= MAX_LOGIT_BIAS_ENTRIES
        valid = valid and all(
            re.fullmatch(r"\d{1,9}", str(key)) and isinstance(value, Real) and not isinstance(value, bool)
            for key, value in bias.items()
        )
        if not valid:
            raise bad_request(f"`logit_bias` must map at most {MAX_LOGIT_BIAS_ENTRIES} token ids to numbers")
    stop = body.get("stop")
    if stop is not None and not (
        isinstance(stop, str)
        or (isinstance(stop, list) and len(stop) <= MAX_STOP_SEQUENCES and all(isinstance(s, str) for s in stop))
    ):
        raise bad_request(f"`stop` must be a string or a list of at most {MAX_STOP_SEQUENCES} strings")
    config = body.get("generation_config")
    if config is not None:
        try:
            parsed = json.loads(config) if isinstance(config, str) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise bad_request("`generation_config` must be a string holding a JSON object")


def check_template_kwargs(kwargs: dict, template_text: str, policy: ServingPolicy) -> None:
    """Checks a request's `chat_template_kwargs`: only variables the model's own chat template reads, with plain values;
    a chat template of the request's own only when the server allows it (it is a program the server would run).

    Args:
        kwargs (`dict`): the request's `chat_template_kwargs`.
        template_text (`str`): the model's chat template(s), as text.
        policy (`ServingPolicy`): the server's limits.

    Raises:
        `fastapi.HTTPException`: 400 naming the first refused key.
    """
    for key, value in kwargs.items():
        if key == "chat_template":
            if not policy.allow_request_chat_template:
                raise bad_request("a request's own `chat_template` is refused (--allow-request-chat-template)")
            if not isinstance(value, str):
                raise bad_request("`chat_template` must be a string")
            continue
        if not (isinstance(key, str) and key.isidentifier()) or key in RESERVED_TEMPLATE_KWARGS:
            raise bad_request(f"`chat_template_kwargs` cannot set {shorten(key, 60)!r}")
        if not re.search(rf"\b{re.escape(key)}\b", template_text):
            raise bad_request(f"`chat_template_kwargs`: the model's chat template has no {shorten(key, 60)!r}")
        if not (
            value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) < 1000)
        ):
            raise bad_request(f"`chat_template_kwargs`: {shorten(key, 60)!r} must be a plain value")


def request_audio_parts(messages: list[dict]) -> list[dict]:
    """The audio parts (`input_audio`, `audio_url`) of checked messages, in order.

    Args:
        messages (`list[dict]`): messages that passed `check_chat_request`, then `resolve_item_references`.

    Returns:
        `list[dict]`

    Raises:
        `ValueError`: a part still names its item by `uuid` alone (the messages were not resolved): a server error.
    """
    parts = []
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if part["type"] in AUDIO_PART_TYPES:
                _refuse_unresolved(part)
                parts.append(part)
    return parts


def request_image_urls(messages: list[dict]) -> list[str]:
    """The image URLs of checked messages, in order.

    Args:
        messages (`list[dict]`): messages that passed `check_chat_request`, then `resolve_item_references`.

    Returns:
        `list[str]`

    Raises:
        `ValueError`: a part still names its item by `uuid` alone (the messages were not resolved): a server error.
    """
    urls = []
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if part["type"] in IMAGE_PART_TYPES:
                _refuse_unresolved(part)
                url = part["image_url"]
                urls.append(url["url"] if isinstance(url, dict) else url)
    return urls


def _refuse_unresolved(part: dict) -> None:
    # Skipping it would pair the request's other items with the wrong placeholders: the wiring is wrong, say so
    if is_item_reference(part):
        raise ValueError(
            f"a `{part['type']}` part names its item by `uuid` alone: call `resolve_item_references` on the messages "
            "before reading their items"
        )
