"""How busy the machine was while we measured: timings from a shared CPU are not speeds.

`LoadMeter` reads, over an interval, the load average before and after, and the CPU time that other
processes used (all CPU time from /proc/stat minus this process's own), so a run can say "timings
unreliable: load 2.4 on 2 cores" instead of reporting a competitor's effect as the engine's speed.
Linux reads /proc; elsewhere only the load average (os.getloadavg) is known.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass

BUSY_SHARE = 0.25  # other processes using more than this share of our cores: a busy machine


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _cpu_seconds_all() -> float | None:
    """Seconds of CPU time used by everything since boot (user + nice + system + irq + softirq + steal)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds_self() -> float:
    """CPU seconds of this process and of its children that have ended (a benchmark's worker is its own work)."""
    return sum(ru.ru_utime + ru.ru_stime for ru in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@dataclass
class Load:
    cores: int  # cores this process may use
    loadavg_before: float | None
    loadavg_after: float | None
    others_cores: float | None  # mean cores used by other processes during the interval

    @property
    def busy(self) -> bool:
        if self.others_cores is not None:
            return self.others_cores > BUSY_SHARE * self.cores
        return self.loadavg_before is not None and self.loadavg_before > BUSY_SHARE * self.cores

    def warning(self) -> str | None:
        """'timings unreliable: ...' for a busy machine, else None."""
        if not self.busy:
            return None
        others = "" if self.others_cores is None else f", other processes used {self.others_cores:.1f} cores"
        load = max(x for x in (self.loadavg_before, self.loadavg_after) if x is not None) \
            if (self.loadavg_before, self.loadavg_after) != (None, None) else float("nan")
        return f"timings unreliable: load {load:.1f} on {self.cores} cores{others}"

    def as_dict(self) -> dict:
        return {**asdict(self), "busy": self.busy}


class LoadMeter:
    """Measures from its creation to `stop()`, which returns the Load of that interval."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._all, self._self, self._avg = _cpu_seconds_all(), _cpu_seconds_self(), _loadavg()

    def others_cores(self) -> float | None:
        """Mean cores other processes used since the meter started (None: unknown, or under 0.5 s)."""
        wall = time.monotonic() - self.started
        all_now = _cpu_seconds_all()
        if self._all is None or all_now is None or wall <= 0.5:
            return None
        return max(0.0, (all_now - self._all) - (_cpu_seconds_self() - self._self)) / wall

    def stop(self) -> Load:
        return Load(available_cores(), self._avg, _loadavg(), self.others_cores())


class BusyWatch:
    """Whether other processes keep the machine busy, re-read at most once per `interval` seconds:
    `changed()` is True on the first reading whose answer differs from the last one (load arrived or
    left). Costs one read of /proc/stat per interval; where /proc is missing it never reports a change."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._meter = LoadMeter()
        self.busy: bool | None = None

    def changed(self) -> bool:
        if time.monotonic() - self._meter.started < self.interval:
            return False
        others = self._meter.others_cores()
        self._meter = LoadMeter()
        if others is None:
            return False
        busy = others > BUSY_SHARE * available_cores()
        flipped = self.busy is not None and busy != self.busy
        self.busy = busy
        return flipped
