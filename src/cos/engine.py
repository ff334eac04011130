"""The public entry point: members + a validated plan -> text, tokens and statistics.

    engine = Engine.from_pretrained(["Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct"],
                                    method="cd_chef", alpha=0.1, gamma=[1, 5])
    out = engine.generate("def fib(n):", max_new_tokens=64, temperature=0)
    print(out.text, out.stats.tokens_per_second)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from .byte_level.loading import BYTE_OPTIONS, byte_level_reason
from .kv_cache import is_static
from .loading import (check_before_weights, check_model_path, check_vocabularies, load_member, load_tokenizer,
                      per_member_placement)
from .member import Member
from .methods.alternate import AlternateLoop
from .methods.kinds import KindsLoop
from .methods.mixture import MixtureLoop
from .methods.speculative import SpeculativeLoop
from .methods.tree import TreeLoop
from .methods.standard import standard_round
from .methods.state import DecodeState
from .plan import DRAFTLESS, LOOPS, MIXTURES, Plan, default_schedule, make_plan, method_info
from .presets import make_combination
from .round_kinds import TREE_DECAY, KindChoice
from .sampling import SamplingParams
from .schedule import Schedule
from .stats import GenerationStats, MemberUsage, predict_speedup
from .stopping import Stopper, as_stop_strings
from .threads import shared_policy
from .tokens import as_id_list, encode_prompt, eos_ids

log = logging.getLogger(__name__)


@dataclass
class Generation:
    text: str
    tokens: list[int]
    stats: GenerationStats


def plan_from_kwargs(method: str, n_members: int, combination=None, gamma=5, proposer=None, bonus="none",
                     draft_threshold=0.0, schedule=None, tree=None, **combination_kwargs) -> Plan:
    """make_plan with the combination the method's family implies (plan.FAMILIES: we_*, cd_*) or given explicitly."""
    family = method_info(method).family
    if family.one_model and (combination is not None or combination_kwargs):
        given = sorted(combination_kwargs) + (["combination"] if combination else [])
        raise ValueError(f"method {method} uses one model's distribution and takes no combination settings: "
                         f"remove {', '.join(given)}")
    if combination is None and family.preset:
        combination = make_combination(family.preset, n_members, **combination_kwargs)
    elif isinstance(combination, str):
        combination = make_combination(combination, n_members, **combination_kwargs)
    return make_plan(method, n_members, combination, gamma, proposer, bonus, draft_threshold, schedule, tree)


# plan.loop -> a request's decoding loop (methods/; `.round()`: one round), from its state, plan and schedule
LOOP_MAKERS = {
    "mix": lambda st, plan, schedule: MixtureLoop(st, plan.combination.weights, plan.proposer, 1, None),
    "mix_sd": lambda st, plan, schedule: MixtureLoop(st, plan.combination.weights, plan.proposer,
                                                     plan.gammas[plan.proposer], schedule),
    "cos": lambda st, plan, schedule: AlternateLoop(st, plan.gammas, plan.proposer, schedule, plan.draft_threshold),
    "naive": lambda st, plan, schedule: SpeculativeLoop(st, plan.proposer, schedule, plan.bonus,
                                                        plan.draft_threshold),
    "sd": lambda st, plan, schedule: SpeculativeLoop(st, None, schedule, plan.bonus, plan.draft_threshold),
}
TREE_MODES = {"sd": lambda plan: "sd", "naive": lambda plan: "exact" if plan.bonus == "exact" else "naive",
              "cos": lambda plan: "cos"}  # plan.loop -> methods/tree.py's mode, where plan.tree is set


