"""The audio decoders and resampler `vlmprep.serving.audio` reaches for the formats the standard library does not read:
soundfile (libsndfile: FLAC, Ogg, MP3, float WAV) and PyAV (FFmpeg: M4A, WebM, and those soundfile cannot read), and
soxr to resample, each optional (the `serving` extra). See `vlmprep.serving.audio` for what reaches them, and why.
"""

from __future__ import annotations

import importlib
import io
import math
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from .errors import shorten
from .media import MediaRefused
from .policy import ServingPolicy

__all__ = [
    "FORMAT_NAMES",
    "INSTALL_HINT",
    "MAX_SOURCE_SAMPLING_RATE",
    "DecodedAudio",
    "check_sampling_rate",
    "check_seconds",
    "decode_with_library",
    "optional_module",
    "resampled",
]

# The highest sample rate read: with `--max-audio-seconds`, it bounds the samples one clip may decode to.
MAX_SOURCE_SAMPLING_RATE = 192_000

FORMAT_NAMES = {"wav": "WAV", "mp3": "MP3", "flac": "FLAC", "ogg": "Ogg", "m4a": "M4A", "webm": "WebM"}
INSTALL_HINT = '`pip install "vlmprep[serving]"`'
# libsndfile's major formats (`SoundFile.format`) of each format it decodes here; the first is the one it must list in
# `soundfile.available_formats()` (MP3 only from libsndfile 1.1 on)
_SOUNDFILE_FORMATS = {"wav": ("WAV", "WAVEX"), "flac": ("FLAC",), "ogg": ("OGG",), "mp3": ("MP3",)}
# FFmpeg's demuxer of each format PyAV decodes here, and the audio decoders (`CodecContext.name`) its stream may need
_PYAV_CONTAINERS = {
    "m4a": ("mp4", ("aac", "alac")),
    "webm": ("webm", ("opus", "vorbis")),
    "mp3": ("mp3", ("mp3float", "mp3")),
    "ogg": ("ogg", ("vorbis", "opus", "flac")),
    "flac": ("flac", ("flac",)),
}
_SOUNDFILE_BLOCK_FRAMES = 1 << 16
_SOUNDFILE_UNKNOWN_LENGTH = 2**62  # libsndfile states a length it does not know as SF_COUNT_MAX (2 ** 63 - 1)


@dataclass(frozen=True)
class DecodedAudio:
    """A decoded clip: its float32 mono samples in [-1, 1], its sample rate in Hz, and the format its bytes were in."""

    waveform: np.ndarray
    sampling_rate: int
    format: str = "wav"


def check_sampling_rate(name: str, rate: int) -> None:
    if rate <= 0:
        raise MediaRefused(f"the {name} clip has no valid sample rate")
    if rate > MAX_SOURCE_SAMPLING_RATE:
        raise MediaRefused(
            f"the {name} clip is sampled at {rate} Hz, over the {MAX_SOURCE_SAMPLING_RATE} Hz this server reads"
        )


def check_seconds(seconds: float, policy: ServingPolicy, stated: bool = True) -> None:
    """Refuses a clip longer than `--max-audio-seconds`: by the length its header states, or (`stated=False`) by the
    samples decoded so far."""
    if seconds > policy.max_audio_seconds:
        limit = policy.max_audio_seconds
        if not stated:
            raise MediaRefused(f"the audio clip lasts longer than --max-audio-seconds ({limit:g})")
        raise MediaRefused(f"the audio clip lasts {seconds:.1f} s, over --max-audio-seconds ({limit:g})")


def optional_module(name: str) -> ModuleType | None:
    """An audio library of the `serving` extra, or `None` where it is not installed (or its native library is not)."""
    try:
        return importlib.import_module(name)
    except (ImportError, OSError):  # soundfile raises OSError when it finds no libsndfile
        return None


def decode_with_library(data: bytes, fmt: str, policy: ServingPolicy) -> DecodedAudio:
    """Decodes a clip whose bytes are `fmt` with soundfile where it reads that format, else with PyAV."""
    soundfile = optional_module("soundfile")
    if (
        soundfile is not None
        and fmt in _SOUNDFILE_FORMATS
        and _SOUNDFILE_FORMATS[fmt][0] in soundfile.available_formats()
    ):
        return _decode_with_soundfile(soundfile, data, fmt, policy)
    av = optional_module("av") if fmt in _PYAV_CONTAINERS else None
    if av is None:
        raise MediaRefused(f"this server has no decoder of {FORMAT_NAMES[fmt]} audio installed ({INSTALL_HINT})")
    return _decode_with_pyav(av, data, fmt, policy)


