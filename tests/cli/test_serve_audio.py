"""Audio clips through `vlmprep serve`: OpenAI `input_audio` parts (base64, in any of `AUDIO_FORMATS`) decoded under
the server's policy.

- The decoder, in process: 8/16/24/32-bit PCM WAV and stereo scaled and averaged as soundfile reads them (the expected
  samples are computed here from the integers written, not by the decoder); every malformed, oversized or over-long
  clip, or one whose bytes are not its declared format, refused with a short message, never read from a file or URL
  the policy does not allow. (Each format's decoding in detail: tests/units/test_request_audio_formats.py.)
- A loopback server on a tiny Gemma 4 checkpoint (images and audio), in each server mode (sequential and
  `--continuous-batching`): an audio request, an image + audio request, and one request per audio format (WAV, MP3,
  FLAC, Ogg, M4A, WebM at 44.1 or 48 kHz, resampled to the model's 16 kHz) answer as the plain transformers class
  answers the same conversation, given the waveform transformers itself decodes from the same bytes; a re-sent clip is
  decoded and encoded once; bad audio, and malformed bytes of each format, are an HTTP 400, never a 500, and the
  server goes on answering.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import sys
import time
import warnings
import wave
from pathlib import Path

import numpy as np
import pytest
import transformers
from PIL import Image
from serve_client import (
    MAX_NEW_TOKENS,
    QUESTION,
    data_url,
    greedy_reply,
    launched_server,
    needs_serving,
    post_chat,
    server_env,
    stop_gracefully,
    time_left,
    wait_until_healthy,
)
from transformers.audio_utils import load_audio

from vlmprep.serving import SERVE_STATS_ENV
from vlmprep.serving.audio import AUDIO_FORMATS, decode_wav, load_request_audio_cached
from vlmprep.serving.media import MediaRefused
from vlmprep.serving.media_cache import MediaCache
from vlmprep.serving.policy import ServingPolicy
from vlmprep.testing.audio_clips import CLIP_OF_FORMAT, AudioEncoderMissing, clip_bytes
from vlmprep.testing.configs.serve import TinyGemma4Processor, build_gemma4_audio_checkpoint, register_tiny_processors

RATE = 16_000
# From the server's health to its last answer (its start has `serve_client.START_TIMEOUT_S`).
SERVER_DEADLINE_S = 120


def _wav(samples: np.ndarray, width: int = 2, rate: int = RATE, channels: int = 1) -> bytes:
    """A PCM WAV file of `samples` (integers of `width` bytes; interleaved when `channels` > 1)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        if width == 3:
            as_bytes = samples.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
        else:
            as_bytes = samples.astype({1: np.uint8, 2: "<i2", 4: "<i4"}[width]).tobytes()
        writer.writeframes(as_bytes)
    return buffer.getvalue()


def _tone(kind: str, seconds: float = 0.5) -> np.ndarray:
    """int16 samples of a 440 Hz tone or a rising chirp (clips the tiny model tells apart)."""
    times = np.arange(int(RATE * seconds)) / RATE
    phase = 2 * np.pi * 440 * times if kind == "tone" else 2 * np.pi * (200 + 3000 * times) * times
    return np.round(16000 * np.sin(phase)).astype(np.int16)


def _part(data: bytes, fmt: str | None = "wav") -> dict:
    audio = {"data": base64.b64encode(data).decode()}
    return {"type": "input_audio", "input_audio": audio if fmt is None else {**audio, "format": fmt}}


# --- the decoder, in process -------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_pcm_samples_are_scaled_as_soundfile_reads_them(width):
    bits = 8 * width
    generator = np.random.default_rng(width)
    values = generator.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), 64, dtype=np.int64)
    stored = values + 128 if width == 1 else values  # 8-bit WAV is unsigned
    clip = decode_wav(_wav(stored, width), ServingPolicy())
    assert clip.sampling_rate == RATE and clip.waveform.dtype == np.float32
    np.testing.assert_array_equal(clip.waveform, (values / 2 ** (bits - 1)).astype(np.float32))


