#!/usr/bin/env python3
"""A CPU model of the causal grid's tail: the dynamic scheduler's deal (each CTA, when free, draws the
next tile of the list) over the list of sm90/kernel/tile_order.hpp, with each tile costing its key
blocks plus a fixed cost per tile, in units of one key block. Prints, per causal sweep point (16k
tokens, hidden 2048, bf16), the sections' sizes and the makespan over the ideal (total work / CTAs).
The sections are the tree's: equal sizes of at most floor(half of L2 / K and V per pair) pairs.
--remainder-last models the rule before f34ee9d (that many pairs a section, the remainder in a last,
shorter one), --nearest the one of f34ee9d (equal sizes, the count nearest half of L2, above it too).
The model has no L2 misses: it cannot see what sections above half of L2 cost.
"""
import argparse
import heapq
import math

TILES = {64: (192, 128), 128: (128, 128), 256: (128, 80)}  # tile_size.hpp, 16-bit
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--sms", type=int, default=132)
parser.add_argument("--l2-mib", type=int, default=60, help="the device's L2 (H200: 60 MiB)")
parser.add_argument("--tile-cost", type=float, default=1.0, help="fixed cost per tile, in key blocks")
rule = parser.add_mutually_exclusive_group()
rule.add_argument("--remainder-last", action="store_true")
rule.add_argument("--nearest", action="store_true")
args = parser.parse_args()


def section_sizes(pairs, kv_bytes):
    half = (args.l2_mib << 20) // 2
    if args.remainder_last:
        per = max(1, min(pairs, half // kv_bytes))
        return [per] * (pairs // per) + ([pairs % per] if pairs % per else [])
    per = (2 * half + kv_bytes) // (2 * kv_bytes) if args.nearest else half // kv_bytes
    per = max(1, min(pairs, per))
    sections = math.ceil(pairs / per)
    q, r = divmod(pairs, sections)
    return [q + 1] * r + [q] * (sections - r)


def makespan_over_ideal(block_m, block_n, seqlen, sizes):
    m_blocks = math.ceil(seqlen / block_m)
    costs = [math.ceil(min(seqlen, (m + 1) * block_m) / block_n) + args.tile_cost
             for size in sizes for m in reversed(range(m_blocks)) for _ in range(size)]
    free_at = [0.0] * args.sms
    for cost in costs:
        heapq.heappush(free_at, heapq.heappop(free_at) + cost)
    return max(free_at) / (sum(costs) / args.sms)


print(f"{'head_dim':>8} {'seqlen':>6} {'pairs':>5}  sections          makespan / ideal")
for head_dim, (block_m, block_n) in TILES.items():
    for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
        pairs = (16384 // seqlen) * (2048 // head_dim)
        sizes = section_sizes(pairs, 2 * seqlen * head_dim * 2)
        shown = f"{len(sizes)} x {sizes[0]}" + (f" .. {sizes[-1]}" if sizes[-1] != sizes[0] else "")
        print(f"{head_dim:>8} {seqlen:>6} {pairs:>5}  {shown:<16}  {makespan_over_ideal(block_m, block_n, seqlen, sizes):.3f}")
