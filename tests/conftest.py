"""Tiny random-initialised members built from a config at test time: no download, fp32, CPU."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cos.member import Member
from cos.round_kinds import KindChoice
from cos.schedule import Schedule

VOCAB = 64

# Tiny tensors: intra-op threads only add synchronisation (milliseconds per op on a busy machine).
torch.set_num_threads(1)


def tiny_model(seed: int, vocab: int = VOCAB, hidden: int = 32, layers: int = 2) -> LlamaForCausalLM:
    """A deterministic tiny Llama. A large init range spreads the logits so argmax ties are rare."""
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, initializer_range=0.3, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def perturbed(model: LlamaForCausalLM, seed: int, scale: float) -> LlamaForCausalLM:
    """A copy of `model` with Gaussian noise on every weight: partial agreement with the original."""
    copy = tiny_model(0, model.config.vocab_size, model.config.hidden_size, model.config.num_hidden_layers)
    copy.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in copy.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=gen))
    return copy


@pytest.fixture(scope="session")
def models():
    """Named tiny models: a base, an identical copy, a close relative, a stranger, a third member."""
    base = tiny_model(1)
    twin = tiny_model(1)
    return {
        "base": base,
        "twin": twin,
        "close": perturbed(base, seed=7, scale=0.05),
        "stranger": tiny_model(2),
        "third": perturbed(base, seed=11, scale=0.1),
    }


def members(*models, cache: str = "preallocated") -> list[Member]:
    return [Member(m, name=f"m{i}", cache=cache, capacity=256) for i, m in enumerate(models)]


class PastDependentSchedule(Schedule):
    """Stands in for the adaptive schedule with every length forced, standard rounds included: k is a
    function of past acceptances (as the adaptive choice is, through α), never of the round's draws."""

    def _adaptive(self, *costs) -> int:
        return int(self.rounds + 3 * self.accepted + self.drafted // 2) % (self.gamma + 1)  # accepted: fractional too

    def continuation(self, *costs) -> int | None:  # CoS, after a bonus: drafts more (0..most), None: drop
        most = costs[-1]
        pick = int(self.rounds + self.drafted) % (most + 2)
        return None if pick == most + 1 else pick


class PastDependentKinds(KindChoice):
    """Stands in for the measured choice of round kind (we_mix_sd, tree: auto) with every kind forced: a
    function of the rounds so far and of past acceptances, never of what comes next."""

    def choose(self) -> str:
        accepted = sum(s.accepted for s in self.schedules.values())
        return self.kinds[int(self.rounds + 2 * accepted) % len(self.kinds)]


def force_every_length(engine):
    """Swap an engine's schedule for PastDependentSchedule (same γ and bonus); standard methods keep none.
    A choice of round kind (we_mix_sd, tree: auto): PastDependentKinds too, its schedules swapped alike."""
    if engine.schedule is not None:
        engine.schedule = PastDependentSchedule("adaptive", engine.schedule.gamma, engine.schedule.bonus)
    if engine.kinds is not None:
        kinds = engine.kinds
        engine.kinds = PastDependentKinds(kinds.kinds, {k: PastDependentSchedule("adaptive", s.gamma, s.bonus)
                                                        for k, s in kinds.schedules.items()})
    return engine


# The member runtimes every exactness test runs on: transformers' DynamicCache with the paper's fixed
# schedule; the preallocated cache with it; transformers' StaticCache (what captured forwards use;
# eager here); and the preallocated cache with draft lengths that vary from round to round
# (0 = a standard round), as the adaptive schedule's do.
RUNTIMES = ["dynamic", "preallocated", "static", "varied"]


def engine_on(runtime: str, models_in_order, plan, **kwargs):
    from cos import Engine

    cache = runtime if runtime in ("dynamic", "static") else "preallocated"
    engine = Engine(members(*models_in_order, cache=cache), plan, **kwargs)
    return force_every_length(engine) if runtime == "varied" else engine


@pytest.fixture(scope="session")
def model_root(tmp_path_factory):
    """A folder of tiny model folders with a tokenizer (tests/tiny_checkpoint.py), for MODEL_PATH."""
    from tiny_checkpoint import save_tiny_models

    return save_tiny_models(tmp_path_factory.mktemp("models"))["tiny-expert"].parent


@pytest.fixture
def tiny_env(model_root, monkeypatch):
    """MODEL_PATH -> the tiny models; one torch thread (a shared 2-core machine stalls with more)."""
    monkeypatch.setenv("MODEL_PATH", str(model_root))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ext():
    """The compiled CPU kernels (cos.kernels; the first run of a new kernel version compiles them: ~60 s),
    or a skip naming why they cannot run here."""
    from cos.kernels import build

    module = build.load()
    if module is None:
        pytest.skip(f"CPU kernels unavailable here: {build.failure()}")
    return module


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a bf16 or fp32 tensor, so that equality means bit for bit (-0.0 != 0.0, NaN == NaN)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)

