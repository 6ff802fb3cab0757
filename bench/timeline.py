#!/usr/bin/env python3
"""When the forward kernel's roles reach their phases, from a diagnostic build (cmake
-DHOPATTN_TIMELINE=ON, e.g. CMAKE_ARGS=-DHOPATTN_TIMELINE=ON scripts/build_variant.sh timeline
true): one launch at one sweep point, its record (src/sm90/kernel/timeline.hpp) read back from the
workspace, the cycles of each phase of a key step and of a tile (median and spread over every step
of every SM), the step against the tensor cores' time for it, how far ahead of its use the producer
loaded each K block, how the SM's warpgroups share the tensor cores (each turn against the previous
S, the softmaxes' overlap, the time with no GEMM outstanding), and a drawing of one SM's
warpgroups over a few tiles.
  HOPATTN_LIBRARY=.variants/timeline/src/libhopattn.so python3 bench/timeline.py \\
      --head-dim 128 --seqlen 8192 --json t.json --png t.png
A stamp is about 7 instructions, 7 stamps a key step (about 50 instructions, 7% of head_dim 128's
step), so the phases are those of a slightly slower kernel: compare them with each other and with
another build's (FA3's below carries the same stamps), not with the sweep.
--impl fa3 reads the same record from a FlashAttention-3 build instrumented with the same stamps at
the same points of its forward (a local measurement patch, outside the repository; see the
performance log), its hopper/ folder in --fa3-path: the record's address goes to it in
$HOPATTN_TIMELINE_FA3_RECORD.
"""
import argparse
import collections
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
import hopattn  # noqa: E402
from hopattn._frontend import FIXED, TorchFrontend  # noqa: E402
from hopattn.attention import forward  # noqa: E402
from bench_common import first_output, load_fa3, report_header  # noqa: E402

HEADER = ROOT / "src" / "sm90" / "kernel" / "timeline.hpp"
# Tensor-core throughput of one SM (dense FLOP per cycle) by input type, for the step's floor.
TENSOR_FLOP_PER_CYCLE = {"bf16": 4096, "fp16": 4096, "e4m3": 8192}


def record_format():
    """The event names and values and the record's constants, read from timeline.hpp (their one
    definition)."""
    text = HEADER.read_text()
    body = re.search(r"enum class TimelineEvent[^{]*\{(.*?)\};", text, re.S).group(1)
    events, value = {}, 0
    for name, explicit in re.findall(r"^\s*k(\w+)(?:\s*=\s*(\d+))?,", body, re.M):
        value = int(explicit) if explicit else value + 1
        events[value] = name
    constants = {name: int(number) for name, number in
                 re.findall(r"(k(?:HeaderWords|MaxCtas|RolesPerCta|Entries))\s*=\s*(\d+)", text)}
    constants["kMagic"] = int(re.search(r"kMagic\s*=\s*0x([0-9a-f']+)ull", text).group(1).replace("'", ""), 16)
    return events, constants


class TimelineFrontend(TorchFrontend):
    """The torch frontend with the timeline's workspace in every call's options."""

    def __init__(self, torch, q, workspace):
        super().__init__(torch, q)
        self.workspace = workspace

    @contextlib.contextmanager
    def options(self, causal, softmax_scale):
        with super().options(causal, softmax_scale) as options:
            options.workspace = self.workspace.data_ptr()
            options.workspace_bytes = self.workspace.numel()
            yield options


