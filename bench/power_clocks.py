"""Clocks and power under sustained load: hopattn beside FlashAttention-3 and SDPA's cuDNN, BF16
forward at head_dim 128 (8k and 16k non-causal, 8k causal), for where a GPU at its power limit
trades clock against work per cycle.

Each phase runs one implementation back to back for --phase-s seconds while nvidia-smi samples the
SM clock and the board power every 50 ms; the phases alternate implementations, twice per case in
reversed order. Per phase: TFLOP/s, mean SM clock and power, TFLOP per joule, and FLOP per SM
cycle of one SM (the work per cycle; only roughly independent of the clock, since memory latency
costs fewer cycles at a lower one). FA3 as bench_forward.py finds it (--fa3-path or $HOPATTN_FA3_PATH).
Usage: python3 bench/power_clocks.py --json bench/results/power_clocks.json
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench_common import load_fa3
from bench_forward import forward_flops, implementations

CASES = [(2, 8192, 16, 128, False), (1, 16384, 16, 128, False), (2, 8192, 16, 128, True)]
NAMES = ("hopattn", "fa3", "sdpa_cudnn")
SAMPLE_MS = 50
SETTLE_SAMPLES = 8  # the sampler's start (0.3 s before the loop) and the loop's first 0.1 s


def sampler_gpu():
    """The GPU torch runs on, as nvidia-smi -i names it (its UUID), so that other cards' samples on a
    multi-GPU host stay out."""
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]


def sampled_fields(gpu):
    """nvidia-smi's query: the instantaneous power where this driver has it, else its average."""
    fields = "clocks.sm,power.draw.instant"
    probe = subprocess.run(["nvidia-smi", "-i", gpu, f"--query-gpu={fields}",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True)
    return fields if probe.returncode == 0 else "clocks.sm,power.draw"


def phase(call, flops, seconds, gpu, fields, sms):
    """One implementation back to back for `seconds`, and what the GPU did meanwhile."""
    sampler = subprocess.Popen(["nvidia-smi", "-i", gpu, f"--query-gpu={fields}",
                                "--format=csv,noheader,nounits", "-lms", str(SAMPLE_MS)],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)  # nvidia-smi's start
    torch.cuda.synchronize()
    start = time.perf_counter()
    launches = 0
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            call()
        launches += 10
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    sampler.terminate()
    samples = []
    for line in sampler.communicate()[0].strip().splitlines():
        try:
            samples.append(tuple(float(x) for x in line.split(",")))
        except ValueError:  # "[N/A]" or a line cut by the terminate
            pass
    samples = samples[SETTLE_SAMPLES:] or samples
    if not samples:
        raise RuntimeError(f"nvidia-smi gave no samples of {fields}")
    clock_mhz = sum(s[0] for s in samples) / len(samples)
    power_w = sum(s[1] for s in samples) / len(samples)
    seconds_per_launch = elapsed / launches
    return dict(tflops=flops / seconds_per_launch / 1e12, clock_mhz=clock_mhz, power_w=power_w, launches=launches,
                tflop_per_joule=flops / 1e12 / (power_w * seconds_per_launch),
                flop_per_sm_cycle=flops / (seconds_per_launch * clock_mhz * 1e6) / sms, samples=len(samples))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--phase-s", type=float, default=2.5, help="seconds each phase runs")
    parser.add_argument("--fa3-path", help="FA3's hopper/ directory")
    parser.add_argument("--commit", default=os.environ.get("HOPATTN_COMMIT", "unknown"))
    args = parser.parse_args()

    fa3, fa3_info = load_fa3(args.fa3_path)
    if fa3 is None:
        print(f"FlashAttention-3 not available: {fa3_info['reason']}", file=sys.stderr)
    impls = {name: fn for name, fn in implementations(fa3).items() if name in NAMES}
    gpu = sampler_gpu()
    fields = sampled_fields(gpu)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    for batch, seqlen, heads, head_dim, causal in CASES:
        q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = forward_flops(batch, heads, seqlen, head_dim, causal)
        for rep in range(2):
            for name in (list(impls) if rep == 0 else list(impls)[::-1]):
                call = lambda fn=impls[name]: fn(q, k, v, causal)  # noqa: E731
                call()
                torch.cuda.synchronize()
                row = phase(call, flops, args.phase_s, gpu, fields, sms)
                row.update(name=name, batch=batch, heads=heads, head_dim=head_dim, seqlen=seqlen, causal=causal,
                           rep=rep)
                results.append(row)
                print(f"d{head_dim} {seqlen}{' causal' if causal else ''} {name} (phase {rep}): "
                      f"{row['tflops']:.1f} TFLOP/s, {row['clock_mhz']:.0f} MHz, {row['power_w']:.0f} W, "
                      f"{row['tflop_per_joule']:.3f} TFLOP/J, {row['flop_per_sm_cycle']:.0f} FLOP per SM cycle",
                      flush=True)
    report = dict(gpu=torch.cuda.get_device_name(), commit=args.commit, command=" ".join(sys.argv), sampled=fields,
                  sample_ms=SAMPLE_MS, phase_s=args.phase_s, fa3=fa3_info, results=results)
    args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
