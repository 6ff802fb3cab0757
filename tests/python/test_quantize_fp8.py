"""hopattn.quantize_fp8 on NumPy arrays: the e4m3 codes equal bench/fp8_numerics.py's e4m3() cast
bit for bit (without the rotation, where both compute the same float32 quotient), the scales'
shapes and values per mode, the rotation against a float64 one with the same splitmix64 signs,
and the argument checks."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

import hopattn

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "fp8_numerics.py"


@pytest.fixture(scope="module")
def numerics():
    spec = importlib.util.spec_from_file_location("fp8_numerics", _BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decode(codes, numerics):
    value, _ = numerics.e4m3_table()
    return value[codes]


def splitmix64_signs(seed, n):
    """core/hadamard.hpp's hadamard_sign, in Python integers."""
    mask = 2 ** 64 - 1
    signs = []
    for i in range(n):
        z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        signs.append(-1.0 if z >> 63 else 1.0)
    return np.array(signs)


def sample(shape=(2, 200, 3, 32), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 3, -1, 5] = 40.0  # an outlier
    return x


@pytest.mark.parametrize("scaling", ["tensor", "head", "block"])
def test_codes_match_the_emulation_without_rotation(numerics, scaling):
    x = sample()
    codes, scales = hopattn.quantize_fp8(x, scaling=scaling, block_rows=64, hadamard=False)
    assert codes.dtype == np.uint8 and codes.shape == x.shape
    amax = np.abs(x).max(-1)  # (batch, seqlen, heads)
    if scaling == "tensor":
        assert scales.shape == ()
        expected = np.float32(amax.max() / np.float32(448))
        per_row = np.full(amax.shape, expected, np.float32)
    elif scaling == "head":
        assert scales.shape == (2, 3)
        expected = (amax.max(1) / np.float32(448)).astype(np.float32)
        per_row = np.repeat(expected[:, None, :], 200, 1)
    else:
        assert scales.shape == (2, 3, 4)  # ceil(200 / 64)
        blocks = np.maximum.reduceat(amax, [0, 64, 128, 192], axis=1)  # (batch, 4, heads)
        expected = (blocks / np.float32(448)).astype(np.float32).transpose(0, 2, 1)
        per_row = np.repeat(blocks.transpose(0, 2, 1), [64, 64, 64, 8], 2).transpose(0, 2, 1)
        per_row = (per_row / np.float32(448)).astype(np.float32)
    np.testing.assert_array_equal(scales, expected)
    values = numerics.e4m3(x * (np.float32(1) / per_row[..., None]))  # float32, as the library's
    np.testing.assert_array_equal(decode(codes, numerics), values)


def test_rotation_is_h_times_d_with_splitmix64_signs(numerics):
    x = sample(seed=1)
    codes, scales = hopattn.quantize_fp8(x, scaling="head", seed=12345)
    signs = splitmix64_signs(12345, 32)
    rotated = numerics.rotate(x.astype(np.float64), signs)  # H (D x) / sqrt(d)
    dequantised = decode(codes, numerics) * scales[:, None, :, None]
    # e4m3 keeps 4 significant bits: half an ulp is 2^-4 relative (plus the subnormal floor),
    # and the float32 rotation differs from the float64 one by far less than an ulp's margin.
    bound = np.maximum(np.abs(rotated) * 2.0 ** -4, scales[:, None, :, None] * 2.0 ** -10)
    assert np.all(np.abs(dequantised - rotated) <= bound * 1.001 + 1e-6)
    # The outlier of 40 is spread over all 32 entries of its vector.
    assert np.abs(rotated[0, 3, -1]).max() < 40 / math.sqrt(32) * 3


def test_rotation_keeps_q_dot_k(numerics):
    q, k = sample(seed=2), sample(seed=3)
    q_codes, q_scales = hopattn.quantize_fp8(q, scaling="tensor", seed=9)
    k_codes, k_scales = hopattn.quantize_fp8(k, scaling="tensor", seed=9)
    q8 = decode(q_codes, numerics) * q_scales
    k8 = decode(k_codes, numerics) * k_scales
    exact = np.einsum("bshd,bthd->bhst", q.astype(np.float64), k.astype(np.float64))
    quantised = np.einsum("bshd,bthd->bhst", q8, k8)
    norms = np.linalg.norm(q, axis=-1).transpose(0, 2, 1)[..., None] * \
        np.linalg.norm(k, axis=-1).transpose(0, 2, 1)[..., None, :]
    assert np.all(np.abs(quantised - exact) <= 2 * 2.0 ** -4 * norms + 1e-6)


def test_float16_strided_input_and_zero_and_nan_blocks(numerics):
    base = sample(shape=(1, 130, 2, 16)).astype(np.float16)
    x = base.copy()
    x[0, :128, 0] = 0
    x[0, 129, 1, 2] = np.nan
    codes, scales = hopattn.quantize_fp8(x, block_rows=128)
    assert scales.shape == (1, 2, 2)
    assert scales[0, 0, 0] == 1.0 and np.all(decode(codes[0, :128, 0], numerics) == 0)
    assert np.isnan(scales[0, 1, 1]) and np.all(codes[0, 128:, 1] == 0x7F)
    assert np.all(np.isfinite(scales[0, :, 0])) and np.isfinite(scales[0, 0, 1])
    view = np.concatenate([base, base], axis=1)[:, ::2]  # seq stride 2 rows, no copy
    codes_view, scales_view = hopattn.quantize_fp8(view, scaling="head", hadamard=False)
    codes_copy, scales_copy = hopattn.quantize_fp8(np.ascontiguousarray(view), scaling="head",
                                                   hadamard=False)
    np.testing.assert_array_equal(codes_view, codes_copy)
    np.testing.assert_array_equal(scales_view, scales_copy)


def test_arguments_are_checked():
    x = sample(shape=(1, 8, 1, 16))
    with pytest.raises(hopattn.InvalidTypeError, match="x: expected a numpy.ndarray"):
        hopattn.quantize_fp8(x.tolist())
    with pytest.raises(hopattn.InvalidArgumentError, match="scaling is 'row'"):
        hopattn.quantize_fp8(x, scaling="row")
    with pytest.raises(hopattn.InvalidArgumentError, match="block_rows is 0"):
        hopattn.quantize_fp8(x, block_rows=0)
    with pytest.raises(hopattn.InvalidTypeError, match="hadamard must be a bool"):
        hopattn.quantize_fp8(x, hadamard=1)
    with pytest.raises(hopattn.InvalidArgumentError, match="seed is -1"):
        hopattn.quantize_fp8(x, seed=-1)
    with pytest.raises(hopattn.InvalidTypeError, match="dtype float64 is not supported"):
        hopattn.quantize_fp8(x.astype(np.float64))
    with pytest.raises(hopattn.InvalidArgumentError,
                       match="x.head_dim is 12 but options->hadamard is set"):
        hopattn.quantize_fp8(np.zeros((1, 8, 1, 12), np.float32))
    codes, _ = hopattn.quantize_fp8(np.zeros((1, 8, 1, 12), np.float32), hadamard=False)
    assert np.all(codes == 0)
    hopattn.quantize_fp8(x, seed=2 ** 64 - 1)