class Engine:
    def __init__(self, members: Sequence[Member], plan: Plan, tokenizer=None, threads: int | str | None = None) -> None:
        """threads: CPU threads per forward: "auto" (measured per kind of call, threads.py), an int, or None
        (leave torch's setting alone). Shared by the members: torch's thread count is per process."""
        if len(members) != plan.n_members:
            raise ValueError(f"method {plan.method} was planned for {plan.n_members} members, got {len(members)}")
        check_vocabularies(members)
        self.members = list(members)
        self.plan = plan.resolve([m.n_params for m in members])
        self.threads = shared_policy(threads)
        self.schedule = self._make_schedule()
        self.kinds = self._make_kinds()
        self.plan.combination.probe(self.members[0].vocab_size, self.members[0].device)  # bad r: fail now
        self.tokenizer = tokenizer
        self.device = self.members[0].device  # where r is computed and tokens are drawn
        positions = [m.max_positions for m in members if m.max_positions]
        # drafts (a tree's nodes) and a bonus may run past the last emitted token
        slack = max(self.plan.gammas + ([self.plan.tree.nodes] if self.plan.tree else [])) + 2
        positions += [m.capacity - slack for m in members if is_static(getattr(m, "cache", None))]  # fixed buffers
        self.context_window = min(positions) if positions else None
        self.row_invariance = next((f"{m.name}: {m.row_invariance}" for m in self.members if m.row_invariance), None)
        if self.row_invariance and self.plan.loop != "standard":
            log.warning("%s: a verify block's logits are not bitwise a one-token step's (%s); greedy output can part "
                        "from the standard method's at a near-tie (kernels/invariance.py)", plan.method,
                        self.row_invariance)

    @classmethod
    def from_pretrained(cls, paths: Sequence[str], method: str = "we", *, device="auto", dtype="bfloat16",
                        tokenizer: str | None = None, threads: int | str | None = "auto", compile: bool = False,
                        kernels: bool | str = "auto", byte_level: bool | str = "auto", **method_kwargs) -> "Engine":
        """Load members (config order) from folders or hub ids. The method is validated first.

        Methods that draft run the adaptive schedule unless `schedule="fixed"` (schedule.py: never
        slower than the standard method by the measured costs; seed fixes the distribution, not the draw).
        threads: "auto" (default; measured per call, threads.py), an int, or None (torch's setting).
        compile: static caches and torch.compile'd decode forwards, CUDA graphs on CUDA (Member); call
        `warm_up()` before timing so compilation and capture happen there.
        kernels: the CPU row-invariant kernels (cos.kernels: Linear layers and attention), "auto" (= True)
        wherever they run; False keeps torch's ops, whose verify-block rows differ in the last bits.

        device / dtype: one value, or a list with one entry per member (e.g. two GPUs). bfloat16 by
        default (faster than float32 on CPUs with native bf16: scripts/bench/dtype.py); exactness holds
        in any dtype (against the standard method run in it).

        byte_level: auto (default): members whose tokenizers differ are combined over bytes, a
        cos.byte_level.ByteEngine is returned and the reason logged; true: over bytes whatever the
        tokenizers; false: tokens only (different tokenizers are an error). Over bytes `prune` and
        `draft_bytes` apply (ByteEngine.from_pretrained).
        """
        if isinstance(paths, str):
            raise ValueError("paths must be a list of model folders or hub ids, one per member, in config order")
        if LOOPS.get(method, "standard") not in DRAFTLESS:  # a tree of a fixed shape is sized by the plan: fixed
            method_kwargs.setdefault("schedule", default_schedule(method_kwargs.get("tree")))
        byte_options = {key: method_kwargs.pop(key) for key in BYTE_OPTIONS if key in method_kwargs}
        plan = plan_from_kwargs(method, len(paths), **method_kwargs)
        paths = [check_model_path(p) for p in paths]
        devices, dtypes = per_member_placement(device, dtype, len(paths))
        tokenizers = [load_tokenizer(p) for p in paths]
        reason = byte_level_reason(byte_level, paths, tokenizers)
        if reason is not None:
            from .byte_level.engine import ByteEngine

            if tokenizer is not None:
                raise ValueError("over bytes each member reads text in its own tokenizer: unset tokenizer")
            log.info("%s: members combined over bytes: %s (docs/byte_level.md)", method, reason)
            return ByteEngine.from_pretrained(paths, method, device=device, dtype=dtype, threads=threads,
                                              kernels=kernels, tokenizers=tokenizers, **byte_options, **method_kwargs)
        if byte_options:
            raise ValueError(f"{', '.join(byte_options)} apply over bytes only (members with different tokenizers, "
                             f"or byte_level=true): unset them")
        vocab = check_before_weights(paths, tokenizers)  # vocabularies from config.json: before any weights
        if vocab:
            plan.combination.probe(vocab)  # a combination's wrong shape or values: also before the weights
        members = [load_member(p, dv, dt, compile, kernels) for p, dv, dt in zip(paths, devices, dtypes)]
        check_vocabularies(members, tokenizers)
        return cls(members, plan, load_tokenizer(tokenizer) if tokenizer else tokenizers[0], threads)

    def warm_up(self) -> float:
        """Compile / capture every forward length this method uses (1 .. max γ + 2) in compiled members;
        returns the seconds spent (0 for eager members)."""
        lengths = range(1, max(self.plan.gammas) + 3)
        return sum(m.warm_up(lengths) for m in self.members if m.forward is not m.model)

    @property
    def combined_members(self) -> list[Member]:
        """The members whose logits r combines, config order: all of them but sd's draft model."""
        return self.members[:1] if self.plan.loop == "sd" else self.members

    # ---------------------------------------------------------------- generation
    def generate(self, prompt: str | Sequence[int], **options) -> Generation:
        """Generate until max_new_tokens / EOS / a stop string. Options as in `stream`."""
        for _ in self.stream_tokens(prompt, **options):
            pass
        return self.last

    def stream(self, prompt: str | Sequence[int], **options) -> Iterator[str]:
        """Yield text pieces as tokens are committed (needs a tokenizer). `self.last` holds the result."""
        shown = ""
        for _ in self.stream_tokens(prompt, **options):
            text = self._stopper.text()
            yield text[len(shown):]
            shown = text

    def stream_tokens(self, prompt: str | Sequence[int], *, max_new_tokens: int = 128, temperature: float = 1.0,
                      top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop: Sequence[str] = (),
                      eos_token_ids: Sequence[int] | None = None) -> Iterator[list[int]]:
        """Yield the tokens committed by each round."""
        params = SamplingParams(temperature, top_k, top_p)
        self.plan.check_sampling(params)  # the mixture methods: sampling only, before any model work
        prompt_ids = self._encode(prompt)
        max_new_tokens = self._fit_context(prompt_ids, max_new_tokens)
        decode = (lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)) if self.tokenizer else None
        stop = as_stop_strings(stop)  # "xE" is one stop string, not "x" and "E"
        self._stopper = Stopper(max_new_tokens, frozenset(self._eos(eos_token_ids)), stop, decode)
        st, loop = self._start(prompt_ids, params, seed)
        started = time.perf_counter()
        while not st.done:
            emitted = loop()
            if emitted:
                yield emitted
        self.last = self._finish(st, time.perf_counter() - started)

    # ---------------------------------------------------------------- internals
    def _make_schedule(self) -> Schedule | None:
        """The draft-length schedule, kept across requests (costs and probes carry over)."""
        plan = self.plan
        if plan.loop in DRAFTLESS:
            return None
        bonus = 0 if plan.loop == "naive" and plan.bonus == "none" else 1
        return Schedule(plan.schedule or "fixed", plan.gammas[plan.proposer], bonus)

    def _make_kinds(self) -> KindChoice | None:
        """Kinds of round chosen by measure (methods/kinds.py): `tree: auto`, chain rounds or tree rounds;
        we_mix_sd under the adaptive schedule, mixture rounds or CoS episodes (their draft lengths scheduled
        apart), not with a member of weight 0, which CoS would run for nothing (it verifies against r with
        every member's row)."""
        plan = self.plan
        if plan.tree is not None and plan.tree.auto:
            return KindChoice(("chain", "tree"), decay=TREE_DECAY)
        if plan.loop == "mix_sd" and self.schedule.kind == "adaptive" and min(plan.combination.weights) > 0:
            return KindChoice(("mixture", "cos"), {"cos": Schedule("adaptive", plan.gammas[plan.proposer], 1)})
        return None

    def _loop(self, st: DecodeState):
        """A request's decoding loop: one `.round()`, one round."""
        plan = self.plan
        if self.kinds is None:
            return self._tree_loop(st) if plan.tree is not None else LOOP_MAKERS[plan.loop](st, plan, self.schedule)
        if plan.tree is not None:  # tree: auto
            loops = {"chain": LOOP_MAKERS[plan.loop](st, plan, self.schedule), "tree": self._tree_loop(st)}
        else:  # we_mix_sd, adaptive
            loops = {"mixture": LOOP_MAKERS["mix_sd"](st, plan, self.schedule),
                     "cos": LOOP_MAKERS["cos"](st, plan, self.kinds.schedules["cos"])}
        return KindsLoop(st, loops, self.kinds)

    def _tree_loop(self, st: DecodeState) -> TreeLoop:
        plan = self.plan
        proposer = None if plan.loop == "sd" else plan.proposer  # sd: the draft model, outside the combination
        return TreeLoop(st, proposer, plan.tree, TREE_MODES[plan.loop](plan))

    def _start(self, prompt_ids: list[int], params: SamplingParams, seed: int):
        plan = self.plan
        seq = torch.tensor(prompt_ids, dtype=torch.long, device=self.device)
        for m in self.members:
            m.threads = self.threads  # this engine's policy (engines may share members)
            m.prefill(seq)
        generator = None if params.greedy else torch.Generator(device=self.device).manual_seed(seed)
        in_combination = self.combined_members
        draft_model = self.members[1] if plan.loop == "sd" else None
        stats = GenerationStats(method=plan.method, gamma=plan.gammas, proposer=plan.proposer,
                                bonus=plan.bonus if plan.loop == "naive" else "", draft_threshold=plan.draft_threshold,
                                schedule=self.schedule.kind if self.schedule else "",
                                tree=plan.tree.describe() if plan.tree else "",
                                weights=list(plan.combination.weights) if plan.loop in MIXTURES else [])
        st = DecodeState(in_combination, plan.combination, params, generator, self._stopper, seq, stats, draft_model)
        for schedule in (self.schedule, self.kinds):
            if schedule is not None:
                schedule.start()
        return st, partial(standard_round, st) if plan.loop == "standard" else self._loop(st).round

    def _finish(self, st: DecodeState, seconds: float) -> Generation:
        for m in self.members:
            m.stats.finish(m.costs)
        if self.schedule is not None:
            self.schedule.finish()
            st.stats.draft_lengths = dict(sorted(self.schedule.chosen.items()))
        if self.kinds is not None:
            self.kinds.finish()
            st.stats.round_kinds = dict(self.kinds.chosen)
        st.stats.threads = self.threads.best()
        st.stats.members = [MemberUsage(m.name, m.stats.calls, m.stats.tokens, m.stats.seconds) for m in self.members]
        st.stats.new_tokens = len(self._stopper.tokens)
        st.stats.wall_seconds = seconds
        st.stats.stop_reason = self._stopper.reason
        st.stats.predicted_speedup = predict_speedup(st.stats, self.plan.loop)
        st.stats.row_invariance = self.row_invariance
        text = self._stopper.text()
        st.stats.new_bytes = len(text.encode("utf-8"))
        return Generation(text, list(self._stopper.tokens), st.stats)

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        return encode_prompt(prompt, self.tokenizer, self.members[0].vocab_size)

    def _fit_context(self, prompt_ids: list[int], max_new_tokens: int) -> int:
        if self.context_window is None:
            return max_new_tokens
        room = self.context_window - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens does not fit the context window of {self.context_window} "
                f"tokens (smallest among members): shorten it (e.g. max_prompt_len) or use fewer few-shot examples"
            )
        return min(max_new_tokens, room)

    def _eos(self, eos_token_ids: Sequence[int] | None) -> set[int]:
        if eos_token_ids is not None:
            return set(eos_token_ids)
        return eos_ids((as_id_list(getattr(m.model.generation_config, "eos_token_id", None)) for m in self.members),
                       self.tokenizer)
