"""Reading a request's audio clip under the server's `ServingPolicy`: where from, how many bytes and seconds, which
format.

A clip comes as an OpenAI `input_audio` part (`{"data": <base64>, "format": "wav"}`) or an `audio_url` part (a data
URL, or a URL or path the media policy allows, read by `vlmprep.serving.media`). transformers serve hands such a clip
to `load_audio`, which decodes it with soundfile or torchcodec and resamples it with soxr to the model's rate; neither
is a dependency of vlmprep. This module decodes PCM WAV with the standard library's `wave` reader, to the float32 mono
waveform soundfile gives (samples scaled by `2 ** (bits - 1)`, 8-bit ones centred first; channels averaged), and
refuses what it cannot decode exactly: any other format, and a clip whose sample rate is not the model's (it never
resamples). The header is read, and the duration checked against `--max-audio-seconds`, before any sample is.
"""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass

import numpy as np

from .errors import shorten
from .media import MediaRefused, base64_media_bytes, base64_media_key, data_url_payload, request_media_bytes
from .policy import ServingPolicy

__all__ = ["AUDIO_FORMATS", "DecodedAudio", "decode_wav", "load_request_audio_cached", "request_audio_bytes"]

# The formats a request's audio clip may have (`input_audio.format`); others are refused, never guessed at.
AUDIO_FORMATS = ("wav",)
_RIFF_MAGIC, _WAVE_MAGIC = b"RIFF", b"WAVE"


@dataclass(frozen=True)
class DecodedAudio:
    """A decoded clip: its float32 mono samples in [-1, 1) and its sample rate in Hz."""

    waveform: np.ndarray
    sampling_rate: int


def request_audio_bytes(part: dict, policy: ServingPolicy) -> bytes:
    """The raw bytes of a checked `input_audio` or `audio_url` content part, read under `policy`.

    Args:
        part (`dict`): a content part that passed `check_chat_request`.
        policy (`ServingPolicy`): the server's media policy and limits.

    Returns:
        `bytes`

    Raises:
        `MediaRefused`: a format other than WAV, or bytes the policy refuses.
    """
    if part["type"] == "audio_url":
        return request_media_bytes(part["audio_url"]["url"], policy, "audio clip")
    _check_audio_format(part)
    return base64_media_bytes(part["input_audio"]["data"], policy, "audio clip")


def _check_audio_format(part: dict) -> None:
    """Refuses an `input_audio` part of a format this server does not decode."""
    fmt = part["input_audio"].get("format")
    if fmt is not None and str(fmt).lower() not in AUDIO_FORMATS:
        raise MediaRefused(
            f'audio format {shorten(fmt, 20)!r} is not decoded by this server: send PCM WAV (`"format": "wav"`)'
        )


def _base64_payload(part: dict) -> str | None:
    """The base64 text of an audio part sent inline (an `input_audio` part of a decoded format, or a data URL), or
    `None`."""
    if part["type"] == "audio_url":
        url = part["audio_url"]["url"]
        return data_url_payload(url, "audio clip") if isinstance(url, str) and url.startswith("data:") else None
    _check_audio_format(part)
    return part["input_audio"]["data"]


