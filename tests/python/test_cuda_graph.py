"""hopattn.attention and hopattn.attention_fp8 captured in a CUDA graph (torch.cuda.graph) replay
eager's results bit for bit, on inputs copied in after the capture, rows whose scores are beyond the
kernels' fused exponent (computed again exactly) among them. Capture used to fail: the stream check
asked the runtime for the stream's device, which a capturing stream refuses.

torch is optional: these tests skip, saying why, where it is not importable or no Hopper GPU is
visible.
"""

import math

import numpy as np
import pytest

import hopattn
from conftest import hopper_skip_reason

torch = pytest.importorskip("torch", reason="PyTorch is not installed; its bindings go untested")

pytestmark = pytest.mark.skipif(hopper_skip_reason(torch) is not None,
                                reason=str(hopper_skip_reason(torch)))

HUGE_HEAD = 1  # its q and k times 1000: scores of ~1e7, past the kernels' fused exponent


def inputs(seed, head_dim):
    """bfloat16 q, k, v on the GPU; attention_fp8 quantises them itself."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 384, 4, head_dim, generator=gen) for _ in range(3))
    q[:, :, HUGE_HEAD] *= 1000
    k[:, :, HUGE_HEAD] *= 1000
    return tuple(t.to("cuda", torch.bfloat16) for t in (q, k, v))


def bits(t):
    t = t.detach().cpu().contiguous()
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()]).numpy()


@pytest.mark.parametrize("fp8", [False, True], ids=["bfloat16", "fp8"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_graph_replay_matches_eager(fp8, causal, head_dim):
    call = hopattn.attention_fp8 if fp8 else hopattn.attention
    static = [t.clone() for t in inputs(0, head_dim)]
    side = torch.cuda.Stream()  # capture's warm-up, on a side stream as torch.cuda.graphs asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(*static, causal=causal, return_lse=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_o, graph_lse = call(*static, causal=causal, return_lse=True)

    for seed in (1, 2):  # inputs the capture never saw
        fresh = inputs(seed, head_dim)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        eager_o, eager_lse = call(*fresh, causal=causal, return_lse=True)
        torch.cuda.synchronize()
        assert torch.isfinite(eager_o).all() and torch.isfinite(eager_lse).all()
        np.testing.assert_array_equal(bits(graph_o), bits(eager_o))
        np.testing.assert_array_equal(bits(graph_lse), bits(eager_lse))
        # Most of the huge head's rows are past every kernel's limit (2^20 in log2 units), so
        # they were computed again exactly.
        assert eager_lse[:, HUGE_HEAD].abs().median().item() * math.log2(math.e) > 2**20
