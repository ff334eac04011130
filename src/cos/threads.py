"""CPU thread policy: how many intra-op threads each member forward runs with.

torch's default, one thread per core, is the fastest choice on a quiet machine and the slowest on a
busy one: every parallel region (each matmul of each layer) waits for its slowest thread, and a thread
the OS has parked for another process holds the whole forward for a time slice. No fixed count is right for every load, so `threads="auto"` measures.

auto: per kind of call (a member's decode forwards; its prefill), it keeps a moving average of the
seconds a call takes with each candidate count (all cores, and 1), uses the faster, and now and then
runs one call with the other count to notice a change of load; the interval doubles while the choice
keeps winning (8 -> 128 calls), and is never shorter than keeps a losing probe's extra seconds within
PROBE_SHARE of the calls between probes (under a competitor a 2-thread forward with the kernels waits on
its parked thread in every parallel region: 1.5-1.9 s against 0.05-0.1 s on 1 thread, 2-core Xeon, so a
probe every 128 calls cost ~12%); it resets when the chosen count's time jumps against its earlier calls
of the same size (load arrived; a 16-row tree forward after one-row steps is not load). A single
thread's time barely moves when load leaves, so the policy also watches the CPU time other processes
take (machine.BusyWatch, one read of /proc/stat per second): when the machine turns busy or quiet, the
averages describe another machine and are dropped, so each count is measured afresh on the next calls. The thread count never changes
what a forward computes (checked bitwise on the packaged Qwen models, 1 vs 2 threads), so the policy
cannot change any output. An int fixes the count (as torch.set_num_threads); None leaves torch's
setting alone (members built directly, tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .machine import BusyWatch, available_cores

EWMA = 0.3  # weight of the newest call in each moving average
FIRST_PROBE, LAST_PROBE = 8, 128  # calls between probes of the other count (doubling while it loses)
JUMP = 1.5  # a call this much slower than its average means the load changed: probe again soon
PROBE_SHARE = 0.02  # a losing probe's extra seconds, at most this share of the seconds between probes


@dataclass
class _Arm:
    """One kind of call: moving average seconds per candidate thread count, and the probe schedule."""

    seconds: dict[int, float] = field(default_factory=dict)
    calls: int = 0
    probe_every: int = FIRST_PROBE
    next_probe: int = FIRST_PROBE - 1  # the call (counted from 0) that runs the other count
    by_size: dict[tuple[int, int], float] = field(default_factory=dict)  # (threads, call size) -> average (JUMP)


class ThreadPolicy:
    """`choose(kind)` before a forward sets torch's thread count; `observe(kind, threads, seconds)` after."""

    def __init__(self, threads: int | str | None = "auto", watch: BusyWatch | None = None) -> None:
        cores = available_cores()
        if threads is None:
            self.candidates = []
        elif threads == "auto":
            self.candidates = [cores, 1] if cores > 1 else [1]
        elif isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
            self.candidates = [threads]
        else:
            raise ValueError(f"threads must be 'auto' or an int >= 1 (cores here: {cores}), got {threads!r}")
        self.arms: dict[tuple, _Arm] = {}
        self.watch = watch or BusyWatch()

    @property
    def adaptive(self) -> bool:
        return len(self.candidates) > 1

    def choose(self, kind: tuple) -> int:
        if not self.candidates:
            return torch.get_num_threads()
        threads = self._pick(kind)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return threads

    def _pick(self, kind: tuple) -> int:
        if not self.adaptive:
            return self.candidates[0]
        if self.watch.changed():  # load arrived or left: the averages describe another machine
            self.arms.clear()  # every count is measured afresh on its next calls
        arm = self.arms.setdefault(kind, _Arm())
        untried = [t for t in self.candidates if t not in arm.seconds]
        if untried:
            return untried[0]
        best = min(arm.seconds, key=arm.seconds.get)
        if arm.calls >= arm.next_probe:
            return next(t for t in self.candidates if t != best)
        return best

    def observe(self, kind: tuple, threads: int, seconds: float, size: int | None = None) -> None:
        """size: the call's length (tokens fed), where calls of one kind differ in it: a load change is
        read from a call slower than the chosen count's earlier calls of the same size (a 16-row tree
        forward after one-row steps is not load arriving)."""
        if not self.adaptive:
            return
        arm = self.arms.setdefault(kind, _Arm())
        arm.calls += 1
        old = arm.seconds.get(threads)
        best = min(arm.seconds, key=arm.seconds.get) if arm.seconds else threads
        if old is None:
            arm.seconds[threads] = seconds
            return
        same_size = old if size is None else arm.by_size.get((threads, size))
        if size is not None:
            arm.by_size[threads, size] = seconds if same_size is None else (1 - EWMA) * same_size + EWMA * seconds
        if threads == best and same_size is not None and seconds > JUMP * same_size:
            arm.probe_every = FIRST_PROBE  # the chosen count slowed down: look at the other one soon
            arm.next_probe = min(arm.next_probe, arm.calls + FIRST_PROBE - 1)
        elif threads != best:  # a probe: it lost again (probe less often), or it won (look closer)
            lost = seconds > arm.seconds[best]
            arm.probe_every = _after_loss(arm.probe_every, seconds, arm.seconds[best]) if lost else FIRST_PROBE
            arm.next_probe = arm.calls + arm.probe_every - 1
        arm.seconds[threads] = (1 - EWMA) * old + EWMA * seconds

    def best(self) -> dict[str, int]:
        """Each kind of call's current choice, for logs: {"member/tokens": threads}."""
        return {"/".join(map(str, k)): min(a.seconds, key=a.seconds.get) for k, a in self.arms.items() if a.seconds}


def _after_loss(every: int, probe_seconds: float, best_seconds: float) -> int:
    """Calls until the next probe after one that lost: twice as many (up to LAST_PROBE), and at least
    as many as keep its extra seconds within PROBE_SHARE of the calls' seconds between probes."""
    affordable = (probe_seconds - best_seconds) / (PROBE_SHARE * best_seconds) if best_seconds > 0 else 0.0
    return max(min(LAST_PROBE, every * 2), math.ceil(affordable))


_shared: dict[str, ThreadPolicy] = {}


def shared_policy(threads: int | str | None) -> ThreadPolicy:
    """The process's "auto" policy (torch's thread count and the machine's load are the process's, so
    every engine learns from every other's calls); a fixed count or None needs no sharing."""
    if threads == "auto":
        return _shared.setdefault("auto", ThreadPolicy("auto"))
    return ThreadPolicy(threads)
