#!/usr/bin/env python3
"""A/B of kernels at one bf16 head_dim (--head-dim, default 128), forward or backward: hopattn builds
(libhopattn.so) and FlashAttention-3 builds through bench/fa3_harness.cu (scripts/build_fa3_harness.sh
with the same HEAD_DIM), unchanged or edited, in the same interleaved rounds as the benchmarks
(bench_common.interleaved_ms: L2 flushed, orders permuted per round). 16k tokens per batch, 16
heads, N(0, 1) inputs, both masks. Each row also has every implementation's largest difference from
the first --impl's output (O, or dQ, dK and dV), so that a build computing something else shows.
The backward is timed alone, after its forward: hopattn's registered operator (as
bench_backward.py's "hopattn op"), FA3's mha_bwd.

Usage: python3 bench/ab_kernels.py --json out.json --impl main=hop:build/src/libhopattn.so \\
         --impl fa3=fa3:fa3_harness.so [--impl NAME=hop:LIB | NAME=fa3:SO ...] [--seqlens 2048,8192]
         [--pass backward] [--head-dim 64]
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
import hopattn._torch_ops  # noqa: E402,F401  (registers torch.ops.hopattn)
from bench_backward import backward_flops  # noqa: E402
from bench_common import (interleaved_ms, on_build_prepared, positive_int, report_header, rotated,  # noqa: E402
                          timing_note)
from bench_forward import forward_flops  # noqa: E402

HEADS, TOKENS = 16, 16384


def fa3_harness(path, tile_semaphore, backward):
    """prepare(q, k, v, d_o, causal) -> the timed call, through the harness at `path`."""
    library = ctypes.CDLL(path)
    library.fa3_harness_forward.restype = ctypes.c_int
    library.fa3_harness_backward.restype = ctypes.c_int
    library.fa3_harness_backward_workspace_bytes.restype = ctypes.c_size_t
    num_sm = torch.cuda.get_device_properties(0).multi_processor_count
    pointer = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    stream = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # noqa: E731

    def forward(q, k, v, causal):
        batch, seqlen, heads, head_dim = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(batch, heads, seqlen, dtype=torch.float32, device=q.device)
        status = library.fa3_harness_forward(
            pointer(q), pointer(k), pointer(v), pointer(o), pointer(lse), batch, seqlen, heads, k.shape[2],
            int(causal), pointer(tile_semaphore), num_sm, ctypes.c_float(head_dim ** -0.5), stream())
        if status != 0:
            raise RuntimeError(f"fa3_harness_forward ({path}) returned {status}")
        return o, lse

    def prepare_forward(q, k, v, d_o, causal):
        return lambda: forward(q, k, v, causal)[0]

    def prepare_backward(q, k, v, d_o, causal):
        o, lse = forward(q, k, v, causal)
        batch, seqlen, heads, head_dim = q.shape
        workspace = torch.empty(library.fa3_harness_backward_workspace_bytes(batch, seqlen, heads, int(causal)),
                                dtype=torch.uint8, device=q.device)

        def run():
            dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
            status = library.fa3_harness_backward(
                pointer(q), pointer(k), pointer(v), pointer(o), pointer(d_o), pointer(lse), pointer(dq), pointer(dk),
                pointer(dv), batch, seqlen, heads, int(causal), num_sm, ctypes.c_float(head_dim ** -0.5),
                pointer(workspace), stream())
            if status != 0:
                raise RuntimeError(f"fa3_harness_backward ({path}) returned {status}")
            return dq, dk, dv
        return run
    return prepare_backward if backward else prepare_forward


def hopattn_prepare(backward):
    def prepare_forward(q, k, v, d_o, causal):
        return lambda: hopattn.attention(q, k, v, causal=causal)

    def prepare_backward(q, k, v, d_o, causal):
        o, lse = torch.ops.hopattn.attention_forward(q, k, v, causal, None, "bshd")
        return lambda: torch.ops.hopattn.attention_backward(d_o, q, k, v, o, lse, causal, None, "bshd")
    return prepare_backward if backward else prepare_forward


def implementations(specs, backward):
    """name -> prepare(q, k, v, d_o, causal), which returns the timed call."""
    tile_semaphore = torch.zeros(1, dtype=torch.int32, device="cuda")
    impls = {}
    for spec in specs:
        name, _, rest = spec.partition("=")
        kind, _, path = rest.partition(":")
        if kind == "hop":
            impls[name] = on_build_prepared(path, hopattn_prepare(backward))
        elif kind == "fa3":
            impls[name] = fa3_harness(path, tile_semaphore, backward)
        else:
            raise SystemExit(f"--impl {spec}: expected NAME=hop:LIBRARY or NAME=fa3:HARNESS")
    return impls


def outputs(result):
    return [t.float() for t in (result if isinstance(result, (tuple, list)) else (result,))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", action="append", required=True, metavar="NAME=hop:LIB|NAME=fa3:SO")
    parser.add_argument("--seqlens", default="2048,8192,16384")
    parser.add_argument("--rounds", type=positive_int, default=9)
    parser.add_argument("--rep-ms", type=float, default=900)
    parser.add_argument("--commit", default=os.environ.get("HOPATTN_COMMIT", "unknown"))
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--head-dim", type=int, choices=(64, 128, 256), default=128,
                        help="the FA3 harnesses must be built for it (HEAD_DIM)")
    parser.add_argument("--pass", dest="direction", choices=("forward", "backward"), default="forward")
    args = parser.parse_args()
    backward = args.direction == "backward"
    header = report_header(torch, hopattn, args.commit, timing_note(args.rounds))
    impls = implementations(args.impl, backward)
    rows = []
    for seqlen in (int(s) for s in args.seqlens.split(",")):
        for causal in (False, True):
            batch = TOKENS // seqlen
            torch.manual_seed(0)
            q, k, v, d_o = (torch.randn(batch, seqlen, HEADS, args.head_dim, dtype=torch.bfloat16, device="cuda")
                            for _ in range(4))
            calls = {name: prepare(q, k, v, d_o, causal) for name, prepare in impls.items()}
            reference = None
            difference = {}
            for name, call in calls.items():
                got = outputs(call())
                reference = got if reference is None else reference
                difference[name] = max(float((a - b).abs().max()) for a, b in zip(got, reference))
            ms = interleaved_ms(calls, rotated(list(impls), len(rows)), args.rep_ms, args.rounds)
            flops = (backward_flops if backward else forward_flops)(batch, HEADS, seqlen, args.head_dim, causal)
            tflops = {name: (str(t) if isinstance(t, Exception) else flops / (t * 1e-3) / 1e12) for name, t in ms.items()}
            rows.append(dict(seqlen=seqlen, causal=causal, tflops=tflops, max_abs_difference=difference))
            print(f"{seqlen:6d} {'causal' if causal else '      '} "
                  + " ".join(f"{n}={t:.0f}" if isinstance(t, float) else f"{n}={t}" for n, t in tflops.items())
                  + f"  max|{'dQ, dK, dV' if backward else 'O'} - first|: " + " ".join(f"{n}={d:.3g}" for n, d in difference.items()), flush=True)
    args.json.write_text(json.dumps(dict(header, impls=args.impl, direction=args.direction, head_dim=args.head_dim, rows=rows), indent=1))


if __name__ == "__main__":
    main()
