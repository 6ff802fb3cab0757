"""What the benchmark scripts share: loading FlashAttention-3, the report header, host overhead,
the order of implementations per case and round, ratio summaries, and variant builds of hopattn.

FlashAttention-3 is a peer built from source outside this repository (hopper/ of
Dao-AILab/flash-attention); the caller puts its directory on PYTHONPATH or names it in
HOPATTN_FA3_PATH. When it cannot be imported the report says why and carries no FA3 figure.
"""
import argparse
import importlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

FA3_PATH_ENV = "HOPATTN_FA3_PATH"


def load_fa3(path=None):
    """(flash_attn_interface module or None, the report's "fa3" entry)."""
    path = path or os.environ.get(FA3_PATH_ENV)
    if path:
        sys.path.insert(0, str(Path(path).resolve()))
    try:
        module = importlib.import_module("flash_attn_interface")
    except Exception as error:  # ImportError, or a missing symbol in a stale build
        return None, dict(available=False, path=path,
                          reason=f"{type(error).__name__}: {error}"[:300])
    info = dict(available=True, path=path, module=getattr(module, "__file__", None))
    try:  # setup.py writes the compiled-out features beside the interface
        config = importlib.import_module("flash_attn_config").CONFIG["build_flags"]
        info["disabled"] = sorted(name.split("DISABLE_")[-1] for name, on in config.items()
                                  if on and "DISABLE_" in name)
    except Exception:
        info["disabled"] = "unknown (no flash_attn_config)"
    return module, info


def first_output(result):
    """FA3 returns out, or (out, lse, ...) depending on its version and return_attn_probs."""
    return result[0] if isinstance(result, (tuple, list)) else result


def rotated(names, index):
    """The implementations as case `index` lists them: clocks drift under sustained load, so no
    implementation should always run first (cool) or last (hot). Its rounds permute the list
    (round_orders)."""
    names = list(names)
    shift = index % len(names)
    return names[shift:] + names[:shift]


def round_orders(order, rounds):
    """The order of each of `rounds` rounds over `order`: the rows of a Williams design (a Latin
    square whose rows, with their reverses when the count is odd, put each implementation right
    after every other equally often). A rotation alone keeps every implementation's predecessor
    fixed, and what runs just before moves a timing: on code two builds share, an A/B read them
    0.98-1.07x apart, one sign per shape (forward_ab_floor_sections_4c1a1aa_*, performance log)."""
    n = len(order)
    first = [0] + [(k + 1) // 2 if k % 2 else n - k // 2 for k in range(1, n)]  # 0, 1, n-1, 2, n-2, ...
    rows = [[order[(j + shift) % n] for j in first] for shift in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return [rows[r % len(rows)] for r in range(rounds)]


def host_us(call, sync, calls=200, rounds=5, warmup=20):
    """Wall-clock microseconds per call of a problem so small that the launch path dominates:
    `calls` calls back to back with one sync at the end, median of `rounds` rounds."""
    for _ in range(warmup):
        call()
    sync()
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        per_round.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(per_round)


def spread(values):
    """min / median / max of the ratios that exist (None where none do)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return dict(min=min(values), median=statistics.median(values), max=max(values), n=len(values))


def report_header(torch, hopattn, commit, timing):
    """The fields every benchmark JSON starts with."""
    return dict(
        gpu=torch.cuda.get_device_name(), commit=commit,
        command=" ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        torch=torch.__version__, cudnn=torch.backends.cudnn.version(), host=platform.node(),
        hopattn_build=hopattn.build_info(), timing=timing)


def positive_int(text):
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def add_run_arguments(parser, rep_ms):
    """The arguments every benchmark takes: time per case, the commit to record, FA3's location."""
    parser.add_argument("--rep-ms", type=float, default=rep_ms,
                        help="do_bench time per case and implementation, over all rounds")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="rounds per case, each timing every implementation once (interleaved_ms)")
    parser.add_argument("--commit", default=os.environ.get("HOPATTN_COMMIT", "unknown"))
    parser.add_argument("--fa3-path", help=f"FA3's hopper/ directory (default: ${FA3_PATH_ENV})")


def add_variant_argument(parser):
    """--variant NAME=LIBRARY (repeatable): another build of libhopattn.so (an experiment,
    scripts/build_variant.sh) timed beside the one loaded, in the same rotation, as "hopattn@NAME"
    (bench_varlen.py: "hopattn_varlen@NAME")."""
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=LIBRARY",
                        help="another libhopattn.so to time beside the loaded one")


def timing_note(rounds):
    """How interleaved_ms times, as each report's "timing" field says it."""
    return (f"median of {rounds} rounds of triton.testing.do_bench medians, L2 flushed; implementation "
            "order rotated per case, permuted per round (round_orders)")


