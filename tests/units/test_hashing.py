import numpy as np
import pytest
import torch

from vlmprep.cache.hashing import hash_item_inputs


def _pixels(seed: int = 0, shape=(3, 16, 16), dtype=torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(dtype)


def test_hash_is_full_width_hex():
    digest = hash_item_inputs({"pixel_values": _pixels()})
    assert len(digest) == 64
    assert all(c in "0123456789abcdef" for c in digest)


def test_same_content_same_hash_across_objects():
    a, b = _pixels(), _pixels()
    assert a is not b
    assert hash_item_inputs({"pixel_values": a}) == hash_item_inputs({"pixel_values": b})
    assert hash_item_inputs({"pixel_values": a}) == hash_item_inputs({"pixel_values": a.to("cpu").clone()})


def test_non_contiguous_view_hashes_like_its_contiguous_copy():
    base = _pixels(shape=(16, 16, 3))
    view = base.permute(2, 0, 1)  # (3, 16, 16), non-contiguous
    assert not view.is_contiguous()
    assert hash_item_inputs({"pixel_values": view}) == hash_item_inputs({"pixel_values": view.contiguous()})
    sliced = _pixels(shape=(3, 16, 32))[..., ::2]
    assert hash_item_inputs({"pixel_values": sliced}) == hash_item_inputs({"pixel_values": sliced.clone()})


def test_requires_grad_does_not_matter():
    pixels = _pixels()
    assert hash_item_inputs({"pixel_values": pixels.clone().requires_grad_()}) == hash_item_inputs(
        {"pixel_values": pixels}
    )


def test_different_pixels_same_shape_differ():
    a = _pixels()
    b = a.clone()
    b[2, 15, 15] += 1.0  # one value in the last byte range
    assert hash_item_inputs({"pixel_values": a}) != hash_item_inputs({"pixel_values": b})


def test_same_bytes_different_dtype_or_shape_differ():
    a = torch.arange(48, dtype=torch.int32)
    assert hash_item_inputs({"pixel_values": a}) != hash_item_inputs({"pixel_values": a.view(torch.float32)})
    assert hash_item_inputs({"pixel_values": a}) != hash_item_inputs({"pixel_values": a.view(3, 16)})
    assert hash_item_inputs({"pixel_values": a.view(3, 16)}) != hash_item_inputs({"pixel_values": a.view(16, 3)})


def test_extras_change_the_hash():
    pixels = _pixels()
    base = hash_item_inputs({"pixel_values": pixels, "image_sizes": (16, 16)})
    assert base != hash_item_inputs({"pixel_values": pixels, "image_sizes": (16, 32)})
    assert base != hash_item_inputs({"pixel_values": pixels})
    assert base != hash_item_inputs({"pixel_values": pixels, "image_sizes": (16, 16), "image_grid_thw": None})
    grid = torch.tensor([[1, 4, 4]])
    assert hash_item_inputs({"pixel_values": pixels, "image_grid_thw": grid}) != hash_item_inputs(
        {"pixel_values": pixels, "image_grid_thw": grid * 2}
    )


def test_key_order_and_names():
    pixels = _pixels()
    assert hash_item_inputs({"pixel_values": pixels, "image_sizes": [16, 16]}) == hash_item_inputs(
        {"image_sizes": [16, 16], "pixel_values": pixels}
    )
    assert hash_item_inputs({"pixel_values": pixels}) != hash_item_inputs({"pixel_values_videos": pixels})
    # Field boundaries are unambiguous.
    assert hash_item_inputs({"a": "bc"}) != hash_item_inputs({"ab": "c"})
    assert hash_item_inputs({"a": [1, [2]]}) != hash_item_inputs({"a": [[1], 2]})


def test_scalars_are_typed():
    assert hash_item_inputs({"x": 1}) != hash_item_inputs({"x": True})
    assert hash_item_inputs({"x": 1}) != hash_item_inputs({"x": 1.0})
    assert hash_item_inputs({"x": 1}) != hash_item_inputs({"x": "1"})
    assert hash_item_inputs({"x": [1, 2]}) == hash_item_inputs({"x": (1, 2)})


def test_lists_of_tensors():
    tiles = [_pixels(0), _pixels(1)]
    assert hash_item_inputs({"pixel_values": tiles}) == hash_item_inputs({"pixel_values": [t.clone() for t in tiles]})
    assert hash_item_inputs({"pixel_values": tiles}) != hash_item_inputs({"pixel_values": tiles[::-1]})


def test_salt():
    inputs = {"pixel_values": _pixels()}
    unsalted = hash_item_inputs(inputs)
    a = hash_item_inputs(inputs, salt="tenant-a")
    assert a == hash_item_inputs(inputs, salt="tenant-a")
    assert len({unsalted, a, hash_item_inputs(inputs, salt="tenant-b"), hash_item_inputs(inputs, salt="")}) == 4


def test_bfloat16():
    pixels = _pixels(dtype=torch.bfloat16)
    digest = hash_item_inputs({"pixel_values": pixels})
    assert digest == hash_item_inputs({"pixel_values": pixels.clone()})
    assert digest != hash_item_inputs({"pixel_values": pixels.to(torch.float16)})
    changed = pixels.clone()
    changed[0, 0, 0] += 1
    assert digest != hash_item_inputs({"pixel_values": changed})


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float16, torch.complex64])
def test_other_dtypes(dtype):
    tensor = torch.ones(2, 3, dtype=dtype)
    assert hash_item_inputs({"x": tensor}) == hash_item_inputs({"x": tensor.clone()})


def test_numpy_arrays():
    array = _pixels().numpy()
    assert hash_item_inputs({"pixel_values": array}) == hash_item_inputs({"pixel_values": array.copy()})
    assert hash_item_inputs({"pixel_values": array}) == hash_item_inputs(
        {"pixel_values": array.astype(">f4")}  # same values, other byte order
    )
    assert hash_item_inputs({"pixel_values": array}) != hash_item_inputs({"pixel_values": array.astype(np.float64)})
    transposed = np.ascontiguousarray(array.transpose(1, 2, 0)).transpose(2, 0, 1)
    assert hash_item_inputs({"pixel_values": transposed}) == hash_item_inputs({"pixel_values": array})


def test_zero_dim_and_empty_tensors():
    assert hash_item_inputs({"x": torch.tensor(1.0)}) != hash_item_inputs({"x": torch.tensor([1.0])})
    assert hash_item_inputs({"x": torch.empty(0, 3)}) != hash_item_inputs({"x": torch.empty(3, 0)})


def test_unsupported_values_raise():
    with pytest.raises(TypeError):
        hash_item_inputs({"x": object()})
    with pytest.raises(TypeError):
        hash_item_inputs({"x": np.array([object()])})
    with pytest.raises(TypeError):
        hash_item_inputs([("pixel_values", _pixels())])


@pytest.mark.parametrize("salt", [123, b"tenant", 1.5, ("a",)])
def test_non_str_salt_raises_type_error(salt):
    with pytest.raises(TypeError, match="`salt` must be a str or None"):
        hash_item_inputs({"pixel_values": _pixels()}, salt=salt)


def test_salt_none_differs_from_the_string_none():
    pixels = _pixels()
    assert hash_item_inputs({"pixel_values": pixels}) != hash_item_inputs({"pixel_values": pixels}, salt="None")
