"""hopattn.forward_fp8 (attention on e4m3 codes and their scales, hopattn_forward_fp8) and
hopattn.attention_fp8 (quantise 16-bit q, k, v, then attend), for NumPy arrays and PyTorch tensors.

As the other front ends, these describe memory to the library and check what only Python can see:
argument types, dtypes by their Python names, and the shape of each scales array against the
layout it is said (or seen) to have, which the library cannot see and needs so that it reads no
scale past the array's end. Everything else (shapes that agree, the backends' limits, scale
values) is the library's, whose messages are raised with the Python names (q_scales, k_scaling).
"""

import ctypes
import reprlib

import numpy as np

from ._ctypes_api import DType, Fp8Scales, Status, has_fp8_forward
from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError, raise_on_error
from ._frontend import FIXED, as_flag, as_int, as_softmax_scale, check_qkv, frontend_for, type_name
from ._lib import library
from .quantize import SCALINGS, as_seed, quantize, scales_shape

__all__ = ["forward_fp8", "attention_fp8"]

# attention_fp8's quantization: (scaling, block_rows) of q, k and v. "block" is the FP8 kernel's
# design: Q and K per block of 128 rows (its tiles), V per head, which the kernel folds into O.
_QUANTIZATIONS = {
    "block": (("block", 128), ("block", 128), ("head", 0)),
    "head": (("head", 0), ("head", 0), ("head", 0)),
    "tensor": (("tensor", 0), ("tensor", 0), ("tensor", 0)),
}

_OUT_DTYPES = {"bfloat16": DType.BFLOAT16, "float16": DType.FLOAT16}


def _out_dtype(out_dtype) -> DType:
    """out_dtype as the library's: "bfloat16" / "float16", or a NumPy, ml_dtypes or torch dtype."""
    name = out_dtype if isinstance(out_dtype, str) else str(out_dtype).removeprefix("torch.")
    if not isinstance(out_dtype, str) and name not in _OUT_DTYPES:
        try:  # np.float16, np.dtype("float16"), ml_dtypes.bfloat16
            name = np.dtype(out_dtype).name
        except (TypeError, ValueError):
            pass
    found = _OUT_DTYPES.get(name)
    if found is None:
        raise InvalidTypeError(f"out_dtype is {reprlib.repr(out_dtype)}; the FP8 forward writes "
                               "'bfloat16' or 'float16' (or the NumPy, ml_dtypes or torch dtype "
                               "of that name)")
    return found


def _scales_layout(name, scales, codes_tensor, scaling, block_rows):
    """(Fp8Scaling, block_rows) of the scales of the codes described by codes_tensor (the ABI's
    (batch, seqlen, heads, head_dim)); scaling None means the one scales.shape says. Raises,
    naming `name` (q_scales, ...) and its scaling argument, when the shape does not fit."""
    x = name.removesuffix("_scales")
    shape = tuple(scales.shape)
    batch, seqlen, heads = codes_tensor.batch, codes_tensor.seqlen, codes_tensor.heads
    if scaling is not None and (not isinstance(scaling, str) or scaling not in SCALINGS):
        raise InvalidArgumentError(f"{x}_scaling is {reprlib.repr(scaling)}; allowed: None (from "
                                   f"{name}.shape), {', '.join(repr(s) for s in SCALINGS)}")
    block_rows = as_int(f"{x}_block_rows", block_rows)
    said = f"{x}_scaling={scaling!r}"
    if scaling is None:
        scaling = {0: "tensor", 1: "tensor", 2: "head", 3: "block"}.get(len(shape))
        said = f"the {scaling!r} layout its shape implies" if scaling else "any scale layout"
    if scaling == "block" and block_rows <= 0:
        raise InvalidArgumentError(f"{x}_block_rows is {block_rows}; block scales need it > 0 "
                                   "(rows per scale)")
    expected = {s: scales_shape(s, batch, seqlen, heads, max(block_rows, 1)) for s in SCALINGS}
    if scaling is None or not (shape == expected[scaling] or
                               (scaling == "tensor" and shape == (1,))):
        raise InvalidArgumentError(
            f"{name}: shape {shape} does not fit {said} for {x} of shape "
            f"({batch}, {seqlen}, {heads}, {codes_tensor.head_dim}); expected () for 'tensor', "
            f"{expected['head']} for 'head', or {expected['block']} for 'block' with "
            f"{x}_block_rows={block_rows}")
    return SCALINGS[scaling], block_rows


