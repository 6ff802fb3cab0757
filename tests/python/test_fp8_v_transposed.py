"""The "v_transposed" layout of e4m3 codes (hopattn_fp8_layout in include/hopattn/hopattn.h):
quantize_fp8(layout="v_transposed") writes the rows codes permuted as the header defines it (a
reference written from that formula, not from the library's code), pad positions zero;
forward_fp8 and forward_fp8_varlen give the same o and lse bit for bit from V in either layout
on the CPU backend (varlen with block K scales, whose key blocks start on the same grid in both
layouts), and on the GPU the same attention (bit for bit where both layouts' kernels compute
alike, which tests/gpu/test_sm90_fp8_forward.cpp checks: at head_dim 128 and 256 they may differ
in tile or exponent scheme);
the argument checks in Python's names. NumPy arrays and CPU tensors (the CPU backend) everywhere,
CUDA tensors on a Hopper GPU (skipped elsewhere, saying why).
"""

import numpy as np
import pytest

import hopattn
from conftest import cu_seqlens, hopper_skip_reason

SEQLENS = [1, 17, 128, 129]


def v_transposed_reference(rows):
    """(batch, seqlen, heads, head_dim) uint8 codes as the header lays out "v_transposed":
    (batch, heads, head_dim, pitch), pitch = seqlen rounded up to a multiple of 16, row
    8 i + 2 c + j of each aligned group of 16 at position 4 c + 2 i + j, zeros past seqlen."""
    batch, seqlen, heads, head_dim = rows.shape
    pitch = (seqlen + 15) // 16 * 16
    row = np.arange(seqlen)
    r = row % 16
    i, c, j = r // 8, (r % 8) // 2, r % 2
    out = np.zeros((batch, heads, head_dim, pitch), np.uint8)
    out[..., row - r + 4 * c + 2 * i + j] = rows.transpose(0, 2, 3, 1)
    return out


def test_the_reference_permutes_each_group_of_16():
    rows = np.arange(32, dtype=np.uint8).reshape(1, 32, 1, 1)
    got = v_transposed_reference(rows)[0, 0, 0]
    group = [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15]  # the row at each position
    np.testing.assert_array_equal(got, group + [16 + g for g in group])


def inputs(seqlen_q, seqlen_k, seed, heads_q=4, heads_kv=2, head_dim=64, batch=2):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, s, h, head_dim)).astype(np.float32)
            for s, h in ((seqlen_q, heads_q), (seqlen_k, heads_kv), (seqlen_k, heads_kv))]


# --- quantize_fp8 -------------------------------------------------------------------------------

@pytest.mark.parametrize("seqlen", SEQLENS)
@pytest.mark.parametrize("scaling", ["tensor", "head", "block"])
def test_quantize_v_transposed_is_the_rows_codes_permuted(seqlen, scaling):
    x = np.random.default_rng(seqlen).standard_normal((2, seqlen, 3, 32)).astype(np.float32)
    rows, rows_scales = hopattn.quantize_fp8(x, scaling=scaling, block_rows=64, hadamard=False)
    codes, scales = hopattn.quantize_fp8(x, scaling=scaling, block_rows=64, hadamard=False,
                                         layout="v_transposed")
    pitch = (seqlen + 15) // 16 * 16
    assert codes.dtype == np.uint8 and codes.shape == (2, 3, 32, pitch)
    assert codes.flags.c_contiguous
    np.testing.assert_array_equal(codes, v_transposed_reference(rows))
    assert not codes[..., seqlen:].any()  # the pad positions of a sequence ending in the group
    np.testing.assert_array_equal(scales, rows_scales)


# --- forward_fp8 and forward_fp8_varlen -----------------------------------------------------------

def quantised(q, k, v, quantize):
    """((codes, scales) of q, k, v in rows, v's in "v_transposed") by `quantize`, quantize_fp8
    on the caller's arrays or tensors."""
    qq, kq = (quantize(x, seed=3) for x in (q, k))
    vq = quantize(v, scaling="head", hadamard=False)
    vt = quantize(v, scaling="head", hadamard=False, layout="v_transposed")
    return qq, kq, vq, vt


