"""Gradients of hopattn.attention and hopattn.attention_varlen through PyTorch autograd.

The reference is softmax attention written with torch operations in float64 and differentiated
by autograd: GQA by repeat_interleave of the kv heads, the causal mask aligned bottom-right, a row
that sees no key contributing nothing, varlen one sequence at a time. The library takes float32,
bfloat16 and float16 only, so its float32 gradients are compared with that reference, and
gradcheck's finite differences (which float32 makes coarse: see test_gradcheck_float32) check the
backward against the library's own forward. torch is optional: without it this file is skipped.
"""

import pytest

import hopattn
from conftest import cu_seqlens, hopper_skip_reason

torch = pytest.importorskip("torch", reason="PyTorch is not installed; autograd goes untested")
from torch._dynamo.testing import AotEagerAndRecordGraphs, CompileCounterWithBackend  # noqa: E402

from hopattn import _ctypes_api, _torch_ops  # noqa: E402

if not _ctypes_api.has_backward(hopattn.library()):
    pytest.skip("the loaded libhopattn has no backward pass (hopattn_backward): rebuild it",
                allow_module_level=True)
requires_hopper = pytest.mark.skipif(hopper_skip_reason(torch) is not None,
                                     reason=str(hopper_skip_reason(torch)))

# float32 gradients against float64, for N(0, 1) inputs at these sizes: the library accumulates
# in float32, so errors are a few float32 ulps of sums of about seqlen_k terms.
ATOL_FLOAT32 = 2e-4


