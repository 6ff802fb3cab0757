#!/usr/bin/env python3
"""Summaries of an Nsight Compute source page (SASS) exported as CSV, as the performance log quotes
them: `ncu -i REPORT --page source --csv --print-source sass > page.csv` (gzip optional), then
  ncu_source.py loops page.csv               backward branches, with their share of the samples
  ncu_source.py region page.csv LO HI [MIN]   the stall mix of [LO, HI] and, in order, its
                                              instructions above MIN percent of its samples
                                              (default 0.4) and every GEMM, barrier, wait and branch
  ncu_source.py mix page.csv LO HI            instructions executed per iteration, by opcode
  ncu_source.py hot page.csv                  `region` and `mix` of the key loop: the smallest loop
                                              with a GEMM and at least half the samples of the
                                              busiest such loop (an attention kernel's step)
LO and HI are absolute addresses (hex), as `loops` prints them."""
import argparse
import csv
import gzip
import re
from collections import defaultdict

import sass_loops


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_page(path):
    """The instructions as (address, sass, samples, executions, {stall reason: samples})."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if "Address" in line and "Source" in line)
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    column = {name: i for i, name in enumerate(header)}
    address = next(i for name, i in column.items() if "Address" in name)
    samples = next(i for name, i in column.items() if name.startswith("Warp Stall Sampling (All"))
    executed = next(i for name, i in column.items() if name.startswith("Instructions Executed"))
    stalls = [(name[len("stall_"):], i) for name, i in column.items()
              if name.startswith("stall_") and "Not Issued" not in name]
    return [(int(r[address], 16), r[column["Source"]], number(r[samples]), number(r[executed]),
             {name: number(r[i]) for name, i in stalls}) for r in rows[1:] if len(r) == len(header)]


def opcode(sass):
    words = sass.split()
    if not words:
        return "?"
    return (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]


def backward_branches(page):
    """(samples, lo, hi, instructions, most executions, has a GEMM) of every loop [lo, hi]
    (sass_loops.backward_branches: out-of-line barrier retries are not loops)."""
    found = []
    for lo, hi in sass_loops.backward_branches([(addr, sass) for addr, sass, *_ in page]):
        body = [x for x in page if lo <= x[0] <= hi]
        found.append((sum(x[2] for x in body), lo, hi, len(body), max(x[3] for x in body),
                      any("GMMA" in x[1] for x in body)))
    return found


def loops(page):
    total = sum(x[2] for x in page) or 1
    for share, lo, hi, count, runs, _ in sorted(backward_branches(page), reverse=True)[:16]:
        print(f"[{lo:#x}, {hi:#x}] {count:5d} instructions, {100 * share / total:5.1f}% of samples, "
              f"executed up to {runs:.0f} times")


def stall_mix(body):
    mix = defaultdict(float)
    for x in body:
        for name, value in x[4].items():
            mix[name] += value
    total = sum(mix.values()) or 1
    return ", ".join(f"{name} {100 * v / total:.1f}%" for name, v in sorted(mix.items(), key=lambda t: -t[1])[:10])


def region(page, lo, hi, minimum):
    body = [x for x in page if lo <= x[0] <= hi]
    total = sum(x[2] for x in body) or 1
    print(f"{len(body)} instructions, {total:.0f} samples; stalls: {stall_mix(body)}")
    cumulative = 0.0
    for addr, sass, samples, runs, stalls in body:
        cumulative += samples
        if 100 * samples / total > minimum or re.search(r"GMMA|DEPBAR|BAR|SYNCS|VOTE|BRA|SHFL", sass):
            top = sorted(((v, k) for k, v in stalls.items() if v), reverse=True)[:2]
            print(f"{addr - lo:#07x} {100 * samples / total:5.2f}% (to here {100 * cumulative / total:5.1f}%) "
                  f"x{runs:.0f}  {sass[:72]:72s} " + " ".join(f"{k}={v:.0f}" for v, k in top))


def opcode_mix(page, lo, hi):
    body = [x for x in page if lo <= x[0] <= hi]
    iterations = max(x[3] for x in body) or 1
    mix = defaultdict(lambda: [0.0, 0.0])
    for _, sass, samples, runs, _ in body:
        mix[opcode(sass)][0] += runs / iterations
        mix[opcode(sass)][1] += samples
    executed = sum(v[0] for v in mix.values())
    total = sum(v[1] for v in mix.values()) or 1
    print(f"{executed:.0f} instructions executed per iteration ({len(body)} in the code)")
    print(", ".join(f"{op} {v[0]:.0f} ({100 * v[1] / total:.0f}% of samples)"
                    for op, v in sorted(mix.items(), key=lambda t: -t[1][0]) if v[0] >= 0.5))


def hot(page, minimum):
    gemm_loops = [x for x in backward_branches(page) if x[5]]
    if not gemm_loops:
        print("no loop with a GEMM")
        return
    busiest = max(x[0] for x in gemm_loops)
    _, lo, hi, *_ = min((x for x in gemm_loops if x[0] >= busiest / 2), key=lambda x: x[3])
    print(f"key loop [{lo:#x}, {hi:#x}]")
    opcode_mix(page, lo, hi)
    region(page, lo, hi, minimum)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("loops", "region", "mix", "hot"))
    parser.add_argument("page")
    parser.add_argument("lo", nargs="?")
    parser.add_argument("hi", nargs="?")
    parser.add_argument("minimum", nargs="?", type=float, default=0.4)
    args = parser.parse_args()
    page = read_page(args.page)
    if args.what == "loops":
        loops(page)
    elif args.what == "hot":
        hot(page, args.minimum)
    elif args.lo is None or args.hi is None:
        parser.error(f"{args.what} needs LO and HI")
    elif args.what == "region":
        region(page, int(args.lo, 16), int(args.hi, 16), args.minimum)
    else:
        opcode_mix(page, int(args.lo, 16), int(args.hi, 16))


if __name__ == "__main__":
    main()
