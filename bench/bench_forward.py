#!/usr/bin/env python3
"""Forward attention, hopattn side by side with PyTorch SDPA's FlashAttention-2 and cuDNN backends.

The FlashAttention-3 paper's sweep: 16k tokens per batch (batch = 16384 / seqlen), hidden 2048
(heads = 2048 / head_dim), head_dim 64/128/256, seqlen 512..16k, causal and not; plus its ablation
point (batch 4, seqlen 8448, 16 heads, head_dim 128). BF16, random N(0,1) inputs in
(batch, seqlen, heads, head_dim) layout, the median of triton.testing.do_bench (which flushes L2
before every run). Accuracy: RMSE and relative error against float64 on one mid-size problem with
0.1% of the entries scaled x10, for every implementation on the same inputs.

Writes JSON (GPU, commit, command, every figure) and a PNG plot; prints a table last.
Usage: python3 bench/bench_forward.py --json bench/results/forward.json --plot bench/results/forward.png
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
ABLATION = dict(batch=4, seqlen=8448, heads=16, head_dim=128)


def forward_flops(batch, heads, seqlen, head_dim, causal):
    return 4.0 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)


def implementations():
    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
                ).transpose(1, 2)
        return run

    return {
        "hopattn": lambda q, k, v, causal: hopattn.attention(q, k, v, causal=causal),
        "sdpa_fa2": sdpa(SDPBackend.FLASH_ATTENTION),
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
    }


def time_case(impls, batch, seqlen, heads, head_dim, causal, rep_ms):
    gen = torch.Generator(device="cuda").manual_seed(seqlen * 7 + head_dim + int(causal))
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16,
                           generator=gen) for _ in range(3))
    flops = forward_flops(batch, heads, seqlen, head_dim, causal)
    row = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal)
    for name, fn in impls.items():
        try:
            ms = do_bench(lambda: fn(q, k, v, causal), warmup=25, rep=rep_ms, return_mode="median")
            row[name] = dict(ms=ms, tflops=flops / ms / 1e9)
        except Exception as error:  # a peer backend may refuse a shape; record why
            row[name] = dict(error=f"{type(error).__name__}: {error}"[:300])
    for peer in ("sdpa_fa2", "sdpa_cudnn"):
        if "tflops" in row["hopattn"] and "tflops" in row[peer]:
            row[f"speedup_vs_{peer}"] = row["hopattn"]["tflops"] / row[peer]["tflops"]
    return row


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
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(HEAD_DIMS), figsize=(5 * len(HEAD_DIMS), 8), sharey=True)
    for col, head_dim in enumerate(HEAD_DIMS):
        for line, causal in enumerate((False, True)):
            ax = axes[line][col]
            sweep = [r for r in rows if r["head_dim"] == head_dim and r["causal"] == causal
                     and r["batch"] * r["seqlen"] == 16384]
            for name, style in (("hopattn", "o-"), ("sdpa_cudnn", "s--"), ("sdpa_fa2", "^--")):
                points = [(r["seqlen"], r[name]["tflops"]) for r in sweep if "tflops" in r[name]]
                if points:
                    ax.plot(*zip(*points), style, label=name)
            ax.set_xscale("log", base=2)
            ax.set_title(f"head_dim {head_dim}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("seqlen")
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("TFLOP/s (BF16 forward)")
    axes[0][0].legend()
    fig.suptitle(f"Forward attention on {torch.cuda.get_device_name()}: 16k tokens, hidden 2048")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--head-dims", type=int, nargs="+", default=HEAD_DIMS)
    parser.add_argument("--seqlens", type=int, nargs="+", default=SEQLENS)
    parser.add_argument("--rep-ms", type=float, default=200.0, help="do_bench time per case")
    parser.add_argument("--commit", default=os.environ.get("HOPATTN_COMMIT", "unknown"))
    args = parser.parse_args()

    impls = implementations()
    cases = [(16384 // s, s, 2048 // d, d, c) for d in args.head_dims for s in args.seqlens
             for c in (False, True)]
    cases.append((ABLATION["batch"], ABLATION["seqlen"], ABLATION["heads"], ABLATION["head_dim"], False))
    rows = []
    for i, case in enumerate(cases):
        rows.append(time_case(impls, *case, args.rep_ms))
        print(f"[{i + 1}/{len(cases)}] {case}", file=sys.stderr, flush=True)
    errors = [accuracy(impls, causal) for causal in (False, True)]

    report = dict(
        gpu=torch.cuda.get_device_name(), commit=args.commit,
        command=" ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        torch=torch.__version__, cudnn=torch.backends.cudnn.version(), host=platform.node(),
        hopattn_build=hopattn.build_info(), timing="triton.testing.do_bench median, L2 flushed",
        cases=rows, accuracy=errors)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    if args.plot:
        plot(rows, args.plot)

    def tf(row, name):
        return f"{row[name]['tflops']:7.1f}" if "tflops" in row[name] else "    err"

    print(f"{'d':>4} {'seqlen':>6} {'bxh':>6} {'causal':>6} | {'hopattn':>7} {'FA2':>7} {'cuDNN':>7}"
          f" | {'vsFA2':>5} {'vscuDNN':>7}")
    for r in rows:
        print(f"{r['head_dim']:>4} {r['seqlen']:>6} {r['batch']:>2}x{r['heads']:<3} {str(r['causal']):>6} |"
              f" {tf(r, 'hopattn')} {tf(r, 'sdpa_fa2')} {tf(r, 'sdpa_cudnn')} |"
              f" {r.get('speedup_vs_sdpa_fa2', float('nan')):5.2f} {r.get('speedup_vs_sdpa_cudnn', float('nan')):7.2f}")
    for e in errors:
        print(f"accuracy causal={e['causal']}: " + ", ".join(
            f"{n} rmse {e[n]['rmse']:.3e} rel {e[n]['rel']:.3e}" if "rmse" in e[n] else f"{n} error"
            for n in impls))


if __name__ == "__main__":
    main()