def _decode_with_soundfile(soundfile: ModuleType, data: bytes, fmt: str, policy: ServingPolicy) -> DecodedAudio:
    name = FORMAT_NAMES[fmt]
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as reader:  # reads the header only
            if reader.format not in _SOUNDFILE_FORMATS[fmt]:  # e.g. a FLAC stream behind an ID3 tag
                raise MediaRefused(f"the {name} clip could not be decoded: its bytes hold {reader.format} audio")
            rate, frames = reader.samplerate, reader.frames
            if frames < _SOUNDFILE_UNKNOWN_LENGTH:
                check_sampling_rate(name, rate)
                check_seconds(frames / rate, policy)
                # On a seekable file soundfile reads up to the stated length, never past it: checked above
                blocks = []
                while len(block := reader.read(_SOUNDFILE_BLOCK_FRAMES, dtype="float32", always_2d=True)):
                    # (frames, channels) -> (frames,): per frame, the mean transformers takes over the whole clip
                    blocks.append(block.T.mean(axis=0) if block.shape[1] > 1 else block[:, 0])
    except MediaRefused:
        raise
    except Exception:  # libsndfile's errors, and cffi's or numpy's on a header it misread: all the client's bytes
        raise MediaRefused(f"the {name} clip could not be decoded") from None
    if frames >= _SOUNDFILE_UNKNOWN_LENGTH:  # a stream that states no length: PyAV stops at the limit while decoding
        av = optional_module("av") if fmt in _PYAV_CONTAINERS else None
        if av is None:
            raise MediaRefused(
                f"the {name} clip states no length, which this server needs to read it ({INSTALL_HINT})"
            )
        return _decode_with_pyav(av, data, fmt, policy)
    return _joined(blocks, rate, fmt)


def _decode_with_pyav(av: ModuleType, data: bytes, fmt: str, policy: ServingPolicy) -> DecodedAudio:
    name = FORMAT_NAMES[fmt]
    demuxer, codecs = _PYAV_CONTAINERS[fmt]
    blocks, decoded, rate = [], 0, None
    try:
        # The format's own demuxer, never FFmpeg's probing of every format it knows
        with av.open(io.BytesIO(data), mode="r", format=demuxer) as container:
            stream = next(iter(container.streams.audio), None)
            if stream is None:
                raise MediaRefused(f"the {name} clip holds no audio stream")
            codec = stream.codec_context.name
            if codec not in codecs:
                raise MediaRefused(
                    f"the {name} clip's audio codec {shorten(codec, 20)!r} is not decoded by this server"
                )
            if stream.duration is not None and stream.time_base is not None:
                check_seconds(float(stream.duration * stream.time_base), policy)
            elif container.duration is not None:
                check_seconds(container.duration / av.time_base, policy)
            # Decoders hand integer or interleaved samples too: converted to planar float32 (channels and rate kept)
            to_planar_float = av.AudioResampler(format="fltp")
            for frame in container.decode(stream):
                if rate is None:  # the first frame's rate is the clip's: a header's can differ (HE-AAC)
                    rate = frame.sample_rate
                    check_sampling_rate(name, rate)
                elif frame.sample_rate != rate:
                    raise MediaRefused(f"the {name} clip changes its sample rate midway")
                for planar in to_planar_float.resample(frame):
                    samples = planar.to_ndarray()  # (channels, frames)
                    blocks.append(samples.mean(axis=0) if samples.shape[0] > 1 else samples[0])
                    decoded += samples.shape[1]
                check_seconds(decoded / rate, policy, stated=False)
    except MediaRefused:
        raise
    except Exception:  # FFmpeg's errors (invalid data, end of file) and PyAV's on what it cannot convert
        raise MediaRefused(f"the {name} clip could not be decoded") from None
    return _joined(blocks, rate or 0, fmt)


def _joined(blocks: list[np.ndarray], rate: int, fmt: str) -> DecodedAudio:
    if not blocks or not sum(len(block) for block in blocks):
        raise MediaRefused(f"the {FORMAT_NAMES[fmt]} clip holds no samples")
    return DecodedAudio(np.ascontiguousarray(np.concatenate(blocks), dtype=np.float32), rate, fmt)


def resampled(clip: DecodedAudio, sampling_rate: int) -> DecodedAudio:
    """`clip` at `sampling_rate`, resampled as transformers' `load_audio` (soundfile backend) resamples."""
    if clip.sampling_rate == sampling_rate:
        return clip
    soxr = optional_module("soxr")
    if soxr is None:
        raise MediaRefused(
            f"the audio clip is sampled at {clip.sampling_rate} Hz and the model takes {sampling_rate} Hz: this "
            f"server has no resampler installed ({INSTALL_HINT})"
        )
    length = math.ceil(len(clip.waveform) * sampling_rate / clip.sampling_rate)
    waveform = soxr.resample(clip.waveform, clip.sampling_rate, sampling_rate, quality="soxr_hq")
    waveform = np.pad(waveform, (0, max(0, length - len(waveform))))[:length]
    return DecodedAudio(np.ascontiguousarray(waveform, dtype=np.float32), sampling_rate, clip.format)