def interleaved_ms(calls, order, rep_ms, rounds):
    """name -> median milliseconds of each zero-argument callable in `calls`, over `rounds` rounds
    that each time every one once, in the orders round_orders(order) gives (triton's do_bench, L2
    flushed, rep_ms / rounds each): a drift of the GPU's clocks during a case then reaches every
    implementation alike. One long measurement per implementation gave ratios of 0.93-1.08 between
    two builds of the same kernel (bdae67b). A callable that raises maps to its exception and is
    not timed again."""
    from triton.testing import do_bench

    times = {name: [] for name in order}
    for round_order in round_orders(order, rounds):
        for name in round_order:
            if isinstance(times[name], Exception):
                continue
            try:
                ms = do_bench(calls[name], warmup=10, rep=rep_ms / rounds, return_mode="median")
                times[name].append(ms)
            except Exception as error:  # a peer may refuse a shape; the caller records why
                times[name] = error
    return {name: t if isinstance(t, Exception) else statistics.median(t) for name, t in times.items()}


_loaded_build = [None]  # the library hopattn calls load now, once on_build has switched it


def on_build(path, fn):
    """fn, run with libhopattn.so at `path` as the loaded build. The package loads one library
    per process (hopattn._lib.library, cached); the switch costs nothing unless the build changes,
    and do_bench's warm-up calls absorb it."""
    from hopattn import _lib

    def run(*args):
        if _loaded_build[0] != path:
            os.environ["HOPATTN_LIBRARY"] = path
            _lib.library.cache_clear()
            _loaded_build[0] = path
        return fn(*args)
    return run


def on_build_prepared(path, prepare):
    """on_build for a prepare(...) that returns the timed call (bench_backward.py's): the
    preparation and every later call of what it returns run on the build at `path`."""
    return on_build(path, lambda *args: on_build(path, prepare(*args)))


def with_variants(impls, variants, labels, name="hopattn", wrap=on_build):
    """(`impls` plus one copy of impls[name] per --variant, "name@VARIANT", each running on its own
    build of the library (`wrap`: on_build, or on_build_prepared); the names of those copies, which
    `labels` now labels by name). `name` may be a tuple of names, each copied. Call it before any
    hopattn call: the loaded build then is the base one."""
    if not variants:
        return impls, []
    from hopattn import _lib
    base = str(_lib.find_library())
    _loaded_build[0] = base
    # Every implementation that calls hopattn runs on the base build unless it is a variant.
    result = {key: wrap(base, fn) if key.startswith("hopattn") else fn for key, fn in impls.items()}
    for variant in variants:
        label, _, path = variant.partition("=")
        if not label or not Path(path).is_file():
            raise SystemExit(f"--variant {variant!r}: expected NAME=LIBRARY with LIBRARY an existing file")
        if Path(path).samefile(base):
            raise SystemExit(f"--variant {variant!r} is the loaded library itself ({base}); set "
                             "HOPATTN_LIBRARY to the tree's own build")
        for copied in (name,) if isinstance(name, str) else name:
            result[f"{copied}@{label}"] = wrap(str(Path(path).resolve()), impls[copied])
    added = [key for key in result if key not in impls]
    labels.update({key: key for key in added})
    return result, added


def print_variant_ratios(rows, variants, base):
    """One line per --variant: its TFLOP/s over `base`'s at each (head_dim, seqlen, mask) row."""
    for name in variants:
        print(f"{name} / {base}: " + ", ".join(
            f"d{r['head_dim']} {r['seqlen']}{' c' if r['causal'] else ''} "
            f"{r[name]['tflops'] / r[base]['tflops']:.3f}"
            for r in rows if "tflops" in r.get(name, {}) and "tflops" in r.get(base, {})))


def add_sweep_arguments(parser, head_dims, seqlens):
    """The FlashAttention-3 sweep's axes, which a run may narrow."""
    parser.add_argument("--head-dims", type=int, nargs="+", default=head_dims)
    parser.add_argument("--seqlens", type=int, nargs="+", default=seqlens)


def plot_sweep(rows, path, series, labels, ylabel, title):
    """TFLOP/s against seqlen, one panel per (mask, head_dim) of the rows: `series` the (name, matplotlib
    style) of the implementations to draw, `labels` their legend names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    head_dims = sorted({r["head_dim"] for r in rows})  # the ones this run measured
    fig, axes = plt.subplots(2, len(head_dims), figsize=(5 * len(head_dims), 8), sharey=True, squeeze=False)
    for col, head_dim in enumerate(head_dims):
        for line, causal in enumerate((False, True)):
            ax = axes[line][col]
            cases = [r for r in rows if r["head_dim"] == head_dim and r["causal"] == causal]
            for name, style in series:
                points = [(r["seqlen"], r[name]["tflops"]) for r in cases if "tflops" in r.get(name, {})]
                if points:
                    ax.plot(*zip(*points), style, label=labels[name])
            ax.set_xscale("log", base=2)
            ax.set_title(f"head_dim {head_dim}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("seqlen")
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(ylabel)
    axes[0][0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
