"""hopattn.quantize_fp8: float8 e4m3 quantisation of NumPy arrays and PyTorch tensors
(hopattn_quantize_fp8 in include/hopattn/hopattn.h, which defines the rotation, the scales and
what NaN and infinity produce)."""

import ctypes
import reprlib

import numpy as np

from ._ctypes_api import Fp8Layout, Fp8Scaling, Status, has_quantize
from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError, raise_on_error
from ._fp8_layout import as_fp8_layout, codes_shape, codes_tensor
from ._frontend import FIXED, as_flag, as_int, frontend_for, type_name
from ._lib import library

SCALINGS = {"tensor": Fp8Scaling.TENSOR, "head": Fp8Scaling.HEAD, "block": Fp8Scaling.BLOCK}


def quantize_fp8(x, scaling="block", block_rows=128, hadamard=True, seed=0, layout="rows"):
    """Quantises x, (batch, seqlen, heads, head_dim) float32, float16 or bfloat16, to float8 e4m3:
    a NumPy array (bfloat16 from ml_dtypes) or a CPU tensor on the CPU backend, a CUDA tensor on
    the Hopper backend on torch.cuda.current_stream() (the same codes and scales bit for bit).

    scaling: "tensor" (one scale), "head" (one per (batch, head)) or "block" (one per block_rows
    rows of each (batch, head)). hadamard: rotate each head_dim vector by H D / sqrt(head_dim)
    first (D = +-1 signs from seed; head_dim a power of two); q and k rotated with one seed keep
    q . k.

    layout: "rows" (the default), codes of x's shape; or "v_transposed", for a V that
    hopattn.forward_fp8 then reads with v_layout="v_transposed" (the SM90 kernel's faster V;
    hadamard must be False): codes of shape (batch, heads, head_dim, pitch), pitch = seqlen rounded
    up to a multiple of 16, each aligned group of 16 rows permuted (row 8 i + 2 c + j at position
    4 c + 2 i + j, as include/hopattn/hopattn.h defines hopattn_fp8_layout), the pad rows (seqlen
    up to the pitch) zero codes.

    Returns (codes, scales): codes, contiguous, the e4m3 values (NumPy: uint8 bit patterns;
    torch: torch.float8_e4m3fn on x's device); scales, float32 on x's device, of shape () for
    "tensor", (batch, heads) for "head", (batch, heads, ceil(seqlen / block_rows)) for "block".
    x's rotated values are approximately codes * scales of their block. Not differentiable.
    """
    if not isinstance(scaling, str) or scaling not in SCALINGS:
        raise InvalidArgumentError(f"scaling is {reprlib.repr(scaling)}; allowed: "
                                   f"{', '.join(repr(s) for s in SCALINGS)}")
    block_rows = as_int("block_rows", block_rows)
    if scaling == "block" and block_rows <= 0:
        raise InvalidArgumentError(f"block_rows is {block_rows}; with scaling='block' it must be "
                                   "> 0 (rows per scale)")
    hadamard = as_flag("hadamard", hadamard)
    seed = as_seed(seed)
    layout = as_fp8_layout("layout", layout)
    if hadamard and layout == Fp8Layout.V_TRANSPOSED:
        raise InvalidArgumentError("hadamard is True, but layout='v_transposed' needs "
                                   "hadamard=False: it is V's layout, and V is not rotated")
    return quantize(frontend_for(x, "x"), "x", x, scaling, block_rows, hadamard, seed, layout)[:2]


def as_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InvalidTypeError(f"seed: expected an int, got {type_name(seed)}")
    if not 0 <= int(seed) < 2 ** 64:
        raise InvalidArgumentError(f"seed is {seed}; it must be in [0, 2**64)")
    return int(seed)


def scales_shape(scaling, batch, seqlen, heads, block_rows):
    """The shape of the scales hopattn_quantize_fp8 writes for a (batch, seqlen, heads, d) x."""
    if scaling == "tensor":
        return ()
    if scaling == "head":
        return (batch, heads)
    return (batch, heads, (seqlen - 1) // block_rows + 1)


def quantize(fe, name, x, scaling, block_rows, hadamard, seed, layout):
    """(codes, scales, the codes' Tensor) of hopattn_quantize_fp8 on the frontend's x, named `name`
    in messages; arguments as checked by quantize_fp8()."""
    lib = library()
    if not has_quantize(lib):
        raise HopattnError(Status.UNSUPPORTED,
                           "the loaded libhopattn has no hopattn_quantize_fp8; rebuild it")
    array, x_tensor = fe.input(name, x, FIXED)
    batch, seqlen, heads, head_dim = x_tensor.batch, x_tensor.seqlen, x_tensor.heads, \
        x_tensor.head_dim
    codes = fe.empty_codes(codes_shape(layout, batch, seqlen, heads, head_dim))
    scales = fe.empty_float32(scales_shape(scaling, batch, seqlen, heads, block_rows))
    out_tensor = codes_tensor(fe.address(codes), layout, batch, seqlen, heads, head_dim)
    with fe.quantize_options() as options:
        options.scaling = SCALINGS[scaling]
        options.block_rows = block_rows
        options.hadamard = 1 if hadamard else 0
        options.seed = seed
        options.layout = layout
        status = lib.hopattn_quantize_fp8(ctypes.byref(x_tensor), ctypes.byref(out_tensor),
                                          fe.address(scales), ctypes.byref(options))
    raise_on_error(status)
    return codes, scales, out_tensor
