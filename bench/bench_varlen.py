#!/usr/bin/env python3
"""Variable-length forward attention: hopattn varlen beside FA3 varlen and hopattn fixed-length.

hopattn.attention_varlen against FlashAttention-3's flash_attn_varlen_func, and against hopattn's
own fixed-length kernel at the same per-token work.

Cases: packed batches of 16k, 32k and 64k tokens; sequence lengths drawn uniformly from
128..8192 (random.Random(--seed), the same draw for every total, so the smaller batches are
prefixes of the larger) until the total is reached, the last one trimmed to fit (it may be short
and of any length); 16 heads, head_dim 128, BF16, q, k, v (total, heads, head_dim) with N(0,1)
entries, causal and not. FLOPs are counted per sequence, 4 * heads * head_dim * s^2, halved for
causal (the convention of bench_forward.py and the FA3 paper, not the exact s(s+1)/2).

The fixed-length comparison runs hopattn.attention on (batch, seqlen) with the same per-token work:
seqlen = sum(s^2) / sum(s) rounded to a multiple of 128 and batch = total / seqlen rounded, and is
measured in its own TFLOP/s (its token count differs from the total by the rounding). Reported
per case: hopattn_varlen / hopattn_fixed (what mixed lengths cost against equal lengths of the same
work) and hopattn_varlen / fa3_varlen.

Timing: median over rounds of triton.testing.do_bench medians (L2 flushed before every run), each
round timing every implementation once, in an order rotated per case (recorded in each row) and
permuted per round (bench_common.round_orders) so that clock drift favours none of them. Host
overhead: microseconds per call of one 128-token sequence, calls back to back, one sync at the end.
Correctness per case: max |hopattn - FA3| over the whole output, and max |impl - reference| on a
few sequences (first, longest, last) against float32 SDPA (math backend) run per sequence, beside
the reference's own BF16 rounding error (the floor any BF16 output has: causal rows that see few
keys have outputs of order 1, where one BF16 ulp is about 0.008).

FlashAttention-3 (`from flash_attn_interface import flash_attn_varlen_func`) is built from source
outside the repository; put its hopper/ directory on PYTHONPATH or pass --fa3-path (default:
$HOPATTN_FA3_PATH). If it cannot be imported the JSON says why and has no FA3 figure; likewise a
hopattn without attention_varlen is recorded as unavailable.

Writes JSON (GPU, commit, command, every figure) and a PNG plot; prints a table last.
Usage: python3 bench/bench_varlen.py --json bench/results/varlen.json --plot bench/results/varlen.png
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402
from bench_common import (add_run_arguments, add_variant_argument, first_output, host_us,  # noqa: E402
                          interleaved_ms, load_fa3, report_header, rotated, spread, timing_note, with_variants)

TOTALS = [16384, 32768, 65536]
MIN_LEN, MAX_LEN = 128, 8192
HEADS, HEAD_DIM = 16, 128
LABELS = dict(hopattn_varlen="hopattn varlen", fa3_varlen="FA3 varlen",
              hopattn_fixed="hopattn fixed")


def draw_lengths(total, seed, low=MIN_LEN, high=MAX_LEN):
    """Lengths uniform in [low, high] until they sum to `total`; the last one trimmed to fit."""
    rng = random.Random(seed)
    lengths = []
    while sum(lengths) < total:
        lengths.append(min(rng.randint(low, high), total - sum(lengths)))
    return lengths


def attention_flops(lengths, heads, head_dim, causal):
    """Forward FLOPs of independent sequences: 4*h*d*s^2 each, halved for causal."""
    return sum(4.0 * heads * head_dim * s * s * (0.5 if causal else 1.0) for s in lengths)


def fixed_shape(lengths, multiple=128):
    """(batch, seqlen) with the same total tokens and per-token work as `lengths`."""
    mean_work = sum(s * s for s in lengths) / sum(lengths)  # tokens attended per token, on average
    seqlen = max(multiple, round(mean_work / multiple) * multiple)
    return max(1, round(sum(lengths) / seqlen)), seqlen


def implementations(fa3):
    """name -> fn(inputs, causal); inputs carries both the packed and the fixed-length tensors."""
    impls = {
        "hopattn_varlen": lambda x, causal: hopattn.attention_varlen(
            x["q"], x["k"], x["v"], x["cu_seqlens"], x["cu_seqlens"], x["max_seqlen"],
            x["max_seqlen"], causal=causal),
        "hopattn_fixed": lambda x, causal: hopattn.attention(
            x["q_fixed"], x["k_fixed"], x["v_fixed"], causal=causal),
    }
    if fa3 is not None:
        impls["fa3_varlen"] = lambda x, causal: first_output(fa3.flash_attn_varlen_func(
            x["q"], x["k"], x["v"], x["cu_seqlens"], x["cu_seqlens"], x["max_seqlen"],
            x["max_seqlen"], softmax_scale=None, causal=causal))
    return impls


def make_inputs(lengths, fixed, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(lengths)
    q, k, v = (torch.randn(total, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16,
                           generator=gen) for _ in range(3))
    offsets = [0]
    for s in lengths:
        offsets.append(offsets[-1] + s)
    batch, seqlen = fixed
    q_fixed, k_fixed, v_fixed = (torch.randn(batch, seqlen, HEADS, HEAD_DIM, device="cuda",
                                             dtype=torch.bfloat16, generator=gen) for _ in range(3))
    return dict(q=q, k=k, v=v, offsets=offsets, max_seqlen=max(lengths),
                cu_seqlens=torch.tensor(offsets, device="cuda", dtype=torch.int32),
                q_fixed=q_fixed, k_fixed=k_fixed, v_fixed=v_fixed)


def reference_sequence(x, index, causal):
    """float32 SDPA (math backend) of one packed sequence, (s, heads, head_dim)."""
    start, end = x["offsets"][index], x["offsets"][index + 1]
    q, k, v = (t[start:end].float().transpose(0, 1).unsqueeze(0) for t in (x["q"], x["k"], x["v"]))
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)[0].transpose(0, 1)


def check(impls, x, lengths, causal):
    """Max abs differences: hopattn vs FA3 on everything, each varlen impl vs float32 per sequence."""
    outputs, result = {}, {}
    for name in ["hopattn_varlen", "fa3_varlen"] + [n for n in impls if n.startswith("hopattn_varlen@")]:
        if name not in impls:
            continue
        try:
            outputs[name] = impls[name](x, causal).float()
            result[name] = dict(nan=bool(torch.isnan(outputs[name]).any().item()))
        except Exception as error:
            result[name] = dict(error=f"{type(error).__name__}: {error}"[:300])
    if "hopattn_varlen" in outputs and "fa3_varlen" in outputs:
        result["max_abs_hopattn_vs_fa3"] = (outputs["hopattn_varlen"]
                                           - outputs["fa3_varlen"]).abs().max().item()
    longest = max(range(len(lengths)), key=lambda i: lengths[i])
    picked = sorted({0, longest, len(lengths) - 1})
    result["reference_sequences"] = [dict(index=i, seqlen=lengths[i]) for i in picked]
    for i, entry in zip(picked, result["reference_sequences"]):
        ref = reference_sequence(x, i, causal)
        start, end = x["offsets"][i], x["offsets"][i + 1]
        entry["max_abs_bf16_rounding"] = (ref.bfloat16().float() - ref).abs().max().item()
        for name, out in outputs.items():
            entry[f"max_abs_{name}"] = (out[start:end] - ref).abs().max().item()
    return result


def time_case(impls, order, total, lengths, causal, seed, rep_ms, rounds):
    fixed = fixed_shape(lengths)
    x = make_inputs(lengths, fixed, seed)
    flops = attention_flops(lengths, HEADS, HEAD_DIM, causal)
    fixed_flops = attention_flops([fixed[1]] * fixed[0], HEADS, HEAD_DIM, causal)
    row = dict(total_tokens=total, num_seqs=len(lengths), max_seqlen=max(lengths),
               work_per_token=sum(s * s for s in lengths) / total, causal=causal, order=order,
               heads=HEADS, head_dim=HEAD_DIM, flops=flops, lengths=lengths,
               fixed=dict(batch=fixed[0], seqlen=fixed[1], tokens=fixed[0] * fixed[1], flops=fixed_flops))
    row["correctness"] = check(impls, x, lengths, causal)
    calls = {name: (lambda fn=impls[name]: fn(x, causal)) for name in order}
    for name, ms in interleaved_ms(calls, order, rep_ms, rounds).items():
        if isinstance(ms, Exception):  # an implementation may be missing or refuse; record why
            row[name] = dict(error=f"{type(ms).__name__}: {ms}"[:300])
        else:
            row[name] = dict(ms=ms, tflops=(fixed_flops if name == "hopattn_fixed" else flops) / ms / 1e9)
    ran = {n: row[n]["tflops"] for n in impls if "tflops" in row[n]}
    if "hopattn_varlen" in ran:
        for other in ("hopattn_fixed", "fa3_varlen"):
            if other in ran:
                row[f"hopattn_varlen_over_{other}"] = ran["hopattn_varlen"] / ran[other]
        for other in ran:
            if other.startswith("hopattn_varlen@"):
                row[f"{other}_over_hopattn_varlen"] = ran[other] / ran["hopattn_varlen"]
    return row


def host_overhead(impls):
    """Microseconds per call of one 128-token sequence, one head, where the launch path dominates."""
    x = make_inputs([128], (1, 128), seed=0)
    x["q"], x["k"], x["v"] = (t[:, :1].contiguous() for t in (x["q"], x["k"], x["v"]))
    x["q_fixed"], x["k_fixed"], x["v_fixed"] = (t[:, :, :1].contiguous()
                                                for t in (x["q_fixed"], x["k_fixed"], x["v_fixed"]))
    result = {}
    for name, fn in impls.items():
        try:
            result[name] = host_us(lambda: fn(x, False), torch.cuda.synchronize)
        except Exception as error:
            result[name] = f"{type(error).__name__}: {error}"[:300]
    return result


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, causal in zip(axes, (False, True)):
        cases = [r for r in rows if r["causal"] == causal]
        for name, style in (("hopattn_varlen", "o-"), ("fa3_varlen", "d-"), ("hopattn_fixed", "s--")):
            points = [(r["total_tokens"], r[name]["tflops"]) for r in cases
                      if "tflops" in r.get(name, {})]
            if points:
                ax.plot(*zip(*points), style, label=LABELS[name])
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["total_tokens"] for r in cases], [f"{r['total_tokens'] // 1024}k" for r in cases])
        ax.set_title("causal" if causal else "non-causal")
        ax.set_xlabel("tokens per packed batch")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("TFLOP/s (BF16 forward)")
    axes[0].legend()
    fig.suptitle(f"Varlen attention on {torch.cuda.get_device_name()}: lengths U[{MIN_LEN}, {MAX_LEN}],"
                 f" {HEADS} heads, head_dim {HEAD_DIM}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--totals", type=int, nargs="+", default=TOTALS)
    parser.add_argument("--seed", type=int, default=0, help="seed of the length draw")
    add_run_arguments(parser, rep_ms=200.0)
    add_variant_argument(parser)
    args = parser.parse_args()

    fa3, fa3_info = load_fa3(args.fa3_path)
    if fa3 is None:
        print(f"FlashAttention-3 not available: {fa3_info['reason']}", file=sys.stderr)
    varlen_info = dict(available=hasattr(hopattn, "attention_varlen"))
    if not varlen_info["available"]:
        varlen_info["reason"] = "hopattn has no attention_varlen"
        print("hopattn.attention_varlen not available: its rows record the error", file=sys.stderr)
    impls, variants = with_variants(implementations(fa3), args.variant, LABELS, name="hopattn_varlen")
    # Before any call: the base build is the loaded one (variants switch it).
    header = report_header(torch, hopattn, args.commit, timing_note(args.rounds))
    cases = [(total, causal) for total in args.totals for causal in (False, True)]
    rows = []
    for i, (total, causal) in enumerate(cases):
        lengths = draw_lengths(total, args.seed)
        rows.append(time_case(impls, rotated(impls, i), total, lengths, causal,
                              seed=total + int(causal), rep_ms=args.rep_ms, rounds=args.rounds))
        print(f"[{i + 1}/{len(cases)}] total {total} causal {causal}: {len(lengths)} sequences",
              file=sys.stderr, flush=True)
    overhead = host_overhead(impls)
    summary = {key: spread([r.get(key) for r in rows])
               for key in ("hopattn_varlen_over_hopattn_fixed", "hopattn_varlen_over_fa3_varlen")}

    report = dict(
        **header,
        fa3=fa3_info, hopattn_varlen=varlen_info,
        flops="per sequence 4*heads*head_dim*s^2, halved for causal",
        lengths=f"uniform integers in [{MIN_LEN}, {MAX_LEN}], random.Random({args.seed}), last trimmed",
        host_us=overhead,
        host_us_method="one 128-token sequence, 1 head, d=128, bf16 non-causal; 200 calls, one sync, "
                       "median of 5 rounds",
        summary=summary, cases=rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    if args.plot:
        plot(rows, args.plot)

    def tf(row, name):
        if name not in impls:
            return "      -"
        return f"{row[name]['tflops']:7.1f}" if "tflops" in row[name] else "    err"

    def num(value, width, digits):
        return f"{value:{width}.{digits}f}" if isinstance(value, float) else " " * (width - 1) + "-"

    print(f"{'tokens':>6} {'seqs':>4} {'causal':>6} | {'varlen':>7} {'FA3vl':>7} {'fixed':>7} {'(bxS)':>9}"
          f" | {'vl/fix':>6} {'vl/FA3':>6} | {'|hop-FA3|':>9} {'|hop-ref|':>9} {'|FA3-ref|':>9}"
          f" {'bf16(ref)':>9}")
    for r in rows:
        c = r["correctness"]
        worst = {n: max((e[f"max_abs_{n}"] for e in c["reference_sequences"] if f"max_abs_{n}" in e),
                        default=None) for n in ("hopattn_varlen", "fa3_varlen", "bf16_rounding")}
        print(f"{r['total_tokens']:>6} {r['num_seqs']:>4} {str(r['causal']):>6} |"
              f" {tf(r, 'hopattn_varlen')} {tf(r, 'fa3_varlen')} {tf(r, 'hopattn_fixed')}"
              f" {r['fixed']['batch']:>3}x{r['fixed']['seqlen']:<5} |"
              f" {num(r.get('hopattn_varlen_over_hopattn_fixed'), 6, 2)}"
              f" {num(r.get('hopattn_varlen_over_fa3_varlen'), 6, 2)} |"
              f" {num(c.get('max_abs_hopattn_vs_fa3'), 9, 5)} {num(worst['hopattn_varlen'], 9, 5)}"
              f" {num(worst['fa3_varlen'], 9, 5)} {num(worst['bf16_rounding'], 9, 5)}")
    print("vl/fix: hopattn varlen / hopattn fixed-length at the same per-token work (TFLOP/s);"
          " vl/FA3: hopattn varlen / FA3 varlen; |x-ref|: worst max abs diff on the reference sequences,"
          " bf16(ref): the reference's own BF16 rounding there"
          + ("" if fa3 else "  (FA3 not available)"))
    for key, s in summary.items():
        if s:
            print(f"{key} over {s['n']} cases: min {s['min']:.3f}  median {s['median']:.3f}"
                  f"  max {s['max']:.3f}")
    for name in variants:
        print(f"{name} / hopattn_varlen: " + ", ".join(
            f"{r['total_tokens'] // 1024}k{' c' if r['causal'] else ''} {r[f'{name}_over_hopattn_varlen']:.3f}"
            for r in rows if f"{name}_over_hopattn_varlen" in r))
    print("host us per call (one 128-token sequence): " + ", ".join(
        f"{LABELS[n]} {v:.1f}" if isinstance(v, float) else f"{LABELS[n]} error"
        for n, v in overhead.items()))


if __name__ == "__main__":
    main()
