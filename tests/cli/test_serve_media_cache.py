"""The server's media cache: re-sent images skip decoding and the image processor, and what the processor gets is
exactly what the image processor itself returns for those images in that request, for every layout family: fixed size
(LLaVA, Gemma3), any-res (LLaVA-Next), patch grid (Qwen2-VL), sub-images (Idefics3)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch
from PIL import Image

from vlmprep.serving.media import load_request_image_cached
from vlmprep.serving.media_cache import MediaCache
from vlmprep.serving.policy import ServingPolicy
from vlmprep.serving.processed_images import CachingImageProcessor, _equal
from vlmprep.utils._compat import serving_unsupported_message

# The chat handler and the engine's services extend the server of transformers 5.25
needs_served_transformers = pytest.mark.skipif(
    serving_unsupported_message() is not None, reason=str(serving_unsupported_message())
)


def _image(width: int, height: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, mode="RGB")


def _data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _image_processors():
    from transformers import (
        Gemma3ImageProcessor,
        Idefics3ImageProcessor,
        LlavaNextImageProcessor,
        Qwen2VLImageProcessor,
    )
    from transformers.models.clip import CLIPImageProcessor

    small = {"height": 32, "width": 32}
    return {
        "fixed_size_clip": (CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=small), False),
        "fixed_size_gemma3": (Gemma3ImageProcessor(size=small), False),
        "any_res": (
            LlavaNextImageProcessor(
                size={"shortest_edge": 32}, crop_size=small, image_grid_pinpoints=[[32, 64], [64, 64]]
            ),
            False,
        ),
        "patch_grid": (Qwen2VLImageProcessor(min_pixels=16 * 28 * 28, max_pixels=64 * 28 * 28), False),
        "sub_images": (
            Idefics3ImageProcessor(size={"longest_edge": 64}, max_image_size={"longest_edge": 32}),
            True,
        ),
    }


def _requests(policy, cache, urls_per_request):
    """Each request's images as the server reads them: decoded once per distinct bytes."""
    requests = []
    for urls in urls_per_request:
        loaded = [load_request_image_cached(url, policy, cache) for url in urls]
        requests.append(([image for image, _ in loaded], {id(image): key for image, key in loaded}))
    return requests


@pytest.mark.parametrize("layout", sorted(_image_processors()))
@pytest.mark.parametrize("return_tensors", ["pt", None])
def test_cached_image_processing_equals_the_image_processors_own(layout, return_tensors):
    image_processor, nested = _image_processors()[layout]
    first, second = _image(40, 30, 0), _image(70, 50, 1)  # two sizes: any-res and sub-images pad to the longer
    urls = {"first": _data_url(first), "second": _data_url(second)}
    policy, cache = ServingPolicy(), MediaCache(2**26)
    chat = [["first"], ["first", "second"], ["first", "second"], ["second", "first", "second"]]
    requests = _requests(policy, cache, [[urls[name] for name in names] for names in chat])
    for images, keys in requests:
        batch = [images] if nested else images
        cached = CachingImageProcessor(image_processor, cache, keys)(batch, return_tensors=return_tensors)
        own = image_processor(batch, return_tensors=return_tensors)
        assert _equal(dict(cached), dict(own)), layout
    stats = cache.stats
    assert (stats.decodes, stats.decode_hits) == (2, 6)  # each image decoded once
    # Each image processed alone once, plus the one-time check of the join (the second request's two images)
    assert stats.processed == 4 and stats.process_hits == 6, stats


