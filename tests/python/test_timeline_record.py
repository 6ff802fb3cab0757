"""bench/timeline.py's reading of a timeline record (src/sm90/kernel/timeline.hpp), on the CPU: a
record written by the kernel's rule with known phase lengths, a clock that wraps its 32 bits, two
consumer warpgroups and a producer, comes back as those lengths."""
import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import timeline  # noqa: E402

EVENTS, CONSTANTS = timeline.record_format()
IDS = {name: value for value, name in EVENTS.items()}
TILE = (128, 128, 128, 2)  # block_m, block_n, head_dim, consumer warpgroups
STEP = dict(InputsReady=20, Turn=30, Issued=300, ScoresDone=100, MaximaDone=350, SoftmaxDone=650, OutputDone=150)
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
    expected = dict(zip((name for name, _, _ in timeline.STEP_PHASES), [20, 30, 300, 100, 1000, 150, CONVERSION]))
    expected.update({"row maxima": 350, "exponentials, sums": 650})
    for name, length in expected.items():
        assert steps[name]["median"] == steps[name]["p10"] == steps[name]["p90"] == length, name
    assert steps["step"]["median"] == sum(STEP.values()) + CONVERSION
    # A tile's last step ends in its last P V and normalisation, not in a step: it is not counted.
    assert summary["steps_recorded"] == CTAS * 2 * TILES * (BLOCKS - 1)
    # Both warpgroups' GEMMs of a 128 x 128 step at head_dim 128: 2 * 2 * 128^3 / 4096 cycles.
    assert summary["tensor_core_floor_cycles_per_step"] == 2048
    # The second warpgroup runs 700 cycles behind: its exponentials (800 to 1450 cycles into each
    # 1800-cycle step) never meet the first's.
    assert summary["pingpong"]["exponentials_overlap_share"] == 0


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


def record_of_tiles(tiles, softmax, maxima=None):
    """One CTA whose consumer warpgroups (role: [(anchor, [turn cycles])], an entry a tile) run their
    tiles: a first block whose Q K^T runs from 900 to 700 cycles before the anchor and whose softmax
    ends 450 before it, then a step at each turn, whose S retires 600 after the turn and whose
    softmax lasts `softmax`; the tile's last P V ends 100 after its last step (or first block), its
    epilogue 50 later; with `maxima`, each step's row maxima are stamped done that long into its
    softmax. What the pingpong analysis reads."""
    words = np.zeros(CONSTANTS["kHeaderWords"] + CONSTANTS["kMaxCtas"] * CONSTANTS["kRolesPerCta"]
                     * CONSTANTS["kEntries"], dtype=np.uint64)
    words[:8] = (CONSTANTS["kMagic"], CONSTANTS["kRolesPerCta"], CONSTANTS["kEntries"], 1) + TILE
    for role, role_tiles in tiles.items():
        stamps = []
        for tile, (anchor, turns) in enumerate(role_tiles):
            stamps += [("TileBegin", tile, anchor - 1000), ("QueryReady", 0, anchor - 900),
                       ("ScoresDone", 0, anchor - 700), ("SoftmaxDone", 0, anchor - 450)]
            last = anchor - 450
            for block, turn in enumerate(turns):
                done = turn + 600
                last = done + softmax + 20
                stamps += [("StepBegin", block, turn - 50), ("InputsReady", 0, turn - 10), ("Turn", 0, turn),
                           ("Issued", 0, turn + 200), ("ScoresDone", 0, done)]
                stamps += [("MaximaDone", 0, done + maxima)] if maxima is not None else []
                stamps += [("SoftmaxDone", 0, done + softmax), ("OutputDone", 0, last)]
            stamps += [("MainloopDone", 0, last + 100), ("EpilogueDone", 0, last + 150)]
        write(words, 0, role, stamps)
    return timeline.read_record(words.view(np.int64), EVENTS, CONSTANTS)


