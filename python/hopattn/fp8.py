"""hopattn.forward_fp8 (attention on e4m3 codes and their scales, hopattn_forward_fp8) and
hopattn.attention_fp8 (quantise 16-bit q, k, v, then attend), and their variable-length forms
forward_fp8_varlen and attention_fp8_varlen, for NumPy arrays and PyTorch tensors.

As the other front ends, these describe memory to the library and check what only Python can see:
argument types, dtypes by their Python names, and the shape of each scales array against the
layout it is said (or seen) to have, which the library cannot see and needs so that it reads no
scale past the array's end. Everything else (shapes that agree, the backends' limits, scale
values) is the library's, whose messages are raised with the Python names (q_scales, k_scaling).
"""

import ctypes
import reprlib

import numpy as np

from ._ctypes_api import DType, Fp8Layout, Fp8Scales, Status, has_fp8_forward, has_fp8_varlen
from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError, raise_on_error
from ._fp8_layout import as_fp8_layout, codes_shape, codes_tensor
from ._frontend import (FIXED, PACKED_K, PACKED_Q, as_flag, as_int, as_softmax_scale, check_qkv,
                        frontend_for)
from ._lib import library
from .quantize import SCALINGS, as_seed, quantize, scales_shape
from .varlen import describe_varlen

__all__ = ["forward_fp8", "attention_fp8", "forward_fp8_varlen", "attention_fp8_varlen"]

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


def _scales_layout(name, scales, tensor, scaling, block_rows):
    """(Fp8Scaling, block_rows) of the scales of the codes described by tensor (the ABI's
    (batch, seqlen, heads, head_dim)); scaling None means the one scales.shape says. Raises,
    naming `name` (q_scales, ...) and its scaling argument, when the shape does not fit."""
    x = name.removesuffix("_scales")
    shape = tuple(scales.shape)
    batch, seqlen, heads = tensor.batch, tensor.seqlen, tensor.heads
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
            f"({batch}, {seqlen}, {heads}, {tensor.head_dim}); expected () for 'tensor', "
            f"{expected['head']} for 'head', or {expected['block']} for 'block' with "
            f"{x}_block_rows={block_rows}")
    return SCALINGS[scaling], block_rows


