"""bench/skip_protocol_model.py (CPU only): the forward's pipelines and turns with warpgroups that
skip the key blocks none of their rows sees finish in every sampled interleaving, and the model
fails when the skipped blocks leave out their turns or their waits."""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import skip_protocol_model as model  # noqa: E402


def failures(trials, **breaks):
    failed = 0
    for trial in range(trials):
        rng = random.Random(trial)
        warpgroups = rng.choice([2, 3])
        tiles = model.random_tiles(rng, warpgroups)
        try:
            failed += not model.run(tiles, warpgroups, True, rng, **breaks)
        except AssertionError:
            failed += 1
    return failed


def test_skipping_warpgroups_finish_every_interleaving():
    assert failures(400) == 0


def test_the_model_catches_skipped_blocks_without_turns_or_waits():
    assert failures(400, skip_turns=False) > 0
    assert failures(400, skip_waits=False) > 0


def test_a_tile_where_two_of_three_warpgroups_skip_its_last_block():
    tiles = [(4, [3, 3, 4]), (5, [4, 5, 5]), (1, [1, 1, 1])]
    for seed in range(50):
        assert model.run(tiles, 3, True, random.Random(seed))
