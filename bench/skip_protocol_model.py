#!/usr/bin/env python3
"""A model of the forward kernel's handshakes, run over random interleavings on the CPU: the producer
warp's K and V pipelines (two stages each), the consumer warpgroups' turns (pingpong's named
barriers) and the tile's end (O staged in V's buffer once every warpgroup's last P V has read it),
with each warpgroup skipping the tile's first key blocks that none of its rows sees
(mainloop.cuh's warpgroup_key_block_end and skip_warpgroup_blocks).

It checks what a GPU run would show only as a hang or a wrong result: that every interleaving
finishes (no deadlock), that no turn barrier is passed twice before it is taken, and that no stage
is released before the producer has filled it (an early arrival would count into the previous
phase). With --break-turns or --break-waits the skipped blocks leave out their turns or their
waits; the model must then fail, which shows it can tell.
  skip_protocol_model.py [--trials N] [--break-turns | --break-waits]
"""
import argparse
import random

STAGES = 2


class Pipeline:
    """Full and empty barriers of a ring of STAGES buffers, counted per use of each stage."""

    def __init__(self, consumers):
        self.fills = [0] * STAGES
        self.releases = [[0] * consumers for _ in range(STAGES)]

    def can_fill(self, use):  # producer_acquire: every consumer has released the stage's last use
        return all(r >= use // STAGES for r in self.releases[use % STAGES])

    def fill(self, use):
        assert self.fills[use % STAGES] == use // STAGES
        self.fills[use % STAGES] += 1

    def full(self, use):  # consumer_wait
        return self.fills[use % STAGES] > use // STAGES

    def release(self, consumer, use):  # consumer_release
        stage = use % STAGES
        assert self.releases[stage][consumer] == use // STAGES, "released out of order"
        assert self.fills[stage] > use // STAGES, "released before the producer filled it"
        self.releases[stage][consumer] += 1


def programs(tiles, warpgroups, skip_turns, skip_waits):
    """Each role's operations in program order. A tile is (key_block_end, each warpgroup's end)."""
    producer = []
    for t, (end, _) in enumerate(tiles):
        producer += [("fill_k",), ("drained", t)]  # the first K, then V's buffer free of O
        for _ in range(end - 1):
            producer += [("fill_k",), ("fill_v",)]  # V one block behind K
        producer += [("fill_v",)]
    consumers = []
    for g in range(warpgroups):
        ops = []
        for t, (end, ends) in enumerate(tiles):
            for _ in range(end - ends[g]):  # skip_warpgroup_blocks
                ops += ([("wait_k",)] if skip_waits else []) + [("release_k",)]
                ops += ([("wait_v",)] if skip_waits else []) + [("release_v",)]
                ops += [("wait_turn",), ("pass_turn",)] if skip_turns else []
            ops += [("wait_k",), ("release_k",)]  # the first block, outside the turns
            for _ in range(ends[g] - 1):  # overlapped steps: S of block n with P V of block n + 1
                ops += [("wait_k",), ("wait_v",), ("wait_turn",), ("pass_turn",), ("release_k",), ("release_v",)]
            ops += [("wait_v",), ("release_v",), ("tile_end", t), ("drain", t)]
        consumers.append(ops)
    return producer, consumers


def run(tiles, warpgroups, pingpong, rng, skip_turns=True, skip_waits=True):
    """One random interleaving; True if every role finished."""
    k, v = Pipeline(warpgroups), Pipeline(warpgroups)
    producer, consumers = programs(tiles, warpgroups, skip_turns, skip_waits)
    roles = consumers + [producer]
    pc = [0] * len(roles)
    k_use, v_use = [0] * len(roles), [0] * len(roles)
    turns = [1] + [0] * (warpgroups - 1)  # the first warpgroup has the first turn
    at_tile_end, drained = {}, [0] * warpgroups

    def ready(r):
        op = roles[r][pc[r]]
        if op[0] == "fill_k":
            return k.can_fill(k_use[r])
        if op[0] == "fill_v":
            return v.can_fill(v_use[r])
        if op[0] == "drained":
            return all(d >= op[1] for d in drained)
        if op[0] == "wait_k":
            return k.full(k_use[r])
        if op[0] == "wait_v":
            return v.full(v_use[r])
        if op[0] == "wait_turn":
            return not pingpong or turns[r] > 0
        if op[0] == "tile_end":  # arrive, then wait for every warpgroup
            at_tile_end.setdefault(op[1], set()).add(r)
            return len(at_tile_end[op[1]]) == warpgroups
        return True

    while True:
        runnable = [r for r in range(len(roles)) if pc[r] < len(roles[r]) and ready(r)]
        if not runnable:
            return all(pc[r] == len(roles[r]) for r in range(len(roles)))
        r = rng.choice(runnable)
        op = roles[r][pc[r]]
        pc[r] += 1
        if op[0] == "fill_k":
            k.fill(k_use[r]), k_use.__setitem__(r, k_use[r] + 1)
        elif op[0] == "fill_v":
            v.fill(v_use[r]), v_use.__setitem__(r, v_use[r] + 1)
        elif op[0] == "release_k":
            k.release(r, k_use[r]), k_use.__setitem__(r, k_use[r] + 1)
        elif op[0] == "release_v":
            v.release(r, v_use[r]), v_use.__setitem__(r, v_use[r] + 1)
        elif op[0] == "wait_turn" and pingpong:
            turns[r] -= 1
        elif op[0] == "pass_turn" and pingpong:
            turns[(r + 1) % warpgroups] += 1
            assert turns[(r + 1) % warpgroups] <= 1, "a turn barrier passed twice before it was taken"
        elif op[0] == "drain":
            drained[r] += 1


def random_tiles(rng, warpgroups):
    """Tiles of 1-5 key blocks; each warpgroup's end in [1, end], at least one warpgroup's the tile's."""
    tiles = []
    for _ in range(rng.randint(1, 4)):
        end = rng.randint(1, 5)
        ends = [rng.randint(1, end) for _ in range(warpgroups)]
        ends[rng.randrange(warpgroups)] = end
        tiles.append((end, ends))
    return tiles


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--break-turns", action="store_true", help="skipped blocks take no turns")
    parser.add_argument("--break-waits", action="store_true", help="skipped blocks release unwaited")
    args = parser.parse_args()
    failures = 0
    for trial in range(args.trials):
        rng = random.Random(trial)
        warpgroups = rng.choice([2, 3])
        tiles = random_tiles(rng, warpgroups)
        try:
            finished = run(tiles, warpgroups, rng.random() < 0.8, rng, not args.break_turns, not args.break_waits)
        except AssertionError as error:
            finished = False
            if failures == 0:
                print(f"trial {trial}: {error}")
        if not finished:
            failures += 1
            if failures == 1:
                print(f"trial {trial}: {warpgroups} warpgroups, tiles {tiles}: did not finish")
    print(f"{args.trials} interleavings, {failures} failed")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
