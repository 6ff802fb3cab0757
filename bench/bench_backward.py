#!/usr/bin/env python3
"""Backward attention: hopattn beside FlashAttention-3 and PyTorch SDPA's FlashAttention-2 and cuDNN.

The FlashAttention-3 paper's backward sweep: 16k tokens per batch (batch = 16384 / seqlen), hidden
2048 (heads = 2048 / head_dim), head_dim 64/128/256, seqlen 512..16k, causal and not. BF16, random
N(0,1) q, k, v and grad_out in (batch, seqlen, heads, head_dim) layout. FLOPs: 2.5 x the forward's
(4 * b * h * s^2 * d, halved for causal, as bench_forward.py counts).

What is timed is the backward alone: each implementation runs its forward once per case, outside
the timing, and the timed call is torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True),
the same path for every implementation (hopattn through its torch.library operators, SDPA with its
backend pinned by sdpa_kernel, FA3 through its autograd function). "hopattn_op" is hopattn's
registered backward operator called directly (torch.ops.hopattn.attention_backward with the o and
lse of torch.ops.hopattn.attention_forward): the kernel without autograd's per-call cost. It is
reported, not compared. Median over rounds of triton.testing.do_bench medians (L2 flushed before
every run), each round timing every implementation once, in an order rotated per case (recorded in
each row) and permuted per round (bench_common.round_orders).

Also: accuracy of dq, dk, dv (relative Frobenius error against float64 autograd of softmax
attention on the GPU, bottom-right causal mask) at b=2 s=1024 h=16 d=128; peak memory of one
training step (forward + backward, torch.cuda.max_memory_allocated above the inputs) at d=128
s=8192; and what determinism costs hopattn at d=128 s=8192: its operator timed with
torch.use_deterministic_algorithms off and on (the flag its backward reads), plus whether two runs
give bitwise-equal gradients. A case or an implementation that fails (hopattn's SM90 backward
refusing a head_dim with UNSUPPORTED, a peer refusing a shape, FA3 built without its backward) is
recorded with the reason and has no figure.

FlashAttention-3 is built from source outside the repository; put its hopper/ directory on
PYTHONPATH or pass --fa3-path (default: $HOPATTN_FA3_PATH).

Writes JSON (GPU, commit, command, every figure) and a PNG plot; prints a table last.
Usage: python3 bench/bench_backward.py --json bench/results/backward.json --plot bench/results/backward.png
       python3 bench/bench_backward.py --quick --json /tmp/backward_quick.json   (6 cases, first check)
"""
import argparse
import contextlib
import ctypes
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402
import hopattn._torch_ops  # noqa: E402,F401  (registers torch.ops.hopattn)
from hopattn._frontend import LAYOUTS, TorchFrontend  # noqa: E402
from bench_common import (add_run_arguments, add_sweep_arguments, add_variant_argument, first_output,  # noqa: E402
                          interleaved_ms, load_fa3, on_build_prepared, plot_sweep, print_variant_ratios,
                          report_header, rotated, spread, timing_note, with_variants)

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
QUICK = [(128, 1024, False), (128, 1024, True), (128, 8192, False), (128, 8192, True),
         (64, 4096, True), (256, 4096, True)]  # (head_dim, seqlen, causal)
TOKENS, HIDDEN = 16384, 2048
PEERS = ("fa3", "sdpa_cudnn", "sdpa_fa2")
STRONG_PEERS = ("fa3", "sdpa_cudnn")
DEVICE = "cuda"  # the one place a CPU smoke test changes
LABELS = dict(hopattn="hopattn", hopattn_op="hopattn op", fa3="FA3", sdpa_fa2="FA2",
              sdpa_cudnn="cuDNN")
SUMMARY_LABELS = dict(hopattn_over_best_fa3_cudnn="best of FA3 and cuDNN", speedup_vs_fa3="FA3",
                      speedup_vs_sdpa_cudnn="cuDNN", speedup_vs_sdpa_fa2="FA2")


