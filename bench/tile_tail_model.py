#!/usr/bin/env python3
"""A CPU model of the causal grid's tail: CTAs taking the tiles of sm90/kernel/tile_order.hpp's list
in order, each SM drawing the next tile when it is free (the forward's dynamic scheduler; the
backward's one-CTA-per-key-block grid as the hardware dispatches it), each tile costing its blocks
of work plus a fixed cost per tile, in units of one block. Prints, per causal sweep point (16k
tokens, hidden 2048, bf16), the sections' sizes and the makespan over the ideal (total work / SMs).

Forward: tiles are query blocks, costing the key blocks they see; sections are equal sizes of at
most floor(half of L2 / K and V per pair) pairs. --remainder-last models the rule before f34ee9d
(that many pairs a section, the remainder in a last, shorter one), --nearest the one of f34ee9d
(equal sizes, the count nearest half of L2, above it too).
--backward: tiles are key blocks, costing the query blocks that see them; sections hold the pairs
whose Q, dO and dQ accumulator fit two thirds of L2, first key blocks first; --key-block-fastest
models the grid before that order (one pair at a time, its key blocks in order).
The model has no L2 misses: it cannot see what sections larger than their share of L2 cost.
"""
import argparse
import heapq
import math

FORWARD_TILES = {64: (192, 128), 128: (128, 128), 256: (128, 80)}  # tile_size.hpp, 16-bit
BACKWARD_TILES = {64: (128, 128), 128: (64, 128), 256: (64, 64)}  # backward/tile_size.hpp, causal
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--sms", type=int, default=132)
parser.add_argument("--l2-mib", type=int, default=60, help="the device's L2 (H200: 60 MiB)")
parser.add_argument("--tile-cost", type=float, default=1.0, help="fixed cost per tile, in blocks of work")
parser.add_argument("--backward", action="store_true")
rule = parser.add_mutually_exclusive_group()
rule.add_argument("--remainder-last", action="store_true")
rule.add_argument("--nearest", action="store_true")
rule.add_argument("--key-block-fastest", action="store_true")
args = parser.parse_args()


def section_sizes(pairs, pair_bytes):
    budget = (args.l2_mib << 20) * 2 // 3 if args.backward else (args.l2_mib << 20) // 2
    if args.key_block_fastest:
        return [1] * pairs
    if args.remainder_last:
        per = max(1, min(pairs, budget // pair_bytes))
        return [per] * (pairs // per) + ([pairs % per] if pairs % per else [])
    per = (2 * budget + pair_bytes) // (2 * pair_bytes) if args.nearest else budget // pair_bytes
    per = max(1, min(pairs, per))
    sections = math.ceil(pairs / per)
    q, r = divmod(pairs, sections)
    return [q + 1] * r + [q] * (sections - r)


def tile_costs(block_m, block_n, seqlen):
    """Each tile's cost in list order within a section, longest first."""
    if args.backward:  # key block n is seen by the query blocks from its first key's on
        return [math.ceil(seqlen / block_m) - (n * block_n) // block_m + args.tile_cost
                for n in range(math.ceil(seqlen / block_n))]
    return [math.ceil(min(seqlen, (m + 1) * block_m) / block_n) + args.tile_cost
            for m in reversed(range(math.ceil(seqlen / block_m)))]


def makespan_over_ideal(block_m, block_n, seqlen, sizes):
    costs = [cost for size in sizes for cost in tile_costs(block_m, block_n, seqlen) for _ in range(size)]
    free_at = [0.0] * args.sms
    for cost in costs:
        heapq.heappush(free_at, heapq.heappop(free_at) + cost)
    return max(free_at) / (sum(costs) / args.sms)


print(f"{'head_dim':>8} {'seqlen':>6} {'pairs':>5}  sections          makespan / ideal")
for head_dim, (block_m, block_n) in (BACKWARD_TILES if args.backward else FORWARD_TILES).items():
    for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
        pairs = (16384 // seqlen) * (2048 // head_dim)
        # The forward's sections share K and V; the backward's Q, dO (bf16), their LSE and D, and dQ (float32).
        pair_bytes = seqlen * (head_dim * (2 + 2 + 4) + 8) if args.backward else 2 * seqlen * head_dim * 2
        sizes = section_sizes(pairs, pair_bytes)
        shown = f"{len(sizes)} x {sizes[0]}" + (f" .. {sizes[-1]}" if sizes[-1] != sizes[0] else "")
        print(f"{head_dim:>8} {seqlen:>6} {pairs:>5}  {shown:<16}  {makespan_over_ideal(block_m, block_n, seqlen, sizes):.3f}")
