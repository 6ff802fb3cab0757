#!/usr/bin/env python3
"""The workload for profiling one attention kernel under Nsight Compute: hopattn's BF16 or FP8
forward, or its BF16 backward (--pass backward), or FlashAttention-3's (--impl fa3, for the same
counters side by side), at one sweep point (default head_dim 128, seqlen 8k, non-causal, 16k
tokens, hidden 2048), launched a few times. FP8 inputs are quantised first (block scales,
rotated). The backward runs the forward once, then its backward --launches times. Profile the
last launch, e.g.
  ncu --clock-control none --kernel-name-base mangled --kernel-name regex:ForwardKernel \\
      --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters \\
      -o fp8 python3 bench/profile_kernel.py --dtype e4m3
(the backward's main kernel: regex:BackwardKernel; FA3's kernels: regex:FlashAttnFwd and
regex:FlashAttnBwdSm90, with its hopper/ directory in --fa3-path.)
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402
from bench_common import first_output, load_fa3  # noqa: E402

# No abbreviated options: scripts/device_check.sh reads --pass from the same arguments.
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
parser.add_argument("--impl", choices=("hopattn", "fa3"), default="hopattn")
parser.add_argument("--pass", dest="pass_", choices=("forward", "backward"), default="forward")
parser.add_argument("--dtype", choices=("bf16", "e4m3"), default="bf16")
parser.add_argument("--head-dim", type=int, default=128)
parser.add_argument("--seqlen", type=int, default=8192)
parser.add_argument("--causal", action="store_true")
parser.add_argument("--launches", type=int, default=3)
parser.add_argument("--v-layout", choices=("v_transposed", "rows"), default="v_transposed",
                    help="hopattn FP8: the layout V is quantised to (v_transposed: attention_fp8's)")
parser.add_argument("--fa3-path", help="FA3's hopper/ directory (default: $HOPATTN_FA3_PATH)")
args = parser.parse_args()
if args.pass_ == "backward" and args.dtype != "bf16":
    parser.error("--pass backward: --dtype must be bf16 (there is no FP8 backward)")
batch, heads = 16384 // args.seqlen, 2048 // args.head_dim
q, k, v = (torch.randn(batch, args.seqlen, heads, args.head_dim, device="cuda", dtype=torch.bfloat16,
                       requires_grad=args.pass_ == "backward")
           for _ in range(3))
if args.impl == "fa3":
    fa3, info = load_fa3(args.fa3_path)
    if fa3 is None:
        raise SystemExit(f"FlashAttention-3 not available: {info['reason']}")
    if args.dtype == "e4m3":
        q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    forward = lambda: first_output(fa3.flash_attn_func(q, k, v, causal=args.causal))  # noqa: E731
elif args.dtype == "e4m3":
    qc, qs = hopattn.quantize_fp8(q, scaling="block", block_rows=128, hadamard=True, seed=0)
    kc, ks = hopattn.quantize_fp8(k, scaling="block", block_rows=128, hadamard=True, seed=0)
    vc, vs = hopattn.quantize_fp8(v, scaling="head", hadamard=False, layout=args.v_layout)
    forward = lambda: hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=args.causal,  # noqa: E731
                                          v_layout=args.v_layout)
else:
    forward = lambda: hopattn.attention(q, k, v, causal=args.causal)  # noqa: E731
if args.pass_ == "forward":
    run = forward
else:
    out = forward()
    grad_out = torch.randn_like(out)
    run = lambda: out.backward(grad_out, retain_graph=True)  # noqa: E731
for _ in range(args.launches):
    run()
torch.cuda.synchronize()
