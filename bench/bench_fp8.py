#!/usr/bin/env python3
"""FP8 forward attention: hopattn's e4m3 kernel beside FlashAttention-3's FP8 path and cuDNN's FP8 SDPA,
in one run, and the accuracy of each on the FlashAttention-3 paper's outlier test.

Speed, on the FA3 sweep (16k tokens, hidden 2048, head_dim 64/128/256, seqlen 512..16k, both masks):
  - hopattn_fp8: the kernel alone on inputs quantised beforehand (hopattn.quantize_fp8: Q and K rotated
    and scaled per 128-row block, V per head), bf16 output; hopattn_fp8_vt the same with V quantised
    in the "v_transposed" layout, which the kernel reads without transposing it (attention_fp8's way);
  - fa3_fp8: FlashAttention-3's flash_attn_func on e4m3 inputs with (batch, heads) descales, bf16 output;
  - cudnn_fp8: cuDNN's FP8 SDPA graph through cudnn-frontend (on Hopper it writes an FP8 output);
  - hopattn_bf16: hopattn's 16-bit kernel on the bf16 inputs, and hopattn_e2e: attention_fp8 from the same
    bf16 inputs (the three quantisations plus the kernel), with quantize: the three quantisations alone
    (V transposed, as attention_fp8 quantises it).
Median over rounds of triton.testing.do_bench medians (L2 flushed), each round timing every
implementation once, in an order rotated per case and permuted per round (bench_common.round_orders).

Accuracy (RMSE and relative error against float64 attention of the unquantised inputs): batch 4, seqlen
2048, 16 heads, head_dim 128; the paper's outliers (N(0,1), 0.1% of entries x10) and channel outliers
(4 of the 128 channels of Q and K x20, as real activations have); hopattn with block or per-tensor
scales, with and without the rotation, FA3 and cuDNN with per-tensor scales, hopattn bf16 for scale.

FA3 is a peer built from source outside the repository (--fa3-path or $HOPATTN_FA3_PATH); cuDNN FP8
needs the cudnn-frontend package. A peer that cannot run is recorded with its reason, never a figure.
Usage: python3 bench/bench_fp8.py --json bench/results/fp8.json --plot bench/results/fp8.png
"""
import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import hopattn  # noqa: E402
from bench_common import (add_run_arguments, add_sweep_arguments, add_variant_argument,  # noqa: E402
                          first_output, interleaved_ms, load_fa3, on_build, plot_sweep, print_variant_ratios,
                          report_header, rotated, spread, timing_note, with_variants)
from hopattn import _lib as hopattn_library  # noqa: E402

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
FP8_PEERS = ("fa3_fp8", "cudnn_fp8")
LABELS = dict(hopattn_fp8="hopattn FP8", hopattn_fp8_vt="hopattn FP8 (V^T)", fa3_fp8="FA3 FP8", cudnn_fp8="cuDNN FP8",
              hopattn_bf16="hopattn BF16", hopattn_e2e="hopattn quantise+FP8", quantize="quantise")
E4M3 = torch.float8_e4m3fn


def forward_flops(batch, heads, seqlen, head_dim, causal):
    return 4.0 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)


def quantise_v(v, quantization, layout):
    return hopattn.quantize_fp8(v, hadamard=False, scaling="tensor" if quantization == "tensor" else "head",
                                layout=layout)


def quantise_qkv(q, k, v, quantization, hadamard, seed=0, v_layout="v_transposed"):
    """hopattn's quantisation of one attention call's inputs, as attention_fp8 does it (V in v_layout)."""
    block = dict(scaling="block", block_rows=128) if quantization == "block" else dict(scaling=quantization)
    qq = hopattn.quantize_fp8(q, hadamard=hadamard, seed=seed, **block)
    kq = hopattn.quantize_fp8(k, hadamard=hadamard, seed=seed, **block)
    return qq, kq, quantise_v(v, quantization, v_layout)


