"""Does the build that HOPATTN_LIBRARY names run and agree with a float64 reference? One small call
per head_dim and mask of the operation an A/B times, before the A/B times it: an experimental build
that hangs or computes garbage is then left out of the run instead of stalling it (device_ab.sh runs
this under `timeout`). Exit 0 when every call agrees, 1 otherwise; one line per call."""
import argparse
import sys

import torch

import hopattn
from bench_backward import reference_gradients
from bench_fp8 import reference

TOLERANCE = {"forward": 2e-2, "fp8": 8e-2, "backward": 3e-2}  # relative error, far above each path's


def relative_error(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def check(operation, head_dim, causal, seqlen):
    gen = torch.Generator(device="cuda").manual_seed(head_dim + causal)
    q, k, v = (torch.randn(2, seqlen, 4, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    if operation == "backward":
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        grad_out = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        hopattn.attention(q, k, v, causal=causal).backward(grad_out)
        expected = reference_gradients(q, k, v, grad_out, causal)
        return max(relative_error(t.grad, ref) for t, ref in zip((q, k, v), expected))
    run = hopattn.attention_fp8 if operation == "fp8" else hopattn.attention
    return relative_error(run(q, k, v, causal=causal), reference(q, k, v, causal))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("operation", choices=sorted(TOLERANCE))
    parser.add_argument("--head-dims", type=int, nargs="+", default=[128])
    parser.add_argument("--seqlen", type=int, default=1000)  # not a multiple of any tile
    args = parser.parse_args()
    ok = True
    for head_dim in args.head_dims:
        for causal in (False, True):
            error = check(args.operation, head_dim, causal, args.seqlen)
            torch.cuda.synchronize()
            good = error == error and error < TOLERANCE[args.operation]  # NaN fails
            ok &= good
            print(f"{args.operation} head_dim {head_dim} causal {causal}: relative error {error:.3e}"
                  f"{'' if good else ' FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