def backward_flops(batch, heads, seqlen, head_dim, causal):
    return 2.5 * 4.0 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)


def failure(error):
    entry = dict(error=f"{type(error).__name__}: {error}"[:300])
    if isinstance(error, hopattn.HopattnError) and error.status == hopattn.Status.UNSUPPORTED:
        entry["unsupported"] = True
    return entry


def implementations(fa3):
    """name -> prepare(q, k, v, grad_out, causal): runs the forward, returns the timed backward
    call, which returns (dq, dk, dv)."""
    def through_autograd(forward):
        def prepare(q, k, v, grad_out, causal):
            out = forward(q, k, v, causal)
            return lambda: torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)
        return prepare

    def sdpa(backend):
        def forward(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
                ).transpose(1, 2)
        return forward

    def hopattn_op(q, k, v, grad_out, causal):
        q, k, v = q.detach(), k.detach(), v.detach()
        o, lse = torch.ops.hopattn.attention_forward(q, k, v, causal, None, "bshd")
        return lambda: torch.ops.hopattn.attention_backward(grad_out, q, k, v, o, lse, causal,
                                                            None, "bshd")

    impls = dict(hopattn=through_autograd(lambda q, k, v, c: hopattn.attention(q, k, v, causal=c)),
                 hopattn_op=hopattn_op,
                 sdpa_fa2=through_autograd(sdpa(SDPBackend.FLASH_ATTENTION)),
                 sdpa_cudnn=through_autograd(sdpa(SDPBackend.CUDNN_ATTENTION)))
    if fa3 is not None:
        impls["fa3"] = through_autograd(lambda q, k, v, c: first_output(
            fa3.flash_attn_func(q, k, v, softmax_scale=None, causal=c)))
    return impls


def inputs(batch, seqlen, heads, head_dim, seed):
    """q, k, v (leaves that require grad) and grad_out, BF16 N(0,1) in bshd."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    q, k, v, grad_out = (torch.randn(batch, seqlen, heads, head_dim, device=DEVICE,
                                     dtype=torch.bfloat16, generator=gen) for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), grad_out


def probe(impls, fa3_info):
    """Each implementation's availability for the backward, from one small backward. A peer that
    fails it is dropped; hopattn stays, its failures recorded per case."""
    report = dict(fa3=dict(fa3_info))
    if "BACKWARD" in fa3_info.get("disabled", ()):
        impls.pop("fa3", None)
        report["fa3"].update(available=False, reason="built with FLASHATTENTION_DISABLE_BACKWARD")
    q, k, v, grad_out = inputs(1, 128, 1, 128, seed=0)
    for name in list(impls):
        try:
            impls[name](q, k, v, grad_out, False)()
            torch.cuda.synchronize()
            report.setdefault(name, {})["available"] = True
        except Exception as error:
            report.setdefault(name, {}).update(available=False, reason=failure(error)["error"])
            if not name.startswith("hopattn"):
                impls.pop(name)
    return report


def time_case(impls, order, batch, seqlen, heads, head_dim, causal, rep_ms, rounds):
    q, k, v, grad_out = inputs(batch, seqlen, heads, head_dim,
                               seed=seqlen * 7 + head_dim + int(causal))
    flops = backward_flops(batch, heads, seqlen, head_dim, causal)
    row = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal,
               order=order)
    calls = {}
    for name in order:
        try:
            calls[name] = impls[name](q, k, v, grad_out, causal)  # the forward: outside the timing
        except Exception as error:
            row[name] = failure(error)
    timed = interleaved_ms(calls, [n for n in order if n in calls], rep_ms, rounds)
    calls = None  # frees the graphs
    for name, ms in timed.items():
        row[name] = failure(ms) if isinstance(ms, Exception) else dict(ms=ms, tflops=flops / ms / 1e9)
    if "tflops" not in row["hopattn"]:
        return row
    for peer in PEERS:
        if "tflops" in row.get(peer, {}):
            row[f"speedup_vs_{peer}"] = row["hopattn"]["tflops"] / row[peer]["tflops"]
    strong = [(row[n]["tflops"], n) for n in STRONG_PEERS if "tflops" in row.get(n, {})]
    if strong:
        tflops, row["best_fa3_cudnn"] = max(strong)
        row["hopattn_over_best_fa3_cudnn"] = row["hopattn"]["tflops"] / tflops
    return row


def reference_gradients(q, k, v, grad_out, causal):
    """dq, dk, dv of float64 softmax attention, bottom-right causal mask, by autograd."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    qh, kh, vh = (t.transpose(1, 2) for t in leaves)
    scores = (qh @ kh.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        seqlen_q, seqlen_k = q.shape[1], k.shape[1]
        rows = torch.arange(seqlen_q, device=DEVICE)[:, None]
        cols = torch.arange(seqlen_k, device=DEVICE)[None, :]
        scores = scores.masked_fill(cols > rows + (seqlen_k - seqlen_q), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)
    return torch.autograd.grad(out, leaves, grad_out.double())


def accuracy(impls, causal):
    batch, seqlen, heads, head_dim = 2, 1024, 16, 128
    q, k, v, grad_out = inputs(batch, seqlen, heads, head_dim, seed=1234 + int(causal))
    reference = reference_gradients(q, k, v, grad_out, causal)
    result = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal)
    for name, prepare in impls.items():
        try:
            grads = prepare(q, k, v, grad_out, causal)()
            result[name] = {
                f"{g}_rel": ((x.double() - ref).norm() / ref.norm()).item()
                for g, x, ref in zip(("dq", "dk", "dv"), grads, reference)}
            result[name]["nan"] = any(bool(torch.isnan(x).any()) for x in grads)
        except Exception as error:
            result[name] = failure(error)
    return result


