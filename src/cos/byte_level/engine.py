"""ByteEngine: the Engine's interface (generate, stream of statistics, loglikelihood) over bytes, for members
whose tokenizers differ (docs/byte_level.md).

    engine = Engine.from_pretrained(["Qwen/Qwen2.5-Coder-0.5B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"],
                                    method="we_chef")     # different tokenizers: a ByteEngine, the reason logged
    out = engine.generate("def fib(n):", max_new_tokens=64, temperature=0)
    print(out.text, out.stats.bytes_per_second)

Methods over bytes: the standard ones (we, cd, custom: every member's byte law at every byte, the
reference), `*_sd` (the proposer drafts bytes in its own tokens, verified against r) and `*_chef` (every
member may draft). Under the adaptive schedule (the default) each round's kind, a draft by one member or a
naive step, is chosen by the bytes per second each kind measured (round_kinds.KindChoice, kept across
requests), so an accelerated method falls back to the naive steps where drafting does not pay (under
sampling, weighted ensembles of two disagreeing members); `schedule: fixed` always drafts (`*_chef`: the
members in turn), `draft_bytes` bytes at most. The text is the standard method's over bytes in every case
(greedy: byte for byte; sampling: in distribution), with `prune`'s bound on what pruning tokenizations
changed (ByteMember, counted in the statistics).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import torch

from ..engine import Generation, plan_from_kwargs
from ..loading import check_model_path, load_tokenizer, per_member_placement
from ..plan import DRAFTLESS, LOOPS, Plan, default_schedule
from ..round_kinds import KindChoice
from ..sampling import SamplingParams
from ..stats import GenerationStats, MemberUsage
from ..stopping import as_stop_strings
from ..threads import shared_policy
from ..tokens import encode_text
from .combined import combined_rows
from .generate import start_all
from .loading import load_byte_member
from .member import ByteMember
from .rounds import NAIVE, DraftLengths, decode, draft_kind
from .stopping import ByteStopper
from .vocabulary import N_SYMBOLS

log = logging.getLogger(__name__)

BYTE_LOOPS = ("standard", "naive", "cos")  # plan.loop values built over bytes
RATE_DECAY = 0.98  # weight kept by a kind of round's older rounds in its measured rate (a memory of ~50 rounds)
DEFAULT_PRUNE = 1e-4  # tokenizations below this weight fraction are dropped (mass counted; 0: exact, exponential)


def check_plan(plan: Plan) -> Plan:
    """What is built over bytes, before anything loads."""
    if plan.loop not in BYTE_LOOPS:
        raise ValueError(f"method {plan.method} is not built over bytes (members with different tokenizers): "
                         f"use we, cd, custom, their *_sd or *_chef")
    if plan.tree is not None:
        raise ValueError(f"tree={plan.tree.describe()}: draft trees are not built over bytes; unset tree")
    return plan


class ByteEngine:
    byte_level = True

    def __init__(self, members: Sequence[ByteMember], plan: Plan, tokenizers: Sequence, threads="auto",
                 draft_bytes: int = 12) -> None:
        """members: byte-level members, config order; tokenizers: each member's (it reads prompts in its own)."""
        check_plan(plan)
        if len(members) != plan.n_members or len(tokenizers) != len(members):
            raise ValueError(f"method {plan.method} was planned for {plan.n_members} members, got {len(members)} "
                             f"members and {len(tokenizers)} tokenizers")
        self.members = list(members)
        self.plan = plan.resolve([m.member.n_params for m in members])
        self.plan.combination.probe(N_SYMBOLS)  # a combination that cannot take 257 symbols: fail now
        self.tokenizers = list(tokenizers)
        self.tokenizer = self.tokenizers[0]  # counts tokens (max_new_tokens) and serves the runner
        self.threads = shared_policy(threads)
        self.kinds = self._kinds()
        self.lengths = DraftLengths(draft_bytes, adaptive=plan.schedule != "fixed")  # kept across requests
        self.context_window = None
        self.row_invariance = None

    @classmethod
    def from_pretrained(cls, paths: Sequence[str], method: str = "we", *, device="auto", dtype="bfloat16",
                        threads="auto", kernels: bool | str = "auto", prune: float = DEFAULT_PRUNE,
                        draft_bytes: int = 12, tokenizers: Sequence | None = None, **method_kwargs) -> "ByteEngine":
        """Load members (config order) over bytes; Engine.from_pretrained comes here when tokenizers differ."""
        if LOOPS.get(method, "standard") not in DRAFTLESS:
            method_kwargs.setdefault("schedule", default_schedule(method_kwargs.get("tree")))
        plan = check_plan(plan_from_kwargs(method, len(paths), **method_kwargs))
        paths = [check_model_path(p) for p in paths]
        devices, dtypes = per_member_placement(device, dtype, len(paths))
        if not 0.0 <= prune < 1.0:
            raise ValueError(f"prune must be in [0, 1) (0 keeps every tokenization: exact), got {prune}")
        tokenizers = list(tokenizers) if tokenizers is not None else [load_tokenizer(p) for p in paths]
        members = [load_byte_member(p, t, dv, dt, kernels, prune) for p, t, dv, dt in zip(paths, tokenizers, devices, dtypes)]
        return cls(members, plan, tokenizers, threads, draft_bytes)

    def _kinds(self) -> KindChoice | tuple[str, ...]:
        """The rounds this method runs: a measured choice (adaptive), or a fixed cycle."""
        plan = self.plan
        if plan.loop == "standard":
            return (NAIVE,)
        drafters = [plan.proposer] if plan.loop == "naive" else \
            [plan.proposer] + [i for i in range(len(self.members)) if i != plan.proposer]
        drafts = tuple(draft_kind(i) for i in drafters)
        # over bytes nothing is compiled and draft lengths adapt from the first round: only each kind's first
        # round (the drafter's first tree, a cold cache) is left out of its measured rate. A round's seconds
        # vary with where tokens end in its stretch of text (a naive episode of 12 bytes took 0.34-1.4 s on
        # one GSM8K prompt), so rates are kept over ~50 rounds (RATE_DECAY), not ~10: with 10 a lucky
        # stretch of naive steps held the choice while drafting measured 1.3x faster
        return drafts if plan.schedule == "fixed" else KindChoice(drafts + (NAIVE,), decay=RATE_DECAY, warm_rounds=1)

    def warm_up(self) -> float:
        return 0.0  # nothing compiled over bytes

    @property
    def combined_members(self) -> list[ByteMember]:
        return self.members

    # ---------------------------------------------------------------- prompts
    def encode(self, prompt: str | Sequence[Sequence[int]], chat_template: bool = False,
               max_prompt_len: int = -1) -> list[list[int]]:
        """Each member's token ids for a prompt: a text in each member's own tokenizer (and chat template on
        request; the last max_prompt_len tokens when > 0), or per-member ids as given."""
        if isinstance(prompt, str):
            return [self._encode_text(tok, prompt, chat_template, max_prompt_len) for tok in self.tokenizers]
        ids = [list(p) if isinstance(p, (list, tuple)) else None for p in prompt]
        if len(ids) != len(self.members) or any(not p for p in ids) or \
                any(not all(isinstance(t, int) and 0 <= t < m.vocab.vocab_size for t in p)
                    for p, m in zip(ids, self.members)):
            raise ValueError(f"over bytes every member reads the prompt in its own tokenizer: give the text, or "
                             f"one non-empty list of token ids per member ({len(self.members)}), each in its vocabulary")
        return ids

    def _encode_text(self, tokenizer, text: str, chat_template: bool, max_prompt_len: int) -> list[int]:
        if chat_template and not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"chat_template asked for, but the tokenizer {tokenizer.name_or_path} has none: "
                             f"set chat_template=false")
        ids = encode_text(tokenizer, text, chat_template, max_prompt_len)
        if not ids:  # an empty text: BOS, else EOS, stands in (as lm-eval's HF model does)
            ids = [tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id]
        return ids

    def count_tokens(self, data: bytes) -> int:
        """Tokens of a text in the first member's tokenizer (what max_new_tokens counts)."""
        return len(self.tokenizer(data.decode("utf-8", errors="replace"), add_special_tokens=False)["input_ids"])

    # ---------------------------------------------------------------- generation
    def generate(self, prompt: str | Sequence[Sequence[int]], *, max_new_tokens: int | None = 128,
                 max_new_bytes: int | None = None, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 seed: int = 0, stop: Sequence[str] = (), eos_token_ids: Sequence[int] | None = None) -> Generation:
        """Generate until END (any member's end tokens), max_new_tokens (the text's tokens in the first member's
        tokenizer), max_new_bytes or a stop string. Generation.tokens holds the output's bytes."""
        if eos_token_ids is not None:
            raise ValueError("over bytes the text ends where the members' end tokens say (END): eos_token_ids "
                             "apply to token-level engines only; use stop strings")
        params = SamplingParams(temperature, top_k, top_p)
        stopper = ByteStopper(max_new_bytes, max_new_tokens, self.count_tokens, as_stop_strings(stop))
        prompts = self.encode(prompt)
        for m in self.members:
            m.member.threads = self.threads
        start_all(self.members, self.plan.combination, prompts)
        generator = None if params.greedy else torch.Generator().manual_seed(seed)
        if isinstance(self.kinds, KindChoice):
            self.kinds.start()
        started = time.perf_counter()
        counts = decode(self.members, self.plan.combination, stopper, params, generator, self.kinds, self.lengths)
        seconds = time.perf_counter() - started
        data = stopper.output()
        return Generation(data.decode("utf-8", errors="replace"), list(data), self._stats(counts, stopper, seconds))

    def _stats(self, counts, stopper: ByteStopper, seconds: float) -> GenerationStats:
        plan, data = self.plan, stopper.output()
        for m in self.members:
            m.member.stats.finish(m.member.costs)
        drafts = plan.loop != "standard"
        return GenerationStats(
            method=plan.method, new_tokens=self.count_tokens(data), new_bytes=len(data), wall_seconds=seconds,
            rounds=counts.rounds if drafts else 0, drafted=counts.drafted, accepted=counts.accepted,
            proposer=plan.proposer if drafts else None, stop_reason=stopper.reason,
            schedule=(plan.schedule or "") if drafts else "", round_kinds=dict(counts.kinds),
            threads=self.threads.best(),
            members=[MemberUsage(m.name, m.member.stats.calls, m.member.stats.tokens, m.member.stats.seconds)
                     for m in self.members],
            byte_level={"prune": [m.prune for m in self.members], "pruned": [m.stats.pruned for m in self.members],
                        "revived": [m.stats.revived for m in self.members],
                        "forwards": [m.stats.forwards for m in self.members],
                        "draft_bytes": self.lengths.most})

    # ---------------------------------------------------------------- scoring
    @torch.inference_mode()
    def loglikelihood(self, context: str, continuation: str | bytes,
                      params: SamplingParams = SamplingParams()) -> tuple[float, bool]:
        """(log r of the continuation's bytes after the context, every byte argmax r): teacher-forced over bytes,
        each member reading the context in its own tokenizer. A byte r gives 0 scores -inf."""
        symbols = list(continuation.encode("utf-8") if isinstance(continuation, str) else continuation)
        if not symbols:
            raise ValueError("an empty continuation has nothing to score")
        start_all(self.members, self.plan.combination, self.encode(context))
        laws = [m.laws_along(symbols) for m in self.members]
        rows = min(len(law) for law in laws)
        if rows < len(symbols):  # a member gives a byte of the continuation probability 0
            return float("-inf"), False
        r = combined_rows(self.members, [law[: len(symbols)] for law in laws], self.plan.combination, params)
        targets = torch.tensor(symbols)
        log_r = r.log().gather(-1, targets[:, None]).squeeze(-1)
        return float(log_r.sum()), bool((r.argmax(-1) == targets).all())
