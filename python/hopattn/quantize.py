"""hopattn.quantize_fp8: float8 e4m3 quantisation of NumPy arrays on the CPU backend
(hopattn_quantize_fp8 in include/hopattn/hopattn.h, which defines the rotation, the scales and
what NaN and infinity produce)."""

import ctypes
import reprlib

import numpy as np

from ._ctypes_api import (Backend, DType, Fp8Scaling, Status, Tensor, default_quantize_options,
                          has_quantize)
from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError, raise_on_error
from ._frontend import FIXED, NumpyFrontend, as_flag, as_int, type_name
from ._lib import library

_SCALINGS = {"tensor": Fp8Scaling.TENSOR, "head": Fp8Scaling.HEAD, "block": Fp8Scaling.BLOCK}


def quantize_fp8(x, scaling="block", block_rows=128, hadamard=True, seed=0):
    """Quantises x, a NumPy array (batch, seqlen, heads, head_dim) of float32, float16 or
    bfloat16 (ml_dtypes), to float8 e4m3.

    scaling: "tensor" (one scale), "head" (one per (batch, head)) or "block" (one per block_rows
    rows of each (batch, head)). hadamard: rotate each head_dim vector by H D / sqrt(head_dim)
    first (D = +-1 signs from seed; head_dim a power of two); q and k rotated with one seed keep
    q . k.

    Returns (codes, scales): codes, uint8 of x's shape, the e4m3 bit patterns; scales, float32 of
    shape () for "tensor", (batch, heads) for "head", (batch, heads, ceil(seqlen / block_rows))
    for "block". x's rotated values are approximately decode(codes) * scales of their block.
    """
    if not isinstance(x, np.ndarray):
        raise InvalidTypeError(f"x: expected a numpy.ndarray (torch tensors are not taken yet: "
                               f"pass a CPU tensor's .numpy()), got {type_name(x)}")
    if not isinstance(scaling, str) or scaling not in _SCALINGS:
        raise InvalidArgumentError(f"scaling is {reprlib.repr(scaling)}; allowed: "
                                   f"{', '.join(repr(s) for s in _SCALINGS)}")
    block_rows = as_int("block_rows", block_rows)
    hadamard = as_flag("hadamard", hadamard)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InvalidTypeError(f"seed: expected an int, got {type_name(seed)}")
    if not 0 <= int(seed) < 2 ** 64:
        raise InvalidArgumentError(f"seed is {seed}; it must be in [0, 2**64)")
    frontend = NumpyFrontend()
    array, x_tensor = frontend.input("x", x, FIXED)
    batch, seqlen, heads, head_dim = array.shape
    if scaling == "block" and block_rows <= 0:
        raise InvalidArgumentError(f"block_rows is {block_rows}; with scaling='block' it must be "
                                   "> 0 (rows per scale)")
    scales_shape = {"tensor": (), "head": (batch, heads),
                    "block": (batch, heads, -(-seqlen // max(block_rows, 1)))}[scaling]
    codes = np.empty(array.shape, dtype=np.uint8)
    scales = np.empty(scales_shape, dtype=np.float32)
    out_tensor = Tensor(codes.ctypes.data, DType.FLOAT8_E4M3, batch, seqlen, heads, head_dim,
                        seqlen * heads * head_dim, heads * head_dim, head_dim)
    lib = library()
    if not has_quantize(lib):
        raise HopattnError(Status.UNSUPPORTED, "the loaded libhopattn has no hopattn_quantize_fp8; rebuild it")
    options = default_quantize_options(lib)
    options.scaling = _SCALINGS[scaling]
    options.block_rows = block_rows
    options.hadamard = 1 if hadamard else 0
    options.seed = int(seed)
    options.backend = Backend.CPU
    raise_on_error(lib.hopattn_quantize_fp8(ctypes.byref(x_tensor), ctypes.byref(out_tensor),
                                            scales.ctypes.data, ctypes.byref(options)))
    return codes, scales