def rasters(tiles, softmax, end=12000):
    """Cycle by cycle, the same record: how many warpgroups are in a softmax, and whether any has a
    GEMM outstanding (first Q K^T, each step from its turn to its P V seen retired, the last P V)."""
    in_softmax, busy = np.zeros(end, dtype=int), np.zeros(end, dtype=bool)
    for role_tiles in tiles.values():
        for anchor, turns in role_tiles:
            busy[anchor - 900: anchor - 700] = True
            in_softmax[anchor - 700: anchor - 450] += 1
            last = anchor - 450
            for turn in turns:
                last = turn + 600 + softmax + 20
                busy[turn: last] = True
                in_softmax[turn + 600: turn + 600 + softmax] += 1
            busy[last: last + 100] = True
    return in_softmax, busy


# Warpgroup 2 takes its turn 400 after warpgroup 1's S retired, warpgroup 1 its next 600 after
# 2's; at the end warpgroup 2 takes two turns in a row, 2,000 after its own S.
ONE_TILE = {1: [(1000, [1000, 3200, 5400])], 2: [(2000, [2000, 4200, 6400, 9000])]}


def test_each_turn_is_read_against_the_previous_s_on_the_sm():
    tile, stamps = record_of_tiles(ONE_TILE, softmax=1200)
    turns_seen = timeline.analyse(stamps, tile, 4096)["pingpong"]
    assert turns_seen["p_v_nominal_cycles"] == 512  # 64 rows x 128 keys x head_dim 128
    gaps = turns_seen["turn_after_previous_s"]
    assert (gaps["n"], gaps["p10"], gaps["median"], gaps["p90"]) == (6, 400, 500, 2000)
    assert turns_seen["late_turn_share"] == pytest.approx(3 / 6)
    assert turns_seen["late_cycles_per_turn"] == pytest.approx((2 * (600 - 512) + 2000 - 512) / 6)


@pytest.mark.parametrize("softmax", [300, 1200, 1500])
def test_the_softmax_overlap_is_the_share_of_softmax_cycles_shared(softmax):
    tile, stamps = record_of_tiles(ONE_TILE, softmax)
    in_softmax, _ = rasters(ONE_TILE, softmax)
    share = timeline.analyse(stamps, tile, 4096)["pingpong"]["softmax_overlap_share"]
    assert share == pytest.approx(in_softmax[in_softmax > 1].sum() / in_softmax.sum())
    assert (share == 0) == (softmax <= 1000)
    # Without the row maxima's stamp (FA3's measurement patch has none) the halves are not reported.
    summary = timeline.analyse(stamps, tile, 4096)
    assert summary["steps"]["row maxima"] is None and summary["pingpong"]["exponentials_overlap_share"] is None


@pytest.mark.parametrize("softmax", [900, 1500])
def test_the_exponentials_overlap_is_the_share_of_the_steps_second_halves_shared(softmax):
    tile, stamps = record_of_tiles(ONE_TILE, softmax, maxima=300)
    summary = timeline.analyse(stamps, tile, 4096)
    assert summary["steps"]["row maxima"]["median"] == 300
    assert summary["steps"]["exponentials, sums"]["median"] == softmax - 300
    in_exponentials = np.zeros(12000, dtype=int)
    for role_tiles in ONE_TILE.values():
        for _, turns in role_tiles:
            for turn in turns:
                in_exponentials[turn + 600 + 300: turn + 600 + softmax] += 1
    share = summary["pingpong"]["exponentials_overlap_share"]
    assert share == pytest.approx(in_exponentials[in_exponentials > 1].sum() / in_exponentials.sum())
    assert (share == 0) == (softmax <= 1000)