def quantised_inputs(q, k, v):
    """The FP8 kernel's timed inputs, quantised once per case: v_layout -> ((codes, scales) of q, k, v),
    q's and k's shared."""
    qq, kq, vq = quantise_qkv(q, k, v, "block", True, v_layout="rows")
    return dict(rows=(qq, kq, vq), v_transposed=(qq, kq, quantise_v(v, "block", "v_transposed")))


def hopattn_fp8_call(quantised, v_layout, causal):
    (qc, qs), (kc, ks), (vc, vs) = quantised[v_layout]
    return hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=causal, v_layout=v_layout)


class CudnnFp8:
    """cuDNN's FP8 SDPA forward (cudnn-frontend's Python graph API), one graph per shape. On Hopper the
    graph writes O in e4m3, scaled by scale_o; descales per tensor."""

    def __init__(self):
        import cudnn
        self.cudnn = cudnn
        self.handle = cudnn.create_handle()
        self.graphs = {}
        self.version = f"backend {cudnn.backend_version()}, frontend {getattr(cudnn, '__version__', '?')}"

    def graph(self, b, h, s, d, causal):
        key = (b, h, s, d, causal)
        if key in self.graphs:
            return self.graphs[key]
        cudnn = self.cudnn
        fp8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=fp8, intermediate_data_type=f32, compute_data_type=f32, handle=self.handle)
        stride = (s * h * d, d, h * d, 1)  # (b, h, s, d) dims over (b, s, h, d) memory
        t = {n: g.tensor(name=n, dim=(b, h, s, d), stride=stride, data_type=fp8) for n in ("q", "k", "v")}
        scalars = {n: g.tensor(name=n, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=f32)
                   for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
        o, _, amax_s, amax_o = g.sdpa_fp8(q=t["q"], k=t["k"], v=t["v"], descale_q=scalars["descale_q"],
                                          descale_k=scalars["descale_k"], descale_v=scalars["descale_v"],
                                          descale_s=scalars["descale_s"], scale_s=scalars["scale_s"],
                                          scale_o=scalars["scale_o"], generate_stats=False,
                                          attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal)
        o.set_output(True).set_dim((b, h, s, d)).set_stride(stride).set_data_type(fp8)
        for amax in (amax_s, amax_o):
            if amax is not None:
                amax.set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        self.graphs[key] = (g, t, scalars, o, amax_s, amax_o, workspace)
        return self.graphs[key]

    def prepare(self, q8, k8, v8, causal, descales=(1.0, 1.0, 1.0), scale_s=1.0, scale_o=1.0):
        """A callable that runs the graph on e4m3 inputs; its output tensor (e4m3, O * scale_o)."""
        b, s, h, d = q8.shape
        g, t, scalars, o, amax_s, amax_o, workspace = self.graph(b, h, s, d, causal)
        out = torch.empty_like(q8)
        one = lambda x: torch.full((1, 1, 1, 1), float(x), device="cuda", dtype=torch.float32)  # noqa: E731
        pack = {t["q"]: q8, t["k"]: k8, t["v"]: v8, o: out,
                scalars["descale_q"]: one(descales[0]), scalars["descale_k"]: one(descales[1]),
                scalars["descale_v"]: one(descales[2]), scalars["descale_s"]: one(1.0 / scale_s),
                scalars["scale_s"]: one(scale_s), scalars["scale_o"]: one(scale_o)}
        pack.update({amax: one(0.0) for amax in (amax_s, amax_o) if amax is not None})
        stream = torch.cuda.current_stream().cuda_stream
        return (lambda: self.cudnn_execute(g, pack, workspace, stream)), out

    def cudnn_execute(self, g, pack, workspace, stream):
        self.cudnn.set_stream(handle=self.handle, stream=stream)
        g.execute(pack, workspace, handle=self.handle)


def load_cudnn():
    try:
        runner = CudnnFp8()
        return runner, dict(available=True, version=runner.version)
    except Exception as error:
        return None, dict(available=False, reason=f"{type(error).__name__}: {error}"[:300])


def implementations():
    """hopattn's timed calls, name -> fn(q, k, v, quantised_inputs(q, k, v), causal). Every name starts
    with "hopattn", so that with_variants runs each on its build; the row calls hopattn_quantize
    "quantize"."""
    return dict(
        hopattn_fp8=lambda q, k, v, quantised, causal: hopattn_fp8_call(quantised, "rows", causal),
        hopattn_fp8_vt=lambda q, k, v, quantised, causal: hopattn_fp8_call(quantised, "v_transposed", causal),
        hopattn_e2e=lambda q, k, v, quantised, causal: hopattn.attention_fp8(q, k, v, causal=causal),
        hopattn_quantize=lambda q, k, v, quantised, causal: quantise_qkv(q, k, v, "block", True),
        hopattn_bf16=lambda q, k, v, quantised, causal: hopattn.attention(q, k, v, causal=causal))


ROW_NAMES = dict(hopattn_quantize="quantize")
# Each FP8 kernel's row key for its TFLOP/s over the best FP8 peer's.
RATIOS_OVER_BEST_FP8_PEER = dict(hopattn_fp8="hopattn_over_best_fp8_peer",
                                 hopattn_fp8_vt="hopattn_fp8_vt_over_best_fp8_peer")


def time_case(fa3, cudnn, impls, prepare, index, batch, seqlen, heads, head_dim, causal, rep_ms, rounds):
    """One row of the sweep; prepare: quantised_inputs, on the loaded (base) build."""
    gen = torch.Generator(device="cuda").manual_seed(seqlen * 7 + head_dim + int(causal))
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    flops = forward_flops(batch, heads, seqlen, head_dim, causal)
    calls = {}
    try:
        quantised = prepare(q, k, v)
    except Exception as error:  # every call but the BF16 kernel's needs it
        quantised = error
    for name, fn in impls.items():
        if isinstance(quantised, Exception) and name != "hopattn_bf16":
            calls[ROW_NAMES.get(name, name)] = quantised
        else:
            calls[ROW_NAMES.get(name, name)] = lambda fn=fn: fn(q, k, v, quantised, causal)
    q8, k8, v8 = (x.to(E4M3) for x in (q, k, v))  # N(0, 1) fits e4m3: descale 1
    if fa3 is not None:
        ones = torch.ones(batch, heads, device="cuda", dtype=torch.float32)
        calls["fa3_fp8"] = lambda: first_output(fa3.flash_attn_func(q8, k8, v8, causal=causal, q_descale=ones,
                                                                    k_descale=ones, v_descale=ones))
    if cudnn is not None:
        try:
            calls["cudnn_fp8"] = cudnn.prepare(q8, k8, v8, causal)[0]
        except Exception as error:
            calls["cudnn_fp8"] = error
    row = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal)
    order = rotated(calls, index)
    row["order"] = order
    timed = interleaved_ms({n: fn for n, fn in calls.items() if not isinstance(fn, Exception)},
                           [n for n in order if not isinstance(calls[n], Exception)], rep_ms, rounds)
    for name in order:
        ms = calls[name] if isinstance(calls[name], Exception) else timed[name]
        if isinstance(ms, Exception):
            row[name] = dict(error=f"{type(ms).__name__}: {ms}"[:300])
        else:
            row[name] = dict(ms=ms) if name == "quantize" else dict(ms=ms, tflops=flops / ms / 1e9)
    ran = [(row[n]["tflops"], n) for n in FP8_PEERS if "tflops" in row.get(n, {})]
    if ran:
        best_tflops, row["best_fp8_peer"] = max(ran)
        for name, key in RATIOS_OVER_BEST_FP8_PEER.items():
            if "tflops" in row.get(name, {}):
                row[key] = row[name]["tflops"] / best_tflops
    if "tflops" in row.get("hopattn_e2e", {}) and "tflops" in row.get("hopattn_bf16", {}):
        row["e2e_over_bf16"] = row["hopattn_e2e"]["tflops"] / row["hopattn_bf16"]["tflops"]
    return row


