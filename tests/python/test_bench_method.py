"""The benchmarks' timing order (bench/bench_common.py), on the CPU: every round times every
implementation once, and over a full design each implementation runs right after every other
equally often, so that no pair of builds in an A/B always has the same predecessor."""
import collections
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_common import interleaved_ms, round_orders  # noqa: E402


@pytest.mark.parametrize("count", range(1, 9))
def test_every_round_times_every_implementation_once(count):
    names = [f"impl{i}" for i in range(count)]
    for order in round_orders(names, 11):
        assert sorted(order) == sorted(names)


@pytest.mark.parametrize("count", range(2, 9))
def test_each_implementation_follows_every_other_equally_often(count):
    names = [f"impl{i}" for i in range(count)]
    design = count if count % 2 == 0 else 2 * count  # the rows, and their reverses when odd
    follows = collections.Counter((order[i], order[i + 1])
                                  for order in round_orders(names, design) for i in range(count - 1))
    assert len(follows) == count * (count - 1)  # every ordered pair of distinct implementations
    assert len(set(follows.values())) == 1


def test_interleaved_ms_times_in_the_round_orders(monkeypatch):
    # triton's do_bench replaced by one call of the function (no GPU): the log is the call order,
    # which a fixed order in every round would not match.
    log = []

    def do_bench(fn, **_):
        fn()
        return 1.0

    testing = types.SimpleNamespace(do_bench=do_bench)
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(testing=testing))
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    names = ["a", "b", "c"]
    medians = interleaved_ms({n: (lambda n=n: log.append(n)) for n in names}, names, rep_ms=1, rounds=6)
    assert log == [name for order in round_orders(names, 6) for name in order]
    assert sorted(medians) == names