def forward_fp8(q, q_scales, k, k_scales, v, v_scales, *, causal=False, scale=None,
                out_dtype="bfloat16", return_lse=False, q_scaling=None, k_scaling=None,
                v_scaling=None, q_block_rows=128, k_block_rows=128, v_block_rows=128,
                v_layout="rows"):
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
    v_layout: "rows" (the default), v of k's shape; or "v_transposed", v as
    quantize_fp8(layout="v_transposed") returns it: the contiguous (batch, heads_kv, head_dim,
    pitch) codes of k's seqlen, which the Hopper kernel reads up to 14% faster; the result is the same
    bit for bit, but for forward_fp8_varlen on CUDA with K scales per tensor or per head, whose key
    blocks then start on groups of 16 keys (the same to rounding).

    Returns o, out_dtype of q's shape on q's device (contiguous), or (o, lse) with the float32
    lse (batch, heads_q, seqlen_q). Scales of NaN or +inf (quantize_fp8's marks of blocks that held
    NaN or inf) make NaN in the rows that see their block; the CPU backend refuses scales that are
    0, negative or -inf, naming the entry.
    """
    return _forward_on_codes(q, q_scales, k, k_scales, v, v_scales, v_layout, (FIXED, FIXED), None,
                             causal, scale, out_dtype, return_lse,
                             (q_scaling, k_scaling, v_scaling),
                             (q_block_rows, k_block_rows, v_block_rows))


def forward_fp8_varlen(q, q_scales, k, k_scales, v, v_scales, cu_seqlens_q, cu_seqlens_k,
                       max_seqlen_q, max_seqlen_k, *, causal=False, scale=None,
                       out_dtype="bfloat16", return_lse=False, q_scaling=None, k_scaling=None,
                       v_scaling=None, q_block_rows=128, k_block_rows=128, v_block_rows=128,
                       seqused_k=None, v_layout="rows"):
    """forward_fp8 on a batch of sequences of different lengths, packed as in
    hopattn.attention_varlen: q (total_q, heads_q, head_dim) and k, v (total_k, heads_kv, head_dim)
    e4m3 codes, cu_seqlens_q / cu_seqlens_k / max_seqlen_q / max_seqlen_k / seqused_k as there.
    The scales are those of the packed tensors, as quantize_fp8 returns them for q[None] (a batch
    of one): () tensor, (1, heads) head, (1, heads, blocks) block, a block counting rows of the
    packed tensor. With v_layout="v_transposed", v is quantize_fp8(v[None],
    layout="v_transposed")'s codes without their batch axis: (heads_kv, head_dim, pitch), the
    pitch total_k rounded up to a multiple of 16.

    NumPy arrays, CPU tensors and CUDA tensors, with forward_fp8's scale rules. Other arguments
    as forward_fp8.
    Returns o (total_q, heads_q, head_dim) of out_dtype, or (o, lse) with lse (heads_q, total_q).
    """
    max_seqlen_q = as_int("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = as_int("max_seqlen_k", max_seqlen_k)
    varlen = (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
    result = _forward_on_codes(q, q_scales, k, k_scales, v, v_scales, v_layout,
                               (PACKED_Q, PACKED_K), varlen, causal, scale, out_dtype, return_lse,
                               (q_scaling, k_scaling, v_scaling),
                               (q_block_rows, k_block_rows, v_block_rows))
    return tuple(x[0] for x in result) if return_lse else result[0]


def _forward_on_codes(q, q_scales, k, k_scales, v, v_scales, v_layout, layouts, varlen, causal,
                      scale, out_dtype, return_lse, scalings, block_rows):
    """forward_fp8 (varlen None) or forward_fp8_varlen (varlen: its metadata arguments), q and o
    in layouts[0], k (and v in "rows") in layouts[1]; o and lse as the ABI's batch-first shapes."""
    causal = as_flag("causal", causal)
    return_lse = as_flag("return_lse", return_lse)
    softmax_scale = as_softmax_scale(scale)
    out = _out_dtype(out_dtype)
    v_layout = as_fp8_layout("v_layout", v_layout)
    fe = frontend_for(q)
    (q, tq), (k, tk) = (fe.codes(n, x, layout) for n, x, layout in (
        ("q", q, layouts[0]), ("k", k, layouts[1])))
    v, tv = _v_codes(fe, v, v_layout, k, tk, layouts[1], varlen is not None)
    scales = [fe.float32_array(n, s) for n, s in (("q_scales", q_scales), ("k_scales", k_scales),
                                                   ("v_scales", v_scales))]
    scale_layouts = [_scales_layout(n, array, t, scaling, rows)
                     for n, (array, _), t, scaling, rows in zip(
                         ("q_scales", "k_scales", "v_scales"), scales, (tq, tk, tv), scalings,
                         block_rows)]
    metadata, c_varlen = (None, None) if varlen is None else describe_varlen(fe, *varlen)
    result = _forward(fe, (tq, tk, tv), v_layout, scales, scale_layouts, causal, softmax_scale,
                      out, return_lse, "out_dtype", c_varlen)
    del metadata  # alive until here: the library read it
    return result


def _v_codes(fe, v, v_layout, k, tk, k_layout, packed):
    """(v to keep alive for the call, its Tensor): in "rows" of k's shape, read as k is; in
    "v_transposed" the contiguous buffer of quantize_fp8(layout="v_transposed") for k's keys
    (without its batch axis where k is packed)."""
    if v_layout == Fp8Layout.ROWS:
        v, tv = fe.codes("v", v, k_layout)
        if tuple(v.shape) != tuple(k.shape):
            raise InvalidArgumentError(f"v: shape {tuple(v.shape)}, but k has shape "
                                       f"{tuple(k.shape)}; v must have k's shape")
        return v, tv
    fe.array("v", v)
    expected = codes_shape(v_layout, tk.batch, tk.seqlen, tk.heads, tk.head_dim)
    axes = "(batch, heads_kv, head_dim, pitch)"
    if packed:
        expected, axes = expected[1:], "(heads_kv, head_dim, pitch)"
    if tuple(v.shape) != expected:
        raise InvalidArgumentError(
            f"v: shape {tuple(v.shape)}, but v_layout='v_transposed' needs {expected} for k of "
            f"shape {tuple(k.shape)}: {axes}, the pitch k's {tk.seqlen} keys rounded up to a "
            "multiple of 16, as quantize_fp8(layout='v_transposed') returns it")
    v, address = fe.codes_in_c_order("v", v)
    return v, codes_tensor(address, v_layout, tk.batch, tk.seqlen, tk.heads, tk.head_dim)


