"""Reading a request's image URL under the server's `ServingPolicy`: where from, how long, how many bytes and pixels.

Three sources, each checked before anything is read:

- a base64 `data:` URL, always accepted (its size is checked before it is decoded);
- a local path or `file://` URL, only for a file under an `--allowed-local-media-path` directory (symbolic links
  resolved first); the refusal is the same whether or not the file exists;
- an `http(s)://` URL, only for an `--allowed-media-domains` host; the host is resolved once and the connection made to
  that address, which must be public unless `--allow-private-media-addresses`; every redirect is checked the same
  way; the whole fetch has one deadline and a byte limit.

The pixel count is read from the image header (PIL opens lazily) and checked before the pixels are decoded; the
decoded image is then what transformers' `load_image` makes of it, so the model sees the very pixels it would.
"""

from __future__ import annotations

import base64
import http.client
import io
import ipaddress
import os
import socket
import ssl
import time
from urllib.parse import urljoin, urlsplit
from urllib.request import url2pathname

from .errors import shorten
from .policy import ServingPolicy

__all__ = [
    "IMAGE_FORMATS",
    "MediaRefused",
    "base64_media_bytes",
    "base64_media_key",
    "data_url_payload",
    "load_request_image",
    "load_request_image_cached",
    "request_media_bytes",
]

# The formats a request's image may have; PIL's other decoders are never reached from a request.
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
MAX_REDIRECTS = 3
_READ_CHUNK = 64 * 1024
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)


class MediaRefused(ValueError):
    """An image URL the policy refuses or that cannot be read; its message is for the client (short, no echo)."""


def load_request_image(url: object, policy: ServingPolicy):
    """Reads one image URL of a request under `policy` (see `load_request_image_cached`, without a cache).

    Args:
        url (`object`): the `image_url` of a request (anything a client sent).
        policy (`ServingPolicy`): the server's media policy and limits.

    Returns:
        `PIL.Image.Image`: an RGB image, as transformers' `load_image` returns it.

    Raises:
        `MediaRefused`: the policy refuses it, or it cannot be read or decoded.
    """
    return load_request_image_cached(url, policy, None)[0]


def load_request_image_cached(url: object, policy: ServingPolicy, media_cache=None, salt: str | None = None):
    """Reads one image URL of a request under `policy`; with a media cache, bytes seen before are not decoded again.

    A fetched or local image's bytes are always read (under every limit) and the cache keyed by their hash: a cached
    image is one whose bytes, not whose URL, were seen, so a changed file or page is decoded afresh. A data URL's
    base64 text (its length checked first) is hashed as it came, not decoded: the text determines the bytes, so a hit
    is the very image those bytes decode to, and a re-sent photo costs one hash instead of a base64 decode and a hash
    (the same image sent once as a data URL and once by URL is two entries).

    Args:
        url (`object`): the `image_url` of a request (anything a client sent).
        policy (`ServingPolicy`): the server's media policy and limits.
        media_cache (`MediaCache`, *optional*): the server's media cache.
        salt (`str`, *optional*): the request's tenant salt: entries of other salts are not seen.

    Returns:
        `tuple[PIL.Image.Image, str | None]`: an RGB image, as transformers' `load_image` returns it, and the media
        cache's key of its bytes (`None` without a cache).

    Raises:
        `MediaRefused`: the policy refuses it, or it cannot be read or decoded.
    """
    if media_cache is None:
        return _decode(request_media_bytes(url, policy), policy), None
    from .media_cache import media_key

    if isinstance(url, str) and url.startswith("data:") and url.isascii():  # not ASCII: refused as read below
        # A URL equal to a recent one is recognized whole (its key is its payload's, checked and hashed the first
        # time): its multi-megabyte payload is not even copied out of it
        key = media_cache.text_key(url, (salt, "image"), lambda: base64_media_key(data_url_payload(url), policy, salt))
        return media_cache.decoded(
            key, lambda: _decode(base64_media_bytes(data_url_payload(url), policy), policy)
        ), key
    data = request_media_bytes(url, policy)
    key = media_key(data, salt)
    return media_cache.decoded(key, lambda: _decode(data, policy)), key