def forward_fp8(q, q_scales, k, k_scales, v, v_scales, *, causal=False, scale=None,
                out_dtype="bfloat16", return_lse=False, q_scaling=None, k_scaling=None,
                v_scaling=None, q_block_rows=128, k_block_rows=128, v_block_rows=128):
    """softmax(q k^T * scale) v on e4m3 inputs: q, k, v the codes hopattn.quantize_fp8 returned,
    (batch, seqlen, heads, head_dim), each with its scales; q and k rotated with one seed (or
    neither), v not rotated. Not differentiable.

    NumPy arrays (codes as uint8 or ml_dtypes float8_e4m3fn, scales float32) and CPU tensors run on
    the CPU backend, which computes in float32 from the dequantised values; CUDA tensors
    (torch.float8_e4m3fn or uint8 codes, float32 scales on the same device) on the Hopper backend
    on torch.cuda.current_stream(), whose kernel takes Q scales of any layout, K per tensor, per
    head or per block of a multiple of 128 rows, and V per tensor or per head.

    q_scaling, k_scaling, v_scaling: "tensor", "head" or "block", or None (the default) for the
    layout the scales' shape shows: () tensor, (batch, heads) head, (batch, heads, blocks) block,
    with q/k/v_block_rows rows per block (default 128, quantize_fp8's). The shape must fit.
    causal, scale, return_lse: as hopattn.attention (scale is that of the unrotated inputs, which
    the rotation keeps). out_dtype: "bfloat16" (default) or "float16", or such a dtype object.

    Returns o, out_dtype of q's shape on q's device (contiguous), or (o, lse) with the float32
    lse (batch, heads_q, seqlen_q). Scales of NaN or +inf (quantize_fp8's marks of blocks that held
    NaN or inf) make NaN in the rows that see their block; the CPU backend refuses scales that are
    0, negative or -inf, naming the entry.
    """
    causal = as_flag("causal", causal)
    return_lse = as_flag("return_lse", return_lse)
    softmax_scale = as_softmax_scale(scale)
    out = _out_dtype(out_dtype)
    fe = frontend_for(q)
    (q, tq), (k, tk), (v, tv) = (fe.codes(n, x, FIXED) for n, x in (("q", q), ("k", k), ("v", v)))
    if tuple(v.shape) != tuple(k.shape):
        raise InvalidArgumentError(f"v: shape {tuple(v.shape)}, but k has shape "
                                   f"{tuple(k.shape)}; v must have k's shape")
    scales = [fe.float32_array(n, s) for n, s in (("q_scales", q_scales), ("k_scales", k_scales),
                                                   ("v_scales", v_scales))]
    layouts = [_scales_layout(n, array, t, scaling, rows)
               for n, (array, _), t, scaling, rows in (
                   ("q_scales", scales[0], tq, q_scaling, q_block_rows),
                   ("k_scales", scales[1], tk, k_scaling, k_block_rows),
                   ("v_scales", scales[2], tv, v_scaling, v_block_rows))]
    return _forward(fe, (tq, tk, tv), scales, layouts, causal, softmax_scale, out, return_lse,
                    "out_dtype")


