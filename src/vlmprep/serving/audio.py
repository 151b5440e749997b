"""Reading a request's audio clip under the server's `ServingPolicy`: where from, how many bytes and seconds, which
format, at which sample rate.

A clip comes as an OpenAI `input_audio` part (`{"data": <base64>, "format": "mp3"}`) or an `audio_url` part (a data
URL, or a URL or path the media policy allows, read by `vlmprep.serving.media`). Its format is read from its first bytes
(RIFF/WAVE, `fLaC`, `OggS`, an ID3 tag or an MPEG layer III frame, an ISO-BMFF `ftyp` box, an EBML header): bytes of
none of `AUDIO_FORMATS`, or of another format than the part declares, are refused before any decoder sees them.

The clip reaches the model as the float32 mono waveform transformers' `load_audio` (its soundfile backend) makes of the
same file, so a server answer matches what a user of plain transformers gets:

- PCM WAV is read with the standard library's `wave` (no extra needed), to the samples soundfile gives (scaled by
  `2 ** (bits - 1)`, 8-bit ones centred first); other WAV encodings (float, extensible) with soundfile;
- FLAC, Ogg (Vorbis, Opus) and MP3 with soundfile (libsndfile, which reads MP3 from 1.1 on), as transformers does;
- M4A (AAC, ALAC) and WebM (Opus, Vorbis), which libsndfile does not read, with PyAV (FFmpeg): only that container's
  demuxer and the decoders of its audio codecs are reached from a request. PyAV also reads MP3, Ogg and FLAC where
  soundfile cannot (not installed, a libsndfile without MP3, a FLAC stream that states no length).

Channels are averaged; a clip at another rate than the model's is resampled with soxr (`soxr_hq`) and padded or cut to
`ceil(samples * rate / source_rate)` samples, exactly as transformers' soundfile backend does (its torchcodec backend
resamples with FFmpeg instead). soundfile, PyAV and soxr come with the `serving` extra; without them, PCM WAV at the
model's rate still works and every other clip is refused with the command that installs them.

`--max-audio-seconds` is checked against the length the header or container states before any sample is decoded
(soundfile never reads a file past that length); PyAV's decoders, which can read past a stated length or find none,
stop as soon as the decoded samples pass the limit, so a small file declaring or holding hours of audio costs at most
the limit's worth of decoding. Every decoder error is a `MediaRefused`. A stream cut at a frame boundary (Ogg, WebM,
MP3) decodes to the part that is there, as players read it; one cut inside a header or a frame is refused.
"""

from __future__ import annotations

import io
import wave

import numpy as np

from .audio_codecs import (
    FORMAT_NAMES,
    INSTALL_HINT,
    MAX_SOURCE_SAMPLING_RATE,
    DecodedAudio,
    check_sampling_rate,
    check_seconds,
    decode_with_library,
    optional_module,
    resampled,
)
from .errors import shorten
from .media import MediaRefused, base64_media_bytes, base64_media_key, data_url_payload, request_media_bytes
from .policy import ServingPolicy

__all__ = [
    "AUDIO_FORMATS",
    "MAX_SOURCE_SAMPLING_RATE",
    "DecodedAudio",
    "decode_audio",
    "decode_wav",
    "load_request_audio_cached",
    "request_audio_bytes",
]

# The formats a request's audio clip may have (`input_audio.format`, and what its bytes are); others are refused.
AUDIO_FORMATS = ("wav", "mp3", "flac", "ogg", "m4a", "webm")


def request_audio_bytes(part: dict, policy: ServingPolicy) -> bytes:
    """The raw bytes of a checked `input_audio` or `audio_url` content part, read under `policy`.

    Args:
        part (`dict`): a content part that passed `check_chat_request`.
        policy (`ServingPolicy`): the server's media policy and limits.

    Returns:
        `bytes`

    Raises:
        `MediaRefused`: a declared format not in `AUDIO_FORMATS`, or bytes the policy refuses.
    """
    if part["type"] == "audio_url":
        return request_media_bytes(part["audio_url"]["url"], policy, "audio clip")
    _declared_format(part)
    return base64_media_bytes(part["input_audio"]["data"], policy, "audio clip")


def _declared_format(part: dict) -> str | None:
    """The format an `input_audio` part declares (`None` for an `audio_url` part, or none declared); a format this
    server does not decode is refused."""
    if part["type"] != "input_audio" or part["input_audio"].get("format") is None:
        return None
    declared = str(part["input_audio"]["format"]).lower()
    if declared not in AUDIO_FORMATS:
        raise MediaRefused(
            f"audio format {shorten(part['input_audio']['format'], 20)!r} is not decoded by this server: send one of "
            f"{', '.join(AUDIO_FORMATS)}"
        )
    return declared


def _base64_payload(part: dict) -> str | None:
    """The base64 text of an audio part sent inline (an `input_audio` part of a decoded format, or a data URL), or
    `None`."""
    if part["type"] == "audio_url":
        url = part["audio_url"]["url"]
        return data_url_payload(url, "audio clip") if isinstance(url, str) and url.startswith("data:") else None
    _declared_format(part)
    return part["input_audio"]["data"]