def request_media_bytes(url: object, policy: ServingPolicy, what: str = "image") -> bytes:
    """The raw bytes a request's media URL names, read under `policy` (where from, how long, how many bytes).

    Args:
        url (`object`): a media URL of a request (anything a client sent): a data URL, an http(s) URL or a local path.
        policy (`ServingPolicy`): the server's media policy and limits.
        what (`str`, *optional*, defaults to `"image"`): the kind of media, for the messages.

    Returns:
        `bytes`: at most `policy.max_media_bytes` of them.

    Raises:
        `MediaRefused`: the policy refuses it, or it cannot be read.
    """
    if not isinstance(url, str) or not url:
        raise MediaRefused(f"the {what} URL must be a non-empty string")
    if url.startswith("data:"):
        return _data_url_bytes(url, policy, what)
    if url.startswith(("http://", "https://")):
        return _fetch(url, policy)
    if "://" in url and not url.startswith("file://"):
        raise MediaRefused(f"unsupported URL scheme in {shorten(url, 40)!r}: send a data URL or an http(s) URL")
    return _read_local(url, policy)


def _data_url_bytes(url: str, policy: ServingPolicy, what: str = "image") -> bytes:
    return base64_media_bytes(data_url_payload(url, what), policy, what)


def data_url_payload(url: str, what: str = "image") -> str:
    """The base64 text of a `data:` URL (not checked yet).

    Args:
        url (`str`): a `data:` URL.
        what (`str`, *optional*, defaults to `"image"`): the kind of media, for the messages.

    Returns:
        `str`

    Raises:
        `MediaRefused`: not a base64 data URL.
    """
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        example = "data:audio/wav;base64,..." if what == "audio clip" else "data:image/png;base64,..."
        raise MediaRefused(f"a data URL must be base64: `{example}`")
    return payload


def _check_base64_length(payload: object, policy: ServingPolicy, what: str = "image") -> None:
    if not isinstance(payload, str) or not payload:
        raise MediaRefused("the media data must be a non-empty base64 string")
    if len(payload) > (policy.max_media_bytes + 2) // 3 * 4 + 4:  # base64 grows 3 bytes to 4 characters
        raise MediaRefused(f"the {what} is over --max-media-bytes ({policy.max_media_bytes} bytes)")


def base64_media_bytes(payload: object, policy: ServingPolicy, what: str = "image") -> bytes:
    """Decodes a request's base64 media payload, its size checked before it is decoded.

    Args:
        payload (`object`): the base64 text (anything a client sent).
        policy (`ServingPolicy`): the server's limits (`max_media_bytes`).
        what (`str`, *optional*, defaults to `"image"`): the kind of media, for the messages.

    Returns:
        `bytes`

    Raises:
        `MediaRefused`: not a string, too long, or not base64.
    """
    _check_base64_length(payload, policy, what)
    try:
        return base64.b64decode(payload)
    except ValueError:
        raise MediaRefused("the media data is not valid base64") from None


def base64_media_key(
    payload: object,
    policy: ServingPolicy,
    salt: str | None = None,
    kind: str = "image",
    what: str = "image",
    media_cache=None,
) -> str | None:
    """The media cache's key of a base64 payload's text, hashed as it came (not decoded), its length checked first.

    The text determines the bytes it decodes to, so an entry under this key is exactly what those bytes decode to; a
    key of text is never a key of raw bytes.

    Args:
        payload (`object`): the base64 text (anything a client sent).
        policy (`ServingPolicy`): the server's limits (`max_media_bytes`).
        salt (`str`, *optional*): the request's tenant salt.
        kind (`str`, *optional*, defaults to `"image"`): what the bytes are decoded as (`media_key`'s `kind`).
        what (`str`, *optional*, defaults to `"image"`): the kind of media, for the messages.
        media_cache (`MediaCache`, *optional*): the server's media cache: a text equal to one it keyed recently is
            not hashed again (`MediaCache.text_key`).

    Returns:
        `str | None`: the key, or `None` for text that is not ASCII (no base64: its decoding refuses it).

    Raises:
        `MediaRefused`: not a string, or too long.
    """
    from .media_cache import media_key

    _check_base64_length(payload, policy, what)
    if not payload.isascii():
        return None
    if media_cache is None:
        return media_key(payload.encode("ascii"), salt, kind=kind, encoding="base64")
    return media_cache.text_key(
        payload, (salt, kind), lambda: media_key(payload.encode("ascii"), salt, kind=kind, encoding="base64")
    )