def test_stereo_is_averaged_to_mono():
    left, right = np.arange(0, 3200, 100, dtype=np.int16), -np.arange(0, 1600, 50, dtype=np.int16)
    interleaved = np.stack([left, right], axis=1).reshape(-1)
    clip = decode_wav(_wav(interleaved, channels=2), ServingPolicy())
    expected = (np.stack([left, right]).astype(np.float32) / 32768).mean(axis=0)
    np.testing.assert_array_equal(clip.waveform, expected)


@pytest.mark.parametrize(
    "part, message",
    [
        (_part(_wav(_tone("tone")), "mp3"), "bytes are WAV, not the declared format 'mp3'"),
        (_part(b"ID3\x03 not a wav at all", None), "the MP3 clip could not be decoded"),  # an ID3 tag: taken as MP3
        (_part(b"RIFF\x10\0\0\0WAVEfmt \x02\0\0\0\x01\0"), "could not be decoded"),
        (_part(_wav(np.zeros(0, dtype=np.int16))), "holds no samples"),
        (_part(_wav(_tone("tone", seconds=2.5))), "lasts 2.5 s, over --max-audio-seconds (2)"),
        (_part(_wav(_tone("tone"))[:30]), "could not be decoded"),  # cut inside its header
        ({"type": "input_audio", "input_audio": {"data": "not base64!", "format": "wav"}}, "not valid base64"),
        ({"type": "audio_url", "audio_url": {"url": "/etc/passwd"}}, "local files are read only under"),
        ({"type": "audio_url", "audio_url": {"url": "http://127.0.0.1/a.wav"}}, "--allowed-media-domains"),
    ],
)
def test_bad_audio_is_refused_with_what_is_wrong(part, message):
    policy = ServingPolicy(max_audio_seconds=2)
    with pytest.raises(MediaRefused) as refusal:
        load_request_audio_cached(part, policy, RATE)
    assert message in str(refusal.value)


def test_a_clip_over_the_byte_limit_is_refused_before_it_is_decoded():
    part = _part(_wav(_tone("tone", seconds=1.0)))  # 32 kB of samples
    with pytest.raises(MediaRefused, match="over --max-media-bytes"):
        load_request_audio_cached(part, ServingPolicy(max_media_bytes=10_000), RATE)


def test_a_resent_clip_is_decoded_once_and_never_taken_for_an_image():
    cache, data = MediaCache(2**20), _wav(_tone("chirp"))
    first, key = load_request_audio_cached(_part(data), ServingPolicy(), RATE, cache, "alice")
    again, same_key = load_request_audio_cached(_part(data), ServingPolicy(), RATE, cache, "alice")
    assert again is first and same_key == key
    assert (cache.stats.decodes, cache.stats.decode_hits) == (1, 1)
    from vlmprep.serving.media_cache import media_key

    assert media_key(data, "alice") != key  # the same bytes sent as an image are another entry


# --- a loopback server -------------------------------------------------------------------------------------------

SOUND_QUESTION = "What is this sound?"


def _format_clips() -> dict[str, bytes]:
    """One clip of each audio format (`vlmprep.testing.audio_clips`' chirp at 44.1 or 48 kHz, stereo); a format whose
    encoder this machine's libsndfile or FFmpeg lacks is left out."""
    clips = {}
    for fmt in AUDIO_FORMATS:
        try:
            clips[fmt] = clip_bytes(CLIP_OF_FORMAT[fmt])
        except AudioEncoderMissing:
            continue
    return clips


def _conversations(image: Image.Image, clips: dict[str, bytes], format_clips: dict[str, bytes]) -> dict[str, list]:
    # name -> the user's content as (kind, value) items, rendered for the server or for the reference; an audio item's
    # value is (its declared format, its bytes)
    conversations = {
        "audio": [("audio", ("wav", clips["tone"])), ("text", SOUND_QUESTION)],
        "image_and_audio": [("image", image), ("audio", ("wav", clips["chirp"])), ("text", QUESTION)],
        "audio_8khz": [("audio", ("wav", clips["tone_8khz"])), ("text", SOUND_QUESTION)],
    }
    for fmt, data in format_clips.items():
        conversations[f"format_{fmt}"] = [("audio", (fmt, data)), ("text", SOUND_QUESTION)]
    return conversations


