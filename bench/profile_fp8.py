#!/usr/bin/env python3
"""The workload for profiling the FP8 forward kernel under Nsight Compute: hopattn_forward_fp8 at one
sweep point (default head_dim 128, seqlen 8k, non-causal, 16k tokens, hidden 2048), launched a few
times after its inputs are quantised. Profile the last launch, e.g.
  ncu --clock-control none --kernel-name-base mangled --kernel-name regex:ForwardKernel \\
      --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters \\
      -o fp8 python3 bench/profile_fp8.py
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--head-dim", type=int, default=128)
parser.add_argument("--seqlen", type=int, default=8192)
parser.add_argument("--causal", action="store_true")
parser.add_argument("--launches", type=int, default=3)
args = parser.parse_args()
batch, heads = 16384 // args.seqlen, 2048 // args.head_dim
q, k, v = (torch.randn(batch, args.seqlen, heads, args.head_dim, device="cuda", dtype=torch.bfloat16)
           for _ in range(3))
qc, qs = hopattn.quantize_fp8(q, scaling="block", block_rows=128, hadamard=True, seed=0)
kc, ks = hopattn.quantize_fp8(k, scaling="block", block_rows=128, hadamard=True, seed=0)
vc, vs = hopattn.quantize_fp8(v, scaling="head", hadamard=False)
for _ in range(args.launches):
    hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=args.causal)
torch.cuda.synchronize()
