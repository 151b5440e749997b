"""A request's audio clip in every format `vlmprep serve` reads (`vlmprep.serving.audio`): WAV, FLAC, Ogg (Vorbis,
Opus), MP3, M4A (AAC) and WebM (Opus), each made by `vlmprep.testing.audio_clips` from a known chirp.

- soundfile's formats (WAV, FLAC, Ogg, MP3) reach the model as the very waveform transformers' `load_audio` (its
  soundfile backend) makes of the same bytes at the same rate; PyAV's (M4A, WebM) as a waveform close to the chirp
  computed at the model's rate (lossy: correlation, not equality); 44.1 and 48 kHz clips are resampled to 16 kHz.
- The declared format must be what the bytes are; unknown formats, malformed and cut bytes of each format are refused
  with a `MediaRefused`, never another exception.
- `--max-audio-seconds` is read from the header before any sample is decoded, and where no length is stated decoding
  stops at the limit: a tiny file declaring or holding hours of audio is refused cheaply.
- Without the `serving` extra's libraries, PCM WAV at the model's rate still works and the rest is refused with the
  command that installs them; PyAV reads soundfile's formats where soundfile is missing.
"""

from __future__ import annotations

import base64
import sys
import warnings

import numpy as np
import pytest

from vlmprep.serving.audio import AUDIO_FORMATS, decode_audio, load_request_audio_cached
from vlmprep.serving.media import MediaRefused
from vlmprep.serving.media_cache import MediaCache
from vlmprep.serving.policy import ServingPolicy
from vlmprep.testing.audio_clips import CLIPS, SECONDS, clip_bytes, expected_mono, soundfile_bytes

RATE = 16_000
INSTALL_HINT = 'pip install "vlmprep[serving]"'


def input_audio(data: bytes, fmt: str | None) -> dict:
    audio = {"data": base64.b64encode(data).decode()}
    return {"type": "input_audio", "input_audio": audio if fmt is None else {**audio, "format": fmt}}


def data_url(data: bytes) -> dict:
    return {"type": "audio_url", "audio_url": {"url": "data:audio/x;base64," + base64.b64encode(data).decode()}}


def load(part: dict, max_seconds: float = 30.0, rate: int = RATE) -> np.ndarray:
    return load_request_audio_cached(part, ServingPolicy(max_audio_seconds=max_seconds), rate)[0]


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    length = min(len(a), len(b))
    return float(np.corrcoef(a[:length], b[:length])[0, 1])


def delayed_correlation(waveform: np.ndarray, source_rate: int, max_delay: int) -> float:
    """The best correlation of `waveform` with the chirp delayed by 0 to `max_delay` samples of the source rate."""
    delays = range(max_delay + 1)
    return max(correlation(waveform, expected_mono(delay=delay / source_rate)) for delay in delays)


# --- every format at the model's rate ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_each_format_reaches_the_model_rate_close_to_the_source(name):
    fmt, _, source_rate, _ = CLIPS[name]
    data = clip_bytes(name)
    waveform = load(input_audio(data, fmt))
    assert waveform.dtype == np.float32 and waveform.ndim == 1 and waveform.flags.c_contiguous
    # Lossy codecs pad to whole frames, and AAC as PyAV writes it keeps the encoder's 1024 priming samples (its edit
    # list starts at 0, so a decoder must play them): at most a frame of 2048 samples more, or later
    assert 0 <= len(waveform) - round(RATE * SECONDS) <= 2048 * RATE // source_rate + 1
    assert delayed_correlation(waveform, source_rate, 2048 if fmt == "m4a" else 0) > 0.95
    assert np.abs(waveform).max() <= 1.0
    # An audio_url part (a data URL) is read the same way, its format taken from its bytes
    np.testing.assert_array_equal(load(data_url(data)), waveform)