def _forward(fe, tensors, scales, layouts, causal, softmax_scale, out, return_lse, out_name):
    """o, or (o, lse), of hopattn_forward_fp8 on described codes (q, k, v Tensors), their scales
    ((array, address) each) and layouts ((Fp8Scaling, block_rows) each)."""
    lib = library()
    if not has_fp8_forward(lib):
        raise HopattnError(Status.UNSUPPORTED,
                           "the loaded libhopattn has no hopattn_forward_fp8; rebuild it")
    tq = tensors[0]
    o = fe.empty_dtype(out_name, (tq.batch, tq.seqlen, tq.heads, tq.head_dim), out)
    lse = fe.empty_float32((tq.batch, tq.heads, tq.seqlen)) if return_lse else None
    to = fe.tensor("o", o, FIXED)
    c_scales = [Fp8Scales(address, scaling, block_rows)
                for (_, address), (scaling, block_rows) in zip(scales, layouts)]
    with fe.options(causal, softmax_scale) as options:
        status = lib.hopattn_forward_fp8(
            ctypes.byref(tensors[0]), ctypes.byref(c_scales[0]), ctypes.byref(tensors[1]),
            ctypes.byref(c_scales[1]), ctypes.byref(tensors[2]), ctypes.byref(c_scales[2]),
            ctypes.byref(to), None if lse is None else fe.address(lse), ctypes.byref(options))
    raise_on_error(status)
    return (o, lse) if return_lse else o


def attention_fp8(q, k, v, causal=False, scale=None, quantization="block", hadamard=True, seed=0,
                  return_lse=False):
    """softmax(q k^T * scale) v through FP8: q, k and v (bfloat16 or float16, (batch, seqlen,
    heads, head_dim)) quantised to e4m3 with hopattn.quantize_fp8, then hopattn.forward_fp8, the
    output in q's dtype. NumPy arrays and CPU tensors on the CPU backend, CUDA tensors on the Hopper
    backend on torch.cuda.current_stream(). Not differentiable (an inference path).

    quantization: "block" (the default): Q and K one scale per block of 128 rows of each (batch,
    head), V one per (batch, head); "head": one per (batch, head) for all three; "tensor": one per
    tensor (the per-tensor baseline of FlashAttention-3's and cuDNN's FP8). hadamard: rotate q and
    k (not v) by one random orthogonal H D / sqrt(head_dim) first, from `seed`, which spreads
    outlier channels and keeps q k^T; head_dim must then be a power of two. causal, scale,
    return_lse: as hopattn.attention.

    Returns o (q's dtype, shape and device, contiguous), or (o, lse).
    """
    causal = as_flag("causal", causal)
    return_lse = as_flag("return_lse", return_lse)
    hadamard = as_flag("hadamard", hadamard)
    seed = as_seed(seed)
    softmax_scale = as_softmax_scale(scale)
    if not isinstance(quantization, str) or quantization not in _QUANTIZATIONS:
        raise InvalidArgumentError(f"quantization is {reprlib.repr(quantization)}; allowed: "
                                   f"{', '.join(repr(s) for s in _QUANTIZATIONS)}")
    fe = frontend_for(q)
    dtypes = {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        fe.array(name, x)
        dtype = fe.dtype(name, x)
        if dtype not in (DType.BFLOAT16, DType.FLOAT16):
            raise InvalidTypeError(f"{name}: dtype {x.dtype} is not supported by attention_fp8; "
                                   "use bfloat16 or float16 (the FP8 forward writes q's dtype)")
        dtypes[name] = dtype
    check_qkv(q, k, v)
    head_dim = q.shape[-1] if len(q.shape) == 4 else 0  # other ranks: quantize names them
    if hadamard and head_dim > 0 and head_dim & (head_dim - 1):
        raise InvalidArgumentError(f"q: head_dim is {head_dim}, but hadamard=True needs a power "
                                   "of two (the Walsh-Hadamard rotation); pass hadamard=False")
    quantized = []
    for (name, x), (scaling, block_rows) in zip((("q", q), ("k", k), ("v", v)),
                                                _QUANTIZATIONS[quantization]):
        rotate = hadamard and name != "v"  # V is not rotated: P V needs V as it is
        quantized.append((scaling, block_rows,
                          *quantize(fe, name, x, scaling, block_rows, rotate, seed)))
    tensors, scales, layouts = [], [], []
    for name, (scaling, block_rows, codes, x_scales) in zip("qkv", quantized):
        tensors.append(fe.codes(name, codes, FIXED)[1])
        scales.append((x_scales, fe.address(x_scales)))
        layouts.append((SCALINGS[scaling], block_rows))
    # `quantized` keeps the codes alive through the call.
    return _forward(fe, tensors, scales, layouts, causal, softmax_scale, dtypes["q"], return_lse,
                    "q")
