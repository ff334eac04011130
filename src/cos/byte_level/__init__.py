"""Byte-level members: models with different tokenizers combined exactly over bytes (docs/byte_level.md)."""

from .member import ByteMember, ByteStats
from .naive import ByteGeneration, combined_law, generate_naive
from .vocabulary import END, N_SYMBOLS, TokenBytes

__all__ = ["ByteGeneration", "ByteMember", "ByteStats", "END", "N_SYMBOLS", "TokenBytes", "combined_law",
           "generate_naive"]
