"""Per-request decoding state shared by every loop: the sequence, r, commits and roll-backs.

Each request owns its state (committed tokens, its generator, its members' caches), so nothing is
global: a rejection in one request touches no other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..combination import Combination
from ..member import Member
from ..sampling import SamplingParams
from ..schedule import Schedule
from ..stats import GenerationStats
from ..stopping import Stopper


@dataclass
class DecodeState:
    members: list[Member]  # the combination's members, config order
    combination: Combination
    params: SamplingParams
    generator: torch.Generator | None
    stopper: Stopper
    seq: torch.Tensor  # [L] committed tokens (prompt + output), on the decoding device
    stats: GenerationStats
    draft_model: Member | None = None  # sd: a proposer outside the combination

    @property
    def device(self) -> torch.device:
        return self.seq.device

    @property
    def done(self) -> bool:
        return self.stopper.done

    @property
    def remaining(self) -> int:
        """New tokens the request may still emit (max_new_tokens less those committed)."""
        return self.stopper.max_new_tokens - len(self.stopper.tokens)

    def count_round(self, drafted: int, accepted: int, schedule: Schedule | None) -> None:
        """One verified block: `drafted` proposals, `accepted` of them kept (vLLM's metric definitions);
        the schedule, if any, learns from the same counts."""
        self.stats.rounds += 1
        self.stats.drafted += drafted
        self.stats.accepted += accepted
        if schedule is not None:
            schedule.observe(drafted, accepted)

    def r(self, member_logits: Sequence[torch.Tensor]) -> torch.Tensor:
        """Combined distribution [..., V] from raw logits of every member, config order."""
        return self.combination.distribution([l.to(self.device) for l in member_logits], self.params)

    def commit(self, tokens: Sequence[int], keep_cached: int) -> list[int]:
        """Emit tokens (cut at a stop), then roll every cache back to its first `keep_cached` positions.

        keep_cached = the length of the prefix that every member's cache may keep: tokens fed
        beyond it were rejected (or follow a stop) and must go.
        """
        emitted = self.stopper.commit(tokens)
        if emitted:
            self.seq = torch.cat([self.seq, torch.tensor(emitted, device=self.device, dtype=self.seq.dtype)])
        keep = min(keep_cached, self.seq.shape[0])
        for m in self.all_models():
            m.rollback(keep)
        return emitted

    def all_models(self) -> list[Member]:
        return self.members + ([self.draft_model] if self.draft_model is not None else [])
