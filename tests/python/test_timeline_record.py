"""bench/timeline.py's reading of a timeline record (src/sm90/kernel/timeline.hpp), on the CPU: a
record written by the kernel's rule with known phase lengths, a clock that wraps its 32 bits, two
consumer warpgroups and a producer, comes back as those lengths."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import timeline  # noqa: E402

EVENTS, CONSTANTS = timeline.record_format()
IDS = {name: value for value, name in EVENTS.items()}
TILE = (128, 128, 128, 2)  # block_m, block_n, head_dim, consumer warpgroups
STEP = dict(InputsReady=20, Turn=30, Issued=300, ScoresDone=100, SoftmaxDone=1000, OutputDone=150)
CONVERSION = 200  # OutputDone to the next StepBegin
BLOCKS, TILES, CTAS = 7, 4, 2
LEAD = 3000  # the producer issues K this long before its step begins


def write(words, cta, role, stamps):
    """The kernel's rule: the slot's first word the count, then one word a stamp, the 32-bit clock
    in its low half and event << 24 | arg in its high half."""
    base = CONSTANTS["kHeaderWords"] + (cta * CONSTANTS["kRolesPerCta"] + role) * CONSTANTS["kEntries"]
    words[base] = len(stamps)
    for i, (event, arg, clock) in enumerate(stamps):
        words[base + 1 + i] = (IDS[event] << 24 | arg) << 32 | clock % 2**32


@pytest.fixture(scope="module")
def record():
    words = np.zeros(CONSTANTS["kHeaderWords"] + CONSTANTS["kMaxCtas"] * CONSTANTS["kRolesPerCta"]
                     * CONSTANTS["kEntries"], dtype=np.uint64)
    words[:8] = (CONSTANTS["kMagic"], CONSTANTS["kRolesPerCta"], CONSTANTS["kEntries"], CTAS) + TILE
    for cta in range(CTAS):
        loads = []
        for role in (1, 2):
            t, stamps = 2**32 - 5000 + 700 * role, []  # the clock wraps inside the record
            for tile in range(TILES):
                stamps += [("TileBegin", tile, t), ("QueryReady", 0, t + 300), ("ScoresDone", 0, t + 800),
                           ("SoftmaxDone", 0, t + 1700)]
                t += 1750
                for block in range(BLOCKS, 0, -1):
                    if role == 1:
                        loads.append((tile, block, t - LEAD))
                    stamps.append(("StepBegin", block, t))
                    for event, length in STEP.items():
                        t += length
                        stamps.append((event, 0, t))
                    t += CONVERSION
                stamps += [("MainloopDone", 0, t), ("EpilogueDone", 0, t + 400)]
                t += 500
            write(words, cta, role, stamps)
        producer = []
        for tile in range(TILES):
            tile_loads = [load for load in loads if load[0] == tile]
            producer.append(("TileBegin", tile, tile_loads[0][2] - 1))
            producer += [("LoadK", block, clock) for _, block, clock in tile_loads]
        write(words, cta, 0, producer)
    return timeline.read_record(words.view(np.int64), EVENTS, CONSTANTS)


def test_the_header_gives_the_kernels_tile(record):
    tile, _ = record
    assert tuple(tile.values()) == TILE


def test_every_role_of_every_cta_is_read_in_order(record):
    _, stamps = record
    assert sorted(stamps) == [(cta, role) for cta in range(CTAS) for role in range(3)]
    for role_stamps in stamps.values():
        clocks = [clock for _, _, clock in role_stamps]
        assert clocks == sorted(clocks)  # unwrapped across 2^32


def test_the_step_phases_come_back(record):
    tile, stamps = record
    summary = timeline.analyse(stamps, tile, 4096)
    steps = summary["steps"]
    expected = dict(zip((name for name, _, _ in timeline.STEP_PHASES), list(STEP.values()) + [CONVERSION]))
    for name, length in expected.items():
        assert steps[name]["median"] == steps[name]["p10"] == steps[name]["p90"] == length, name
    assert steps["step"]["median"] == sum(STEP.values()) + CONVERSION
    # A tile's last step ends in its last P V and normalisation, not in a step: it is not counted.
    assert summary["steps_recorded"] == CTAS * 2 * TILES * (BLOCKS - 1)
    # Both warpgroups' GEMMs of a 128 x 128 step at head_dim 128: 2 * 2 * 128^3 / 4096 cycles.
    assert summary["tensor_core_floor_cycles_per_step"] == 2048


def test_the_tile_phases_and_the_load_lead_come_back(record):
    tile, stamps = record
    summary = timeline.analyse(stamps, tile, 4096)
    tiles = summary["tiles"]
    assert tiles["Q wait"]["median"] == 300
    assert tiles["first S"]["median"] == 500
    assert tiles["last P V and normalisation"]["median"] == CONVERSION
    assert tiles["epilogue"]["median"] == 400
    assert tiles["to the next tile"]["median"] == 100
    # K is issued LEAD before its step begins; the consumer finds it at InputsReady, 20 later.
    assert summary["k_load_lead_cycles"]["p10"] == LEAD + STEP["InputsReady"]


def test_a_record_without_the_magic_is_refused():
    words = np.zeros(CONSTANTS["kHeaderWords"] + 8, dtype=np.int64)
    with pytest.raises(SystemExit, match="HOPATTN_TIMELINE"):
        timeline.read_record(words, EVENTS, CONSTANTS)


def record_of_turns(turns, softmax):
    """One CTA whose consumer warpgroups (role: [turn cycles]) each run one tile: a first block whose
    Q K^T runs from 900 to 500 cycles before the first turn, then steps whose S retires 600 after
    the turn and whose softmax lasts `softmax`; what the pingpong analysis reads."""
    words = np.zeros(CONSTANTS["kHeaderWords"] + CONSTANTS["kMaxCtas"] * CONSTANTS["kRolesPerCta"]
                     * CONSTANTS["kEntries"], dtype=np.uint64)
    words[:8] = (CONSTANTS["kMagic"], CONSTANTS["kRolesPerCta"], CONSTANTS["kEntries"], 1) + TILE
    for role, role_turns in turns.items():
        first = role_turns[0]
        stamps = [("TileBegin", 0, first - 1000), ("QueryReady", 0, first - 900), ("ScoresDone", 0, first - 500),
                  ("SoftmaxDone", 0, first - 100)]
        for block, turn in enumerate(role_turns):
            done = turn + 600
            stamps += [("StepBegin", block, turn - 50), ("InputsReady", 0, turn - 10), ("Turn", 0, turn),
                       ("Issued", 0, turn + 200), ("ScoresDone", 0, done), ("SoftmaxDone", 0, done + softmax),
                       ("OutputDone", 0, done + softmax + 20)]
        end = stamps[-1][2] + 100
        write(words, 0, role, stamps + [("MainloopDone", 0, end), ("EpilogueDone", 0, end + 50)])
    return timeline.read_record(words.view(np.int64), EVENTS, CONSTANTS)


def test_each_turn_is_read_against_the_previous_s_on_the_sm():
    # Warpgroup 2 takes its turn 400 after warpgroup 1's S retired, warpgroup 1 its next 600 after
    # 2's; at the end warpgroup 2 takes two turns in a row, 2,000 after its own S.
    turns = {1: [1000, 3200, 5400], 2: [2000, 4200, 6400, 9000]}
    tile, stamps = record_of_turns(turns, softmax=1200)
    turns_seen = timeline.analyse(stamps, tile, 4096)["pingpong"]
    assert turns_seen["p_v_nominal_cycles"] == 512  # 64 rows x 128 keys x head_dim 128
    gaps = turns_seen["turn_after_previous_s"]
    assert (gaps["n"], gaps["p10"], gaps["median"], gaps["p90"]) == (6, 400, 500, 2000)
    assert turns_seen["late_turn_share"] == pytest.approx(3 / 6)
    assert turns_seen["late_cycles_per_turn"] == pytest.approx((2 * (600 - 512) + 2000 - 512) / 6)


@pytest.mark.parametrize("softmax", [300, 1200, 1500])
def test_the_softmax_overlap_is_the_share_of_softmax_cycles_shared(softmax):
    turns = {1: [1000, 3200, 5400], 2: [2000, 4200, 6400]}
    tile, stamps = record_of_turns(turns, softmax)
    # Counted cycle by cycle: how many warpgroups are in their softmax.
    busy = np.zeros(10000, dtype=int)
    for role_turns in turns.values():
        for turn in role_turns:
            busy[turn + 600: turn + 600 + softmax] += 1
    expected = busy[busy > 1].sum() / busy.sum()
    share = timeline.analyse(stamps, tile, 4096)["pingpong"]["softmax_overlap_share"]
    assert share == pytest.approx(expected)
    assert (share == 0) == (softmax <= 1000)


@pytest.mark.parametrize("softmax", [300, 1200])
def test_the_time_without_a_gemm_outstanding_is_what_no_warpgroup_covers(softmax):
    turns = {1: [1000, 3200, 5400], 2: [2000, 4200, 6400]}
    tile, stamps = record_of_turns(turns, softmax)
    # Cycle by cycle: a warpgroup has a GEMM outstanding for its first Q K^T, from each turn to that
    # step's P V seen retired (20 after its softmax), then for its last P V and normalisation.
    busy = np.zeros(10000, dtype=bool)
    begin, end = min(t[0] for t in turns.values()) - 1000, 0
    for role_turns in turns.values():
        busy[role_turns[0] - 900: role_turns[0] - 500] = True
        for turn in role_turns:
            busy[turn: turn + 600 + softmax + 20] = True
        last = role_turns[-1] + 600 + softmax + 20
        busy[last: last + 100] = True
        end = max(end, last + 150)
    idle = (end - begin) - busy[begin:end].sum()
    turns_seen = timeline.analyse(stamps, tile, 4096)["pingpong"]
    assert turns_seen["no_gemm_share"] == pytest.approx(idle / (end - begin))
    assert turns_seen["no_gemm_cycles_per_tile"] == pytest.approx(idle)  # one tile
    assert idle > 0
