#!/usr/bin/env python3
"""What a softmax phase shares its SM sub-partitions with, read from a timeline build's raw stamps
(`timeline.py --stamps FILE`): for each step's row maxima and exponentials, the share of the phase
during which another consumer warpgroup of the CTA was in its own row maxima (the ALU pipe's FMNMX)
or its own exponentials (MUFU), and the phase's length binned by those shares and by warpgroup.

If a phase run alone (no other warpgroup in a softmax phase) is about as long as one shared with
another's, the other warpgroup's softmax is not what stretches it: what remains on the sub-partition
is the tensor cores' GEMMs and the warps' own dependencies.
  timeline_contention.py STAMPS.json[.gz] [--json OUT]"""
import argparse
import bisect
import gzip
import json
import statistics
from pathlib import Path

from timeline import consumer_tiles, step_marks

PHASES = {"row maxima": ("ScoresDone", "MaximaDone"), "exponentials": ("MaximaDone", "SoftmaxDone")}
# Bins of a share: [low, high).
BINS = [(0.0, 0.05), (0.05, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01)]


class Intervals:
    """One warpgroup's intervals of one phase, sorted and disjoint, for overlap queries."""

    def __init__(self, intervals):
        self.intervals = sorted(intervals)
        self.begins = [a for a, _ in self.intervals]

    def overlap(self, a, b):
        """Cycles of [a, b) covered by these intervals."""
        total = 0
        i = max(0, bisect.bisect_right(self.begins, a) - 1)
        while i < len(self.intervals) and self.intervals[i][0] < b:
            lo, hi = self.intervals[i]
            total += max(0, min(b, hi) - max(a, lo))
            i += 1
        return total


def phase_intervals(stamps):
    """{phase: [(begin, end)]} of one warpgroup's steps that stamped both ends."""
    out = {phase: [] for phase in PHASES}
    for _, tile_stamps in consumer_tiles(stamps):
        for step in step_marks(tile_stamps):
            for phase, (a, b) in PHASES.items():
                if a in step and b in step and step[b] > step[a]:
                    out[phase].append((step[a], step[b]))
    return out


def read_stamps(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    record = {}
    for key, stamps in data["stamps"].items():
        cta, role = (int(x) for x in key.split())
        record[(cta, role)] = [tuple(s) for s in stamps]
    return data.get("case"), record


def contention(record):
    """For each phase: rows of (phase's cycles, share with another's maxima, share with another's
    exponentials, the warpgroup's role), over every consumer warpgroup of every CTA in the record."""
    rows = {phase: [] for phase in PHASES}
    for cta in sorted({cta for cta, role in record if role > 0}):
        groups = {role: phase_intervals(stamps) for (owner, role), stamps in record.items()
                  if owner == cta and role > 0}
        indexed = {role: {phase: Intervals(iv) for phase, iv in phases.items()} for role, phases in groups.items()}
        for role, phases in groups.items():
            others = [indexed[r] for r in indexed if r != role]
            for phase, intervals in phases.items():
                for a, b in intervals:
                    length = b - a
                    # With three warpgroups two others may share the same cycles: the share is capped at 1.
                    maxima = min(1.0, sum(o["row maxima"].overlap(a, b) for o in others) / length)
                    exps = min(1.0, sum(o["exponentials"].overlap(a, b) for o in others) / length)
                    rows[phase].append((length, maxima, exps, role))
    return rows


def binned(rows, column):
    """[{share: [low, high], n, median_cycles}] of rows binned by one share column (1: maxima, 2:
    exponentials)."""
    out = []
    for lo, hi in BINS:
        lengths = [r[0] for r in rows if lo <= r[column] < hi]
        out.append(dict(share=[lo, min(hi, 1.0)], n=len(lengths),
                        median_cycles=statistics.median(lengths) if lengths else None))
    return out


def summary(rows):
    out = {}
    for phase, phase_rows in rows.items():
        alone = [r[0] for r in phase_rows if r[1] + r[2] < 0.05]
        roles = sorted({r[3] for r in phase_rows})
        out[phase] = dict(
            n=len(phase_rows),
            median_cycles=statistics.median(r[0] for r in phase_rows) if phase_rows else None,
            by_role={role: dict(n=len(lengths), median_cycles=statistics.median(lengths))
                     for role in roles for lengths in [[r[0] for r in phase_rows if r[3] == role]]},
            alone=dict(n=len(alone), median_cycles=statistics.median(alone) if alone else None),
            by_other_maxima=binned(phase_rows, 1),
            by_other_exponentials=binned(phase_rows, 2))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("stamps")
    parser.add_argument("--json")
    args = parser.parse_args()
    case, record = read_stamps(args.stamps)
    result = summary(contention(record))
    print(f"case: {case}")
    for phase, s in result.items():
        alone = s["alone"]
        print(f"{phase}: {s['n']} phases, median {s['median_cycles']:.0f} cycles; run alone (no other "
              f"warpgroup in a softmax phase): {alone['n']}, median "
              f"{alone['median_cycles'] if alone['median_cycles'] is None else round(alone['median_cycles'])}")
        print("  by warpgroup: " + ", ".join(f"{role}: {v['n']} x {round(v['median_cycles'])}"
                                           for role, v in s["by_role"].items()))
        for key, label in (("by_other_maxima", "another's row maxima"), ("by_other_exponentials", "another's exponentials")):
            cells = ", ".join(f"[{b['share'][0]:.2f}, {b['share'][1]:.2f}): {b['n']} x "
                              f"{'-' if b['median_cycles'] is None else round(b['median_cycles'])}" for b in s[key])
            print(f"  by share with {label}: {cells}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(case=case, phases=result), indent=1) + "\n")


if __name__ == "__main__":
    main()