@pytest.mark.parametrize("seqlen_k", [1, 17, 129])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_fp8_from_v_transposed_equals_rows_bit_for_bit(seqlen_k, causal):
    q, k, v = inputs(70, seqlen_k, seed=seqlen_k)
    (qc, qs), (kc, ks), (vc, vs), (vt, vts) = quantised(q, k, v, hopattn.quantize_fp8)
    np.testing.assert_array_equal(vt, v_transposed_reference(vc))
    o, lse = hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=causal, out_dtype="float16",
                                 return_lse=True)
    o_t, lse_t = hopattn.forward_fp8(qc, qs, kc, ks, vt, vts, causal=causal, out_dtype="float16",
                                     return_lse=True, v_layout="v_transposed")
    np.testing.assert_array_equal(o_t.view(np.uint16), o.view(np.uint16))
    np.testing.assert_array_equal(lse_t.view(np.uint32), lse.view(np.uint32))
    # A strided view of the same bytes is copied into C order first.
    strided = np.concatenate([vt, vt], axis=-1)[..., :vt.shape[-1]]
    o_s = hopattn.forward_fp8(qc, qs, kc, ks, strided, vts, causal=causal, out_dtype="float16",
                              v_layout="v_transposed")
    np.testing.assert_array_equal(o_s.view(np.uint16), o.view(np.uint16))


# Five sequences, one without queries, one of a single query row; total_k 289, pitch 304.
CU_Q = cu_seqlens([0, 37, 200, 1, 92])
CU_K = cu_seqlens([5, 64, 130, 61, 29])


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_fp8_varlen_from_v_transposed_equals_rows_bit_for_bit(causal):
    q, k, v = (x[0] for x in inputs(int(CU_Q[-1]), int(CU_K[-1]), seed=21, batch=1))
    # The packed tensors quantised as batches of one, as forward_fp8_varlen's scales are.
    (qc, qs), (kc, ks), (vc, vs), (vt, vts) = quantised(q[None], k[None], v[None],
                                                        hopattn.quantize_fp8)
    seqused = np.array([3, 0, 130, 61, 2], np.int32)
    for seqused_k in (None, seqused):
        o, lse = hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vc[0], vs, CU_Q, CU_K, 200, 130,
                                            causal=causal, out_dtype="float16", return_lse=True,
                                            seqused_k=seqused_k)
        o_t, lse_t = hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vt[0], vts, CU_Q, CU_K, 200,
                                                130, causal=causal, out_dtype="float16",
                                                return_lse=True, seqused_k=seqused_k,
                                                v_layout="v_transposed")
        np.testing.assert_array_equal(o_t.view(np.uint16), o.view(np.uint16))
        np.testing.assert_array_equal(lse_t.view(np.uint32), lse.view(np.uint32))


# --- argument checks ----------------------------------------------------------------------------

def test_quantize_arguments_in_python_names():
    x = np.zeros((1, 20, 2, 32), np.float32)
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"^INVALID_ARGUMENT: hadamard is True, but layout='v_transposed' "
                             r"needs hadamard=False"):
        hopattn.quantize_fp8(x, layout="v_transposed")
    with pytest.raises(hopattn.InvalidArgumentError,
                       match="layout is 'columns'; allowed: 'rows', 'v_transposed'"):
        hopattn.quantize_fp8(x, hadamard=False, layout="columns")
    with pytest.raises(hopattn.InvalidArgumentError, match="layout is None"):
        hopattn.quantize_fp8(x, hadamard=False, layout=None)


