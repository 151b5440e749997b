"""What `vlmprep serve` lets a client do: its media policy, its limits on the work of one request, its caches' sizes,
and their flags.

Safe by default, in the manner of vLLM's server (`--allowed-local-media-path`, `--allowed-media-domains`, a 5 s fetch
timeout): images come as base64 data URLs; a local path or `file://` URL only from under an allowed directory; an
`http(s)://` URL only from an allowed domain, never from a private, loopback or link-local address unless allowed.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Annotated

__all__ = ["API_KEY_ENV", "DEFAULT_LIMITS", "ServingPolicy", "policy_from_options", "policy_parameters"]

MIB = 1024 * 1024
API_KEY_ENV = "VLMPREP_API_KEY"


@dataclasses.dataclass(frozen=True)
class ServingPolicy:
    """The media policy and per-request limits of `vlmprep serve` (each field is a flag of the same name).

    Args:
        allowed_local_media_path (`tuple[str, ...]`, *optional*, defaults to `()`):
            Directories whose files (paths or `file://` URLs) requests may name; none by default.
        allowed_media_domains (`tuple[str, ...]`, *optional*, defaults to `()`):
            Host names `http(s)://` image URLs may name (redirects included); none by default.
        allow_private_media_addresses (`bool`, *optional*, defaults to `False`):
            Whether an allowed domain may resolve to a private, loopback, link-local or reserved address.
        media_fetch_timeout (`float`, *optional*, defaults to 5.0): seconds one image fetch may take in all.
        max_media_bytes (`int`, *optional*, defaults to 10 MiB): the most bytes of one encoded image or audio clip.
        max_image_pixels (`int`, *optional*, defaults to 4096 * 4096): the most pixels of one image, read from its
            header before it is decoded.
        max_images_per_request (`int`, *optional*, defaults to 8): the most images in one request.
        max_audio_per_request (`int`, *optional*, defaults to 4): the most audio clips in one request.
        max_audio_seconds (`float`, *optional*, defaults to 300.0): the longest audio clip, in seconds, read from its
            header before its samples are decoded.
        max_request_bytes (`int`, *optional*, defaults to 32 MiB): the most bytes of one request body.
        max_tokens_limit (`int`, *optional*, defaults to 4096): the most new tokens a request may ask for.
        allow_request_chat_template (`bool`, *optional*, defaults to `False`):
            Whether a request may send its own chat template (a program the server would run).
        api_key (`str`, *optional*): when set, every endpoint needs `Authorization: Bearer <key>`, and the admin
            endpoints (`/load_model`, `/reset`) are served; without it they are not.
        prefix_cache (`bool`, *optional*, defaults to `True`): whether sequential generations reuse the KV of earlier
            requests' prefixes (a chat's earlier turns) through a `PrefixCache`, per tenant.
        prefix_cache_bytes (`int`, *optional*, defaults to 1 GiB): the prefix cache's budget for stored KV.
        media_cache_bytes (`int`, *optional*, defaults to 256 MiB): the media cache's budget for decoded and processed
            images re-sent with the same bytes; 0 turns it off.
    """

    allowed_local_media_path: tuple[str, ...] = ()
    allowed_media_domains: tuple[str, ...] = ()
    allow_private_media_addresses: bool = False
    media_fetch_timeout: float = 5.0
    max_media_bytes: int = 10 * MIB
    max_image_pixels: int = 4096 * 4096
    max_images_per_request: int = 8
    max_audio_per_request: int = 4
    max_audio_seconds: float = 300.0
    max_request_bytes: int = 32 * MIB
    max_tokens_limit: int = 4096
    allow_request_chat_template: bool = False
    api_key: str | None = None
    prefix_cache: bool = True
    prefix_cache_bytes: int = 1024 * MIB
    media_cache_bytes: int = 256 * MIB

    def __post_init__(self):
        for name in (
            "media_fetch_timeout",
            "max_media_bytes",
            "max_image_pixels",
            "max_request_bytes",
            "max_audio_seconds",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive")
        if self.prefix_cache_bytes < 1 or self.media_cache_bytes < 0:
            raise ValueError("--prefix-cache-bytes must be positive and --media-cache-bytes >= 0")
        if self.max_images_per_request < 0 or self.max_audio_per_request < 0 or self.max_tokens_limit < 1:
            raise ValueError(
                "--max-images-per-request and --max-audio-per-request must be >= 0 and --max-tokens-limit >= 1"
            )
        for directory in self.allowed_local_media_path:
            if not os.path.isdir(directory):
                raise ValueError(f"--allowed-local-media-path {directory!r} is no directory")


DEFAULT_LIMITS = ServingPolicy()

_HELP = {
    "allowed_local_media_path": "A directory whose image files requests may name (repeat for several). Default: none.",
    "allowed_media_domains": "A host name http(s) image URLs may name (repeat for several). Default: none.",
    "allow_private_media_addresses": "Let allowed domains resolve to private/loopback/link-local addresses.",
    "media_fetch_timeout": "Seconds one image fetch may take in all.",
    "max_media_bytes": "The most bytes of one encoded image or audio clip.",
    "max_image_pixels": "The most pixels of one image (checked before decoding).",
    "max_images_per_request": "The most images in one request.",
    "max_audio_per_request": "The most audio clips in one request.",
    "max_audio_seconds": "The longest audio clip, in seconds (checked before decoding).",
    "max_request_bytes": "The most bytes of one request body.",
    "max_tokens_limit": "The most new tokens a request may ask for.",
    "allow_request_chat_template": "Let requests send their own chat template (it runs on the server).",
    "api_key": "Require `Authorization: Bearer <key>` on every endpoint; serve /load_model and /reset "
    f"(or set ${API_KEY_ENV}).",
    "prefix_cache": "Reuse the KV of earlier requests' prefixes (a chat's earlier turns), per tenant.",
    "prefix_cache_bytes": "The prefix cache's budget for stored KV, in bytes.",
    "media_cache_bytes": "The budget, in bytes, for images re-sent with the same bytes (decoded, processed); 0: off.",
}


def policy_parameters() -> list[inspect.Parameter]:
    """The `ServingPolicy` fields as keyword parameters with typer options, to extend `transformers serve`'s signature.

    Returns:
        `list[inspect.Parameter]`
    """
    import typer

    parameters = []
    for field in dataclasses.fields(ServingPolicy):
        default = field.default
        annotation = {tuple: list[str], bool: bool, int: int, float: float}.get(type(default), str | None)
        # The key also comes from the environment, which `ps` does not show to other users as it shows arguments
        envvar = API_KEY_ENV if field.name == "api_key" else None
        option = typer.Option(help=_HELP[field.name], envvar=envvar)
        parameters.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=list(default) if isinstance(default, tuple) else default,
                annotation=Annotated[annotation, option],
            )
        )
    return parameters


def policy_from_options(options: dict) -> ServingPolicy:
    """Takes the `ServingPolicy` fields out of `options` (the parsed command line) and builds the policy.

    Args:
        options (`dict`): keyword arguments of the command; the policy's are removed from it.

    Returns:
        `ServingPolicy`
    """
    values = {}
    for field in dataclasses.fields(ServingPolicy):
        if field.name in options:
            value = options.pop(field.name)
            values[field.name] = tuple(value) if isinstance(value, list) else value
    return ServingPolicy(**values)