@pytest.mark.parametrize("name", sorted(name for name, case in CLIPS.items() if case[3]))
def test_soundfile_formats_match_transformers_load_audio_exactly(name):
    from transformers.audio_utils import load_audio

    pytest.importorskip("soxr")
    fmt, _, source_rate, _ = CLIPS[name]
    data = clip_bytes(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # libsndfile's MP3 reader warns through stderr only
        reference = load_audio(base64.b64encode(data).decode(), sampling_rate=RATE, backend="soundfile")
    waveform = load(input_audio(data, fmt))
    np.testing.assert_array_equal(waveform, reference)
    if name.startswith("wav_pcm16"):  # lossless: every sample where the chirp is, to within 16-bit rounding
        np.testing.assert_allclose(waveform[16:-16], expected_mono()[16:-16], atol=2e-3)


def test_a_clip_keeps_its_own_rate_until_it_is_resampled():
    clip = decode_audio(clip_bytes("flac_44k"), ServingPolicy(), "flac")
    assert (clip.sampling_rate, clip.format, len(clip.waveform)) == (44_100, "flac", round(44_100 * SECONDS))
    np.testing.assert_allclose(clip.waveform, expected_mono(44_100), atol=2e-4)  # 16-bit FLAC: lossless
    resampled = load(input_audio(clip_bytes("flac_44k"), "flac"), rate=24_000)
    assert len(resampled) == 12_000  # ceil(22050 * 24000 / 44100), as transformers pads or cuts


# --- formats: declared, sniffed, unknown -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, declared", [("flac_44k", "mp3"), ("mp3_44k", "wav"), ("m4a_aac_44k", "webm"), ("ogg_vorbis_44k", "flac")]
)
def test_a_format_other_than_the_bytes_is_refused_naming_the_real_one(name, declared):
    with pytest.raises(MediaRefused, match=f"not the declared format '{declared}'"):
        load(input_audio(clip_bytes(name), declared))


@pytest.mark.parametrize(
    "part, message",
    [
        (input_audio(b"FORM\0\0\0\x20AIFFCOMM", "aiff"), "format 'aiff' is not decoded by this server"),
        (input_audio(b"FORM\0\0\0\x20AIFFCOMM", None), "none of the formats this server decodes"),
        (data_url(b"FORM\0\0\0\x20AIFFCOMM"), "none of the formats this server decodes"),
        (data_url(bytes(64)), "none of the formats this server decodes"),
    ],
    ids=["declared_aiff", "undeclared_aiff", "aiff_data_url", "zeros_data_url"],
)
def test_an_unknown_format_is_refused_naming_the_accepted_ones(part, message):
    with pytest.raises(MediaRefused, match=message) as refusal:
        load(part)
    assert ", ".join(AUDIO_FORMATS) in str(refusal.value)


# --- malformed and cut bytes -------------------------------------------------------------------------------------


def _malformed(data: bytes, how: str) -> bytes:
    if how == "header_cut":
        return data[:40]
    if how == "zeros_after_magic":
        return data[:16] + bytes(4000)
    return data[:16] + np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("how", ["header_cut", "zeros_after_magic", "noise_after_magic"])
@pytest.mark.parametrize(
    "name",
    ["wav_float_48k", "flac_44k", "ogg_vorbis_44k", "ogg_opus_48k", "mp3_44k"]
    + [
        "m4a_aac_44k",
        "webm_opus_48k",
    ],
)
def test_malformed_bytes_of_each_format_are_refused(name, how):
    fmt = CLIPS[name][0]
    with pytest.raises(MediaRefused, match="could not be decoded|holds no"):
        load(input_audio(_malformed(clip_bytes(name), how), fmt))