def read_record(words, events, constants):
    """(the kernel's tile: block_m, block_n, head_dim, consumers; {(cta, role): [(event name, arg,
    cycle)]}) from the record's int64 words (a NumPy array), the clock unwrapped from its 32 bits."""
    header = constants["kHeaderWords"]
    if int(words[0]) != constants["kMagic"]:
        raise SystemExit("no timeline in the workspace: the loaded library was not built with "
                         "-DHOPATTN_TIMELINE=ON (HOPATTN_LIBRARY names the library)")
    roles, entries, ctas = (int(w) for w in words[1:4])
    tile = dict(zip(("block_m", "block_n", "head_dim", "consumers"), (int(w) for w in words[4:8])))
    words = words.view(np.uint64)
    record = {}
    for cta in range(min(ctas, constants["kMaxCtas"])):
        for role in range(roles):
            base = header + (cta * roles + role) * entries
            stamps = words[base + 1: base + 1 + int(words[base])]
            if len(stamps) == 0:
                continue
            clock = (stamps & np.uint64(2**32 - 1)).astype(np.int64)
            clock += np.concatenate(([0], np.cumsum(np.diff(clock) < 0))) * 2**32
            kinds = (stamps >> np.uint64(56)).astype(np.int64)
            args = ((stamps >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64)
            record[(cta, role)] = [(events.get(int(e), f"event{int(e)}"), int(a), int(c))
                                   for e, a, c in zip(kinds, args, clock)]
    return tile, record


def deciles(values):
    """Median and 10th and 90th percentiles: the cycles of a typical step, which a tile's first and
    last steps would hide in bench_common.spread's min and max."""
    if not values:
        return None
    ordered = sorted(values)
    pick = lambda f: ordered[min(len(ordered) - 1, int(f * len(ordered)))]  # noqa: E731
    return dict(median=statistics.median(ordered), p10=pick(0.1), p90=pick(0.9), n=len(ordered))


# A consumer step's phases: (name, from event, to event); "next" is the following step's begin (or
# the tile's MainloopDone).
STEP_PHASES = [
    ("inputs wait", "StepBegin", "InputsReady"),
    ("turn wait", "InputsReady", "Turn"),
    ("issue S, rescale O, issue P V", "Turn", "Issued"),
    ("S wait", "Issued", "ScoresDone"),
    ("softmax", "ScoresDone", "SoftmaxDone"),
    ("P V wait", "SoftmaxDone", "OutputDone"),
    ("P conversion, loop", "OutputDone", "next"),
]
# The softmax's two halves, where the build stamps the row maxima (MaximaDone: ours does, the FA3
# measurement patch does not); reported beside "softmax", not in a step's sum.
SOFTMAX_HALVES = [
    ("row maxima", "ScoresDone", "MaximaDone"),
    ("exponentials, sums", "MaximaDone", "SoftmaxDone"),
]
TILE_PHASES = [
    ("Q wait", "TileBegin", "QueryReady"),
    ("first S", "QueryReady", "ScoresDone"),
    ("first softmax", "ScoresDone", "SoftmaxDone"),
    ("last P V and normalisation", "before the last P V", "MainloopDone"),
    ("epilogue", "MainloopDone", "EpilogueDone"),
    ("to the next tile", "EpilogueDone", "next TileBegin"),
]


def consumer_tiles(stamps):
    """The consumer's stamps cut into tiles: [(tile, [(event, arg, cycle)])]."""
    tiles = []
    for event, arg, cycle in stamps:
        if event == "TileBegin":
            tiles.append((arg, []))
        if tiles:
            tiles[-1][1].append((event, arg, cycle))
    return tiles


# The events a complete step has stamped, besides its begin (STEP_PHASES' own, but "next").
STEP_EVENTS = {event for _, a, b in STEP_PHASES for event in (a, b)} - {"StepBegin", "next"}
OPTIONAL_STEP_EVENTS = {"MaximaDone"}


def step_marks(tile_stamps):
    """[{event: cycle, 'next': cycle, 'block': key block}] of a tile's overlapped steps; 'next' is
    the following step's begin. The last step has none: the tile's last P V and normalisation
    follow it (TILE_PHASES), not a step's P conversion."""
    steps = []
    for event, arg, cycle in tile_stamps:
        if event == "StepBegin":
            if steps:
                steps[-1]["next"] = cycle
            steps.append({"StepBegin": cycle, "block": arg})
        elif steps and event in STEP_EVENTS | OPTIONAL_STEP_EVENTS:
            steps[-1][event] = cycle
    return steps


def step_phases(tile_stamps):
    """[{phase: cycles, 'step': cycles}] of a tile's steps that stamped every point (all but its last),
    with the softmax's halves where they were stamped."""
    return [dict({name: s[b] - s[a] for name, a, b in STEP_PHASES + SOFTMAX_HALVES if a in s and b in s},
                 step=s["next"] - s["StepBegin"])
            for s in step_marks(tile_stamps) if STEP_EVENTS | {"next"} <= s.keys()]


def tile_marks(tile_stamps, next_begin):
    """The cycle of each event's first stamp in the tile, and the two points TILE_PHASES adds: where
    the tile's last P V follows (its last step's P V retired or, in a tile of one key block, the
    first softmax done) and the next tile's begin."""
    points = {}
    for event, _, cycle in tile_stamps:
        points.setdefault(event, cycle)
    points["before the last P V"] = max((c for e, _, c in tile_stamps if e == "OutputDone"),
                                        default=points.get("SoftmaxDone"))
    points["next TileBegin"] = next_begin
    return points


def tile_phases(tile_stamps, next_begin):
    points = tile_marks(tile_stamps, next_begin)
    return {name: points[b] - points[a] for name, a, b in TILE_PHASES
            if points.get(a) is not None and points.get(b) is not None}


def k_loads(producer):
    """{(tile, key block): cycle} of the producer's K loads."""
    loads, tile = {}, None
    for event, arg, cycle in producer:
        if event == "TileBegin":
            tile = arg
        elif event == "LoadK":
            loads[(tile, arg)] = cycle
    return loads


def depth_cycles(intervals):
    """{depth: cycles} of a set of [begin, end) intervals: how long exactly `depth` of them were open
    at once (touching intervals do not overlap)."""
    edges = sorted([(a, 1) for a, b in intervals if b > a] + [(b, -1) for a, b in intervals if b > a])
    cycles, depth, last = collections.Counter(), 0, None
    for cycle, change in edges:
        if depth:
            cycles[depth] += cycle - last
        depth, last = depth + change, cycle
    return cycles


def gemm_intervals(points, steps):
    """When a warpgroup of one tile has a GEMM issued, or about to be, and not yet seen retired, from
    the tile's tile_marks and step_marks: the first Q K^T (from Q's arrival, so with the wait for the
    first K), each step's S and P V (from its turn to its P V's retirement) and the last P V (from
    the point before it, with P's conversion and the normalisation, to the mainloop's end).
    Retirement is seen late (after the softmax), so these overstate the tensor cores' busy time."""
    spans = [("QueryReady", "ScoresDone"), ("before the last P V", "MainloopDone")]
    intervals = [(points[a], points[b]) for a, b in spans if points.get(a) is not None and b in points]
    return intervals + [(s["Turn"], s["OutputDone"]) for s in steps if {"Turn", "OutputDone"} <= s.keys()]


def pingpong(record, kernel_tile, flop_per_cycle):
    """How the consumer warpgroups of each SM share its tensor cores, from every stamp on one SM clock:
    - the turns: the steps of all warpgroups of a CTA in the order they issued their S (took their
      turns; in a kernel without pingpong, simply issued it); for each step after another of the
      same tile, the cycles from that step's S retiring to this one's turn. The tensor cores have
      that step's P V to run meanwhile, so a gap beyond P V's nominal time (one warpgroup's 64 rows
      at flop_per_cycle) is time they may stand idle for want of an issue ('late' turns, and the
      cycles beyond, on average per turn: an upper bound if they run below nominal). A tile's
      first step follows its tile boundary, which the no-GEMM reading covers;
    - the softmax overlap: the share of the warpgroups' softmax cycles (each tile's first softmax
      and every step's) during which another warpgroup of the SM was in its softmax too (ideally
      0: each softmax runs under the others' GEMMs, and two softmaxes share the SM's exponential
      units); and likewise for the steps' exponentials (their second half, from MaximaDone), where
      the build stamps it;
    - no GEMM outstanding: the share of the CTA's time (first tile's begin to last epilogue's end)
      in which no warpgroup had a GEMM issued and not yet seen retired (gemm_intervals), and those
      cycles per tile: a floor on the tensor cores' idle time, tile boundaries included."""
    pv_cycles = 2 * 64 * kernel_tile["block_n"] * kernel_tile["head_dim"] / flop_per_cycle
    gaps, beyond = [], 0
    softmax_depths, exponential_depths, idle, span, tiles = collections.Counter(), collections.Counter(), 0, 0, 0
    for cta in sorted({cta for cta, role in record if role > 0}):
        # Each warpgroup's tiles, each parsed once: (tile, its tile_marks, its step_marks).
        parsed = {role: [(tile, tile_marks(stamps, None), step_marks(stamps)) for tile, stamps in consumer_tiles(stamps)]
                  for (owner, role), stamps in record.items() if owner == cta and role > 0}
        tiles_parsed = [entry for cut in parsed.values() for entry in cut]
        steps = [dict(marks, tile=tile) for tile, _, marks_of_tile in tiles_parsed for marks in marks_of_tile
                 if {"Turn", "ScoresDone", "SoftmaxDone"} <= marks.keys()]
        steps.sort(key=lambda s: s["Turn"])
        for previous, step in zip(steps, steps[1:]):
            if step["tile"] == previous["tile"]:
                gaps.append(step["Turn"] - previous["ScoresDone"])
                beyond += max(0.0, gaps[-1] - pv_cycles)
        softmax_depths += depth_cycles([(s["ScoresDone"], s["SoftmaxDone"]) for s in steps] +
                                       [(p["ScoresDone"], p["SoftmaxDone"]) for _, p, _ in tiles_parsed
                                        if {"ScoresDone", "SoftmaxDone"} <= p.keys()])
        exponential_depths += depth_cycles([(s["MaximaDone"], s["SoftmaxDone"]) for s in steps if "MaximaDone" in s])
        gemms = [interval for _, points, marks in tiles_parsed for interval in gemm_intervals(points, marks)]
        # The CTA's span: its warpgroups' first TileBegin to their last EpilogueDone.
        begins = [cut[0][1]["TileBegin"] for cut in parsed.values() if cut and "TileBegin" in cut[0][1]]
        ends = [cut[-1][1]["EpilogueDone"] for cut in parsed.values() if cut and "EpilogueDone" in cut[-1][1]]
        if begins and ends:
            span += max(ends) - min(begins)
            idle += max(ends) - min(begins) - sum(depth_cycles(gemms).values())
            tiles += max(len(cut) for cut in parsed.values())
    late = [g for g in gaps if g > pv_cycles]
    def shared_share(depths):  # of the cycles in such a phase, the share with another warpgroup in it too
        total = sum(depth * cycles for depth, cycles in depths.items())
        return sum(depth * cycles for depth, cycles in depths.items() if depth > 1) / total if total else None
    return dict(p_v_nominal_cycles=pv_cycles, turn_after_previous_s=deciles(gaps),
                late_turn_share=len(late) / len(gaps) if gaps else None,
                late_cycles_per_turn=beyond / len(gaps) if gaps else None,
                softmax_overlap_share=shared_share(softmax_depths),
                exponentials_overlap_share=shared_share(exponential_depths),
                no_gemm_share=idle / span if span else None,
                no_gemm_cycles_per_tile=idle / tiles if tiles else None)


def analyse(record, kernel_tile, flop_per_cycle):
    steps, tiles, leads = [], [], []
    loads = {cta: k_loads(stamps) for (cta, role), stamps in record.items() if role == 0}
    for (cta, role), stamps in record.items():
        if role == 0:
            continue
        cut = consumer_tiles(stamps)
        for i, (tile, tile_stamps) in enumerate(cut):
            steps += step_phases(tile_stamps)
            next_begin = cut[i + 1][1][0][2] if i + 1 < len(cut) else None
            tiles.append(tile_phases(tile_stamps, next_begin))
            # How long before the consumer found K (its InputsReady) the producer issued the load.
            leads += [s["InputsReady"] - loads[cta][(tile, s["block"])] for s in step_marks(tile_stamps)
                      if "InputsReady" in s and (tile, s["block"]) in loads.get(cta, {})]
    # A warpgroup's step (S and P V of its rows) recurs once every warpgroup has done its own.
    floor = 2 * 2 * kernel_tile["block_m"] * kernel_tile["block_n"] * kernel_tile["head_dim"] / flop_per_cycle
    step_stats = {}
    for name, _, _ in STEP_PHASES:
        step_stats[name] = deciles([s[name] for s in steps])
        if name == "softmax":  # its halves beside it, where stamped (None otherwise)
            step_stats.update({half: deciles([s[half] for s in steps if half in s]) for half, _, _ in SOFTMAX_HALVES})
    step_stats["step"] = deciles([s["step"] for s in steps])
    return dict(
        steps=step_stats,
        tensor_core_floor_cycles_per_step=floor,
        tensor_core_share=floor / step_stats["step"]["median"] if step_stats["step"] else None,
        tiles={name: deciles([t[name] for t in tiles if name in t]) for name, _, _ in TILE_PHASES},
        k_load_lead_cycles=deciles(leads),
        pingpong=pingpong(record, kernel_tile, flop_per_cycle),
        tiles_recorded=len(tiles), steps_recorded=len(steps))


# The drawing's colours: the tile's own phases that lie between two of its stamps, then the steps'.
TILE_COLOURS = {"Q wait": "#7f7f7f", "first S": "#dbdb8d", "first softmax": "#c7c7c7",
                "last P V and normalisation": "#bcbd22", "epilogue": "#8c564b"}
# The producer's loads, as ticks on its row: (offset from the row, colour).
LOAD_MARKS = {"LoadK": (-0.25, "C0"), "LoadV": (0.0, "C2"), "LoadQ": (0.25, "C3")}
COLOURS = {"inputs wait": "#d62728", "turn wait": "#ff9896", "issue S, rescale O, issue P V": "#1f77b4",
           "S wait": "#aec7e8", "softmax": "#2ca02c", "P V wait": "#98df8a", "P conversion, loop": "#9467bd"}


def case_of(args, batch, heads, tile):
    """The JSON's case: the problem asked for, then the record's tile constants (head_dim among
    them), which describe the kernel that ran and so win."""
    return {**dict(dtype=args.dtype, batch=batch, seqlen=args.seqlen, heads=heads, head_dim=args.head_dim,
                   causal=args.causal), **tile}


def draw(record, cta, consumers, path, title, tiles_shown=3):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = {}
    for role in range(1, consumers + 1):
        cut = consumer_tiles(record.get((cta, role), []))
        rows[role] = cut[len(cut) // 2: len(cut) // 2 + tiles_shown]  # tiles from the middle of the run
    spans = [c for cut in rows.values() for _, stamps in cut for _, _, c in stamps]
    if not spans:
        return
    start, end = min(spans), max(spans)
    fig, ax = plt.subplots(figsize=(16, 1.2 + 0.9 * (consumers + 1)))
    def bar(role, points, a, b, colour):  # where both points were stamped
        if points.get(a) is not None and points.get(b) is not None:
            ax.barh(role, points[b] - points[a], left=points[a] - start, color=colour, height=0.6)

    for role, cut in rows.items():
        for _, stamps in cut:
            for marks in step_marks(stamps):
                for name, a, b in STEP_PHASES:
                    bar(role, marks, a, b, COLOURS[name])
            points = tile_marks(stamps, None)
            for name, a, b in TILE_PHASES:
                if name in TILE_COLOURS:
                    bar(role, points, a, b, TILE_COLOURS[name])
    for event, _, cycle in record.get((cta, 0), []):
        if event in LOAD_MARKS and start <= cycle <= end:
            offset, colour = LOAD_MARKS[event]
            ax.plot(cycle - start, offset, marker="|", color=colour)
    ax.set_ylim(-0.6, consumers + 1.3)
    ax.set_yticks(range(consumers + 1), ["producer (K, V, Q)"] + [f"warpgroup {r}" for r in range(1, consumers + 1)])
    ax.set_xlabel(f"SM cycles (CTA {cta})")
    legend = list(TILE_COLOURS.items()) + list(COLOURS.items())
    ax.legend(handles=[Patch(color=c, label=n) for n, c in legend], ncol=5, fontsize=8, loc="upper right")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", choices=("hopattn", "fa3"), default="hopattn")
    parser.add_argument("--fa3-path", help="the instrumented FA3's hopper/ directory (--impl fa3)")
    parser.add_argument("--dtype", choices=("bf16", "fp16", "e4m3"), default="bf16",
                        help="e4m3: inputs quantised as attention_fp8 does (block scales, rotated; "
                             "V given transposed)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--tokens", type=int, default=16384, help="batch x seqlen (the sweep's 16k)")
    parser.add_argument("--hidden", type=int, default=2048, help="heads x head_dim (the sweep's 2048)")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--launches", type=int, default=3, help="the last one is read")
    parser.add_argument("--cta", type=int, default=0, help="the CTA (SM) drawn")
    parser.add_argument("--json")
    parser.add_argument("--png")
    parser.add_argument("--stamps", help="write the first --stamps-ctas CTAs' stamps here (JSON), "
                                         "for readings the summary does not make")
    parser.add_argument("--stamps-ctas", type=int, default=4)
    args = parser.parse_args()
    import torch  # here, so that the record's decoding is importable (and tested) without it

    events, constants = record_format()
    batch, heads = max(1, args.tokens // args.seqlen), max(1, args.hidden // args.head_dim)
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    q, k, v = (torch.randn(batch, args.seqlen, heads, args.head_dim, device="cuda", dtype=dtype) for _ in range(3))
    record_bytes = (constants["kHeaderWords"] + constants["kMaxCtas"] * constants["kRolesPerCta"]
                    * constants["kEntries"]) * 8
    workspace = torch.zeros(record_bytes + 4096, dtype=torch.uint8, device="cuda")
    if args.impl == "fa3":
        fa3, info = load_fa3(args.fa3_path)
        if fa3 is None:
            raise SystemExit(f"FlashAttention-3 not available: {info['reason']}")
        os.environ["HOPATTN_TIMELINE_FA3_RECORD"] = f"{workspace.data_ptr():x}"
        inputs = [t.to(torch.float8_e4m3fn) for t in (q, k, v)] if args.dtype == "e4m3" else (q, k, v)
        run = lambda: first_output(fa3.flash_attn_func(*inputs, causal=args.causal))  # noqa: E731
    elif args.dtype == "e4m3":
        qc, qs = hopattn.quantize_fp8(q, scaling="block", block_rows=128, hadamard=True, seed=0)
        kc, ks = hopattn.quantize_fp8(k, scaling="block", block_rows=128, hadamard=True, seed=0)
        vc, vs = hopattn.quantize_fp8(v, scaling="head", hadamard=False, layout="v_transposed")
        # forward_fp8 takes no workspace argument: its frontend is the one that adds the record's.
        hopattn.fp8.frontend_for = lambda q, first="q": TimelineFrontend(torch, q, workspace)
        run = lambda: hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=args.causal,  # noqa: E731
                                          v_layout="v_transposed")
    else:
        fe = TimelineFrontend(torch, q, workspace)
        run = lambda: forward(fe, q, k, v, args.causal, args.head_dim ** -0.5, FIXED, False)[0]  # noqa: E731
    for _ in range(args.launches):
        out = run()
    torch.cuda.synchronize()
    reference = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v)), is_causal=args.causal).transpose(1, 2)
    error = ((out.float() - reference).norm() / reference.norm()).item()
    words = workspace[:record_bytes].view(torch.int64).cpu().numpy()
    tile, record = read_record(words, events, constants)
    summary = analyse(record, tile, TENSOR_FLOP_PER_CYCLE[args.dtype])
    commit = os.environ.get("HOPATTN_COMMIT") or subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
        text=True).stdout.strip() or "unknown"
    case = case_of(args, batch, heads, tile)
    report = dict(report_header(torch, hopattn, commit, timing="one launch's SM clock stamps (timeline build)"),
                  impl=args.impl, case=case, relative_error_vs_sdpa_float32=error, **summary)
    print(f"relative error against SDPA in float32: {error:.2e}; {summary['tiles_recorded']} tiles, "
          f"{summary['steps_recorded']} steps recorded; tile {tile['block_m']} x {tile['block_n']}, "
          f"{tile['consumers']} consumer warpgroups")
    print("key step, one consumer warpgroup (cycles: median [p10, p90]):")
    for name, stats in summary["steps"].items():
        if stats:
            print(f"  {name:32s} {stats['median']:7.0f}  [{stats['p10']:.0f}, {stats['p90']:.0f}]")
    if summary["tensor_core_share"]:
        print(f"  tensor cores' floor {summary['tensor_core_floor_cycles_per_step']:.0f} cycles: "
              f"{summary['tensor_core_share']:.0%} of the median step")
    print("tile:")
    for name, stats in summary["tiles"].items():
        if stats:
            print(f"  {name:32s} {stats['median']:7.0f}  [{stats['p10']:.0f}, {stats['p90']:.0f}]")
    if summary["k_load_lead_cycles"]:
        lead = summary["k_load_lead_cycles"]
        print(f"K issued ahead of its use: median {lead['median']:.0f} cycles [{lead['p10']:.0f}, {lead['p90']:.0f}]")
    sharing = summary["pingpong"]
    if sharing["turn_after_previous_s"]:
        gap = sharing["turn_after_previous_s"]
        print(f"turns: each S issued {gap['median']:.0f} cycles [{gap['p10']:.0f}, {gap['p90']:.0f}] after the "
              f"tile's previous S on the SM retired; later than that step's P V ({sharing['p_v_nominal_cycles']:.0f} "
              f"nominal) in {sharing['late_turn_share']:.0%} of turns, {sharing['late_cycles_per_turn']:.0f} cycles "
              f"beyond on average per turn")
    if sharing["softmax_overlap_share"] is not None:
        print(f"softmax cycles with another warpgroup in its softmax too: {sharing['softmax_overlap_share']:.0%}")
    if sharing["exponentials_overlap_share"] is not None:
        print(f"exponentials' cycles (the steps' second half) with another warpgroup in its own too: "
              f"{sharing['exponentials_overlap_share']:.0%}")
    if sharing["no_gemm_share"] is not None:
        print(f"no GEMM outstanding on the SM: {sharing['no_gemm_share']:.0%} of its time, "
              f"{sharing['no_gemm_cycles_per_tile']:.0f} cycles a tile")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if args.stamps:
        kept = {f"{cta} {role}": stamps for (cta, role), stamps in record.items() if cta < args.stamps_ctas}
        Path(args.stamps).write_text(json.dumps(dict(case=case, stamps=kept)) + "\n")
    if args.png:
        draw(record, args.cta, tile["consumers"], args.png,
             f"{args.impl} forward timeline: {args.dtype} head_dim {case['head_dim']}, seqlen {args.seqlen}, "
             f"{'causal' if args.causal else 'non-causal'} ({commit})")


if __name__ == "__main__":
    main()