def _forward(fe, tensors, v_layout, scales, layouts, causal, softmax_scale, out, return_lse,
             out_name, varlen=None):
    """o, or (o, lse), of hopattn_forward_fp8 (or, with a hopattn_varlen, of
    hopattn_forward_fp8_varlen) on described codes (q, k, v Tensors; v in v_layout), their scales
    ((array, address) each) and layouts ((Fp8Scaling, block_rows) each); o and lse in the ABI's
    shapes."""
    lib = library()
    needed, present = (("hopattn_forward_fp8", has_fp8_forward(lib)) if varlen is None else
                       ("hopattn_forward_fp8_varlen", has_fp8_varlen(lib)))
    if not present:
        raise HopattnError(Status.UNSUPPORTED, f"the loaded libhopattn has no {needed}; rebuild it")
    tq = tensors[0]
    o = fe.empty_dtype(out_name, (tq.batch, tq.seqlen, tq.heads, tq.head_dim), out)
    lse = fe.empty_float32((tq.batch, tq.heads, tq.seqlen)) if return_lse else None
    to = fe.tensor("o", o, FIXED)
    c_scales = [Fp8Scales(address, scaling, block_rows)
                for (_, address), (scaling, block_rows) in zip(scales, layouts)]
    arguments = (ctypes.byref(tensors[0]), ctypes.byref(c_scales[0]), ctypes.byref(tensors[1]),
                 ctypes.byref(c_scales[1]), ctypes.byref(tensors[2]), ctypes.byref(c_scales[2]),
                 ctypes.byref(to), None if lse is None else fe.address(lse))
    with fe.options(causal, softmax_scale) as options:
        options.fp8_v_layout = v_layout
        if varlen is None:
            status = lib.hopattn_forward_fp8(*arguments, ctypes.byref(options))
        else:
            status = lib.hopattn_forward_fp8_varlen(*arguments, ctypes.byref(varlen),
                                                    ctypes.byref(options))
    raise_on_error(status)
    return (o, lse) if return_lse else o


def attention_fp8(q, k, v, causal=False, scale=None, quantization="block", hadamard=True, seed=0,
                  return_lse=False):
    """softmax(q k^T * scale) v through FP8: q, k and v (bfloat16 or float16, (batch, seqlen,
    heads, head_dim)) quantised to e4m3 with hopattn.quantize_fp8 (V in layout "v_transposed"),
    then hopattn.forward_fp8, the output in q's dtype. NumPy arrays and CPU tensors on the CPU
    backend, CUDA tensors on the Hopper backend on torch.cuda.current_stream(). Not
    differentiable (an inference path).

    quantization: "block" (the default): Q and K one scale per block of 128 rows of each (batch,
    head), V one per (batch, head); "head": one per (batch, head) for all three; "tensor": one per
    tensor (the per-tensor baseline of FlashAttention-3's and cuDNN's FP8). hadamard: rotate q and
    k (not v) by one random orthogonal H D / sqrt(head_dim) first, from `seed`, which spreads
    outlier channels and keeps q k^T; head_dim must then be a power of two. causal, scale,
    return_lse: as hopattn.attention.

    Returns o (q's dtype, shape and device, contiguous), or (o, lse).
    """
    return _attention_fp8(q, k, v, None, causal, scale, quantization, hadamard, seed, return_lse)


