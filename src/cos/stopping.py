"""When a generation ends: max new tokens, EOS, stop strings.

Tokens are committed one at a time in order, even when a round accepts a multi-token block, so a
stop inside a block cuts exactly there: nothing after an EOS, a stop string or the token budget is
ever emitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


def as_stop_strings(stop: str | Iterable[str] | None) -> tuple[str, ...]:
    """One string is ONE stop string ("xE", not "x" and "E"); a list is several; each must be non-empty."""
    stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
    bad = [s for s in stops if not isinstance(s, str) or not s]
    if bad:
        raise ValueError(f"stop strings must be non-empty strings, got {bad[0]!r}")
    return stops


@dataclass
class Stopper:
    max_new_tokens: int
    eos_token_ids: frozenset[int] = frozenset()
    stop_strings: Sequence[str] = ()
    decode: object = None  # callable list[int] -> str; needed only for stop strings
    tokens: list[int] = field(default_factory=list)
    done: bool = False
    reason: str = ""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.stop_strings and self.decode is None:
            raise ValueError("stop strings need a tokenizer to decode the output; load the members with one")
        self._max_stop = max((len(s) for s in self.stop_strings), default=0)

    def commit(self, new_tokens: Iterable[int]) -> list[int]:
        """Append tokens until a stop; returns the ones actually emitted."""
        emitted = []
        for token in new_tokens:
            if self.done:
                break
            self.tokens.append(token)
            emitted.append(token)
            if token in self.eos_token_ids:
                self._stop("eos")
            elif self._hit_stop_string():
                self._stop("stop_string")
            elif len(self.tokens) >= self.max_new_tokens:
                self._stop("length")
        return emitted

    def _stop(self, reason: str) -> None:
        self.done, self.reason = True, reason

    def _hit_stop_string(self) -> bool:
        if not self.stop_strings:
            return False
        # a stop string can only end in the text of the last token: decode a short tail
        tail = self.decode(self.tokens[-(self._max_stop + 8) :])
        return any(s in tail for s in self.stop_strings)

    def text(self) -> str:
        """The output text, cut before the first stop string."""
        if self.decode is None:
            return ""
        text = self.decode(self.tokens)
        cuts = [text.find(s) for s in self.stop_strings if s in text]
        return text[: min(cuts)] if cuts else text