@pytest.mark.parametrize("name", ["flac_44k", "m4a_aac_44k"])
def test_a_clip_cut_inside_its_frames_or_index_is_refused(name):
    data = clip_bytes(name)  # FLAC: a frame cut in two; M4A: the sample index (written last) cut off
    with pytest.raises(MediaRefused, match="could not be decoded"):
        load(input_audio(data[: len(data) // 2 + 7], CLIPS[name][0]))


# --- duration: before decoding, or while decoding where no length is stated --------------------------------------


@pytest.mark.parametrize(
    "name", ["wav_pcm16_44k", "flac_44k", "ogg_vorbis_44k", "mp3_44k", "m4a_aac_44k", "webm_opus_48k"]
)
def test_a_clip_over_the_limit_is_refused(name):
    with pytest.raises(MediaRefused, match=r"over --max-audio-seconds \(0.25\)|longer than --max-audio-seconds"):
        load(input_audio(clip_bytes(name), CLIPS[name][0]), max_seconds=0.25)


def _flac_stating_length(data: bytes, frames: int) -> bytes:
    """FLAC bytes whose STREAMINFO states `frames` samples (0: unknown); its 36-bit count starts at byte 21's low
    nibble (after `fLaC`, the block header, 10 bytes of block and frame sizes, 20 bits of rate and 8 of layout)."""
    patched = bytearray(data)
    patched[21] = (patched[21] & 0xF0) | (frames >> 32 & 0xF)
    patched[22:26] = (frames & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(patched)


def test_a_tiny_file_stating_hours_is_refused_before_any_sample_is_read(monkeypatch):
    soundfile = pytest.importorskip("soundfile")
    reads = []
    real_read = soundfile.SoundFile.read
    monkeypatch.setattr(soundfile.SoundFile, "read", lambda self, *a, **k: reads.append(1) or real_read(self, *a, **k))
    ten_hours = _flac_stating_length(clip_bytes("flac_44k"), 10 * 3600 * 44_100)
    with pytest.raises(MediaRefused, match=r"lasts 36000.0 s, over --max-audio-seconds \(30\)"):
        load(input_audio(ten_hours, "flac"))
    assert reads == []


def test_a_stream_stating_no_length_stops_decoding_at_the_limit(monkeypatch):
    av = pytest.importorskip("av")
    # A minute of silence is 14 kB of FLAC; streamed, it states no length (libsndfile cannot read it: PyAV does)
    silence = np.zeros((8000 * 60, 1), dtype=np.int16)
    streamed = _flac_stating_length(soundfile_bytes("FLAC", "PCM_16", 8000, samples=silence), 0)
    decoded = []
    real_resampler = av.AudioResampler

    class CountingResampler:  # the decoder's frames, counted where the decoder hands them over
        def __init__(self, **kwargs):
            self.resampler = real_resampler(**kwargs)

        def resample(self, frame):
            decoded.append(frame.samples)
            return self.resampler.resample(frame)

    monkeypatch.setattr(av, "AudioResampler", CountingResampler)
    with pytest.raises(MediaRefused, match=r"longer than --max-audio-seconds \(2\)"):
        load(input_audio(streamed, "flac"), max_seconds=2)
    assert 2 * 8000 < sum(decoded) <= 2 * 8000 + max(decoded)  # one frame past the limit, of 60 s


def test_a_clip_sampled_over_192_khz_is_refused():
    data = soundfile_bytes("WAV", "PCM_16", 384_000, seconds=0.01)
    with pytest.raises(MediaRefused, match="sampled at 384000 Hz, over the 192000 Hz"):
        load(input_audio(data, "wav"))


# --- the media cache ---------------------------------------------------------------------------------------------


def test_a_resent_clip_is_decoded_and_resampled_once_per_model_rate():
    cache, part = MediaCache(2**24), input_audio(clip_bytes("mp3_44k"), "mp3")
    first, key = load_request_audio_cached(part, ServingPolicy(), RATE, cache, "alice")
    again, same_key = load_request_audio_cached(part, ServingPolicy(), RATE, cache, "alice")
    other_rate, other_key = load_request_audio_cached(part, ServingPolicy(), 24_000, cache, "alice")
    assert again is first and same_key == key and other_key != key
    assert len(other_rate) == 12_000 and (cache.stats.decodes, cache.stats.decode_hits) == (2, 1)
    with pytest.raises(MediaRefused, match="bytes are MP3, not the declared format 'wav'"):  # checked on a hit too
        load_request_audio_cached(input_audio(clip_bytes("mp3_44k"), "wav"), ServingPolicy(), RATE, cache, "alice")


# --- without the serving extra's libraries, and PyAV where soundfile is missing ----------------------------------


def test_without_the_audio_libraries_pcm_wav_works_and_the_rest_says_what_to_install(monkeypatch):
    wav_16k, wav_44k, flac = (clip_bytes(name) for name in ("wav_pcm16_16k", "wav_pcm16_44k", "flac_44k"))
    expected = load(input_audio(wav_16k, "wav"))
    for module in ("soundfile", "av", "soxr"):
        monkeypatch.setitem(sys.modules, module, None)  # `import` raises ImportError
    np.testing.assert_array_equal(load(input_audio(wav_16k, "wav")), expected)
    for data, fmt in [(wav_44k, "wav"), (flac, "flac"), (clip_bytes("wav_float_48k"), "wav")]:
        with pytest.raises(MediaRefused, match=INSTALL_HINT.replace("[", r"\[").replace("]", r"\]")):
            load(input_audio(data, fmt))


@pytest.mark.parametrize("name", ["flac_44k", "ogg_vorbis_44k", "mp3_44k"])
def test_pyav_reads_soundfiles_formats_where_soundfile_is_missing(monkeypatch, name):
    pytest.importorskip("av")
    fmt = CLIPS[name][0]
    with_soundfile = decode_audio(clip_bytes(name), ServingPolicy(), fmt)
    monkeypatch.setitem(sys.modules, "soundfile", None)
    with_pyav = decode_audio(clip_bytes(name), ServingPolicy(), fmt)
    assert with_pyav.sampling_rate == with_soundfile.sampling_rate
    if fmt == "flac":  # lossless: the same samples from both libraries
        np.testing.assert_array_equal(with_pyav.waveform, with_soundfile.waveform)
    else:
        assert correlation(with_pyav.waveform, with_soundfile.waveform) > 0.99
