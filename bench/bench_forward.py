#!/usr/bin/env python3
"""Forward attention: hopattn beside FlashAttention-3 and PyTorch SDPA's FlashAttention-2 and cuDNN.

The FlashAttention-3 paper's sweep: 16k tokens per batch (batch = 16384 / seqlen), hidden 2048
(heads = 2048 / head_dim), head_dim 64/128/256, seqlen 512..16k, causal and not; plus its ablation
point (batch 4, seqlen 8448, 16 heads, head_dim 128). BF16, random N(0,1) inputs in
(batch, seqlen, heads, head_dim) layout, the median over rounds of triton.testing.do_bench medians
(which flushes L2 before every run), each round timing every implementation once, in an order
rotated per case (recorded in each row) and permuted per round (bench_common.round_orders), so
that neither clock drift under sustained load nor what ran just before favours any.
Each row has hopattn's TFLOP/s over the best of FA3 and cuDNN, and over the best of all peers.
Host overhead: wall-clock microseconds per call of a tiny problem (b=1, s=128, h=1, d=128), calls
back to back with one sync at the end.
Accuracy: RMSE and relative error against float64 on one mid-size problem with 0.1% of the entries
scaled x10, for every implementation on the same inputs.

FlashAttention-3 (`from flash_attn_interface import flash_attn_func`) is built from source outside
the repository; put its hopper/ directory on PYTHONPATH or pass --fa3-path (default: $HOPATTN_FA3_PATH).
If it cannot be imported the JSON says why ("fa3": {"available": false, ...}) and has no FA3 figure.

Writes JSON (GPU, commit, command, every figure) and a PNG plot; prints a table last.
Usage: python3 bench/bench_forward.py --json bench/results/forward.json --plot bench/results/forward.png
"""
import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402
from bench_common import (add_run_arguments, add_sweep_arguments, add_variant_argument,  # noqa: E402
                          first_output, host_us, interleaved_ms, load_fa3, plot_sweep, print_variant_ratios,
                          report_header, rotated, spread, timing_note, with_variants)

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
ABLATION = dict(batch=4, seqlen=8448, heads=16, head_dim=128)
PEERS = ("fa3", "sdpa_cudnn", "sdpa_fa2")
STRONG_PEERS = ("fa3", "sdpa_cudnn")  # the two fastest known on Hopper; FA2 is no target
LABELS = dict(hopattn="hopattn", fa3="FA3", sdpa_fa2="FA2", sdpa_cudnn="cuDNN")


def forward_flops(batch, heads, seqlen, head_dim, causal):
    return 4.0 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)


def implementations(fa3):
    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
                ).transpose(1, 2)
        return run

    impls = {
        "hopattn": lambda q, k, v, causal: hopattn.attention(q, k, v, causal=causal),
        "sdpa_fa2": sdpa(SDPBackend.FLASH_ATTENTION),
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
    }
    if fa3 is not None:
        impls["fa3"] = lambda q, k, v, causal: first_output(
            fa3.flash_attn_func(q, k, v, softmax_scale=None, causal=causal))
    return impls


def best_of(row, names):
    """(name, TFLOP/s) of the fastest of `names` that ran on this case, or (None, None)."""
    ran = [(row[n]["tflops"], n) for n in names if "tflops" in row.get(n, {})]
    return (max(ran)[1], max(ran)[0]) if ran else (None, None)


def time_case(impls, order, batch, seqlen, heads, head_dim, causal, rep_ms, rounds):
    gen = torch.Generator(device="cuda").manual_seed(seqlen * 7 + head_dim + int(causal))
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16,
                           generator=gen) for _ in range(3))
    flops = forward_flops(batch, heads, seqlen, head_dim, causal)
    row = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal, order=order)
    calls = {name: (lambda fn=impls[name]: fn(q, k, v, causal)) for name in order}
    for name, ms in interleaved_ms(calls, order, rep_ms, rounds).items():
        if isinstance(ms, Exception):  # a peer backend may refuse a shape; record why
            row[name] = dict(error=f"{type(ms).__name__}: {ms}"[:300])
        else:
            row[name] = dict(ms=ms, tflops=flops / ms / 1e9)
    if "tflops" not in row["hopattn"]:
        return row
    for peer in PEERS:
        if "tflops" in row.get(peer, {}):
            row[f"speedup_vs_{peer}"] = row["hopattn"]["tflops"] / row[peer]["tflops"]
    for key, names in (("best_fa3_cudnn", STRONG_PEERS), ("best_peer", PEERS)):
        best, tflops = best_of(row, names)
        if best is not None:
            row[key] = best
            row[f"hopattn_over_{key}"] = row["hopattn"]["tflops"] / tflops
    return row