@pytest.mark.parametrize("softmax", [300, 1200])
def test_the_time_without_a_gemm_outstanding_is_what_no_warpgroup_covers(softmax):
    tile, stamps = record_of_tiles(ONE_TILE, softmax)
    _, busy = rasters(ONE_TILE, softmax)
    begin, end = 0, 9000 + 600 + softmax + 20 + 150  # warpgroup 1's TileBegin, warpgroup 2's epilogue
    idle = (end - begin) - busy[begin:end].sum()
    turns_seen = timeline.analyse(stamps, tile, 4096)["pingpong"]
    assert turns_seen["no_gemm_share"] == pytest.approx(idle / (end - begin))
    assert turns_seen["no_gemm_cycles_per_tile"] == pytest.approx(idle)  # one tile
    assert idle > 0


def test_turns_pair_within_a_tile_and_a_one_block_tile_keeps_its_last_p_v():
    # The second tile: one key block for warpgroup 1 (no step), two for warpgroup 2.
    tiles = {1: [(1000, [1000, 3200]), (8000, [])], 2: [(2000, [2000, 4200]), (9000, [9000])]}
    tile, stamps = record_of_tiles(tiles, softmax=300)
    turns_seen = timeline.analyse(stamps, tile, 4096)["pingpong"]
    # 4200 -> 9000 crosses the tile boundary: not a turn of the same tile.
    assert turns_seen["turn_after_previous_s"]["n"] == 3
    assert turns_seen["turn_after_previous_s"]["p90"] == 600
    _, busy = rasters(tiles, softmax=300)
    begin, end = 0, 9000 + 600 + 300 + 20 + 150
    idle = (end - begin) - busy[begin:end].sum()
    assert turns_seen["no_gemm_cycles_per_tile"] == pytest.approx(idle / 2)
    assert timeline.analyse(stamps, tile, 4096)["tiles"]["last P V and normalisation"]["n"] == 4


def test_the_case_takes_the_records_tile_beside_the_problem(record):
    # The record's header repeats head_dim; building the case once failed on the duplicate.
    tile, _ = record
    problem = argparse.Namespace(dtype="bf16", seqlen=8192, head_dim=64, causal=True)  # the record's wins
    case = timeline.case_of(problem, 2, 16, tile)
    assert case == dict(dtype="bf16", batch=2, seqlen=8192, heads=16, head_dim=128, causal=True, block_m=128,
                        block_n=128, consumers=2)


@pytest.mark.parametrize("softmax", [900, 1500])
def test_the_contention_reading_gives_each_phase_its_share_with_the_others_phases(softmax):
    """bench/timeline_contention.py against a cycle-by-cycle count of the same record."""
    import timeline_contention
    _, stamps = record_of_tiles(ONE_TILE, softmax, maxima=300)
    rows = timeline_contention.contention(stamps)
    # Rasters per warpgroup: 1 in its row maxima, 2 in its exponentials (steps only: the tiles'
    # first blocks stamp no maxima).
    raster = {role: np.zeros(12000, dtype=int) for role in ONE_TILE}
    for role, role_tiles in ONE_TILE.items():
        for _, turns in role_tiles:
            for turn in turns:
                raster[role][turn + 600: turn + 900] = 1
                raster[role][turn + 900: turn + 600 + softmax] = 2
    expected = {"row maxima": [], "exponentials": []}
    for role, role_tiles in ONE_TILE.items():
        other = raster[3 - role]
        for _, turns in role_tiles:
            for turn in turns:
                for phase, a, b in (("row maxima", turn + 600, turn + 900),
                                    ("exponentials", turn + 900, turn + 600 + softmax)):
                    expected[phase].append((b - a, (other[a:b] == 1).mean(), (other[a:b] == 2).mean(), role))
    for phase in expected:
        assert sorted(rows[phase]) == pytest.approx(sorted(expected[phase]))
    assert any(r[1] + r[2] > 0 for r in rows["exponentials"]) == (softmax > 1000)
    summary = timeline_contention.summary(rows)
    assert summary["exponentials"]["n"] == 7
    assert sum(b["n"] for b in summary["exponentials"]["by_other_exponentials"]) == 7
    assert {role: v["n"] for role, v in summary["exponentials"]["by_role"].items()} == {1: 3, 2: 4}