def hopattn_workspace_bytes(q, k, v, causal, deterministic):
    """The library's own backward workspace (cudaMallocAsync, outside torch's allocator, so not in
    max_memory_allocated), from hopattn_backward_workspace_size; None if it cannot say."""
    try:
        fe, size = TorchFrontend(torch, q), ctypes.c_size_t(0)
        (_, tq), (_, tk), (_, tv) = (fe.input(n, x.detach(), LAYOUTS["bshd"])
                                     for n, x in (("q", q), ("k", k), ("v", v)))
        with fe.backward_options(causal, 0.0, deterministic) as options:
            status = hopattn._lib.library().hopattn_backward_workspace_size(
                ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), None,
                ctypes.byref(options), ctypes.byref(size))
        return size.value if status == 0 else None
    except Exception:
        return None


def memory(impls, batch, seqlen, heads, head_dim, causal=False):
    """Peak bytes torch allocates in one training step (forward + backward) beyond the inputs."""
    q, k, v, grad_out = inputs(batch, seqlen, heads, head_dim, seed=99)
    result = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal,
                  input_mib=4 * q.numel() * q.element_size() / 2**20)
    for name, prepare in impls.items():
        try:
            prepare(q, k, v, grad_out, causal)()  # warm-up: plans and workspaces cached
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            grads = prepare(q, k, v, grad_out, causal)()
            torch.cuda.synchronize()
            result[name] = dict(peak_mib=(torch.cuda.max_memory_allocated() - base) / 2**20)
            del grads
        except Exception as error:
            result[name] = failure(error)
    workspace = hopattn_workspace_bytes(q, k, v, causal, deterministic=False)
    if workspace is not None and "hopattn" in result:
        result["hopattn"]["library_workspace_mib"] = workspace / 2**20
    return result


@contextlib.contextmanager
def deterministic_algorithms(on):
    """torch.use_deterministic_algorithms(on), which hopattn's backward operator reads. Filling
    torch.empty outputs (what the flag does by default) is turned off: it would be timed too."""
    import torch.utils.deterministic as det
    saved = torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(on)
    det.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0])
        det.fill_uninitialized_memory = saved[1]