def decode_wav(data: bytes, policy: ServingPolicy) -> DecodedAudio:
    """Decodes PCM WAV bytes as soundfile reads them (float32, channels averaged), within `--max-audio-seconds`.

    Args:
        data (`bytes`): the clip's bytes.
        policy (`ServingPolicy`): the server's limits.

    Returns:
        `DecodedAudio`

    Raises:
        `MediaRefused`: not PCM WAV, malformed, empty, or longer than the limit.
    """
    if data[:4] != _RIFF_MAGIC or data[8:12] != _WAVE_MAGIC:
        raise MediaRefused('the audio clip is not a WAV file: send PCM WAV (`"format": "wav"`)')
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:  # reads the header only
            channels, width, rate = reader.getnchannels(), reader.getsampwidth(), reader.getframerate()
            frames = reader.getnframes()
            if rate <= 0 or channels <= 0 or width not in (1, 2, 3, 4):
                raise MediaRefused("the WAV clip has no valid sample rate, channel count or sample width")
            if frames / rate > policy.max_audio_seconds:
                limit = policy.max_audio_seconds
                raise MediaRefused(f"the audio clip lasts {frames / rate:.1f} s, over --max-audio-seconds ({limit:g})")
            raw = reader.readframes(frames)
    except MediaRefused:
        raise
    except (wave.Error, EOFError, ValueError, OverflowError):  # `wave` raises these for a broken or non-PCM header
        raise MediaRefused("the WAV clip could not be decoded: only uncompressed PCM WAV is read") from None
    usable = len(raw) // (width * channels) * width * channels
    if usable == 0:
        raise MediaRefused("the WAV clip holds no samples")
    samples = _pcm_to_float(raw[:usable], width).reshape(-1, channels)  # (frames, channels)
    waveform = samples.T.mean(axis=0) if channels > 1 else samples[:, 0]
    return DecodedAudio(np.ascontiguousarray(waveform, dtype=np.float32), rate)


def _pcm_to_float(raw: bytes, width: int) -> np.ndarray:
    # Little-endian PCM -> float32 scaled as libsndfile scales it: by 2 ** (bits - 1); 8-bit WAV samples are unsigned
    if width == 1:
        return (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    if width == 3:
        packed = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        values = packed[:, 0] | (packed[:, 1] << 8) | (packed[:, 2] << 16)
        values = (values << 8) >> 8  # sign-extend 24 bits
        return values.astype(np.float32) / np.float32(2**23)
    dtype = np.dtype("<i2") if width == 2 else np.dtype("<i4")
    return np.frombuffer(raw, dtype=dtype).astype(np.float32) / np.float32(2 ** (8 * width - 1))


def load_request_audio_cached(
    part: dict, policy: ServingPolicy, sampling_rate: int, media_cache=None, salt: str | None = None
) -> tuple[np.ndarray, str | None]:
    """Reads one audio part of a request under `policy`; with a media cache, bytes seen before are not decoded again.

    Args:
        part (`dict`): an `input_audio` or `audio_url` content part that passed `check_chat_request`.
        policy (`ServingPolicy`): the server's media policy and limits.
        sampling_rate (`int`): the rate the model's feature extractor takes; a clip at another rate is refused.
        media_cache (`MediaCache`, *optional*): the server's media cache.
        salt (`str`, *optional*): the request's tenant salt: entries of other salts are not seen.

    Returns:
        `tuple[np.ndarray, str | None]`: the float32 mono waveform, and the media cache's key of its bytes (`None`
        without a cache).

    Raises:
        `MediaRefused`: the policy refuses it, or it cannot be decoded exactly.
    """
    key = None
    if media_cache is None:
        clip = decode_wav(request_audio_bytes(part, policy), policy)
    else:
        from .media_cache import media_key

        payload = _base64_payload(part)
        if payload is not None:
            key = base64_media_key(payload, policy, salt, "audio", "audio clip", media_cache)
        if key is not None:  # the base64 text hashed as it came: a re-sent clip is not base64-decoded again
            clip = media_cache.decoded(
                key, lambda: decode_wav(base64_media_bytes(payload, policy, "audio clip"), policy)
            )
        else:
            data = request_audio_bytes(part, policy)
            key = media_key(data, salt, kind="audio")
            clip = media_cache.decoded(key, lambda: decode_wav(data, policy))
    if clip.sampling_rate != sampling_rate:
        raise MediaRefused(
            f"the audio clip is sampled at {clip.sampling_rate} Hz and the model takes {sampling_rate} Hz: resample "
            "it before sending (this server does not resample)"
        )
    return clip.waveform, key