def _read_local(url: str, policy: ServingPolicy) -> bytes:
    refusal = MediaRefused(
        "local files are read only under a directory the server allows (--allowed-local-media-path)"
    )
    if not policy.allowed_local_media_path:
        raise refusal
    if url.startswith("file://"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise refusal
        url = url2pathname(parts.path)
    path = os.path.realpath(url)
    allowed = [os.path.realpath(directory) for directory in policy.allowed_local_media_path]
    if not any(os.path.commonpath([path, directory]) == directory for directory in allowed):
        raise refusal
    try:
        with open(path, "rb") as file:
            data = file.read(policy.max_media_bytes + 1)
    except OSError:
        raise MediaRefused("the local image could not be read") from None
    if len(data) > policy.max_media_bytes:
        raise MediaRefused(f"the image is over --max-media-bytes ({policy.max_media_bytes} bytes)")
    return data


def _fetch(url: str, policy: ServingPolicy) -> bytes:
    deadline = time.monotonic() + policy.media_fetch_timeout
    allowed_hosts = {host.lower().rstrip(".") for host in policy.allowed_media_domains}
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        if parts.scheme not in ("http", "https") or host not in allowed_hosts:
            raise MediaRefused(
                f"images are fetched only from the domains the server allows (--allowed-media-domains), "
                f"not {shorten(host, 60)!r}"
            )
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            address = _checked_address(host, port, policy)
            connection = _PinnedConnection.open(parts.scheme, host, address, port, _left(deadline, policy))
            try:
                target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                connection.request("GET", target, headers={"User-Agent": "vlmprep-serve"})
                response = connection.getresponse()
                if response.status in _REDIRECT_STATUSES and response.getheader("Location"):
                    url = urljoin(url, response.getheader("Location"))
                    continue
                if response.status != 200:
                    raise MediaRefused(f"the image URL answered HTTP {response.status}")
                return _read_limited(response, deadline, policy)
            finally:
                connection.close()
        except TimeoutError:
            raise MediaRefused(f"fetching the image took over {policy.media_fetch_timeout:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            if isinstance(error, MediaRefused):
                raise
            raise MediaRefused("the image URL could not be fetched") from None
    raise MediaRefused(f"the image URL redirected more than {MAX_REDIRECTS} times")


def _left(deadline: float, policy: ServingPolicy) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _checked_address(host: str, port: int, policy: ServingPolicy) -> str:
    """The address to connect to: the host's first, refused when it is not public (unless allowed)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    address = infos[0][4][0]
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if getattr(ip, "ipv4_mapped", None) is not None:
        ip = ip.ipv4_mapped
    if not ip.is_global and not policy.allow_private_media_addresses:
        raise MediaRefused(
            "the image host resolves to a private, loopback or link-local address, which the server does not fetch "
            "from (--allow-private-media-addresses)"
        )
    return address


def _read_limited(response: http.client.HTTPResponse, deadline: float, policy: ServingPolicy) -> bytes:
    declared = response.getheader("Content-Length")
    if declared and declared.isdigit() and int(declared) > policy.max_media_bytes:
        raise MediaRefused(f"the image is over --max-media-bytes ({policy.max_media_bytes} bytes)")
    chunks, size = [], 0
    while True:
        _left(deadline, policy)
        chunk = response.read1(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > policy.max_media_bytes:
            raise MediaRefused(f"the image is over --max-media-bytes ({policy.max_media_bytes} bytes)")
        chunks.append(chunk)


class _PinnedConnection:
    """HTTP(S) connections to an address resolved (and checked) beforehand, with the host's name for `Host` and TLS:
    a second DNS answer can never send the request elsewhere."""

    @staticmethod
    def open(scheme: str, host: str, address: str, port: int, timeout: float) -> http.client.HTTPConnection:
        base = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection

        class Pinned(base):
            def connect(self):
                self.sock = socket.create_connection((address, port), self.timeout)
                if scheme == "https":
                    self.sock = self._context.wrap_socket(self.sock, server_hostname=host)

        if scheme == "https":
            return Pinned(host, port, timeout=timeout, context=ssl.create_default_context())
        return Pinned(host, port, timeout=timeout)


def _decode(data: bytes, policy: ServingPolicy):
    import PIL.Image
    from transformers.image_utils import load_image

    try:
        image = PIL.Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)  # reads the header only
    except PIL.Image.DecompressionBombError:
        raise MediaRefused(f"the image has over --max-image-pixels ({policy.max_image_pixels}) pixels") from None
    except Exception:  # PIL raises several kinds for bytes that are no image
        raise MediaRefused(f"the image is not a {', '.join(IMAGE_FORMATS)} image") from None
    width, height = image.size
    if width * height > policy.max_image_pixels:
        raise MediaRefused(
            f"the image is {width}x{height} pixels, over --max-image-pixels ({policy.max_image_pixels})"
        )
    try:
        image.load()
        return load_image(image)  # EXIF orientation and RGB, as transformers serve reads images
    except Exception:
        raise MediaRefused("the image could not be decoded") from None
