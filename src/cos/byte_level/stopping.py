"""When a byte-level generation ends: END, a byte budget, a token budget, stop strings.

Symbols are committed one at a time, even from a verified block, so a stop inside a block cuts exactly
there. Every rule is a function of the emitted text alone (not of how a round produced it), so the naive
and the speculative loops stop at the same byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .vocabulary import END


class ByteStopper:
    def __init__(self, max_bytes: int | None = None, max_tokens: int | None = None,
                 count_tokens: Callable[[bytes], int] | None = None, stop_strings: Sequence[str] = ()) -> None:
        """max_tokens: a budget in the tokens of `count_tokens` (the first member's tokenizer: how many
        tokens the text is), checked once the text has that many bytes (a token spells at least one)."""
        if max_bytes is None and max_tokens is None:
            raise ValueError("give max_bytes or max_tokens: a byte-level generation needs a budget")
        for name, value in (("max_bytes", max_bytes), ("max_tokens", max_tokens)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if max_tokens is not None and count_tokens is None:
            raise ValueError("a token budget needs a tokenizer to count the text's tokens")
        self.max_bytes, self.max_tokens, self.count_tokens = max_bytes, max_tokens, count_tokens
        self.stops = [s.encode("utf-8") for s in stop_strings]
        self.data = bytearray()
        self.done, self.reason = False, ""

    def commit(self, symbol: int) -> bool:
        """Take one emitted symbol; True when the generation ends with it (nothing after it is taken)."""
        if self.done:
            raise RuntimeError("the generation has ended; nothing more can be committed")
        if symbol == END:
            return self._stop("eos")
        self.data.append(symbol)
        if any(self.data.endswith(s) for s in self.stops):  # checked at every byte: a first match ends here
            return self._stop("stop_string")
        if self.max_bytes is not None and len(self.data) >= self.max_bytes:
            return self._stop("length")
        if self.max_tokens is not None and len(self.data) >= self.max_tokens \
                and self.count_tokens(bytes(self.data)) >= self.max_tokens:
            return self._stop("length")
        return False

    @property
    def room(self) -> int:
        """Bytes that may still come before the byte budget (a draft longer than that is wasted)."""
        return (self.max_bytes - len(self.data)) if self.max_bytes is not None else 1 << 30

    def output(self) -> bytes:
        """The text, cut before the first stop string."""
        data = bytes(self.data)
        cuts = [data.find(s) for s in self.stops if s in data]
        return data[: min(cuts)] if cuts else data

    def _stop(self, reason: str) -> bool:
        self.done, self.reason = True, reason
        return True