def reference(q, k, v, causal):
    q64, k64, v64 = (t.double().transpose(1, 2) for t in (q, k, v))
    scores = (q64 @ k64.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(q.shape[1], k.shape[1], device="cuda", dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v64).transpose(1, 2)


def per_tensor_e4m3(x):
    """x as e4m3 with one scale (amax / 448) and its descale, FA3's and cuDNN's way."""
    scale = x.float().abs().amax().clamp(min=1e-12) / 448.0
    return (x.float() / scale).to(E4M3), float(scale)


def accuracy(fa3, cudnn, distribution, causal=False):
    batch, seqlen, heads, head_dim = 4, 2048, 16, 128
    gen = torch.Generator(device="cuda").manual_seed(4321)

    def make(channel_outliers):
        x = torch.randn(batch, seqlen, heads, head_dim, device="cuda", generator=gen)
        if distribution == "outliers":
            x = torch.where(torch.rand(x.shape, device="cuda", generator=gen) < 1e-3, x * 10, x)
        elif channel_outliers:
            x[..., :4] *= 20
        return x.to(torch.bfloat16)

    q, k, v = make(True), make(True), make(False)
    ref = reference(q, k, v, causal)
    runs = {}
    for quantization in ("block", "head", "tensor"):
        for hadamard in (True, False):
            name = f"hopattn_{quantization}{'_hadamard' if hadamard else ''}"
            runs[name] = lambda quantization=quantization, hadamard=hadamard: hopattn.attention_fp8(
                q, k, v, causal=causal, quantization=quantization, hadamard=hadamard)
    runs["hopattn_bf16"] = lambda: hopattn.attention(q, k, v, causal=causal)
    (q8, qs), (k8, ks), (v8, vs) = per_tensor_e4m3(q), per_tensor_e4m3(k), per_tensor_e4m3(v)
    if fa3 is not None:
        def fa3_run():
            d = lambda s: torch.full((batch, heads), s, device="cuda", dtype=torch.float32)  # noqa: E731
            return first_output(fa3.flash_attn_func(q8, k8, v8, causal=causal, q_descale=d(qs), k_descale=d(ks),
                                                    v_descale=d(vs)))
        runs["fa3_fp8_tensor"] = fa3_run
    if cudnn is not None:
        def cudnn_run():
            scale_o = 448.0 / max(ref.abs().max().item(), 1e-12)  # O's range onto e4m3's
            call, out = cudnn.prepare(q8, k8, v8, causal, descales=(qs, ks, vs), scale_o=scale_o)
            call()
            return out.float() / scale_o
        runs["cudnn_fp8_tensor"] = cudnn_run
    result = dict(batch=batch, seqlen=seqlen, heads=heads, head_dim=head_dim, causal=causal,
                  distribution=distribution)
    for name, run in runs.items():
        try:
            out = run().double()
            diff = out - ref
            result[name] = dict(rmse=diff.pow(2).mean().sqrt().item(), rel=(diff.norm() / ref.norm()).item(),
                                nan=bool(torch.isnan(out).any().item()))
        except Exception as error:
            result[name] = dict(error=f"{type(error).__name__}: {error}"[:300])
    return result


def plot(rows, path):
    plot_sweep(rows, path, (("hopattn_fp8", "o-"), ("hopattn_fp8_vt", "^-"), ("fa3_fp8", "d-"), ("cudnn_fp8", "s--"),
                            ("hopattn_e2e", "o:"), ("hopattn_bf16", "x:")),
               LABELS, "TFLOP/s (FP8 forward)",
               f"FP8 forward attention on {torch.cuda.get_device_name()}: 16k tokens, hidden 2048")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path)
    add_sweep_arguments(parser, HEAD_DIMS, SEQLENS)
    add_run_arguments(parser, rep_ms=100.0)
    add_variant_argument(parser)
    parser.add_argument("--variant-of", default="hopattn_fp8", metavar="NAME,...",
                        help="the implementations each --variant runs (hopattn_fp8, hopattn_fp8_vt, "
                             "hopattn_e2e, hopattn_quantize)")
    args = parser.parse_args()
    base_build = str(hopattn_library.find_library())  # before any call: the loaded build
    impls, variants = with_variants(implementations(), args.variant, LABELS, name=tuple(args.variant_of.split(",")))
    prepare = on_build(base_build, quantised_inputs)

    fa3, fa3_info = load_fa3(args.fa3_path)
    cudnn, cudnn_info = load_cudnn()
    for name, info in (("FlashAttention-3", fa3_info), ("cuDNN FP8", cudnn_info)):
        if not info["available"]:
            print(f"{name} not available: {info['reason']}", file=sys.stderr)
    cases = [(16384 // s, s, 2048 // d, d, c) for d in args.head_dims for s in args.seqlens for c in (False, True)]
    rows = []
    for i, case in enumerate(cases):
        rows.append(time_case(fa3, cudnn, impls, prepare, i, *case, args.rep_ms, args.rounds))
        print(f"[{i + 1}/{len(cases)}] {case}", file=sys.stderr, flush=True)
    errors = [on_build(base_build, accuracy)(fa3, cudnn, distribution)
              for distribution in ("outliers", "channels")]
    summary = dict(hopattn_over_best_fp8_peer=spread([r.get("hopattn_over_best_fp8_peer") for r in rows]),
                   seqlen_ge_1k=spread([r.get("hopattn_over_best_fp8_peer") for r in rows if r["seqlen"] >= 1024]),
                   hopattn_fp8_vt_over_best_fp8_peer=spread([r.get("hopattn_fp8_vt_over_best_fp8_peer")
                                                             for r in rows]),
                   e2e_over_bf16=spread([r.get("e2e_over_bf16") for r in rows]))
    report = dict(**report_header(torch, hopattn, args.commit, timing_note(args.rounds)),
                  fa3=fa3_info, cudnn_fp8=cudnn_info, summary=summary, cases=rows, accuracy=errors)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    if args.plot:
        plot(rows, args.plot)

    def tf(row, name):
        entry = row.get(name)
        if entry is None:
            return "      -"
        return f"{entry['tflops']:7.1f}" if "tflops" in entry else "    err"

    def ratio(row, key):
        return f"{row[key]:6.2f}" if key in row else "     -"

    print(f"{'d':>4} {'seqlen':>6} {'causal':>6} | {'hopFP8':>7} {'hopVT':>7} {'FA3FP8':>7} {'cuDNN8':>7} |"
          f" {'vsBest':>6} {'VTvsB':>6} | {'hopBF16':>7} {'e2e':>7} {'quant ms':>8}")
    for r in rows:
        quant = f"{r['quantize']['ms']:8.3f}" if "ms" in r.get("quantize", {}) else "       -"
        print(f"{r['head_dim']:>4} {r['seqlen']:>6} {str(r['causal']):>6} | {tf(r, 'hopattn_fp8')}"
              f" {tf(r, 'hopattn_fp8_vt')} {tf(r, 'fa3_fp8')} {tf(r, 'cudnn_fp8')} |"
              f" {ratio(r, 'hopattn_over_best_fp8_peer')} {ratio(r, 'hopattn_fp8_vt_over_best_fp8_peer')} |"
              f" {tf(r, 'hopattn_bf16')} {tf(r, 'hopattn_e2e')} {quant}")
    for variant in variants:  # each over the implementation it copies ("quantize" has times, not TFLOP/s)
        base = variant.split("@")[0]
        print_variant_ratios(rows, [variant], ROW_NAMES.get(base, base))
    for key, s in summary.items():
        if s:
            print(f"{key} over {s['n']} cases: min {s['min']:.3f}  median {s['median']:.3f}  max {s['max']:.3f}")
    for e in errors:
        print(f"accuracy ({e['distribution']}): " + ", ".join(
            f"{n} rmse {v['rmse']:.3e} rel {v['rel']:.3e}" if isinstance(v, dict) and "rmse" in v
            else f"{n} {v['error'][:80]}" for n, v in e.items() if isinstance(v, dict)))


if __name__ == "__main__":
    main()