def _sniffed_format(data: bytes) -> str | None:
    """The format of a clip's bytes, from its first bytes, or `None` for none of `AUDIO_FORMATS`."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    # An ID3v2 tag, or an MPEG audio frame's sync (11 bits set) with layer bits `01` (layer III)
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE6 == 0xE2):
        return "mp3"
    if data[4:8] == b"ftyp":
        return "m4a"
    if data[:4] == b"\x1a\x45\xdf\xa3":  # EBML: WebM (and Matroska audio, which the same demuxer reads)
        return "webm"
    return None


def _check_format(actual: str | None, declared: str | None) -> None:
    if actual is None:
        raise MediaRefused(f"the audio clip is none of the formats this server decodes ({', '.join(AUDIO_FORMATS)})")
    if declared is not None and declared != actual:
        raise MediaRefused(
            f"the audio clip's bytes are {FORMAT_NAMES[actual]}, not the declared format {declared!r}: declare "
            f'`"format": "{actual}"`'
        )


def decode_audio(data: bytes, policy: ServingPolicy, declared_format: str | None = None) -> DecodedAudio:
    """Decodes a clip of any of `AUDIO_FORMATS` to float32 mono samples at its own rate, within `--max-audio-seconds`.

    Args:
        data (`bytes`): the clip's bytes.
        policy (`ServingPolicy`): the server's limits.
        declared_format (`str`, *optional*): the format the request declares; bytes of another format are refused.

    Returns:
        `DecodedAudio`: at the clip's own sample rate.

    Raises:
        `MediaRefused`: another format than declared or none decoded, a decoder missing, malformed, empty, sampled
        over `MAX_SOURCE_SAMPLING_RATE` or longer than the limit.
    """
    actual = _sniffed_format(data)
    _check_format(actual, declared_format)
    if actual == "wav":
        return decode_wav(data, policy)
    return decode_with_library(data, actual, policy)


def decode_wav(data: bytes, policy: ServingPolicy) -> DecodedAudio:
    """Decodes WAV bytes as soundfile reads them (float32, channels averaged), within `--max-audio-seconds`: PCM with
    the standard library, other encodings with soundfile (the `serving` extra).

    Args:
        data (`bytes`): the clip's bytes.
        policy (`ServingPolicy`): the server's limits.

    Returns:
        `DecodedAudio`

    Raises:
        `MediaRefused`: not WAV, malformed, empty, or longer than the limit.
    """
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise MediaRefused('the audio clip is not a WAV file: declare the format its bytes are in (`"format"`)')
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:  # reads the header only
            channels, width, rate = reader.getnchannels(), reader.getsampwidth(), reader.getframerate()
            frames = reader.getnframes()
            if rate <= 0 or channels <= 0 or width not in (1, 2, 3, 4):
                raise MediaRefused("the WAV clip has no valid sample rate, channel count or sample width")
            check_sampling_rate("WAV", rate)
            check_seconds(frames / rate, policy)
            raw = reader.readframes(frames)
    except MediaRefused:
        raise
    except (wave.Error, EOFError, ValueError, OverflowError):  # `wave` raises these for a broken or non-PCM header
        # `wave` reads PCM only: float and extensible WAV (and a broken header, refused there too) are soundfile's
        if optional_module("soundfile") is None:
            raise MediaRefused(
                f"the WAV clip could not be decoded: only PCM WAV is read without soundfile ({INSTALL_HINT})"
            ) from None
        return decode_with_library(data, "wav", policy)
    usable = len(raw) // (width * channels) * width * channels
    if usable == 0:
        raise MediaRefused("the WAV clip holds no samples")
    samples = _pcm_to_float(raw[:usable], width).reshape(-1, channels)  # (frames, channels)
    waveform = samples.T.mean(axis=0) if channels > 1 else samples[:, 0]
    return DecodedAudio(np.ascontiguousarray(waveform, dtype=np.float32), rate, "wav")


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
    """Reads one audio part of a request under `policy`, resampled to `sampling_rate`; with a media cache, bytes seen
    before are not decoded (or resampled) again.

    Args:
        part (`dict`): an `input_audio` or `audio_url` content part that passed `check_chat_request`.
        policy (`ServingPolicy`): the server's media policy and limits.
        sampling_rate (`int`): the rate the model's feature extractor takes; a clip at another rate is resampled.
        media_cache (`MediaCache`, *optional*): the server's media cache.
        salt (`str`, *optional*): the request's tenant salt: entries of other salts are not seen.

    Returns:
        `tuple[np.ndarray, str | None]`: the float32 mono waveform at `sampling_rate`, and the media cache's key of its
        bytes (`None` without a cache).

    Raises:
        `MediaRefused`: the policy refuses it, its format is not the declared one or none decoded, or it cannot be
        decoded.
    """
    declared = _declared_format(part)

    def decode(data: bytes) -> DecodedAudio:
        return resampled(decode_audio(data, policy, declared), sampling_rate)

    key = None
    if media_cache is None:
        clip = decode(request_audio_bytes(part, policy))
    else:
        from .media_cache import media_key

        # An entry holds the clip resampled to one rate: the same bytes for a model of another rate are another entry
        kind = f"audio@{sampling_rate}Hz"
        payload = _base64_payload(part)
        if payload is not None:
            key = base64_media_key(payload, policy, salt, kind, "audio clip", media_cache)
        if key is not None:  # the base64 text hashed as it came: a re-sent clip is not base64-decoded again
            clip = media_cache.decoded(key, lambda: decode(base64_media_bytes(payload, policy, "audio clip")))
        else:
            data = request_audio_bytes(part, policy)
            key = media_key(data, salt, kind=kind)
            clip = media_cache.decoded(key, lambda: decode(data))
    _check_format(clip.format, declared)  # an entry may have been decoded for a part that declared no format
    return clip.waveform, key