def host_overhead(impls):
    """Microseconds per call at (b=1, s=128, h=1, d=128), where the launch path dominates."""
    q, k, v = (torch.randn(1, 128, 1, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    result = {}
    for name, fn in impls.items():
        try:
            result[name] = host_us(lambda: fn(q, k, v, False), torch.cuda.synchronize)
        except Exception as error:
            result[name] = f"{type(error).__name__}: {error}"[:300]
    return result


def accuracy(impls, causal):
    """RMSE and relative error vs float64 at (b=4, s=2048, h=16, d=128), 0.1% of entries x10."""
    batch, seqlen, heads, head_dim = 4, 2048, 16, 128
    gen = torch.Generator(device="cuda").manual_seed(1234 + int(causal))

    def make():
        x = torch.randn(batch, seqlen, heads, head_dim, device="cuda", generator=gen)
        outliers = torch.rand(x.shape, device="cuda", generator=gen) < 1e-3
        return torch.where(outliers, x * 10, x).to(torch.bfloat16)

    q, k, v = make(), make(), make()
    q64, k64, v64 = (t.double().transpose(1, 2) for t in (q, k, v))
    scores = (q64 @ k64.transpose(-1, -2)) / math.sqrt(head_dim)
    if causal:
        mask = torch.ones(seqlen, seqlen, device="cuda", dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    ref = (torch.softmax(scores, dim=-1) @ v64).transpose(1, 2)
    del scores
    result = {}
    for name, fn in impls.items():
        try:
            out = fn(q, k, v, causal).double()
            diff = out - ref
            result[name] = dict(rmse=diff.pow(2).mean().sqrt().item(),
                                rel=(diff.norm() / ref.norm()).item(),
                                nan=bool(torch.isnan(out).any().item()))
        except Exception as error:
            result[name] = dict(error=f"{type(error).__name__}: {error}"[:300])
    return dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal,
                **result)


def plot(rows, path):
    sweep = [r for r in rows if r["batch"] * r["seqlen"] == 16384]  # not the ablation point
    plot_sweep(sweep, path, (("hopattn", "o-"), ("fa3", "d-"), ("sdpa_cudnn", "s--"), ("sdpa_fa2", "^--")),
               LABELS, "TFLOP/s (BF16 forward)",
               f"Forward attention on {torch.cuda.get_device_name()}: 16k tokens, hidden 2048")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path)
    add_sweep_arguments(parser, HEAD_DIMS, SEQLENS)
    add_run_arguments(parser, rep_ms=200.0)
    add_variant_argument(parser)
    parser.add_argument("--no-ablation", action="store_true", help="leave out the ablation point")
    args = parser.parse_args()

    fa3, fa3_info = load_fa3(args.fa3_path)
    if fa3 is None:
        print(f"FlashAttention-3 not available: {fa3_info['reason']}", file=sys.stderr)
    impls, variants = with_variants(implementations(fa3), args.variant, LABELS)
    cases = [(16384 // s, s, 2048 // d, d, c) for d in args.head_dims for s in args.seqlens
             for c in (False, True)]
    if not args.no_ablation:
        cases.append((ABLATION["batch"], ABLATION["seqlen"], ABLATION["heads"], ABLATION["head_dim"], False))
    # Before any call: the base build is the loaded one (variants switch it).
    header = report_header(torch, hopattn, args.commit, timing_note(args.rounds))
    rows = []
    for i, case in enumerate(cases):
        rows.append(time_case(impls, rotated(impls, i), *case, args.rep_ms, args.rounds))
        print(f"[{i + 1}/{len(cases)}] {case}", file=sys.stderr, flush=True)
    overhead = host_overhead(impls)
    errors = [accuracy(impls, causal) for causal in (False, True)]
    summary = {key: spread([r.get(f"hopattn_over_{key}") for r in rows])
               for key in ("best_fa3_cudnn", "best_peer")}

    report = dict(
        **header,
        fa3=fa3_info, host_us=overhead,
        host_us_method="b=1 s=128 h=1 d=128 bf16 non-causal; 200 calls, one sync, median of 5 rounds",
        summary=summary, cases=rows, accuracy=errors)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    if args.plot:
        plot(rows, args.plot)

    def tf(row, name):
        if name not in impls:
            return "      -"
        return f"{row[name]['tflops']:7.1f}" if "tflops" in row[name] else "    err"

    def ratio(row, key):
        return f"{row[key]:5.2f}" if key in row else "    -"

    print(f"{'d':>4} {'seqlen':>6} {'bxh':>6} {'causal':>6} | {'hopattn':>7} {'FA3':>7} {'FA2':>7}"
          f" {'cuDNN':>7} | {'vsFA3':>5} {'vsFA2':>5} {'vscuD':>5} {'vsBest':>6} {'vsAll':>5}")
    for r in rows:
        print(f"{r['head_dim']:>4} {r['seqlen']:>6} {r['batch']:>2}x{r['heads']:<3} {str(r['causal']):>6} |"
              f" {tf(r, 'hopattn')} {tf(r, 'fa3')} {tf(r, 'sdpa_fa2')} {tf(r, 'sdpa_cudnn')} |"
              f" {ratio(r, 'speedup_vs_fa3')} {ratio(r, 'speedup_vs_sdpa_fa2')}"
              f" {ratio(r, 'speedup_vs_sdpa_cudnn')}  {ratio(r, 'hopattn_over_best_fa3_cudnn')}"
              f" {ratio(r, 'hopattn_over_best_peer')}")
    print_variant_ratios(rows, variants, "hopattn")
    print("vsBest: hopattn / best of FA3 and cuDNN; vsAll: hopattn / best of every peer"
          + ("" if fa3 else "  (FA3 not available: vsBest is vs cuDNN alone)"))
    for key, label in (("best_fa3_cudnn", "best of FA3 and cuDNN"), ("best_peer", "best peer")):
        s = summary[key]
        if s:
            print(f"hopattn / {label} over {s['n']} cases: min {s['min']:.3f}  median {s['median']:.3f}"
                  f"  max {s['max']:.3f}")
    print("host us per call (b=1 s=128 h=1 d=128): " + ", ".join(
        f"{LABELS[n]} {v:.1f}" if isinstance(v, float) else f"{LABELS[n]} error"
        for n, v in overhead.items()))
    for e in errors:
        print(f"accuracy causal={e['causal']}: " + ", ".join(
            f"{LABELS[n]} rmse {e[n]['rmse']:.3e} rel {e[n]['rel']:.3e}" if "rmse" in e[n]
            else f"{LABELS[n]} error" for n in impls))


if __name__ == "__main__":
    main()
