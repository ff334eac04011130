"""Tiny random Llama checkpoints saved as model folders WITH a tokenizer: no download, fp32, CPU.

The tokenizer is byte-level BPE with no merges: the 256 byte symbols (GPT-2's printable mapping)
and `<eos>`, so any text encodes to one token per UTF-8 byte and every member shares one vocabulary.
Used by the end-to-end runner tests through `MODEL_PATH=<folder>`. `tiny-merged` has a tokenizer of its
own (the same bytes plus a few merges, so a different vocabulary): with any other it is combined over bytes.

    paths = save_tiny_models(tmp_path)   # {"tiny-expert": ..., "tiny-amateur": ..., "tiny-third": ..., "tiny-merged": ...}
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

EOS = "<eos>"
# name -> (seed, hidden size, layers): the expert is the largest, so it is never the default proposer
TINY_MODELS = {
    "tiny-expert": (1, 48, 2),
    "tiny-amateur": (2, 32, 1),
    "tiny-third": (3, 32, 2),
}


MERGED = {"tiny-merged": (4, 32, 1)}  # saved with merged_tokenizer()
MERGES = [("Ġ", "t"), ("e", "r"), ("i", "n"), ("Ġt", "h"), ("Ġth", "e"), ("d", "e"), ("de", "f"), ("r", "e"),
          ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ")]


def byte_tokenizer(merges: list[tuple[str, str]] = ()) -> PreTrainedTokenizerFast:
    """Byte-level tokenizer: ids 0..255 are the bytes, then the merges' tokens, then <eos>."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda ch: _byte_of(ch))
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab[EOS] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS)


def merged_tokenizer() -> PreTrainedTokenizerFast:
    """The byte tokenizer with MERGES: a vocabulary of its own, the same bytes spelled."""
    return byte_tokenizer(MERGES)


def _byte_of(symbol: str) -> int:
    """The byte GPT-2's bytes-to-unicode mapping shows as `symbol` (printable bytes map to themselves)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    extra = [b for b in range(256) if b not in printable]
    code = ord(symbol)
    return code if code in printable else extra[code - 256]


def tiny_llama(seed: int, vocab: int, hidden: int, layers: int, eos_id: int) -> LlamaForCausalLM:
    """A deterministic tiny Llama; a large init range spreads logits so argmax ties are rare."""
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, initializer_range=0.3, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=eos_id, pad_token_id=None)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def save_tiny_models(root: str | Path, names: dict[str, tuple[int, int, int]] | None = None) -> dict[str, Path]:
    """Save each tiny model with the byte tokenizer into `root/<name>`; returns name -> folder."""
    root = Path(root)
    paths = {}
    for name, (seed, hidden, layers) in (names or {**TINY_MODELS, **MERGED}).items():
        tokenizer = merged_tokenizer() if name in MERGED else byte_tokenizer()
        eos_id = tokenizer.convert_tokens_to_ids(EOS)
        folder = root / name
        model = tiny_llama(seed, len(tokenizer), hidden, layers, eos_id)
        model.generation_config.eos_token_id = eos_id
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        paths[name] = folder
    return paths
