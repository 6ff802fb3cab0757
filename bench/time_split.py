#!/usr/bin/env python3
"""Where a call's time goes: GPU time and host time, measured apart, of hopattn's FP8 quantisation
(one tensor, and the three of attention_fp8), attention_fp8 end to end and the 16-bit forward, at
16k tokens, hidden 2048 (head_dim 128 and 256, seqlen 4k and 8k).
  - GPU time: the GPU first sleeps (torch.cuda._sleep) while the host queues `--calls` calls, so the
    events around them time the GPU's work alone, launch gaps included, host waits excluded.
  - host time: the same calls queued behind a longer sleep, timed on the host's clock: what a call
    costs the calling thread when the GPU never makes it wait.
A call is GPU-bound where its GPU time exceeds its host time; the benchmarks' figures (do_bench:
back-to-back calls) read the larger of the two.
Usage: python3 bench/time_split.py > bench/results/time_split_<commit>_h200.txt
       (--quantize-only: the quantisation calls alone, for a library built without every kernel)
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402

SLEEP_CYCLES = 1_000_000_000  # about 0.5 s at the H200's clocks: longer than any queue of calls here


def gpu_ms(fn, calls):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(SLEEP_CYCLES)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def host_us(fn, calls):
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(2 * SLEEP_CYCLES)
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - begin
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="calls per measurement (a few launches each)")
    parser.add_argument("--quantize-only", action="store_true",
                        help="time the quantisation calls only (no attention kernel needed)")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"{'head_dim':>8} {'seqlen':>6} {'call':<12} {'GPU ms':>8} {'host us':>8}")
    for head_dim in (128, 256):
        for seqlen in (4096, 8192):
            heads, batch = 2048 // head_dim, 16384 // seqlen
            q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            calls = {
                "quantize_q": lambda: hopattn.quantize_fp8(q, scaling="block", block_rows=128, hadamard=True),
                "quantize_v": lambda: hopattn.quantize_fp8(v, scaling="head", hadamard=False),
                "quantize_qkv": lambda: (hopattn.quantize_fp8(q, scaling="block", block_rows=128, hadamard=True),
                                         hopattn.quantize_fp8(k, scaling="block", block_rows=128, hadamard=True),
                                         hopattn.quantize_fp8(v, scaling="head", hadamard=False)),
                "fp8_e2e": lambda: hopattn.attention_fp8(q, k, v),
                "bf16": lambda: hopattn.attention(q, k, v),
            }
            if args.quantize_only:
                calls = {name: fn for name, fn in calls.items() if name.startswith("quantize")}
            for name, fn in calls.items():
                print(f"{head_dim:>8} {seqlen:>6} {name:<12} {gpu_ms(fn, args.calls):8.3f} "
                      f"{host_us(fn, args.calls):8.1f}", flush=True)


if __name__ == "__main__":
    main()