def test_forward_arguments_in_python_names():
    q, k, v = inputs(16, 20, seed=5, head_dim=32, batch=1)
    (qc, qs), (kc, ks), (vc, vs), (vt, vts) = quantised(q, k, v, hopattn.quantize_fp8)

    def forward(v_codes, v_layout="v_transposed"):
        return hopattn.forward_fp8(qc, qs, kc, ks, v_codes, vts, out_dtype="float16",
                                   v_layout=v_layout)

    forward(vt)
    with pytest.raises(hopattn.InvalidArgumentError,
                       match="v_layout is 'transposed'; allowed: 'rows', 'v_transposed'"):
        forward(vt, "transposed")
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"^INVALID_ARGUMENT: v: shape \(1, 20, 2, 32\), but "
                             r"v_layout='v_transposed' needs \(1, 2, 32, 32\) for k of shape "
                             r"\(1, 20, 2, 32\): \(batch, heads_kv, head_dim, pitch\), the pitch "
                             r"k's 20 keys rounded up to a multiple of 16"):
        forward(vc)  # rows codes said to be transposed
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"v: shape \(1, 2, 32, 20\), but v_layout='v_transposed' needs "
                             r"\(1, 2, 32, 32\)"):
        forward(vt[..., :20])  # a pitch of seqlen, not rounded up
    with pytest.raises(hopattn.InvalidArgumentError, match=r"v: shape \(1, 2, 32, 32\), but k "
                                                           r"has shape \(1, 20, 2, 32\)"):
        forward(vt, "rows")
    with pytest.raises(hopattn.InvalidTypeError, match="v: dtype float32 is not e4m3 codes"):
        forward(vt.astype(np.float32))
    with pytest.raises(hopattn.InvalidTypeError, match="v: expected a numpy.ndarray like q"):
        forward(vt.tolist())
    with pytest.raises(hopattn.InvalidArgumentError, match=r"v_scales: shape \(1, 3\) does not "
                                                           r"fit"):
        hopattn.forward_fp8(qc, qs, kc, ks, vt, np.ones((1, 3), np.float32),
                            v_layout="v_transposed")
    # forward_fp8_varlen: the packed V without its batch axis.
    cu = np.array([0, 16], np.int32)
    cu_k = np.array([0, 20], np.int32)
    hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vt[0], vts, cu, cu_k, 16, 20,
                               v_layout="v_transposed")
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"v: shape \(1, 2, 32, 32\), but v_layout='v_transposed' needs "
                             r"\(2, 32, 32\) for k of shape \(20, 2, 32\): \(heads_kv, head_dim, "
                             r"pitch\)"):
        hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vt, vts, cu, cu_k, 16, 20,
                                   v_layout="v_transposed")


# --- PyTorch tensors ----------------------------------------------------------------------------

def bits(t):
    """A tensor's bytes as a NumPy array of unsigned integers of its element size."""
    import torch

    t = t.detach().cpu().contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]).numpy()


def assert_same_attention(o_t, lse_t, o, lse):
    """V given transposed (o_t, lse_t) against V in rows: the same bits on the CPU backend; on the
    GPU, where the layouts may run different tiles or exponent schemes (P rounded to e4m3 against
    other running maxima or offsets), o within 5% in relative RMS and each finite LSE within 4e-3
    (the FP8 GPU tests' bounds against the reference), the rows that see no key -inf in both."""
    if o.device.type == "cpu":
        np.testing.assert_array_equal(bits(o_t), bits(o))
        np.testing.assert_array_equal(bits(lse_t), bits(lse))
        return
    difference = (o_t.float() - o.float()).norm() / o.float().norm()
    assert difference < 0.05, f"o with V transposed is {difference:.3e} from V in rows (relative RMS)"
    lse, lse_t = lse.cpu().numpy(), lse_t.cpu().numpy()
    np.testing.assert_array_equal(np.isneginf(lse_t), np.isneginf(lse))
    finite = np.isfinite(lse)
    np.testing.assert_allclose(lse_t[finite], lse[finite], rtol=0, atol=4e-3)


def torch_inputs(torch, seqlen_q, seqlen_k, seed, device, **shape):
    return [torch.from_numpy(x).to(device, torch.bfloat16)
            for x in inputs(seqlen_q, seqlen_k, seed, **shape)]


def hopper_or_skip():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    reason = hopper_skip_reason(torch)
    if reason is not None:
        pytest.skip(reason)
    return torch


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    """The devices the torch tests run on: CPU tensors everywhere PyTorch is, CUDA ones on a
    Hopper GPU."""
    if request.param == "cuda":
        hopper_or_skip()
    else:
        pytest.importorskip("torch", reason="PyTorch is not installed")
    return request.param


