"""The memory layouts of e4m3 codes (hopattn_fp8_layout; core/fp8_layout.hpp holds the library's
definition): "rows", hopattn_tensor's contiguous (batch, seqlen, heads, head_dim), and
"v_transposed", the layout in which the SM90 FP8 kernel reads V without transposing it: a
contiguous (batch, heads, head_dim, pitch) buffer, pitch = seqlen rounded up to a multiple of 16,
the rows of each aligned group of 16 permuted (row 8 i + 2 c + j at position 4 c + 2 i + j) and
the pad rows (seqlen up to the pitch) holding zero codes. The library reads both through the logical
(batch, seqlen, heads, head_dim) Tensor that codes_tensor() gives.
"""

import reprlib

from ._ctypes_api import DType, Fp8Layout, Tensor
from ._errors import InvalidArgumentError

FP8_LAYOUTS = {"rows": Fp8Layout.ROWS, "v_transposed": Fp8Layout.V_TRANSPOSED}

# Rows per permuted group, and the multiple the pitch is rounded to (TMA's 16-byte stride).
_GROUP = 16


def as_fp8_layout(name, value) -> Fp8Layout:
    if not isinstance(value, str) or value not in FP8_LAYOUTS:
        raise InvalidArgumentError(f"{name} is {reprlib.repr(value)}; allowed: "
                                   f"{', '.join(repr(s) for s in FP8_LAYOUTS)}")
    return FP8_LAYOUTS[value]


def v_transposed_pitch(seqlen) -> int:
    """The distance between two head_dim columns of a "v_transposed" buffer."""
    return -(-seqlen // _GROUP) * _GROUP


def codes_shape(layout, batch, seqlen, heads, head_dim):
    """The shape of the buffer holding (batch, seqlen, heads, head_dim) codes in `layout`."""
    if layout == Fp8Layout.V_TRANSPOSED:
        return (batch, heads, head_dim, v_transposed_pitch(seqlen))
    return (batch, seqlen, heads, head_dim)


def codes_tensor(address, layout, batch, seqlen, heads, head_dim) -> Tensor:
    """The Tensor of a contiguous buffer of codes_shape(layout, ...) at `address`."""
    if layout == Fp8Layout.V_TRANSPOSED:
        head_stride = head_dim * v_transposed_pitch(seqlen)
        return Tensor(address, DType.FLOAT8_E4M3, batch, seqlen, heads, head_dim,
                      heads * head_stride, 1, head_stride)
    return Tensor(address, DType.FLOAT8_E4M3, batch, seqlen, heads, head_dim,
                  seqlen * heads * head_dim, heads * head_dim, head_dim)
