"""The lm-evaluation-harness model `cos`: an Engine behind lm-eval's LM interface.

    lm_eval --model cos --model_args members=EXPERT|AMATEUR,method=cd_chef,alpha=0.1,gamma=1|5 --tasks gsm8k

- generate_until: Engine.generate per request, in order, with the request's stop strings, token budget
  and sampling (options.py); request i draws from seed + i; statistics logged (tally.py).
- loglikelihood: teacher-forced log r of the continuation and whether it is greedy (likelihood.py).
- loglikelihood_rolling: the same over lm-eval's disjoint rolling windows of the whole text.
- Members whose tokenizers differ run over bytes (a ByteEngine, docs/byte_level.md): each member reads the
  request's text in its own tokenizer, loglikelihood is log r of the continuation's UTF-8 bytes and
  loglikelihood_rolling log r of the whole text's bytes after BOS (no windows: bytes have no context limit here).

Text is encoded by lm-eval's TemplateLM, as its Hugging Face model does (no special tokens added; BOS, else
EOS, stands in for an empty context), so scores compare with `--model hf` on the same members.
Requests run one at a time in order: batch_size changes nothing and is accepted for the CLI's sake.
"""

from __future__ import annotations

import logging

from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from ..runner.build import build_engines
from ..runner.run import generate_pair, progress_postfix, warm_up
from ..sampling import SamplingParams
from .args import fail, parse_model_args
from .likelihood import ContinuationScorer
from .options import request_options
from .tally import Tally

log = logging.getLogger("cos.lm_eval")


@register_model("cos")
class CoSLM(TemplateLM):
    def __init__(self, **model_args) -> None:
        super().__init__()
        self.args = parse_model_args(model_args)  # every check before any model loads
        run = self.args.run
        if self.args.batch_size not in (1, "1"):
            log.info("batch_size=%s: requests run one at a time, in order (the engine decodes one sequence)",
                     self.args.batch_size)
        self.built = build_engines(run, paths=self.args.paths)
        self.engine = self.built.engine
        self.tokenizer = self.built.tokenizer
        params = SamplingParams(float(run.generate.temperature) if "temperature" in self.args.sampling else 1.0,
                                run.generate.top_k, float(run.generate.top_p))
        self.scorer = ContinuationScorer(self.engine, params)
        self.tally = Tally(run.method.method)
        self.generated = 0  # requests generated so far: request i samples with seed + i
        self.warmed_up = False
        windows = [w for w in (self.args.max_length, self.engine.context_window) if w]
        self.max_length = min(windows) if windows else 2048
        log.info("cos: %s on %s (%s)", run.method.method, ", ".join(self.args.paths), run.dtypes[0])

    # ---------------------------------------------------------------- lm-eval's interface
    @property
    def tokenizer_name(self) -> str:
        return getattr(self.tokenizer, "name_or_path", "cos").replace("/", "__")

    def get_model_info(self) -> dict:
        """Added by lm-eval to its results' config: the members, the method and the engine's statistics."""
        return {"cos_method": self.args.run.method.method, "cos_members": list(self.args.paths),
                "cos_statistics": self.tally.summary()}

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"lm_eval --model cos: --apply_chat_template, but the tokenizer of {self.args.paths[0]} "
                             f"has no chat template: drop the flag")
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        outputs = []
        start = len(self.tally.records)
        bar = tqdm(requests, desc=f"cos {self.tally.method}", disable=disable_tqdm or self.rank != 0, unit="request")
        for request in bar:
            context, gen_kwargs = request.args
            options = request_options(gen_kwargs, self.args.sampling, self.args.max_gen_toks,
                                      self.args.run.seed + self.generated)
            ids = self.prompt_ids(context, options["max_new_tokens"])
            if not self.warmed_up and self.args.run.warmup:
                warm_up(self.built, ids, options, self.args.run.warmup)  # one-off costs off the statistics
            self.warmed_up = True
            record = generate_pair(self.built, ids, options)
            self.generated += 1
            self.tally.add(record)
            bar.set_postfix(progress_postfix(self.tally.records[start:]))
            outputs.append(record["output"])
            self.cache_hook.add_partial("generate_until", request.args, record["output"])
        self.tally.log_summary()
        return outputs

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        if not self.built.byte_level:
            return super().loglikelihood(requests, disable_tqdm)
        return self._over_bytes("loglikelihood", requests, lambda args: args, disable_tqdm)

    def _over_bytes(self, kind: str, requests, context_and_text, disable_tqdm: bool) -> list:
        """log r over bytes (ByteEngine.loglikelihood) of each request's (context, continuation); rolling: the
        log-probability alone."""
        out = []
        for request in tqdm(requests, desc=f"cos {kind} (bytes)", disable=disable_tqdm or self.rank != 0):
            result = self.engine.loglikelihood(*context_and_text(request.args), self.scorer.params)
            result = result[0] if kind == "loglikelihood_rolling" else result
            out.append(result)
            self.cache_hook.add_partial(kind, request.args, result)
        return out

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """requests: ((context, continuation), context ids, continuation ids), encoded by TemplateLM."""
        self.scorer.start()
        out = []
        for args, context, continuation in tqdm(requests, desc="cos loglikelihood", disable=disable_tqdm or self.rank != 0):
            result = self.score_pair(context, continuation)
            out.append(result)
            if args is not None:
                self.cache_hook.add_partial("loglikelihood", args, result)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        if self.built.byte_level:
            return self._over_bytes("loglikelihood_rolling", requests, lambda args: ("", args[0]), disable_tqdm)
        self.scorer.start()
        out = []
        for request in tqdm(requests, desc="cos loglikelihood_rolling", disable=disable_tqdm or self.rank != 0):
            (text,) = request.args
            windows = map(make_disjoint_window, get_rolling_token_windows(
                token_list=self.tok_encode(text), prefix_token=self.prefix_token_id, max_seq_len=self.max_length,
                context_len=1))
            total = sum(self.score_pair(list(context), list(continuation))[0] for context, continuation in windows)
            out.append(total)
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return out

    # ---------------------------------------------------------------- encoding
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        """Stands in for an empty context (lm-eval's HF model: BOS if the tokenizer has one, else EOS)."""
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tokenizer(string, add_special_tokens=bool(add_special_tokens))["input_ids"]

    def score_pair(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """log r of the continuation; the context is cut from the left to fit max_length."""
        if not continuation:
            raise fail("a loglikelihood request with an empty continuation has nothing to score")
        if len(continuation) > self.max_length:
            raise fail(f"a continuation of {len(continuation)} tokens does not fit the context window of "
                       f"{self.max_length} tokens")
        ids = (context + continuation)[-(self.max_length + 1):]
        return self.scorer(ids, len(continuation))

    def prompt_ids(self, context: str, max_new_tokens: int) -> list[int]:
        """The prompt's tokens, cut from the left so that max_new_tokens still fit (as lm-eval's HF model);
        over bytes, each member's tokens of the whole context."""
        if self.built.byte_level:
            return self.engine.encode(context)
        ids = self.tok_encode(context) or [self.prefix_token_id]
        room = max(1, self.max_length - max_new_tokens)
        if len(ids) > room:
            log.warning("prompt of %d tokens cut to its last %d (max_length %d - max_gen_toks %d)", len(ids), room,
                        self.max_length, max_new_tokens)
        return ids[-room:]

