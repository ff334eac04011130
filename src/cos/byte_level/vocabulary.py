"""The bytes each token of a vocabulary stands for, in the tensors a byte-level member reads.

A token sequence decodes to the concatenation of its tokens' bytes (what `tokenizer.decode` gives with
special tokens kept, before any clean-up of spaces). End-of-text tokens stand for END, the 257th symbol
after the 256 byte values. A token with no bytes (none in the packaged vocabularies) could repeat
forever without changing the text: such tokens, and logits rows past the tokenizer's vocabulary, are
NONE, tokens the byte-level model does not generate (their probability is dropped and the rest
renormalised; docs/byte_level.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

END = 256  # the symbol after the last byte: end of text
N_SYMBOLS = 257  # the 256 byte values and END
NONE = 257  # first symbol of a token the byte-level model never generates (scattered, then dropped)


@dataclass
class TokenBytes:
    """Bytes per token id over a logits row of `vocab_size` entries."""

    pieces: list[bytes]  # per token id; b"" for END and NONE tokens
    end_ids: frozenset[int]
    vocab_size: int

    def __post_init__(self) -> None:
        if len(self.pieces) > self.vocab_size:
            raise ValueError(f"{len(self.pieces)} token pieces for a logits row of {self.vocab_size} entries")
        pieces = self.pieces + [b""] * (self.vocab_size - len(self.pieces))
        self.lengths = torch.tensor([len(p) for p in pieces])
        width = max(1, int(self.lengths.max()))
        table = torch.full((self.vocab_size, width), -1, dtype=torch.int16)
        for i, piece in enumerate(pieces):
            if piece:
                table[i, : len(piece)] = torch.frombuffer(bytearray(piece), dtype=torch.uint8).to(torch.int16)
        self.table = table  # [V, longest piece], -1 past a token's end
        first = table[:, 0].long()
        first[first < 0] = NONE
        for i in self.end_ids:
            first[i] = END
        self.first = first  # [V]: the first symbol a token emits
        self.generated = first != NONE  # tokens the byte-level model can emit
        self.starting = [torch.nonzero(first == b).flatten() for b in range(N_SYMBOLS)]  # ids by first symbol
        self.spelled = torch.tensor([ids.numel() > 0 for ids in self.starting])  # [257]: symbols a token starts
        self.by_piece = {}  # bytes -> a token that emits them (the first such id)
        for i, piece in enumerate(pieces):
            if piece and bool(self.generated[i]):
                self.by_piece.setdefault(piece, i)
        self.longest = max(map(len, self.by_piece), default=1)

    @classmethod
    def from_tokenizer(cls, tokenizer, vocab_size: int, end_ids: Sequence[int]) -> "TokenBytes":
        """From a Hugging Face byte-level BPE tokenizer (GPT-2, Llama 3, Qwen, SmolLM). Checked on a probe
        text: the pieces of its encoding must concatenate to its bytes."""
        size = len(tokenizer)
        tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
        special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items()}
        convert = _converter(tokenizer)
        pieces = [b"" if i in end_ids else t.encode("utf-8") if i in special else convert(t)
                  for i, t in enumerate(tokens)]
        out = cls(pieces, frozenset(int(i) for i in end_ids), vocab_size)
        out.check(tokenizer)
        return out

    def check(self, tokenizer) -> None:
        probe = "def f(x):\n    return x  # ünïcödé, 数字 42\n\n\tdone."
        ids = tokenizer.encode(probe, add_special_tokens=False)
        got = b"".join(self.pieces[i] for i in ids)
        if got != probe.encode("utf-8"):
            raise ValueError(f"{type(tokenizer).__name__}: token pieces decode {probe!r} to {got!r}: this "
                             f"tokenizer's byte mapping is not one cos.byte_level knows (byte-level BPE)")

    def longest_match(self, data: bytes) -> list[int]:
        """Tokens covering `data` by longest match from the left (a guess at how the model would spell it;
        stops where no token matches)."""
        out, at = [], 0
        while at < len(data):
            for size in range(min(self.longest, len(data) - at), 0, -1):
                token = self.by_piece.get(data[at : at + size])
                if token is not None:
                    out.append(token)
                    at += size
                    break
            else:
                break
        return out

    def decode(self, ids: Sequence[int]) -> bytes:
        return b"".join(self.pieces[i] for i in ids)


def _converter(tokenizer):
    """token string -> bytes, by the tokenizer's decoder."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    kind = type(decoder).__name__ if decoder is not None else ""
    described = repr(decoder) if decoder is not None else ""
    if kind == "ByteLevel" or "ByteLevel" in described:
        to_byte = {ch: b for b, ch in _gpt2_symbols().items()}
        return lambda token: bytes(to_byte[ch] for ch in token)
    raise ValueError(f"{type(tokenizer).__name__} has decoder {kind or 'none'}: cos.byte_level reads byte-level "
                     f"BPE vocabularies (GPT-2, Llama 3, Qwen, SmolLM)")


def _gpt2_symbols() -> dict[int, str]:
    """GPT-2's byte -> printable symbol map, which byte-level BPE vocabularies spell tokens in: printable
    bytes stand for themselves, the others for the code points from 256 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}