def determinism(impls, batch, seqlen, heads, head_dim, causal, rep_ms):
    q, k, v, grad_out = inputs(batch, seqlen, heads, head_dim, seed=7)
    flops = backward_flops(batch, heads, seqlen, head_dim, causal)
    result = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal)
    for key, on in (("nondeterministic", False), ("deterministic", True)):
        try:
            with deterministic_algorithms(on):
                call = impls["hopattn_op"](q, k, v, grad_out, causal)
                ms = do_bench(call, warmup=25, rep=rep_ms, return_mode="median")
                first, second = call(), call()
            result[key] = dict(ms=ms, tflops=flops / ms / 1e9, bitwise_repeatable=all(
                torch.equal(a, b) for a, b in zip(first, second)))
            workspace = hopattn_workspace_bytes(q, k, v, causal, on)
            if workspace is not None:
                result[key]["library_workspace_mib"] = workspace / 2**20
        except Exception as error:
            result[key] = failure(error)
    if "ms" in result["nondeterministic"] and "ms" in result["deterministic"]:
        result["slowdown"] = result["deterministic"]["ms"] / result["nondeterministic"]["ms"]
    return result


def plot(rows, path):
    plot_sweep(rows, path, (("hopattn", "o-"), ("fa3", "d-"), ("sdpa_cudnn", "s--"), ("sdpa_fa2", "^--")),
               LABELS, "TFLOP/s (BF16 backward)",
               f"Backward attention on {torch.cuda.get_device_name()}: 16k tokens, hidden 2048")