def test_an_image_processor_whose_batch_is_no_join_of_its_items_is_not_cached():
    class BatchNormalizing:  # the batch's pixels depend on every image of the batch
        def to_json_string(self):
            return "{}"

        def __call__(self, images, return_tensors=None):
            pixels = torch.stack([torch.tensor(np.array(image), dtype=torch.float32) for image in images])
            return {"pixel_values": pixels / pixels.max()}

    policy, cache = ServingPolicy(), MediaCache(2**24)
    urls = [_data_url(_image(8, 8, 0)), _data_url(_image(8, 8, 1).point(lambda v: v // 2))]
    for images, keys in _requests(policy, cache, [urls, urls]):
        cached = CachingImageProcessor(BatchNormalizing(), cache, keys)(images)
        assert _equal(dict(cached), BatchNormalizing()(images))


def test_the_media_cache_stays_within_its_bytes():
    policy, cache = ServingPolicy(), MediaCache(3 * 32 * 32 * 3)
    urls = [_data_url(_image(32, 32, seed)) for seed in range(5)]
    for url in urls:
        load_request_image_cached(url, policy, cache)
    stats = cache.stats
    assert stats.bytes <= stats.max_bytes and stats.entries == 3 and stats.evictions == 2


@needs_served_transformers
def test_tenants_get_their_own_cache_partitions():
    from fastapi import HTTPException

    from vlmprep.serving.chat import VisionPrepChatCompletionHandler

    def salt(policy: ServingPolicy, body: dict):
        handler = VisionPrepChatCompletionHandler.__new__(VisionPrepChatCompletionHandler)
        handler.policy = policy
        return handler._tenant_salt(body)

    open_server, keyed = ServingPolicy(), ServingPolicy(api_key="secret")
    assert salt(open_server, {}) is None
    assert len({salt(open_server, {"cache_salt": "alice"}), salt(open_server, {"cache_salt": "bob"})}) == 2
    assert salt(keyed, {}) is not None and "secret" not in salt(keyed, {})
    assert salt(keyed, {"cache_salt": "alice"}) != salt(open_server, {"cache_salt": "alice"})
    for bad in (3, "", "x" * 257):
        with pytest.raises(HTTPException) as refusal:
            salt(open_server, {"cache_salt": bad})
        assert refusal.value.status_code == 400 and "cache_salt" in refusal.value.detail


def test_an_image_of_one_tenant_is_decoded_again_for_another():
    policy, cache = ServingPolicy(), MediaCache(2**24)
    url = _data_url(_image(8, 8, 0))
    for salt in ("alice", "alice", "bob", None, None):
        load_request_image_cached(url, policy, cache, salt)
    assert (cache.stats.decodes, cache.stats.decode_hits) == (3, 2)


@needs_served_transformers
def test_the_caches_follow_the_policy_the_media_cache_in_the_api_server_the_prefix_cache_in_the_engine():
    from vlmprep.serving.chat import VisionPrepChatCompletionHandler
    from vlmprep.serving.runners import EngineServices

    def handler(policy: ServingPolicy):
        return VisionPrepChatCompletionHandler(model_manager=None, generation_state=None, policy=policy)

    on, off = ServingPolicy(), ServingPolicy(prefix_cache=False, media_cache_bytes=0)
    assert handler(on).media_cache is not None and handler(off).media_cache is None
    assert EngineServices(on).prefix_cache.max_bytes == on.prefix_cache_bytes
    assert EngineServices(off).prefix_cache is None
    # Which generations take the prefix cache: tests/cli/test_serve_batching.py (the sequential runner)


def test_a_re_sent_data_url_is_hashed_as_text_not_decoded_again(monkeypatch):
    import vlmprep.serving.media as media

    decodes = []
    real_b64decode = media.base64.b64decode
    monkeypatch.setattr(media.base64, "b64decode", lambda payload: decodes.append(1) or real_b64decode(payload))
    policy, cache = ServingPolicy(), MediaCache(2**24)
    image = _image(12, 8, 3)
    url = _data_url(image)
    first, key = load_request_image_cached(url, policy, cache)
    again, same_key = load_request_image_cached(url, policy, cache)
    assert again is first and same_key == key and len(decodes) == 1
    # The image a hit returns is the one the bytes decode to
    assert np.array_equal(np.asarray(first), np.asarray(image))
    # A key of base64 text is never a key of raw bytes (the same bytes fetched by URL are another entry)
    from vlmprep.serving.media_cache import media_key

    payload = url.partition(",")[2].encode()
    assert media_key(payload, encoding="base64") != media_key(payload)
    assert media_key(base64.b64decode(payload)) != key


def test_a_re_sent_data_url_is_recognized_without_hashing_it_again(monkeypatch):
    import vlmprep.serving.media_cache as media_cache
    from vlmprep.serving.text_keys import TextKeyMemo

    hashed = []
    real_media_key = media_cache.media_key
    monkeypatch.setattr(media_cache, "media_key", lambda *a, **k: hashed.append(1) or real_media_key(*a, **k))
    policy, cache = ServingPolicy(), MediaCache(2**24)
    url, other = _data_url(_image(12, 8, 3)), _data_url(_image(12, 8, 4))
    first_key = load_request_image_cached(url, policy, cache)[1]
    # An equal text (another str object, as each request's JSON gives) gets the same key, unhashed; another image,
    # another tenant or another kind of media is hashed
    assert load_request_image_cached("".join(url), policy, cache)[1] == first_key and len(hashed) == 1
    assert load_request_image_cached(other, policy, cache)[1] != first_key and len(hashed) == 2
    assert load_request_image_cached(url, policy, cache, "alice")[1] != first_key and len(hashed) == 3
    assert cache.stats.texts_recognized == 1
    # Texts with one probe (same length and windows) are told apart by the whole comparison
    memo = TextKeyMemo(max_bytes=1000)
    left, right = "A" * 80 + "B" + "A" * 119, "A" * 80 + "C" + "A" * 119  # windows: [0, 64), [100, 164), [136, 200)
    assert memo.key(left, "n", lambda: "left") == "left" and memo.key(right, "n", lambda: "right") == "right"
    assert memo.key(left, "n", lambda: "?") == "left" and memo.key(right, "n", lambda: "?") == "right"
    # Bounded: the least recently used texts go; a text over the budget is never held
    for index in range(20):
        memo.key(f"{index:0100d}", "n", str)
    assert memo.bytes <= 1000 and memo.key("x" * 2000, "n", lambda: "big") == "big" and memo.bytes <= 1000


@pytest.mark.parametrize(
    ("payload", "message"),
    [("!!!!", "not a PNG"), ("a", "not valid base64"), ("é" * 8, "not valid base64"), ("A" * 200, "over")],
)
def test_a_bad_data_url_is_refused_with_the_cache_as_without_it_and_never_cached(payload, message):
    from vlmprep.serving.media import MediaRefused

    policy, cache = ServingPolicy(max_media_bytes=100), MediaCache(2**24)
    url = "data:image/png;base64," + payload
    for media_cache in (None, cache, cache):  # refused again: nothing was stored
        with pytest.raises(MediaRefused, match=message):
            load_request_image_cached(url, policy, media_cache)
    assert (cache.stats.entries, cache.stats.decode_hits) == (0, 0)
