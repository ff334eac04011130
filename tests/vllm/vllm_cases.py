"""What the vLLM tests share: prompts, composites, engine options, the HF side, log r comparisons.

A module of its own (not conftest.py) so that test modules can import it by a unique name.
"""

from __future__ import annotations

import gc
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from cos import SamplingParams
from cos.vllm_backend import CompositeSpec, VllmEngine

KV_CACHE_BYTES = 64 << 20  # per engine: ~16k tokens of these tiny members
ENGINE_OPTIONS = dict(enforce_eager=True, dtype="float32", max_model_len=256, seed=0,
                      kv_cache_memory_bytes=KV_CACHE_BYTES)
MAX_NEW = 24

# 8+ different prompts: texts (byte tokenizer) and raw token ids, of different lengths
PROMPTS = ["Hello, world", "def fib(n):", "The quick brown fox", "1 + 1 =", "Once upon a time", "import torch",
           "a", "Collaborative decoding via speculation", [256, 7, 7, 7, 7], [12, 200, 31, 44, 5, 99, 150, 3, 8]]

# composites: members in config order, the combination, and the member that drafts
COMPOSITES = {
    "we2": (("big", "small"), "we", {"weights": [0.5, 0.5]}, "m1"),
    "cd2": (("small", "close"), "cd", {"alpha": 0.1}, "m1"),  # the amateur drafts, as in the paper
    # the drafter weighs most: a Monte Carlo test of the verifiers' withheld token has power where q_v is far from r
    "we3": (("big", "small", "close"), "we", {"weights": [0.3, 0.2, 0.5]}, "m2"),
}

# sampling defaults in member big's generation_config.json, which no composite may apply
BIG_GENERATION = {"repetition_penalty": 1.1, "temperature": 0.6, "top_p": 0.9, "do_sample": True}

GREEDY = SamplingParams(temperature=0)
SAMPLED = SamplingParams(temperature=0.7, top_k=40, top_p=0.9)

# vLLM's fp32 kernels (fused qkv, CPU paged attention, RMSNorm) and HF's differ by float rounding only:
# a tiny member's log-softmax differs by up to ~5e-5 between them, as much as HF sdpa vs HF eager
# attention (3e-5) and less than HF fp32 vs fp64 (1.3e-4). Cross-implementation checks use this floor;
# the combination itself is checked to 1e-6 on vLLM's own member logits.
FP32_FLOOR = 2e-4


def floor(params: SamplingParams) -> float:
    """Logit rounding differences are divided by the temperature."""
    return FP32_FLOOR / min(1.0, params.temperature or 1.0)


def assert_log_r_close(got: torch.Tensor, want: torch.Tensor, atol: float = FP32_FLOOR) -> None:
    """Same support (-inf in the same places) and log r equal to atol elsewhere."""
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "different supports"
    finite = ~torch.isinf(want)
    err = (got[finite] - want[finite]).abs().max().item()
    assert err <= atol, f"max |log r_vllm - log r_hf| = {err:.3g} > {atol}"


def assert_greedy_equal(got: list[int], want: list[int], log_r_at) -> None:
    """Equal token for token; a divergence is allowed only at a floating-point near-tie of r (HF's rule),
    and its log r gap is in the message either way."""
    assert len(got) == len(want), (got, want)
    for j, (g, w) in enumerate(zip(got, want)):
        if g != w:
            lr = log_r_at(j)
            gap = float(lr[w] - lr[g])
            assert abs(gap) < FP32_FLOOR, f"token {j}: vLLM {g} vs HF {w}, log r gap {gap:.3g}"
            return


class Engines:
    """Lazily created VllmEngines, one per (composite, speculative or not), shared by the session."""

    def __init__(self, composite_dirs: dict[str, Path]) -> None:
        self.dirs = composite_dirs
        self.cache: dict[tuple[str, bool, str, int, bool], VllmEngine] = {}

    def __call__(self, name: str, speculative: bool = False, draft_sampling: str = "greedy",
                 gamma: int = 3, alternate: bool = True) -> VllmEngine:
        """alternate=False: verify with the whole composite (VllmEngine alternate_proposals=False)."""
        key = (name, speculative, draft_sampling, gamma, alternate)
        if key not in self.cache:
            draft = COMPOSITES[name][3] if speculative else None
            self.cache[key] = VllmEngine(self.dirs[name], speculative_draft=draft, num_speculative_tokens=gamma,
                                         speculative_options={"draft_sample_method": draft_sampling},
                                         alternate_proposals=alternate, **ENGINE_OPTIONS)
        return self.cache[key]

    def spec(self, name: str) -> CompositeSpec:
        return CompositeSpec.load(self.dirs[name])

    def close(self) -> None:
        for engine in self.cache.values():
            engine.close()
        self.cache.clear()
        gc.collect()


class HFSide:
    """The HF engine's view of a composite: its members as transformers models and its combination."""

    def __init__(self, composite_dir: Path) -> None:
        self.spec = CompositeSpec.load(composite_dir)
        self.paths = [str(m.path) for m in self.spec.members]
        self.combination = self.spec.combination
        self.models = [AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for p in self.paths]

    @torch.inference_mode()
    def log_r(self, tokens: list[int], params: SamplingParams) -> torch.Tensor:
        """log r [L, V] at every position of `tokens` (row j predicts token j+1)."""
        seq = torch.tensor([tokens])
        logits = [m(input_ids=seq).logits[0] for m in self.models]
        return self.combination.distribution(logits, params).log()