def _transformers_waveform(fmt: str, data: bytes) -> np.ndarray:
    """The float32 mono waveform at the model's rate that transformers makes of a clip's bytes."""
    if fmt in ("wav", "mp3", "flac", "ogg"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # libsndfile's MP3 reader warns through stderr only
            return load_audio(base64.b64encode(data).decode(), sampling_rate=RATE, backend="soundfile")
    # transformers' soundfile backend cannot read M4A or WebM (its torchcodec backend can, but resamples with FFmpeg,
    # not with soxr as the soundfile backend and the server do): an independent reference instead, decoded with PyAV
    # (FFmpeg probing the container itself, where the server names its demuxer), the channels averaged and the rate
    # converted as `load_audio`'s soundfile backend does (soxr_hq, padded or cut to `ceil(samples * rate / source)`)
    import av
    import soxr

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        to_planar_float = av.AudioResampler(format="fltp")  # decoders may hand integer or interleaved samples
        frames = [*container.decode(stream)]
        planes = [planar.to_ndarray() for frame in [*frames, None] for planar in to_planar_float.resample(frame)]
    samples = np.concatenate(planes, axis=1)  # (channels, frames)
    waveform, source_rate = samples.mean(axis=0), frames[0].sample_rate
    length = math.ceil(len(waveform) * RATE / source_rate)
    waveform = soxr.resample(waveform, source_rate, RATE, quality="soxr_hq")
    return np.pad(waveform, (0, max(0, length - len(waveform))))[:length].astype(np.float32)


def _reference_answer(model, processor, items) -> str:
    """The plain class's greedy answer to one user turn, as transformers serve would return it."""
    from transformers.cli.serving.utils import parse_assistant_message

    content = []
    for kind, value in items:
        if kind == "audio":
            waveform = _transformers_waveform(*value) if isinstance(value, tuple) else value
            content.append({"type": "audio", "audio": waveform})
        else:
            content.append({"type": kind, kind: value})
    prompt_ids, generated = greedy_reply(model, processor, [{"role": "user", "content": content}])
    decoded = processor.decode(generated, skip_special_tokens=True)
    # transformers serve then parses the answer with the family's response template (Gemma 4 has one)
    content, _, _ = parse_assistant_message(processor, model.config, generated, prompt_ids, cleaned_content=decoded)
    return content


def _server_content(items) -> list[dict]:
    content = []
    for kind, value in items:
        if kind == "audio":
            fmt, data = value
            content.append(_part(data, fmt))
        elif kind == "image":
            content.append({"type": "image_url", "image_url": {"url": data_url(value)}})
        else:
            content.append({"type": "text", "text": value})
    return content


def _malformed_parts(format_clips: dict[str, bytes]) -> dict[str, dict]:
    """Malformed bytes of each format, declared as that format: cut inside its header, noise after its first bytes
    (reaching its decoder), and random bytes (refused before any decoder sees them)."""
    generator = np.random.default_rng(0)
    parts = {}
    for fmt, data in format_clips.items():
        parts[f"{fmt} cut inside its header"] = _part(data[:40], fmt)
        parts[f"{fmt} noise after its first bytes"] = _part(data[:16] + generator.bytes(4000), fmt)
        parts[f"random bytes declared {fmt}"] = _part(generator.bytes(len(data)), fmt)
    return parts


_AUDIO_CHECKPOINTS: dict = {}
_AUDIO_CHATS: dict = {}


def audio_checkpoint(tmp_path_factory, global_head_dim: int = 32) -> Path:
    """A tiny Gemma 4 checkpoint with audio, built once per head dimension of its full-attention layer."""
    if global_head_dim not in _AUDIO_CHECKPOINTS:
        register_tiny_processors()
        directory = tmp_path_factory.mktemp("gemma4_audio") / "checkpoint"
        _AUDIO_CHECKPOINTS[global_head_dim] = build_gemma4_audio_checkpoint(directory, global_head_dim=global_head_dim)
    return _AUDIO_CHECKPOINTS[global_head_dim]


def audio_chat(tmp_path_factory, global_head_dim: int = 32):
    """The test's conversations on `audio_checkpoint`, the plain transformers class's answers to them, and the clips
    of each format covered."""
    if global_head_dim in _AUDIO_CHATS:
        return _AUDIO_CHATS[global_head_dim]
    register_tiny_processors()
    checkpoint = audio_checkpoint(tmp_path_factory, global_head_dim)
    processor = transformers.AutoProcessor.from_pretrained(checkpoint)
    assert isinstance(processor, TinyGemma4Processor)
    model = transformers.Gemma4ForConditionalGeneration.from_pretrained(checkpoint).eval()
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8), mode="RGB")
    clips = {kind: _wav(_tone(kind)) for kind in ("tone", "chirp")}
    clips["tone_8khz"] = _wav(_tone("tone")[::2], rate=8000)  # the same tone, resampled by the server
    format_clips = _format_clips()
    conversations = _conversations(image, clips, format_clips)
    expected = {name: _reference_answer(model, processor, items) for name, items in conversations.items()}
    # The tiny model must be able to fail: another clip, another answer; and a clip's samples not resampled to the
    # model's rate (the 44.1 kHz WAV's, as read at its own rate) another answer than the same clip resampled
    swapped = [("audio", ("wav", clips["chirp"])), *conversations["audio"][1:]]
    assert _reference_answer(model, processor, swapped) != expected["audio"]
    if "wav" in format_clips:
        samples = load_audio(base64.b64encode(format_clips["wav"]).decode(), sampling_rate=44_100, backend="soundfile")
        unresampled = [("audio", samples), *conversations["format_wav"][1:]]
        assert _reference_answer(model, processor, unresampled) != expected["format_wav"]
    _AUDIO_CHATS[global_head_dim] = (conversations, expected, format_clips)
    return _AUDIO_CHATS[global_head_dim]