def attention_fp8_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         causal=False, scale=None, quantization="block", hadamard=True, seed=0,
                         return_lse=False, seqused_k=None):
    """attention_fp8 on a batch of sequences of different lengths, packed as in
    hopattn.attention_varlen: q (total_q, heads_q, head_dim), k and v (total_k, heads_kv,
    head_dim), bfloat16 or float16, with cu_seqlens_q / cu_seqlens_k / max_seqlen_q / max_seqlen_k
    / seqused_k as there. Each packed tensor is quantised as one (batch of one) sequence:
    quantization="block" scales blocks of 128 packed rows, which may span two sequences (and the
    unused keys past seqused_k count towards their blocks' scales). Returns o (total_q, heads_q,
    head_dim, q's dtype), or (o, lse) with lse (heads_q, total_q).
    """
    max_seqlen_q = as_int("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = as_int("max_seqlen_k", max_seqlen_k)
    varlen = (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
    result = _attention_fp8(q, k, v, varlen, causal, scale, quantization, hadamard, seed,
                            return_lse)
    return tuple(x[0] for x in result) if return_lse else result[0]


def _attention_fp8(q, k, v, varlen, causal, scale, quantization, hadamard, seed, return_lse):
    """attention_fp8 (varlen None: q, k, v (batch, seqlen, heads, head_dim)) or
    attention_fp8_varlen (varlen: its metadata arguments; q, k, v packed, quantised as a batch of
    one); o and lse in the ABI's batch-first shapes."""
    causal = as_flag("causal", causal)
    return_lse = as_flag("return_lse", return_lse)
    hadamard = as_flag("hadamard", hadamard)
    seed = as_seed(seed)
    softmax_scale = as_softmax_scale(scale)
    if not isinstance(quantization, str) or quantization not in _QUANTIZATIONS:
        raise InvalidArgumentError(f"quantization is {reprlib.repr(quantization)}; allowed: "
                                   f"{', '.join(repr(s) for s in _QUANTIZATIONS)}")
    fe = frontend_for(q)
    name_of = "attention_fp8" if varlen is None else "attention_fp8_varlen"
    dtypes = {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        fe.array(name, x)
        dtype = fe.dtype(name, x)
        if dtype not in (DType.BFLOAT16, DType.FLOAT16):
            raise InvalidTypeError(f"{name}: dtype {x.dtype} is not supported by {name_of}; "
                                   "use bfloat16 or float16 (the FP8 forward writes q's dtype)")
        dtypes[name] = dtype
    check_qkv(q, k, v)
    if varlen is not None:
        for name, x, layout in (("q", q, PACKED_Q), ("k", k, PACKED_K), ("v", v, PACKED_K)):
            layout.to_abi(name, x.shape, (0,) * len(x.shape))  # the rank and sizes, in its names
        q, k, v = q[None], k[None], v[None]  # each packed tensor as a batch of one
    head_dim = q.shape[-1] if len(q.shape) == 4 else 0  # other ranks: quantize names them
    if hadamard and head_dim > 0 and head_dim & (head_dim - 1):
        raise InvalidArgumentError(f"q: head_dim is {head_dim}, but hadamard=True needs a power "
                                   "of two (the Walsh-Hadamard rotation); pass hadamard=False")
    quantized = []
    for (name, x), (scaling, block_rows) in zip((("q", q), ("k", k), ("v", v)),
                                                _QUANTIZATIONS[quantization]):
        # V is not rotated (P V needs V as it is), and is laid out as the Hopper kernel reads it
        # fastest.
        rotate, layout = ((False, Fp8Layout.V_TRANSPOSED) if name == "v" else
                          (hadamard, Fp8Layout.ROWS))
        quantized.append((scaling, block_rows,
                          *quantize(fe, name, x, scaling, block_rows, rotate, seed, layout)))
    tensors, scales, layouts = [], [], []
    for scaling, block_rows, _, x_scales, tensor in quantized:
        tensors.append(tensor)
        scales.append((x_scales, fe.address(x_scales)))
        layouts.append((SCALINGS[scaling], block_rows))
    metadata, c_varlen = (None, None) if varlen is None else describe_varlen(fe, *varlen)
    # `quantized` keeps the codes alive through the call, `metadata` the prefix sums.
    result = _forward(fe, tensors, Fp8Layout.V_TRANSPOSED, scales, layouts, causal, softmax_scale,
                      dtypes["q"], return_lse, "q", c_varlen)
    del metadata, quantized
    return result