@pytest.mark.parametrize("seqlen", SEQLENS)
def test_torch_quantize_v_transposed(device, seqlen):
    import torch

    x = torch.from_numpy(inputs(1, seqlen, seed=seqlen, batch=2)[2]).to(device, torch.bfloat16)
    rows, rows_scales = hopattn.quantize_fp8(x, scaling="head", hadamard=False)
    codes, scales = hopattn.quantize_fp8(x, scaling="head", hadamard=False,
                                         layout="v_transposed")
    assert codes.dtype == torch.float8_e4m3fn and codes.device == x.device
    assert codes.shape == (2, 2, 64, (seqlen + 15) // 16 * 16) and codes.is_contiguous()
    np.testing.assert_array_equal(bits(codes), v_transposed_reference(bits(rows)))
    np.testing.assert_array_equal(bits(scales), bits(rows_scales))
    if device == "cuda":  # the CPU backend's codes, bit for bit
        cpu_codes, _ = hopattn.quantize_fp8(x.cpu(), scaling="head", hadamard=False,
                                            layout="v_transposed")
        np.testing.assert_array_equal(bits(codes), bits(cpu_codes))


@pytest.mark.parametrize("seqlen_k", [17, 1000])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_torch_forward_fp8_from_v_transposed_matches_rows(device, seqlen_k, causal):
    import torch

    q, k, v = torch_inputs(torch, 300, seqlen_k, seqlen_k, device, head_dim=128)
    (qc, qs), (kc, ks), (vc, vs), (vt, vts) = quantised(q, k, v, hopattn.quantize_fp8)
    o, lse = hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=causal, return_lse=True)
    o_t, lse_t = hopattn.forward_fp8(qc, qs, kc, ks, vt, vts, causal=causal, return_lse=True,
                                     v_layout="v_transposed")
    assert o_t.device == q.device
    assert_same_attention(o_t, lse_t, o, lse)
    # attention_fp8 quantises V transposed: the same result as the kernel on these codes.
    o_e2e = hopattn.attention_fp8(q, k, v, causal=causal, seed=3)
    np.testing.assert_array_equal(bits(o_e2e), bits(o_t))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_torch_forward_fp8_varlen_from_v_transposed_matches_rows(device, causal):
    import torch

    # Sequences that start off every 16-row group and 128-row scale block, one without keys.
    cu = cu_seqlens([129, 271, 0, 300, 333])
    q, k, v = (x[0] for x in torch_inputs(torch, int(cu[-1]), int(cu[-1]), 7, device, batch=1,
                                          head_dim=128))
    (qc, qs), (kc, ks), (vc, vs), (vt, vts) = quantised(q[None], k[None], v[None],
                                                        hopattn.quantize_fp8)
    cu = torch.from_numpy(cu).to(device)
    o, lse = hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vc[0], vs, cu, cu, 333, 333,
                                        causal=causal, return_lse=True)
    o_t, lse_t = hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vt[0], vts, cu, cu, 333, 333,
                                            causal=causal, return_lse=True,
                                            v_layout="v_transposed")
    assert_same_attention(o_t, lse_t, o, lse)
    o_e2e = hopattn.attention_fp8_varlen(q, k, v, cu, cu, 333, 333, causal=causal, seed=3)
    np.testing.assert_array_equal(bits(o_e2e), bits(o_t))


def test_torch_v_transposed_errors_name_the_argument():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    q, k, v = torch_inputs(torch, 16, 20, 9, "cpu", head_dim=32, batch=1)
    (qc, qs), (kc, ks), (vc, vs), (vt, vts) = quantised(q, k, v, hopattn.quantize_fp8)
    with pytest.raises(hopattn.InvalidArgumentError, match="hadamard is True, but "
                                                           "layout='v_transposed'"):
        hopattn.quantize_fp8(v, layout="v_transposed")
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"v: shape \(1, 20, 2, 32\), but v_layout='v_transposed' needs "
                             r"\(1, 2, 32, 32\)"):
        hopattn.forward_fp8(qc, qs, kc, ks, vc, vts, v_layout="v_transposed")
    with pytest.raises(hopattn.InvalidTypeError, match="v: dtype torch.bfloat16 is not e4m3 codes"):
        hopattn.forward_fp8(qc, qs, kc, ks, torch.zeros(vt.shape, dtype=torch.bfloat16), vts,
                            v_layout="v_transposed")
    # A host tensor that is not contiguous is copied; a CUDA one is refused (below).
    strided = torch.cat([vt, vt], dim=-1)[..., :vt.shape[-1]]
    np.testing.assert_array_equal(
        bits(hopattn.forward_fp8(qc, qs, kc, ks, strided, vts, v_layout="v_transposed")),
        bits(hopattn.forward_fp8(qc, qs, kc, ks, vt, vts, v_layout="v_transposed")))


def test_cuda_refuses_a_v_transposed_that_is_not_contiguous():
    torch = hopper_or_skip()
    q, k, v = torch_inputs(torch, 128, 128, 10, "cuda", head_dim=128, batch=1)
    (qc, qs), (kc, ks), _, (vt, vts) = quantised(q, k, v, hopattn.quantize_fp8)
    strided = torch.cat([vt, vt], dim=-1)[..., :vt.shape[-1]]
    with pytest.raises(hopattn.InvalidArgumentError, match="v: must be contiguous for CUDA "
                                                           "tensors"):
        hopattn.forward_fp8(qc, qs, kc, ks, strided, vts, v_layout="v_transposed")