@needs_serving
# The engine's audio requests are checked in process (tests/batching/test_audio_requests.py); through a second server
# (~30 s on this machine) they run with `make test-slow`
@pytest.mark.parametrize("mode", ["sequential", pytest.param("continuous_batching", marks=pytest.mark.slow)])
def test_audio_requests_answer_as_the_plain_class_and_bad_audio_is_a_400(tmp_path, tmp_path_factory, mode):
    sequential = mode == "sequential"
    # A real Gemma 4's full-attention layers have their own head dimension, which transformers' paged cache cannot
    # hold (the engine refuses it: tests/batching/test_audio_requests.py); the engine's server gets one head dimension
    global_head_dim = 32 if sequential else 16
    checkpoint = audio_checkpoint(tmp_path_factory, global_head_dim)
    stats_path, log = tmp_path / "stats.json", tmp_path / "server.log"
    env = server_env(**{SERVE_STATS_ENV: str(stats_path)})
    # The tiny checkpoint's processor class is registered by this module's entry point, which then runs `vlmprep serve`
    command = [sys.executable, "-m", "vlmprep.testing.configs.serve", str(checkpoint), "--host", "127.0.0.1"]
    command += ["--device", "cpu", "--max-audio-seconds", "2"]
    command += [] if sequential else ["--continuous-batching"]

    with launched_server(command, env, log) as server:
        # The references are computed while the server starts (it spends that time importing).
        conversations, expected, format_clips = audio_chat(tmp_path_factory, global_head_dim)
        url = f"{server.base_url}/v1/chat/completions"

        def chat(name: str, deadline: float) -> None:
            messages = [{"role": "user", "content": _server_content(conversations[name])}]
            payload = {"messages": messages, "temperature": 0, "max_tokens": MAX_NEW_TOKENS}
            assert post_chat(url, payload, deadline) == (200, expected[name]), (name, log.read_text())

        server.wait_until_healthy()
        deadline = time.monotonic() + SERVER_DEADLINE_S
        # The first clip again: decoded once; then the same chirp in each format, resampled from 44.1 or 48 kHz
        for name in ("audio", "image_and_audio", "audio", *(f"format_{fmt}" for fmt in format_clips)):
            chat(name, deadline)
        bad_parts = {
            "mp3": _part(b"\xff\xfb\x90\x00" * 10, "mp3"),
            "garbage": _part(os.urandom(64)),
            "too long": _part(_wav(_tone("tone", seconds=2.5))),
            "no data": {"type": "input_audio", "input_audio": {"format": "wav"}},
            "audio_url string": {"type": "audio_url", "audio_url": "data:audio/wav;base64,UklGRg=="},
            **_malformed_parts(format_clips),
        }
        for reason, part in bad_parts.items():
            messages = [{"role": "user", "content": [part, {"type": "text", "text": "Hear this."}]}]
            status, body = post_chat(url, {"messages": messages, "max_tokens": 2}, deadline)
            assert status == 400 and "audio" in body, (reason, status, body, log.read_text())
        # The server is still up and answers: its health, and a clip it has not decoded before (8 kHz, resampled)
        assert server.process.poll() is None, log.read_text()
        wait_until_healthy(server.base_url, server.process, log, deadline)
        chat("audio_8khz", deadline)
        stop_gracefully(server.process, min(15, time_left(deadline)))
    assert server.process.returncode == 0, log.read_text()
    (stats,) = json.loads(stats_path.read_text()).values()
    # Each distinct item decoded once (the two clips, the image, one clip per format and the 8 kHz clip; a refused clip
    # is no decode), the re-sent clip taken from the media cache, and encoded once: the repeated request's clip is in
    # the prefix cache (sequential), or its features in the encoder cache (the engine shares no page of Gemma 4, whose
    # sliding layers transformers' paged cache does not share)
    distinct = 3 + len(format_clips) + 1
    assert (stats["media_cache"]["decodes"], stats["media_cache"]["decode_hits"]) == (distinct, 1), stats
    assert stats["encoder_cache"]["misses"] == distinct, stats
    assert stats["prefix_cache"]["hits"] >= 1 if sequential else stats["encoder_cache"]["hits"] >= 1, stats