def print_report(rows, summary, errors, peak, det, variants):
    def tf(row, name):
        entry = row.get(name)
        if entry is None:
            return "      -"
        return f"{entry['tflops']:7.1f}" if "tflops" in entry else (
            "  unsup" if entry.get("unsupported") else "    err")

    def ratio(row, key):
        return f"{row[key]:5.2f}" if key in row else "    -"

    print(f"{'d':>4} {'seqlen':>6} {'bxh':>6} {'causal':>6} | {'hopattn':>7} {'FA3':>7} {'FA2':>7}"
          f" {'cuDNN':>7} | {'vsFA3':>5} {'vsFA2':>5} {'vscuD':>5} {'vsBest':>6}")
    for r in rows:
        print(f"{r['head_dim']:>4} {r['seqlen']:>6} {r['batch']:>2}x{r['heads']:<3} {str(r['causal']):>6} |"
              f" {tf(r, 'hopattn')} {tf(r, 'fa3')} {tf(r, 'sdpa_fa2')} {tf(r, 'sdpa_cudnn')} |"
              f" {ratio(r, 'speedup_vs_fa3')} {ratio(r, 'speedup_vs_sdpa_fa2')}"
              f" {ratio(r, 'speedup_vs_sdpa_cudnn')}  {ratio(r, 'hopattn_over_best_fa3_cudnn')}")
    print_variant_ratios(rows, variants, "hopattn")
    print("backward TFLOP/s (2.5x forward FLOPs); vsBest: hopattn / best of FA3 and cuDNN")
    for key, s in summary.items():
        if isinstance(s, dict):
            print(f"hopattn / {SUMMARY_LABELS[key]} over {s['n']} cases: min {s['min']:.3f}  median {s['median']:.3f}"
                  f"  max {s['max']:.3f}")
    if summary["autograd_overhead_us"] is not None:
        print(f"hopattn autograd.grad minus its operator: median {summary['autograd_overhead_us']:.1f} us")
    for e in errors:
        print(f"accuracy causal={e['causal']} (rel. error dq/dk/dv vs float64): " + ", ".join(
            f"{LABELS[n]} {e[n]['dq_rel']:.2e}/{e[n]['dk_rel']:.2e}/{e[n]['dv_rel']:.2e}"
            if "dq_rel" in e[n] else f"{LABELS[n]} error" for n in LABELS if n in e))
    print(f"peak MiB of one training step at d={peak['head_dim']} s={peak['seqlen']} "
          f"(inputs {peak['input_mib']:.0f} MiB not counted): " + ", ".join(
              f"{LABELS[n]} {peak[n]['peak_mib']:.0f}" if "peak_mib" in peak[n] else f"{LABELS[n]} error"
              for n in LABELS if n in peak))
    for d in det:
        if "slowdown" in d:
            print(f"hopattn deterministic causal={d['causal']}: {d['deterministic']['ms']:.3f} ms vs "
                  f"{d['nondeterministic']['ms']:.3f} ms (x{d['slowdown']:.3f}); bitwise repeatable "
                  f"{d['deterministic']['bitwise_repeatable']} (non-det "
                  f"{d['nondeterministic']['bitwise_repeatable']})")
        else:
            print(f"hopattn deterministic causal={d['causal']}: error")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    add_sweep_arguments(parser, HEAD_DIMS, SEQLENS)
    parser.add_argument("--quick", action="store_true",
                        help=f"only {len(QUICK)} cases (head_dim, seqlen, causal): {QUICK}")
    parser.add_argument("--list-cases", action="store_true", help="print the cases and exit")
    add_run_arguments(parser, rep_ms=200.0)
    add_variant_argument(parser)
    args = parser.parse_args()

    chosen = QUICK if args.quick else [(d, s, c) for d in args.head_dims for s in args.seqlens
                                       for c in (False, True)]
    cases = [(TOKENS // s, s, HIDDEN // d, d, c) for d, s, c in chosen]
    if args.list_cases:
        for case in cases:
            print("batch {} seqlen {} heads {} head_dim {} causal {}".format(*case))
        return
    if args.json is None:
        parser.error("--json is required")

    fa3, fa3_info = load_fa3(args.fa3_path)
    if fa3 is None:
        print(f"FlashAttention-3 not available: {fa3_info['reason']}", file=sys.stderr)
    impls, variants = with_variants(implementations(fa3), args.variant, LABELS, wrap=on_build_prepared)
    availability = probe(impls, fa3_info)
    rows = []
    for i, case in enumerate(cases):
        rows.append(time_case(impls, rotated(impls, i), *case, args.rep_ms, args.rounds))
        print(f"[{i + 1}/{len(cases)}] {case}", file=sys.stderr, flush=True)
    errors = [accuracy(impls, causal) for causal in (False, True)]
    peak = memory(impls, TOKENS // 8192, 8192, HIDDEN // 128, 128)
    det = [determinism(impls, TOKENS // 8192, 8192, HIDDEN // 128, 128, causal, args.rep_ms)
           for causal in (False, True)]
    summary = {key: spread([r.get(key) for r in rows]) for key in SUMMARY_LABELS}
    overhead = [(r["hopattn"]["ms"] - r["hopattn_op"]["ms"]) * 1e3 for r in rows
                if "ms" in r["hopattn"] and "ms" in r.get("hopattn_op", {})]
    summary["autograd_overhead_us"] = statistics.median(overhead) if overhead else None

    report = dict(
        **report_header(torch, hopattn, args.commit, "backward only (forward run once per case "
                        "outside the timing): torch.autograd.grad(out, (q, k, v), grad_out, "
                        "retain_graph=True); " + timing_note(args.rounds)),
        flops="2.5 x forward (4 b h s^2 d, halved for causal)", implementations=availability,
        fa3=fa3_info, summary=summary, cases=rows, accuracy=errors,
        accuracy_method="relative Frobenius error vs float64 autograd on the GPU, BF16 N(0,1) "
                        "q, k, v, grad_out",
        memory=peak, memory_method="torch.cuda.max_memory_allocated above the inputs, one "
                                   "forward + backward after a warm-up step; hopattn's library "
                                   "workspace (cudaMallocAsync) is outside torch and given apart",
        determinism=det, determinism_method="hopattn_op with torch.use_deterministic_algorithms "
                                            "off / on (fill_uninitialized_memory off)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    if args.plot:
        plot(rows, args.plot)
    print_report(rows, summary, errors, peak, det, variants)


if __name__ == "__main__":
    main()
