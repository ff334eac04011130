"""Byte-level members: models with different tokenizers combined exactly over bytes (docs/byte_level.md)."""

from .combined import combined_law, combined_rows
from .generate import ByteGeneration, generate_naive, generate_speculative
from .member import ByteMember, ByteStats
from .vocabulary import END, N_SYMBOLS, TokenBytes

__all__ = ["ByteGeneration", "ByteMember", "ByteStats", "END", "N_SYMBOLS", "TokenBytes", "combined_law",
           "combined_rows", "generate_naive", "generate_speculative"]
