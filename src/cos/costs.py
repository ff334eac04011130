"""What a member's forwards cost: moving-average seconds by the number of tokens fed.

Members record them (member.py); the adaptive schedule (schedule.py) and the mixture loops' cost model read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EWMA = 0.3  # weight of the newest call in each moving average


@dataclass
class CallCosts:
    """Moving-average seconds per forward of a member, by the number of tokens fed."""

    seconds: dict[int, float] = field(default_factory=dict)

    def observe(self, n_tokens: int, seconds: float) -> None:
        old = self.seconds.get(n_tokens)
        self.seconds[n_tokens] = seconds if old is None else (1 - EWMA) * old + EWMA * seconds

    def __call__(self, n_tokens: int) -> float | None:
        """Estimated seconds for n tokens: measured, else the nearest measured length below (else above)."""
        if n_tokens in self.seconds:
            return self.seconds[n_tokens]
        below = [n for n in self.seconds if n < n_tokens]
        above = [n for n in self.seconds if n > n_tokens]
        if below:
            return self.seconds[max(below)]
        return self.seconds[min(above)] if above else None
