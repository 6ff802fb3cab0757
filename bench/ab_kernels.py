#!/usr/bin/env python3
"""A/B of forward kernels at bf16 head_dim 128: hopattn builds (libhopattn.so) and FlashAttention-3
builds through bench/fa3_harness.cu (scripts/build_fa3_harness.sh), unchanged or edited, in the same
interleaved rounds as the benchmarks (bench_common.interleaved_ms: L2 flushed, orders permuted per
round). 16k tokens per batch, 16 heads, N(0, 1) inputs, both masks. Each row also has every
implementation's largest |O - O_first| on its inputs (the first --impl is the reference), so that a
build computing something else shows.

Usage: python3 bench/ab_kernels.py --json out.json --impl main=hop:build/src/libhopattn.so \\
         --impl fa3=fa3:fa3_harness.so [--impl NAME=hop:LIB | NAME=fa3:SO ...] [--seqlens 2048,8192]
"""
import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402
from bench_common import interleaved_ms, on_build, positive_int, report_header, rotated, timing_note  # noqa: E402
from bench_forward import forward_flops  # noqa: E402

HEAD_DIM, HEADS, TOKENS = 128, 16, 16384


def fa3_harness(path, tile_semaphore):
    library = ctypes.CDLL(path)
    library.fa3_harness_forward.restype = ctypes.c_int
    num_sm = torch.cuda.get_device_properties(0).multi_processor_count

    def run(q, k, v, causal):
        batch, seqlen, heads, head_dim = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(batch, heads, seqlen, dtype=torch.float32, device=q.device)
        pointer = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
        status = library.fa3_harness_forward(
            pointer(q), pointer(k), pointer(v), pointer(o), pointer(lse), batch, seqlen, heads, k.shape[2],
            int(causal), pointer(tile_semaphore), num_sm, ctypes.c_float(head_dim ** -0.5),
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if status != 0:
            raise RuntimeError(f"fa3_harness_forward ({path}) returned {status}")
        return o
    return run


def implementations(specs):
    tile_semaphore = torch.zeros(1, dtype=torch.int32, device="cuda")
    impls = {}
    for spec in specs:
        name, _, rest = spec.partition("=")
        kind, _, path = rest.partition(":")
        if kind == "hop":
            impls[name] = on_build(path, lambda q, k, v, causal: hopattn.attention(q, k, v, causal=causal))
        elif kind == "fa3":
            impls[name] = fa3_harness(path, tile_semaphore)
        else:
            raise SystemExit(f"--impl {spec}: expected NAME=hop:LIBRARY or NAME=fa3:HARNESS")
    return impls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", action="append", required=True, metavar="NAME=hop:LIB|NAME=fa3:SO")
    parser.add_argument("--seqlens", default="2048,8192,16384")
    parser.add_argument("--rounds", type=positive_int, default=9)
    parser.add_argument("--rep-ms", type=float, default=900)
    parser.add_argument("--commit", default=os.environ.get("HOPATTN_COMMIT", "unknown"))
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    header = report_header(torch, hopattn, args.commit, timing_note(args.rounds))
    impls = implementations(args.impl)
    rows = []
    for seqlen in (int(s) for s in args.seqlens.split(",")):
        for causal in (False, True):
            batch = TOKENS // seqlen
            torch.manual_seed(0)
            q, k, v = (torch.randn(batch, seqlen, HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
                       for _ in range(3))
            reference = None
            difference = {}
            for name, run in impls.items():
                o = run(q, k, v, causal).float()
                reference = o if reference is None else reference
                difference[name] = float((o - reference).abs().max())
            ms = interleaved_ms({name: (lambda run=run: run(q, k, v, causal)) for name, run in impls.items()},
                                rotated(list(impls), len(rows)), args.rep_ms, args.rounds)
            flops = forward_flops(batch, HEADS, seqlen, HEAD_DIM, causal)
            tflops = {name: (str(t) if isinstance(t, Exception) else flops / (t * 1e-3) / 1e12) for name, t in ms.items()}
            rows.append(dict(seqlen=seqlen, causal=causal, tflops=tflops, max_abs_difference=difference))
            print(f"{seqlen:6d} {'causal' if causal else '      '} "
                  + " ".join(f"{n}={t:.0f}" if isinstance(t, float) else f"{n}={t}" for n, t in tflops.items())
                  + "  max|O - first|: " + " ".join(f"{n}={d:.3g}" for n, d in difference.items()), flush=True)
    args.json.write_text(json.dumps(dict(header, impls=args.impl, rows=rows), indent=1))


if __name__ == "__main__":
    main()
