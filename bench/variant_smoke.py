"""Does the build that HOPATTN_LIBRARY names run and agree with a float64 reference? One small call
per head_dim and mask of the operation an A/B times, before the A/B times it: an experimental build
that hangs or computes garbage is then left out of the run instead of stalling it (device_ab.sh runs
this under `timeout`). Exit 0 when every call agrees, 1 otherwise; one line per call."""
import argparse
import sys

import torch

import hopattn

TOLERANCE = {"forward": 2e-2, "fp8": 8e-2, "backward": 3e-2}  # relative error, far above each path's


def reference(q, k, v, causal):
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1 + s.shape[-1] - s.shape[-2]), float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2)


def relative_error(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def check(operation, head_dim, causal, seqlen):
    gen = torch.Generator(device="cuda").manual_seed(head_dim + causal)
    q, k, v = (torch.randn(2, seqlen, 4, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    expected = reference(q, k, v, causal)
    if operation == "fp8":
        return relative_error(hopattn.attention_fp8(q, k, v, causal=causal), expected)
    if operation == "forward":
        return relative_error(hopattn.attention(q, k, v, causal=causal), expected)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    grad_out = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    hopattn.attention(q, k, v, causal=causal).backward(grad_out)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    reference(*leaves, causal).backward(grad_out.double())
    return max(relative_error(t.grad, leaf.grad) for t, leaf in zip((q, k, v), leaves))


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