@needs_serving
@pytest.mark.parametrize(
    "modality, feature_extractor",
    [("VLM", True), ("MULTIMODAL", False)],
    ids=["image_text_model", "no_feature_extractor"],
)
def test_audio_for_a_model_without_audio_is_a_400(modality, feature_extractor):
    from types import SimpleNamespace

    from fastapi import HTTPException
    from transformers.cli.serving.utils import Modality

    from vlmprep.serving.chat import VisionPrepChatCompletionHandler

    handler = SimpleNamespace(policy=ServingPolicy(), media_cache=None)
    processor = SimpleNamespace(feature_extractor=SimpleNamespace(sampling_rate=RATE) if feature_extractor else None)
    messages = [{"role": "user", "content": [_part(_wav(_tone("tone")))]}]
    with pytest.raises(HTTPException) as refusal:
        VisionPrepChatCompletionHandler._request_audio(handler, messages, processor, Modality[modality], None)
    assert refusal.value.status_code == 400 and "the model takes no audio" in refusal.value.detail


def test_a_resent_clip_is_hashed_as_base64_text_not_decoded_again(monkeypatch):
    import vlmprep.serving.media as media

    decodes = []
    real_b64decode = media.base64.b64decode
    monkeypatch.setattr(media.base64, "b64decode", lambda payload: decodes.append(1) or real_b64decode(payload))
    cache, data = MediaCache(2**20), _wav(_tone("chirp"))
    data_url = {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64," + base64.b64encode(data).decode()}}
    for part in (_part(data), _part(data), data_url, data_url):
        load_request_audio_cached(part, ServingPolicy(), RATE, cache, "alice")
    # the same text (an input_audio part's data, a data URL's payload) is one entry, decoded once
    assert len(decodes) == 1 and (cache.stats.decodes, cache.stats.decode_hits) == (1, 3)
    with pytest.raises(MediaRefused, match="bytes are WAV, not the declared format 'mp3'"):  # checked on a hit too
        load_request_audio_cached(
            {"type": "input_audio", "input_audio": {"data": _part(data)["input_audio"]["data"], "format": "mp3"}},
            ServingPolicy(),
            RATE,
            cache,
            "alice",
        )
