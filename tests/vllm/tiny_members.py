"""Tiny random Llama member folders with a byte-level tokenizer: no download, seeded, fp32."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

BYTES = 256
SPECIALS = ("<s>", "</s>")
VOCAB = BYTES + len(SPECIALS)  # 258: one token per byte + BOS + EOS


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with no merges: every byte is one token; <s> = 256, </s> = 257."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab.update({s: BYTES + i for i, s in enumerate(SPECIALS)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def tiny_llama(seed: int, hidden: int = 64, layers: int = 2, vocab: int = VOCAB, heads: int = 2,
               kv_heads: int = 1) -> LlamaForCausalLM:
    """A deterministic tiny Llama. head_dim 32 (vLLM's CPU attention needs a multiple of 32); a large init
    range spreads the logits so argmax ties are rare."""
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=512, initializer_range=0.3, tie_word_embeddings=False,
                         bos_token_id=BYTES, eos_token_id=BYTES + 1, dtype="float32")
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def save_member(path: Path, seed: int, tokenizer: PreTrainedTokenizerFast | None = None,
                generation: dict | None = None, **sizes) -> Path:
    """A tiny Llama (sizes as `tiny_llama`) and the byte tokenizer saved as a HF model folder.
    generation: sampling defaults for its generation_config.json (as hub models ship them)."""
    model = tiny_llama(seed, **sizes)
    if generation:
        model.generation_config.update(**generation)
    model.save_pretrained(str(path))
    (tokenizer or byte_tokenizer()).save_pretrained(str(path))
    return path


def save_perturbed(path: Path, base: Path, seed: int, scale: float) -> Path:
    """A copy of the member at `base` with Gaussian noise on every weight: partial agreement with it."""
    model = LlamaForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=gen))
    model.save_pretrained(str(path))
    byte_tokenizer().save_pretrained(str(path))
    return path


def logit_mean(values: list[torch.Tensor]) -> torch.Tensor:
    """A custom combination for tests ('tiny_members:logit_mean', space 'logits'): the mean of processed logits."""
    return sum(values) / len(values)
