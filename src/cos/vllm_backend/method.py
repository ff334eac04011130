"""VllmMethod: one method of the benchmark runner on a VllmEngine, with the part of cos.Engine's interface
the runner uses (`plan`, `generate(prompt_ids, **options) -> Generation`, `warm_up()`).

The Generation's statistics use the HF engine's definitions where vLLM measures the same thing: new
tokens, decode seconds (first to last token, prefill excluded, from vLLM's request metrics; the whole
call when vLLM keeps no metrics), rounds / drafted / accepted (vLLM's per-request speculative metrics:
verification steps, draft tokens, accepted draft tokens), the stop reason. vLLM does not time its
members apart, so per-member usage is empty and there is no cost ratio and no predicted speedup.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..engine import Generation
from ..plan import DRAFTLESS, Plan
from ..stats import GenerationStats
from .engine import VllmEngine


class VllmMethod:
    def __init__(self, engine: VllmEngine, plan: Plan, eos_token_ids: Sequence[int]) -> None:
        """plan: the method's resolved plan (proposer fixed); eos_token_ids: where to stop, as the HF engine
        would for the same members (every member's generation_config EOS and the tokenizer's)."""
        self.engine, self.plan, self.eos_token_ids = engine, plan, sorted(set(eos_token_ids))

    def warm_up(self) -> float:
        return 0.0  # nothing to compile ahead: vLLM captured its graphs when it started

    def generate(self, prompt: str | Sequence[int], *, max_new_tokens: int = 128, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop: Sequence[str] = ()) -> Generation:
        start = time.perf_counter()
        out = self.engine.generate([prompt], max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                   top_k=top_k, seed=seed, stop=stop, eos_token_ids=self.eos_token_ids)[0]
        seconds = time.perf_counter() - start
        plan, spec = self.plan, out.spec or {}
        drafts = plan.loop not in DRAFTLESS
        stats = GenerationStats(
            method=plan.method, new_tokens=len(out.token_ids),
            wall_seconds=out.decode_seconds if out.decode_seconds is not None else seconds,
            rounds=spec.get("rounds", 0), drafted=spec.get("draft_tokens", 0), accepted=spec.get("accepted_tokens", 0),
            gamma=plan.gammas, proposer=plan.proposer, bonus="exact" if plan.loop == "naive" else "",
            schedule=(plan.schedule or "fixed") if drafts else "", stop_reason=out.stop_reason)
        return Generation(out.text, list(out.token_ids), stats)

    def close(self) -> None:
        self.engine.close()