def reference(q, k, v, causal, scale=None):
    """softmax(q k^T * scale) v in float64, (batch, seqlen, heads, head_dim), differentiable."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    if causal:
        i = torch.arange(seqlen_q)[:, None]
        visible = torch.arange(seqlen_k)[None, :] <= i + seqlen_k - seqlen_q
    # A row that sees no key gets O = 0: softmax over its zeros, then multiplied by 0.
    s = s.masked_fill(~visible, float("-inf")).masked_fill(~visible.any(-1, keepdim=True), 0.0)
    p = s.softmax(-1) * visible.any(-1, keepdim=True)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def reference_varlen(q, k, v, cu_q, cu_k, causal, seqused_k=None):
    """The packed batch one sequence at a time: (total_q, heads_q, head_dim) in float64."""
    rows = []
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if seqused_k is not None:
            k1 = k0 + int(seqused_k[b])
        if k1 == k0:  # no keys: every row is 0, and q gets no gradient from it
            rows.append(q[q0:q1].double() * 0)
            continue
        rows.append(reference(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal)[0])
    return torch.cat(rows)


def random_inputs(*shapes, dtype=torch.float32, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=gen).to(device, dtype).requires_grad_()
                 for s in shapes)


def gradients(output, inputs, grad_output):
    return torch.autograd.grad(output, inputs, grad_output)


def assert_gradients_close(got, expected, atol):
    for name, g, e in zip(("dq", "dk", "dv"), got, expected):
        assert g.shape == e.shape
        # e: computed in float64, rounded to its float32 leaf's dtype only at the end.
        torch.testing.assert_close(g.double().cpu(), e.double().cpu(), rtol=0, atol=atol,
                                   msg=lambda m: f"{name}: {m}")


def to_bhsd(x):
    return x.detach().transpose(1, 2).requires_grad_()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(7, 7), (5, 12), (12, 5), (1, 9)])
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_gradients_match_float64_reference(causal, seqlen_q, seqlen_k, heads_q, heads_kv, layout):
    q, k, v = random_inputs((2, seqlen_q, heads_q, 16), (2, seqlen_k, heads_kv, 16),
                            (2, seqlen_k, heads_kv, 16))
    grad_o = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    expected = gradients(reference(q, k, v, causal), (q, k, v), grad_o.double())
    if layout == "bhsd":
        q, k, v = (to_bhsd(x) for x in (q, k, v))
        grad_o = grad_o.transpose(1, 2).contiguous()
    o = hopattn.attention(q, k, v, causal=causal, layout=layout)
    got = gradients(o, (q, k, v), grad_o)
    if layout == "bhsd":
        got = tuple(g.transpose(1, 2) for g in got)
    assert_gradients_close(got, expected, ATOL_FLOAT32)


def test_gradients_with_scale_and_strided_inputs():
    # q, k and v as views of one packed qkv buffer: strided inputs, one gradient buffer.
    qkv = torch.randn(2, 10, 3, 4, 32, generator=torch.Generator().manual_seed(3),
                      requires_grad=True)
    q, k, v = qkv.unbind(2)
    o = hopattn.attention(q, k, v, causal=True, scale=0.3)
    grad_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(4))
    (got,) = gradients(o, (qkv,), grad_o)
    (expected,) = gradients(reference(q, k, v, True, scale=0.3), (qkv,), grad_o.double())
    torch.testing.assert_close(got.double(), expected.double(), rtol=0, atol=ATOL_FLOAT32)


def test_gradients_of_a_broadcast_output_gradient():
    # o.sum() hands backward an expanded gradient (every stride 0).
    q, k, v = random_inputs((1, 9, 2, 16), (1, 9, 2, 16), (1, 9, 2, 16))
    hopattn.attention(q, k, v, causal=True).sum().backward()
    expected = gradients(reference(q, k, v, True).sum(), (q, k, v), None)
    assert_gradients_close((q.grad, k.grad, v.grad), expected, ATOL_FLOAT32)


def test_lse_is_not_differentiable():
    q, k, v = random_inputs((1, 6, 2, 16), (1, 6, 2, 16), (1, 6, 2, 16))
    o, lse = hopattn.attention(q, k, v, return_lse=True)
    assert o.requires_grad and not lse.requires_grad
    with_lse = gradients(o.sum() + lse.sum(), (q, k, v), None)
    assert all(torch.equal(a, b) for a, b in zip(with_lse, gradients(
        hopattn.attention(q, k, v).sum(), (q, k, v), None)))


def test_no_grad_and_inputs_without_grad():
    q, k, v = (x.detach() for x in random_inputs((1, 6, 2, 16), (1, 6, 2, 16), (1, 6, 2, 16)))
    assert not hopattn.attention(q, k, v).requires_grad
    q.requires_grad_()
    with torch.no_grad():
        assert not hopattn.attention(q, k, v).requires_grad
    (dq,) = gradients(hopattn.attention(q, k, v).sum(), (q,), None)
    assert dq.shape == q.shape


def test_deterministic_gradients_are_bitwise_repeatable():
    q, k, v = random_inputs((2, 33, 4, 32), (2, 40, 2, 32), (2, 40, 2, 32))
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [gradients(hopattn.attention(q, k, v, causal=True).square().sum(), (q, k, v), None)
                for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.filterwarnings("ignore:Input #.* is not a double precision:UserWarning")
def test_gradcheck_float32():
    """torch.autograd.gradcheck of the library's backward against finite differences of its own
    forward. The library computes in float32 only, so double inputs are refused and float32
    central differences carry about eps**2 truncation plus ~1e-7 / eps rounding error per
    element: eps = 1e-2 with atol = rtol = 1e-2 is what float32 can resolve at this size (the
    float64 comparison above is the precise check)."""
    q, k, v = random_inputs((1, 4, 2, 8), (1, 5, 1, 8), (1, 5, 1, 8), seed=5)
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda q, k, v: hopattn.attention(q, k, v, causal=causal), (q, k, v), eps=1e-2,
            atol=1e-2, rtol=1e-2, nondet_tol=0.0)


# --- variable-length batches --------------------------------------------------------------------

LENGTHS = [(5, 7), (0, 3), (6, 2), (1, 1), (4, 0), (9, 9)]  # (seqlen_q, seqlen_k) per sequence


def packed(lengths, heads_q, heads_kv, head_dim, dtype=torch.float32, device="cpu"):
    total_q, total_k = (sum(l[i] for l in lengths) for i in (0, 1))
    q, k, v = random_inputs((total_q, heads_q, head_dim), (total_k, heads_kv, head_dim),
                            (total_k, heads_kv, head_dim), dtype=dtype, device=device)
    cu_q, cu_k = (torch.from_numpy(cu_seqlens([l[i] for l in lengths])).to(device)
                  for i in (0, 1))
    return q, k, v, cu_q, cu_k, max(l[0] for l in lengths), max(l[1] for l in lengths)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_varlen_gradients_match_float64_reference(causal, heads_q, heads_kv):
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, heads_q, heads_kv, 16)
    grad_o = torch.randn(q.shape, generator=torch.Generator().manual_seed(2))
    o = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal)
    got = gradients(o, (q, k, v), grad_o)
    expected = gradients(reference_varlen(q, k, v, cu_q, cu_k, causal), (q, k, v),
                         grad_o.double())
    assert_gradients_close(got, expected, ATOL_FLOAT32)


def test_varlen_gradients_with_seqused_k():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 2, 2, 16)
    used = torch.tensor([3, 0, 2, 1, 0, 6], dtype=torch.int32)
    o = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, seqused_k=used)
    grad_o = torch.randn(q.shape, generator=torch.Generator().manual_seed(2))
    got = gradients(o, (q, k, v), grad_o)
    expected = gradients(reference_varlen(q, k, v, cu_q, cu_k, True, used), (q, k, v),
                         grad_o.double())
    assert_gradients_close(got, expected, ATOL_FLOAT32)
    assert torch.count_nonzero(got[1][7:9]) == 0  # keys past seqused_k get no gradient


# --- the operators, torch.compile ---------------------------------------------------------------

def fixed_op_samples():
    q, k, v = random_inputs((2, 6, 4, 16), (2, 9, 2, 16), (2, 9, 2, 16))
    yield q, k, v, True, None, "bshd"
    yield to_bhsd(q), to_bhsd(k), to_bhsd(v), False, 0.5, "bhsd"


def varlen_op_samples():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 4, 2, 16)
    yield q, k, v, cu_q, cu_k, None, max_q, max_k, True, None
    yield q, k, v, cu_q, cu_k, torch.tensor([3, 0, 2, 1, 0, 6], dtype=torch.int32), max_q, max_k, \
        False, 0.25


def test_opcheck_attention_ops():
    # Schema, fake (meta) implementation, autograd registration and AOT dispatch: the forward's
    # autograd runs the backward operator, so both are checked.
    for args in fixed_op_samples():
        torch.library.opcheck(_torch_ops.attention_forward, args)
        o, lse = _torch_ops.attention_forward(*args)
        q, k, v, *rest = (a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        torch.library.opcheck(_torch_ops.attention_backward,
                              (torch.randn_like(o), q, k, v, o.detach(), lse, *rest))


def test_opcheck_attention_varlen_ops():
    for args in varlen_op_samples():
        torch.library.opcheck(_torch_ops.attention_varlen_forward, args)
        o, lse = _torch_ops.attention_varlen_forward(*args)
        q, k, v, *metadata = (a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        torch.library.opcheck(_torch_ops.attention_varlen_backward,
                              (torch.randn_like(o), q, k, v, o.detach(), lse, *metadata))


def test_fake_tensors_give_the_real_outputs_layout():
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k, v = (x.detach() for x in random_inputs((2, 6, 4, 16), (2, 9, 2, 16), (2, 9, 2, 16)))
    o, lse = _torch_ops.attention_forward(q, k, v, True, None, "bshd")
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(x) for x in (q, k, v))
        fo, flse = _torch_ops.attention_forward(fq, fk, fv, True, None, "bshd")
        grads = _torch_ops.attention_backward(fo, fq, fk, fv, fo, flse, True, None, "bshd")
    for fake, real in zip((fo, flse), (o, lse)):
        assert (fake.shape, fake.stride(), fake.dtype) == (real.shape, real.stride(), real.dtype)
    for fake, x in zip(grads, (q, k, v)):
        assert (fake.shape, fake.stride(), fake.dtype) == (x.shape, x.contiguous().stride(),
                                                           x.dtype)


# AotEagerAndRecordGraphs, torch's own test backend, returns unboxed functions; torch says so.
IGNORE_UNBOXED = pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd:UserWarning")


@IGNORE_UNBOXED
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph_forward_and_backward(dynamic):
    # fullgraph=True raises on any graph break; the recorded graphs show both operators.
    backend = AotEagerAndRecordGraphs()
    counter = CompileCounterWithBackend(backend)

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 0.2

        def forward(self, q, k, v):
            o, lse = hopattn.attention(q, k, v, causal=True, scale=self.scale, return_lse=True)
            return o.square().sum() + lse.sum()

    model = Attention()
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=dynamic)
    # Sizes all different: dynamo's duck sizing would tie equal ones together.
    q, k, v = random_inputs((3, 6, 4, 16), (3, 9, 2, 16), (3, 9, 2, 16))
    compiled(q, k, v).backward()
    got = (q.grad, k.grad, v.grad)
    expected = gradients(model(q, k, v), (q, k, v), None)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    graphs = [str(g.graph) for g in (*backend.fw_graphs, *backend.bw_graphs)]
    assert any("hopattn.attention_forward" in g for g in graphs), graphs
    assert any("hopattn.attention_backward" in g for g in graphs), graphs
    # One compilation; with dynamic shapes, dynamo traces twice (an operator's float argument,
    # symbolic at first, is specialised and the analysis restarts), and new lengths reuse it.
    compilations = counter.frame_count
    assert compilations == (2 if dynamic else 1)
    if dynamic:
        q, k, v = random_inputs((5, 11, 4, 16), (5, 7, 2, 16), (5, 7, 2, 16))
        compiled(q, k, v).backward()
        assert counter.frame_count == compilations
        expected = gradients(model(q, k, v), (q, k, v), None)
        assert all(torch.equal(a, b) for a, b in zip((q.grad, k.grad, v.grad), expected))


@IGNORE_UNBOXED
def test_compile_fullgraph_varlen():
    backend = AotEagerAndRecordGraphs()
    counter = CompileCounterWithBackend(backend)

    @torch.compile(backend=counter, fullgraph=True)
    def loss(q, k, v, cu_q, cu_k, max_q, max_k):
        return hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True).sum()

    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 4, 2, 16)
    loss(q, k, v, cu_q, cu_k, max_q, max_k).backward()
    expected = gradients(reference_varlen(q, k, v, cu_q, cu_k, True).sum(), (q, k, v), None)
    assert counter.frame_count == 1
    assert_gradients_close((q.grad, k.grad, v.grad), expected, ATOL_FLOAT32)
    assert any("hopattn.attention_varlen_backward" in str(g.graph) for g in backend.bw_graphs)


# --- errors -------------------------------------------------------------------------------------

def test_errors_keep_python_names():
    q, k, v = random_inputs((1, 6, 2, 16), (1, 6, 2, 16), (1, 6, 2, 16))
    with pytest.raises(hopattn.InvalidArgumentError, match="scale must be a positive finite"):
        hopattn.attention(q, k, v, scale=-1.0)
    with pytest.raises(hopattn.InvalidTypeError, match="scale must be .*; got str '1'"):
        hopattn.attention(q, k, v, scale="1")
    with pytest.raises(hopattn.InvalidTypeError, match="^INVALID_ARGUMENT: v: expected a "
                                                       "torch.Tensor like q, got numpy.ndarray$"):
        hopattn.attention(q, k, v.detach().numpy())
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q\.heads \(2\) must be a multiple"):
        hopattn.attention(q, k[:, :, :1].expand(1, 6, 3, 16), v[:, :, :1].expand(1, 6, 3, 16))


# --- CUDA (Hopper) ------------------------------------------------------------------------------

# bf16 / fp16 gradients against float64, relative to the largest reference gradient: the inputs
# are rounded to 8 / 11 bits and P and dS are rounded again for the tensor cores.
CUDA_RTOL = {torch.float16: 1e-2, torch.bfloat16: 4e-2}


@requires_hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
def test_cuda_gradients_match_float64_reference(dtype, causal, head_dim):
    q, k, v = random_inputs((2, 200, 8, head_dim), (2, 257, 2, head_dim),
                            (2, 257, 2, head_dim), dtype=dtype, device="cuda")
    grad_o = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to("cuda", dtype)
    stream = torch.cuda.Stream()  # forward and backward on the caller's current stream
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = gradients(hopattn.attention(q, k, v, causal=causal), (q, k, v), grad_o)
    stream.synchronize()
    cpu = [x.detach().cpu().requires_grad_() for x in (q, k, v)]
    expected = gradients(reference(*cpu, causal), cpu, grad_o.double().cpu())
    for name, g, e in zip(("dq", "dk", "dv"), got, expected):
        assert g.dtype == dtype and g.device.type == "cuda"
        error = (g.double().cpu() - e.double()).abs().max().item()
        assert error <= CUDA_RTOL[dtype] * e.abs().max().item(), f"{name}: max error {error}"


@requires_hopper
def test_cuda_varlen_gradients_match_float64_reference():
    lengths = [(130, 200), (0, 64), (64, 1), (257, 129)]
    q, k, v, cu_q, cu_k, max_q, max_k = packed(lengths, 8, 2, 128, torch.bfloat16, "cuda")
    o = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    got = gradients(o.float().square().sum(), (q, k, v), None)
    cpu = [x.detach().cpu().requires_grad_() for x in (q, k, v)]
    ref_o = reference_varlen(*cpu, cu_q.cpu(), cu_k.cpu(), True)
    expected = gradients(ref_o.square().sum(), cpu, None)
    for name, g, e in zip(("dq", "dk", "dv"), got, expected):
        error = (g.double().cpu() - e.double()).abs().max().item()
        assert error <= CUDA_RTOL[torch.bfloat16] * e.abs().max().item(), f"{name}: {error}"
