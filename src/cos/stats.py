"""Statistics of one generation, and the speedup docs/algorithm.md §6 predicts from them.

Definitions follow vLLM's spec-decode metrics: acceptance rate = accepted / drafted; mean
acceptance length = 1 + accepted / rounds. c = (time per call of the proposer) / (time per call of
a verifier), measured per member, never assumed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from . import mixture
from .plan import MIXTURES


@dataclass
class MemberUsage:
    name: str
    calls: int
    tokens: int
    seconds: float

    @property
    def seconds_per_call(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0


@dataclass
class GenerationStats:
    method: str
    new_tokens: int = 0  # over bytes (byte_level): the text's tokens in the first member's tokenizer
    new_bytes: int = 0  # UTF-8 bytes of the output text
    wall_seconds: float = 0.0
    rounds: int = 0  # verification calls
    drafted: int = 0  # tokens verified against r
    accepted: int = 0
    gamma: list[int] = field(default_factory=list)  # per member, config order
    proposer: int | None = None  # default proposer, config index into the members
    bonus: str = ""
    draft_threshold: float = 0.0  # > 0: drafts of varying length (no closed-form prediction)
    stop_reason: str = ""
    schedule: str = ""  # fixed | adaptive ("" for standard methods)
    tree: str = ""  # the draft tree's shape, "nodes N width W" ("" for chains)
    standard_rounds: int = 0  # rounds the adaptive schedule ran without drafting
    draft_lengths: dict[int, int] = field(default_factory=dict)  # draft length chosen -> rounds
    round_kinds: dict[str, int] = field(default_factory=dict)  # rounds per kind: mixture | cos (we_mix_sd, adaptive), chain | tree (tree: auto)
    threads: dict[str, int] = field(default_factory=dict)  # CPU threads chosen per kind of call (threads.py)
    members: list[MemberUsage] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)  # the mixture's w (we_mix, we_mix_sd), config order
    predicted_speedup: float | None = None
    row_invariance: str | None = None  # None: verify rows bitwise one-token steps' rows; else why not
    byte_level: dict = field(default_factory=dict)  # over bytes (ByteEngine): prune, pruned mass, revivals, forwards

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def bytes_per_second(self) -> float:
        return self.new_bytes / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted / self.rounds if self.rounds else None

    @property
    def cost_ratio(self) -> float | None:
        """c: proposer seconds per call / mean seconds per call of the other members."""
        if self.proposer is None or len(self.members) < 2:
            return None
        others = [m.seconds_per_call for i, m in enumerate(self.members) if i != self.proposer and m.calls]
        if not others or not self.members[self.proposer].calls or sum(others) == 0:
            return None
        return self.members[self.proposer].seconds_per_call / (sum(others) / len(others))

    def as_dict(self) -> dict:
        d = asdict(self)
        for key in ("tokens_per_second", "bytes_per_second", "acceptance_rate", "mean_acceptance_length", "cost_ratio"):
            d[key] = getattr(self, key)
        return d


def tokens_per_round(alpha: float, gamma: int) -> float:
    """Expected tokens per round of γ drafts, no bonus: (1 - α^γ) / (1 - α)."""
    return float(gamma) if alpha >= 1.0 else (1 - alpha**gamma) / (1 - alpha)


def predict_speedup(stats: GenerationStats, loop: str) -> float | None:
    """Speedup over the method's standard counterpart predicted from measured α and per-call costs.

    sd: (1-α^(γ+1)) / ((1-α)(1+cγ)) (Leviathan et al.). naive: tokens/round × Σt / (γ t_p + Σ t_v)
    (Thm 3.1 for n = 2), with the bonus round of Leviathan when `bonus == "exact"`. cos, n = 2:
    (1-α^γq)(1+c) / ((1-α)(1+cγq - α^γp c)) (Thm 3.6). Otherwise None: no closed form is claimed
    (n >= 3 members under cos, drafts cut by a confidence threshold, an adaptive schedule that
    chose other lengths than γ: γ is then not fixed, draft trees, members over bytes, or no per-member costs measured: the vLLM
    backend). mix, mix_sd: cos/mixture.py's cost model (ME:
    Σ t_i / Σ w_i t_i; the hybrid: m = γ foreign positions per round under `fixed`, else the best m).
    """
    alpha = stats.acceptance_rate
    if loop == "standard":
        return 1.0
    if stats.tree or not stats.gamma:  # the chain formulas hold for neither trees nor rounds over bytes (no γ)
        return None
    if stats.round_kinds.get("cos"):  # CoS episodes among the mixture rounds: no closed form for the blend
        return None
    if loop in MIXTURES:
        t = [m.seconds_per_call for m in stats.members]
        gamma = stats.gamma[stats.proposer] if loop == "mix_sd" else 1
        m = 0 if loop == "mix" else gamma if stats.schedule == "fixed" else None
        return mixture.predicted_speedup(stats.weights, stats.proposer, alpha or 0.0, t, gamma, m)
    if not stats.members:  # per-member costs not measured (the vLLM backend): no prediction
        return None
    varied = any(k != stats.gamma[stats.proposer] for k in stats.draft_lengths) if stats.proposer is not None else False
    if stats.draft_threshold > 0 or varied or alpha is None or stats.proposer is None \
            or any(m.seconds_per_call <= 0 for m in stats.members):
        return None
    alpha = min(alpha, 1 - 1e-9)
    p = stats.proposer
    t = [m.seconds_per_call for m in stats.members]
    g = stats.gamma[p]
    if loop == "sd":  # members = [target, draft]; standard = target alone
        return tokens_per_round(alpha, g + 1) * t[0] / (g * t[p] + t[0])
    if loop == "naive":
        per_round = tokens_per_round(alpha, g + 1 if stats.bonus == "exact" else g)
        return per_round * sum(t) / (g * t[p] + sum(t) - t[p])
    if loop == "cos" and len(t) == 2:
        c = t[p] / t[1 - p]
        gp = stats.gamma[1 - p]
        return (1 - alpha**g) * (1 + c) / ((1 - alpha) * (1 + c * g - alpha**gp * c))
    return None
