"""Audio clips for the serve tests, in every format `vlmprep serve` reads (`vlmprep.serving.audio.AUDIO_FORMATS`): a
known chirp written as WAV, FLAC, Ogg (Vorbis, Opus) and MP3 with soundfile (libsndfile) or PyAV (FFmpeg), and as M4A
(AAC) and WebM (Opus) with PyAV.

Which encoders exist depends on the machine's libsndfile and FFmpeg builds: an encoder that is missing raises
`AudioEncoderMissing`, a `unittest.SkipTest`, so a test that asks for such a clip is skipped (pytest and unittest both
read it as a skip) and other callers can catch it by name.

Example:

```python
>>> from vlmprep.testing.audio_clips import CLIPS, clip_bytes
>>> fmt, _, source_rate, _ = CLIPS["flac_44k"]
>>> fmt, source_rate, clip_bytes("flac_44k")[:4]
('flac', 44100, b'fLaC')

```
"""

from __future__ import annotations

import functools
import io
import unittest
from collections.abc import Callable

import numpy as np

__all__ = [
    "CLIPS",
    "CLIP_OF_FORMAT",
    "SECONDS",
    "AudioEncoderMissing",
    "chirp",
    "clip_bytes",
    "expected_mono",
    "pyav_bytes",
    "soundfile_bytes",
]

SECONDS = 0.5  # every clip's length, unless asked otherwise


class AudioEncoderMissing(unittest.SkipTest):
    """This machine's soundfile (libsndfile) or PyAV (FFmpeg) cannot write the clip asked for: the test is skipped."""


def chirp(rate: int, seconds: float = SECONDS, delay: float = 0.0) -> np.ndarray:
    """A stereo `(frames, 2)` float32 chirp rising from 200 to 2200 Hz, silent for its first `delay` seconds.

    The right channel is at half the left's level, so averaging the channels is seen; the chirp is not periodic, so a
    waveform shifted or out of order does not correlate with it.

    Args:
        rate (`int`): samples per second.
        seconds (`float`, *optional*, defaults to `SECONDS`): its length.
        delay (`float`, *optional*, defaults to 0.0): seconds of silence before it starts.

    Returns:
        `np.ndarray`: `(round(rate * seconds), 2)` float32 samples in [-0.5, 0.5].
    """
    times = np.arange(round(rate * seconds)) / rate - delay
    left = np.where(times >= 0, 0.5 * np.sin(2 * np.pi * (200 + 2000 * times / seconds) * times), 0.0)
    return np.stack([left, 0.5 * left], axis=1).astype(np.float32)


def expected_mono(rate: int = 16_000, seconds: float = SECONDS, delay: float = 0.0) -> np.ndarray:
    """The chirp's channel mean computed at `rate` (band-limited far below 8 kHz: no resampler is needed).

    Returns:
        `np.ndarray`: `(round(rate * seconds),)` float32 samples.
    """
    return chirp(rate, seconds, delay).mean(axis=1)


def soundfile_bytes(
    container: str, subtype: str | None, rate: int, seconds: float = SECONDS, samples: np.ndarray | None = None
) -> bytes:
    """A clip written by soundfile (libsndfile).

    Args:
        container (`str`): libsndfile's major format (`"WAV"`, `"FLAC"`, `"OGG"`, `"MP3"`).
        subtype (`str`, *optional*): its subtype (`"PCM_16"`, `"FLOAT"`, `"VORBIS"`, `"OPUS"`), or `None` for the
            format's default.
        rate (`int`): samples per second.
        seconds (`float`, *optional*, defaults to `SECONDS`): the chirp's length, where `samples` is not given.
        samples (`np.ndarray`, *optional*): `(frames, channels)` samples to write instead of the chirp.

    Returns:
        `bytes`

    Raises:
        `AudioEncoderMissing`: soundfile is not installed, or its libsndfile does not write `container`.
    """
    try:
        import soundfile
    except (ImportError, OSError) as missing:  # soundfile raises OSError when it finds no libsndfile
        raise AudioEncoderMissing(f"soundfile is not installed: {missing}") from None
    if container not in soundfile.available_formats():
        raise AudioEncoderMissing(f"this libsndfile writes no {container}")
    buffer = io.BytesIO()
    soundfile.write(
        buffer, chirp(rate, seconds) if samples is None else samples, rate, format=container, subtype=subtype
    )
    return buffer.getvalue()


