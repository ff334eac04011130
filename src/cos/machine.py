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

from .threads import available_cores

BUSY_SHARE = 0.25  # other processes using more than this share of our cores: a busy machine


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
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


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
        self._t = time.monotonic()
        self._all, self._self, self._avg = _cpu_seconds_all(), _cpu_seconds_self(), _loadavg()

    def stop(self) -> Load:
        wall = time.monotonic() - self._t
        all_now = _cpu_seconds_all()
        others = None
        if self._all is not None and all_now is not None and wall > 0.5:
            others = max(0.0, (all_now - self._all) - (_cpu_seconds_self() - self._self)) / wall
        return Load(available_cores(), self._avg, _loadavg(), others)
