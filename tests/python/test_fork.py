"""multiprocessing with the fork start method (issue 10): a child forked after the parent has
called the library computes, and exits, instead of waiting for thread-pool workers that fork()
did not copy. Each child runs under a deadline and is killed if it hangs."""

import multiprocessing
import sys

import numpy as np
import pytest

import hopattn

DEADLINE_S = 60

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the fork start method is tested on Linux")


def _inputs(seqlen):
    rng = np.random.default_rng(7)
    shape = (1, seqlen, 2, 32)
    return tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(3))


def _child_attention(seqlen, queue):
    q, k, v = _inputs(seqlen)
    queue.put(hopattn.attention(q, k, v, causal=True))


def _child_no_call():
    pass


def _run(target, *args):
    """The child's exit code and what it put in the queue; fails if it hangs."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue) if args else ())
    child.start()
    result = None
    if args:
        try:
            result = queue.get(timeout=DEADLINE_S)
        except Exception:  # queue.Empty: the child never answered
            pass
    child.join(DEADLINE_S)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the forked child hung for {DEADLINE_S} s and was killed")
    return child.exitcode, result


def test_child_computes_after_the_parent_called():
    q, k, v = _inputs(1000)
    expected = hopattn.attention(q, k, v, causal=True)  # the parent's pool now has workers
    exitcode, got = _run(_child_attention, 1000)
    assert exitcode == 0
    np.testing.assert_array_equal(got, expected)
    # And the parent still computes.
    np.testing.assert_array_equal(hopattn.attention(q, k, v, causal=True), expected)


def test_child_that_makes_no_call_exits():
    q, k, v = _inputs(64)
    hopattn.attention(q, k, v)
    exitcode, _ = _run(_child_no_call)
    assert exitcode == 0


def test_pool_of_forked_workers():
    q, k, v = _inputs(300)
    expected = hopattn.attention(q, k, v, causal=True)
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        results = pool.starmap_async(_attention_of, [(300,)] * 4)
        got = results.get(timeout=DEADLINE_S)
    for out in got:
        np.testing.assert_array_equal(out, expected)


def _attention_of(seqlen):
    q, k, v = _inputs(seqlen)
    return hopattn.attention(q, k, v, causal=True)
