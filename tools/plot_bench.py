#!/usr/bin/env python3
"""Throughput against sequence length from hopattn-bench's --json file (JSON Lines).

hopattn-bench --plot runs this script; it also works by hand on a saved file:
    python3 tools/plot_bench.py results.jsonl results.png
    python3 tools/plot_bench.py --check     # exit 0 if matplotlib can be imported
One line per configuration (backend, dtype, batch, heads, head_dim, mask), seqlen_q on x;
when every configuration has a single case, a bar per case instead. A case that failed its
check is drawn with a red cross; cases the library refused are left out.
Reads the older single-object file ({"cases": [...]}) too.
"""
import json
import sys

EXIT_MISSING = 3  # hopattn-bench's exit status for an output it cannot produce


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit(f"matplotlib is not installed for {sys.executable} "
                 f"(pip install matplotlib), so no plot can be drawn")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_results(path):
    """The header object (or {}) and the case objects, from JSON Lines or the older format."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        whole = json.loads(text)
        if isinstance(whole, dict) and "cases" in whole and isinstance(whole["cases"], list):
            return whole, whole["cases"]
    except json.JSONDecodeError:
        pass
    header, cases = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            # The last line of an interrupted run may be cut; earlier ones may not.
            if number == len(text.splitlines()):
                break
            raise SystemExit(f"{path}:{number}: not JSON ({e})")
        if record.get("type") == "header":
            header = record
        elif record.get("type", "case") == "case":
            cases.append(record)
    return header, cases


def series_key(case):
    mask = "causal" if case["causal"] else "full"
    kv = f"/{case['heads_kv']}" if case["heads_kv"] != case["heads_q"] else ""
    batch = "varlen" if case.get("varlen_lengths") else f"b={case['batch']}"
    return f"{case['backend']} {case['dtype']} {batch} h={case['heads_q']}{kv} d={case['head_dim']} {mask}"


def plot(header, cases, out_path):
    plt = import_pyplot()
    done = [c for c in cases if c.get("status") == "HOPATTN_OK" and c.get("flops_per_second")]
    if not done:
        sys.exit("no case finished with status HOPATTN_OK: nothing to plot")
    gpu = any(c["backend"] == "sm90" for c in done)
    scale, unit = (1e12, "TFLOP/s") if gpu else (1e9, "GFLOP/s")
    series = {}
    for c in done:
        series.setdefault(series_key(c), []).append(c)

    fig, ax = plt.subplots(figsize=(8, 4.8))
    if all(len(points) == 1 for points in series.values()):
        labels = [f"{key} s={points[0]['seqlen_q']}" for key, points in series.items()]
        values = [points[0]["flops_per_second"] / scale for points in series.values()]
        colors = ["tab:blue" if points[0]["pass"] else "tab:red" for points in series.values()]
        ax.barh(range(len(values)), values, color=colors)
        ax.set_yticks(range(len(values)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
    else:
        for key, points in sorted(series.items()):
            points.sort(key=lambda c: c["seqlen_q"])
            xs = [c["seqlen_q"] for c in points]
            ys = [c["flops_per_second"] / scale for c in points]
            ax.plot(xs, ys, "o-", label=key)
            failed = [(x, y) for x, y, c in zip(xs, ys, points) if not c["pass"]]
            if failed:
                ax.plot(*zip(*failed), "x", color="red", markersize=10, mew=2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("seqlen_q (varlen: total tokens)")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    title = f"hopattn {header.get('version', '?')}"
    if header.get("device"):
        title += f" on {header['device']}"
    if header.get("git_commit", "unknown") != "unknown":
        title += f", commit {header['git_commit'][:7]}"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)


def main(argv):
    if argv[1:] == ["--check"]:
        import_pyplot()
        return 0
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    header, cases = read_results(argv[1])
    plot(header, cases, argv[2])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except SystemExit as e:
        # sys.exit("message") prints it and exits 1; hopattn-bench reads 3 as "cannot produce".
        if isinstance(e.code, str):
            print(f"plot_bench.py: {e.code}", file=sys.stderr)
            sys.exit(EXIT_MISSING)
        raise
    except OSError as e:
        print(f"plot_bench.py: {e}", file=sys.stderr)
        sys.exit(EXIT_MISSING)