def pyav_bytes(
    muxer: str, codec: str, rate: int, seconds: float = SECONDS, samples: np.ndarray | None = None
) -> bytes:
    """A stereo clip encoded and muxed by PyAV (FFmpeg), as one frame followed by the encoder's flush.

    Args:
        muxer (`str`): FFmpeg's muxer (`"mp3"`, `"ipod"` for M4A, `"mp4"`, `"webm"`).
        codec (`str`): FFmpeg's encoder (`"libmp3lame"`, `"aac"`, `"libopus"`).
        rate (`int`): samples per second.
        seconds (`float`, *optional*, defaults to `SECONDS`): the chirp's length, where `samples` is not given.
        samples (`np.ndarray`, *optional*): `(frames, 2)` float32 samples to write instead of the chirp.

    Returns:
        `bytes`

    Raises:
        `AudioEncoderMissing`: PyAV is not installed, or its FFmpeg has no `codec` encoder.
    """
    try:
        import av
    except ImportError as missing:
        raise AudioEncoderMissing(f"PyAV is not installed: {missing}") from None
    try:
        av.codec.Codec(codec, "w")
    except Exception:  # PyAV raises UnknownCodecError (a ValueError) or FFmpeg's own error for a missing encoder
        raise AudioEncoderMissing(f"this FFmpeg build has no {codec} encoder") from None
    planar = np.ascontiguousarray((chirp(rate, seconds) if samples is None else samples).T)  # (channels, frames)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=muxer) as container:
        stream = container.add_stream(codec, rate=rate, layout="stereo")
        frame = av.AudioFrame.from_ndarray(planar, format="fltp", layout="stereo")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return buffer.getvalue()


# name -> (declared format, encoder, source rate, decoded by soundfile as transformers' `load_audio` decodes it)
CLIPS: dict[str, tuple[str, Callable[[], bytes], int, bool]] = {
    "wav_pcm16_16k": ("wav", lambda: soundfile_bytes("WAV", "PCM_16", 16_000), 16_000, True),
    "wav_pcm16_44k": ("wav", lambda: soundfile_bytes("WAV", "PCM_16", 44_100), 44_100, True),
    "wav_float_48k": ("wav", lambda: soundfile_bytes("WAV", "FLOAT", 48_000), 48_000, True),
    "flac_44k": ("flac", lambda: soundfile_bytes("FLAC", "PCM_16", 44_100), 44_100, True),
    "ogg_vorbis_44k": ("ogg", lambda: soundfile_bytes("OGG", "VORBIS", 44_100), 44_100, True),
    "ogg_opus_48k": ("ogg", lambda: soundfile_bytes("OGG", "OPUS", 48_000), 48_000, True),
    "mp3_44k": ("mp3", lambda: pyav_bytes("mp3", "libmp3lame", 44_100), 44_100, True),
    "m4a_aac_44k": ("m4a", lambda: pyav_bytes("ipod", "aac", 44_100), 44_100, False),
    "mp4_aac_48k": ("m4a", lambda: pyav_bytes("mp4", "aac", 48_000), 48_000, False),
    "webm_opus_48k": ("webm", lambda: pyav_bytes("webm", "libopus", 48_000), 48_000, False),
}
# One clip of each format a request may declare (all resampled to a 16 kHz model's rate), for tests that go through
# every format once
CLIP_OF_FORMAT = {
    "wav": "wav_pcm16_44k",
    "mp3": "mp3_44k",
    "flac": "flac_44k",
    "ogg": "ogg_vorbis_44k",
    "m4a": "m4a_aac_44k",
    "webm": "webm_opus_48k",
}


@functools.cache
def clip_bytes(name: str) -> bytes:
    """The bytes of the clip `CLIPS[name]`, encoded once per process.

    Raises:
        `AudioEncoderMissing`: this machine cannot encode it (not cached: asked again, it raises again).
    """
    return CLIPS[name][1]()
