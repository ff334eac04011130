"""Byte-level members (cos.byte_level): exact next-byte laws of token-level models, and collaborative
decoding over bytes of members with different tokenizers.

- Deterministic: the probability a byte-level member gives a whole string (its symbols' laws, then END)
  equals the brute-force marginal over every tokenization of the string, each tokenization's probability
  taken from a fresh forward of a tiny transformer (its own code path: no cache, no tree).
- Monte Carlo: strings sampled token by token and decoded are distributed as the byte-level member's law
  over their first symbols (Bretagnolle-Huber-Carol bound, δ = 1e-6, as in test_sampling_exact.py); a
  member that keeps one tokenization (the heaviest) is the negative control and must fail the same bound.
- The naive byte-level ensemble samples r = f(byte laws) for two members whose vocabularies differ.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
import torch
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from cos import Contrastive, Member, SamplingParams, WeightedEnsemble
from cos.byte_level import END, ByteMember, TokenBytes, combined_law, generate_naive, generate_speculative
from cos.byte_level.generate import start_all
from cos.byte_level.member import Covers, Partial
from cos.byte_level.rounds import DraftLengths, decode
from cos.byte_level.stopping import ByteStopper
from conftest import tiny_model
from table_member import TableMember
from tiny_checkpoint import byte_tokenizer

# two vocabularies over the bytes a, b with different merges; the last id is the end-of-text token
PIECES_A = [b"a", b"b", b"ab", b"ba", b"aab", b""]
PIECES_B = [b"a", b"b", b"bb", b"aa", b"bab", b"abb", b""]
A, B = ord("a"), ord("b")


def vocabulary(pieces) -> TokenBytes:
    return TokenBytes(list(pieces), frozenset({len(pieces) - 1}), len(pieces))


def table_member(pieces, seed: int, prune: float = 0.0) -> ByteMember:
    return ByteMember(TableMember(seed, vocab=len(pieces), scale=1.5, name=f"table{seed}"), vocabulary(pieces), prune)


def llama_member(pieces, seed: int) -> ByteMember:
    model = tiny_model(seed, vocab=len(pieces), hidden=32, layers=2)
    return ByteMember(Member(model, name=f"llama{seed}", capacity=256), vocabulary(pieces))


def next_token_law(member: ByteMember, tokens: list[int]) -> torch.Tensor:
    """The model's next-token law after `tokens`, from a fresh forward (TableMember: its table)."""
    seq = torch.tensor(tokens)
    if isinstance(member.member, TableMember):
        logits = member.member.logits_at(seq, torch.tensor([len(tokens)]))[0]
    else:
        with torch.no_grad():
            logits = member.member.model(input_ids=seq[None]).logits[0, -1]
    return logits.double().softmax(-1)


def tokenizations(data: bytes, pieces) -> list[list[int]]:
    """Every token sequence (no end token) whose pieces concatenate to `data`."""
    if not data:
        return [[]]
    out = []
    for t, piece in enumerate(pieces):
        if piece and data.startswith(piece):
            out += [[t] + rest for rest in tokenizations(data[len(piece):], pieces)]
    return out


def brute_force(member: ByteMember, prompt: list[int], data: bytes) -> float:
    """P(the generated text is exactly `data`) = Σ over its tokenizations of P(tokens, then end)."""
    end = len(member.vocab.pieces) - 1
    total = 0.0
    for tokens in tokenizations(data, member.vocab.pieces):
        p, seq = 1.0, list(prompt)
        for t in tokens + [end]:
            p *= float(next_token_law(member, seq)[t])
            seq.append(t)
        total += p
    return total


def byte_level(member: ByteMember, prompt: list[int], data: bytes) -> float:
    member.start(prompt)
    p = 1.0
    for symbol in list(data) + [END]:
        p *= float(member.distribution()[symbol])
        member.advance(symbol)
    return p


STRINGS = [bytes(s) for n in range(5) for s in itertools.product([A, B], repeat=n)]


@pytest.mark.parametrize("pieces", [PIECES_A, PIECES_B], ids=["vocab_a", "vocab_b"])
def test_string_probability_is_the_marginal_over_every_tokenization(pieces):
    member = llama_member(pieces, seed=3)
    prompt = [0, 1]
    for data in STRINGS:
        assert byte_level(member, prompt, data) == pytest.approx(brute_force(member, prompt, data), rel=1e-5), data
    # the strings up to 4 bytes hold most of the mass only with short texts; at least their sum is below 1
    assert sum(byte_level(member, prompt, s) for s in STRINGS) < 1.0


def test_each_law_is_a_distribution_and_ambiguity_is_tracked():
    member = llama_member(PIECES_A, seed=4)
    member.start([0])
    for symbol in b"abab":
        law = member.distribution()
        assert law.shape == (257,) and float(law.sum()) == pytest.approx(1.0, abs=1e-12)
        assert set(torch.nonzero(law).flatten().tolist()) == {A, B, END}
        member.advance(symbol)
    # "abab": a|b|a|b, ab|ab, a|ba|b, ab|a|b, a|b|ab ... more than one hypothesis is alive
    assert member.stats.most_hypotheses > 2
    assert member.stats.forwards <= member.stats.bytes + 1


def test_impossible_symbol_and_a_finished_text_are_refused():
    member = table_member(PIECES_A, seed=1)
    member.start([0])
    with pytest.raises(ValueError, match="no token of its vocabulary spells byte 99"):
        member.advance(ord("c"))
    member.advance(END)
    with pytest.raises(RuntimeError, match="ended"):
        member.distribution()


# Monte Carlo: outcomes are the first 3 symbols (a text that ends sooner: its bytes, then END)
N_SYMBOLS_MC, N_SAMPLES, DELTA = 3, 12000, 1e-6
OUTCOMES = [s for n in range(N_SYMBOLS_MC + 1) for s in itertools.product([A, B], repeat=n)]
THRESHOLD = math.sqrt(2 * (len(OUTCOMES) * math.log(2) + math.log(1 / DELTA)) / N_SAMPLES)


def law_of_outcomes(member: ByteMember, prompt: list[int]) -> dict[tuple, float]:
    """The byte-level member's probability of each outcome, enumerated symbol by symbol."""
    out = {}
    for outcome in OUTCOMES:
        member.start(prompt)
        p = 1.0
        for symbol in outcome:
            p *= float(member.distribution()[symbol])
            if p == 0:  # the control can rule a string out
                break
            member.advance(symbol)
        out[outcome] = p * (float(member.distribution()[END]) if p and len(outcome) < N_SYMBOLS_MC else 1.0)
    return out


def sampled_tokens(member: ByteMember, prompt: list[int], seed: int) -> tuple:
    """Sample tokens from the model, decode: the outcome of the text's first symbols."""
    generator, seq, data = torch.Generator().manual_seed(seed), list(prompt), b""
    while len(data) < N_SYMBOLS_MC:
        t = int(torch.multinomial(next_token_law(member, seq).float(), 1, generator=generator))
        if t in member.vocab.end_ids:
            break
        data += member.vocab.pieces[t]
        seq.append(t)
    return tuple(data[:N_SYMBOLS_MC])


class HeaviestTokenization(ByteMember):
    """Negative control: keeps one tokenization, the heaviest (what 'decode the likeliest token' does)."""

    def _renormalised(self, covers: Covers) -> tuple[Covers, float]:
        entries = [(w, Covers({path: w}, [])) for path, w in covers.boundary.items()]
        entries += [(float(w), Covers({}, [Partial(p.path, p.offset, p.ids[i:i + 1], p.weights[i:i + 1])]))
                    for p in covers.partials for i, w in enumerate(p.weights)]
        return super()._renormalised(max(entries, key=lambda e: e[0])[1]) if entries else (covers, 0.0)


@pytest.mark.slow
def test_sampled_tokens_decoded_are_distributed_as_the_byte_level_law():
    member = table_member(PIECES_A, seed=5)
    prompt = [0, 2]
    empirical = Counter(sampled_tokens(member, prompt, s) for s in range(N_SAMPLES))
    exact = law_of_outcomes(member, prompt)
    assert sum(exact.values()) == pytest.approx(1.0, abs=1e-9)
    l1 = sum(abs(empirical[o] / N_SAMPLES - p) for o, p in exact.items())
    assert l1 < THRESHOLD, (l1, THRESHOLD)
    control = law_of_outcomes(HeaviestTokenization(member.member, member.vocab), prompt)
    l1_control = sum(abs(empirical[o] / N_SAMPLES - p) for o, p in control.items())
    assert l1_control > THRESHOLD, (l1_control, THRESHOLD)


def ensemble_law(members, combination, params, prompts) -> dict[tuple, float]:
    out = {}
    for outcome in OUTCOMES:
        for m, prompt in zip(members, prompts):
            m.start(prompt)
        p = 1.0
        for symbol in outcome:
            p *= float(combined_law(members, combination, params)[symbol])
            for m in members:
                m.advance(symbol)
        out[outcome] = p * (float(combined_law(members, combination, params)[END])
                            if len(outcome) < N_SYMBOLS_MC else 1.0)
    return out


COMBINATIONS = {"we": WeightedEnsemble.two_member(0.4), "cd": Contrastive(alpha=0.3)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_naive_ensemble_of_two_vocabularies_samples_r(name):
    combination, params = COMBINATIONS[name], SamplingParams(temperature=1.0)
    members = [table_member(PIECES_A, seed=6), table_member(PIECES_B, seed=7)]
    prompts = [[0, 2], [1, 3]]
    exact = ensemble_law(members, combination, params, prompts)
    assert sum(exact.values()) == pytest.approx(1.0, abs=1e-6)
    n = 3000
    counts = Counter(tuple(generate_naive(members, combination, prompts, N_SYMBOLS_MC, params, seed=s).data)
                     for s in range(n))
    l1 = sum(abs(counts[o] / n - p) for o, p in exact.items())
    bound = math.sqrt(2 * (len(OUTCOMES) * math.log(2) + math.log(1 / DELTA)) / n)
    assert l1 < bound, (l1, bound)


def test_naive_ensemble_greedy_follows_argmax_r():
    members = [llama_member(PIECES_A, seed=8), llama_member(PIECES_B, seed=9)]
    combination, greedy = WeightedEnsemble.two_member(0.5), SamplingParams(temperature=0)
    out = generate_naive(members, combination, [[0], [1]], 6, greedy)
    for m, prompt in zip(members, [[0], [1]]):
        m.start(prompt)
    expected = bytearray()
    for _ in range(6):
        symbol = int(combined_law(members, combination, greedy).argmax())
        if symbol == END:
            break
        expected.append(symbol)
        for m in members:
            m.advance(symbol)
    assert out.data == bytes(expected)


def test_pruning_drops_light_tokenizations_and_counts_the_mass():
    exact, pruned = table_member(PIECES_A, seed=10), table_member(PIECES_A, seed=10, prune=0.05)
    greedy = SamplingParams(temperature=0)
    data = generate_naive([pruned], WeightedEnsemble(n_members=1, weights=(1.0,)), [[0]], 6, greedy).data
    assert len(data) >= 3
    p_exact, p_pruned = byte_level(exact, [0], data), byte_level(pruned, [0], data)
    assert pruned.stats.most_hypotheses < exact.stats.most_hypotheses
    assert 0 < pruned.stats.pruned and exact.stats.pruned == 0
    assert p_pruned != p_exact


def test_a_byte_pruning_ruled_out_revives_the_member_from_one_spelling():
    """Under pruning a member can give 0 to a byte another member emits: it goes on from the longest-match
    spelling of the text (counted), and its laws stay laws."""
    for seed, prefix in itertools.product(range(40), STRINGS[1:7]):
        member = table_member(PIECES_A, seed, prune=0.4)
        member.start([0])
        for symbol in prefix:
            if not member.distribution()[symbol] > 0:
                break
            member.advance(symbol)
        else:
            continue
        member.advance(symbol)  # the byte it ruled out
        assert member.stats.revived == 1 and member.text == bytes(prefix[: len(member.text)])
        for symbol in b"ab":
            assert float(member.distribution().sum()) == pytest.approx(1.0) and member.distribution()[symbol] > 0
            member.advance(symbol)
        return
    pytest.fail("no pruned member ruled a byte out: the search space above needs widening")


def test_r_gives_no_mass_to_a_byte_some_member_cannot_spell():
    """A byte no token of one member starts with (0xF5-0xFF in some real vocabularies) would leave that
    member's law undefined after it: r excludes it."""
    members = [table_member(PIECES_A, 1), table_member([b"a", b"c", b"ac", b""], 2)]
    for m, prompt in zip(members, [[0], [0]]):
        m.start(prompt)
    r = combined_law(members, WeightedEnsemble.two_member(0.5), SamplingParams())
    assert r[A] > 0 and r[B] == 0 and r[ord("c")] == 0 and float(r.sum()) == pytest.approx(1.0)


def test_token_bytes_from_a_byte_level_tokenizer():
    tokenizer = byte_tokenizer()
    vocab = TokenBytes.from_tokenizer(tokenizer, len(tokenizer) + 3, [tokenizer.eos_token_id])
    assert vocab.pieces[ord("a")] == b"a" and vocab.pieces[0x80] == bytes([0x80])
    assert not vocab.generated[-3:].any()  # logits rows past the tokenizer: never generated
    assert int(vocab.first[tokenizer.eos_token_id]) == END


def test_an_unknown_byte_mapping_is_refused_with_the_fix():
    word = Tokenizer(tok_models.WordLevel({"hello": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word, unk_token="[UNK]")
    with pytest.raises(ValueError, match="byte-level BPE"):
        TokenBytes.from_tokenizer(tokenizer, 2, [])


def test_vocabulary_size_mismatch_is_refused():
    with pytest.raises(ValueError, match="vocab_size"):
        ByteMember(TableMember(0, vocab=8), vocabulary(PIECES_A))


# -- speculation over bytes -------------------------------------------------------------------------------
def sequential_laws(member: ByteMember, prompt: list[int], symbols: list[int]) -> torch.Tensor:
    member.start(prompt)
    laws = []
    for symbol in symbols:
        laws.append(member.distribution())
        member.advance(symbol)
    return torch.stack(laws + [member.distribution()])


@pytest.mark.parametrize("make", [table_member, llama_member], ids=["table", "llama"])
@pytest.mark.parametrize("prune", [0.0, 0.02])
def test_laws_along_a_draft_are_the_laws_byte_by_byte(make, prune):
    """Exact (prune 0), every single-byte tokenization stays alive: one forward per byte, as stepwise.
    Pruned, the levels are the likely tokenizations': fewer forwards."""
    member = make(PIECES_B, 12)
    member.prune = prune
    member.start([0, 1])
    drafts = (member.draft(8, greedy=False, generator=torch.Generator().manual_seed(seed)) for seed in range(200))
    symbols = next(d for d in drafts if END not in d)  # a text the member can emit, 8 bytes long
    expected = sequential_laws(member, [0, 1], symbols)
    stepwise = member.stats.forwards
    member.start([0, 1])
    ahead = member.laws_along(symbols)
    torch.testing.assert_close(ahead, expected, rtol=1e-5, atol=1e-7)  # fp32 rows of a tree vs of a chain
    assert member.stats.forwards < stepwise if prune else member.stats.forwards <= stepwise
    ahead_forwards = member.stats.forwards
    for symbol in symbols:  # emitting the draft afterwards needs no forward: its laws are known
        member.advance(symbol)
    member.distribution()
    assert member.stats.forwards == ahead_forwards


def test_laws_along_stop_at_end_and_at_an_impossible_byte():
    member = table_member(PIECES_A, 13)
    member.start([0])
    assert member.laws_along([A, END, B]).shape == (2, 257)
    assert member.laws_along([A, ord("c"), B]).shape == (2, 257)


SPEC_CASES = {"we_draft_a": ("we", 0), "we_draft_b": ("we", 1), "cd_draft_a": ("cd", 0)}


@pytest.mark.parametrize("case", list(SPEC_CASES))
@pytest.mark.parametrize("draft_bytes,adaptive", [(1, False), (3, False), (5, False), (5, True), (9, True)])
def test_speculative_greedy_is_the_naive_reference(case, draft_bytes, adaptive):
    name, drafter = SPEC_CASES[case]
    greedy = SamplingParams(temperature=0)
    for seed in range(3):
        # prune: with every tokenization kept their number doubles with each byte (2^24 here)
        members = [table_member(PIECES_A, 20 + seed, prune=1e-4), table_member(PIECES_B, 30 + seed, prune=1e-4)]
        prompts = [[0, seed % 5], [1, 2]]
        naive = generate_naive(members, COMBINATIONS[name], prompts, 24, greedy)
        spec = generate_speculative(members, COMBINATIONS[name], prompts, 24, greedy, drafter=drafter,
                                    draft_bytes=draft_bytes, adaptive=adaptive)
        assert (spec.data, spec.ended) == (naive.data, naive.ended)
        if draft_bytes > 1 and len(naive.data) > 8:
            assert spec.rounds < naive.rounds


def test_speculative_greedy_on_transformers_with_different_vocabularies():
    members = [llama_member(PIECES_A, 8), llama_member(PIECES_B, 9)]
    for m in members:
        m.prune = 0.02
    combination, greedy = WeightedEnsemble.two_member(0.5), SamplingParams(temperature=0)
    naive = generate_naive(members, combination, [[0], [1]], 16, greedy)
    spec = generate_speculative(members, combination, [[0], [1]], 16, greedy, drafter=1, draft_bytes=6)
    assert (spec.data, spec.ended) == (naive.data, naive.ended)


MIXED = ("draft:0", "naive", "draft:1", "draft:1")  # a cycle of kinds of round, as the engine's choice may run


def generate_mixed(members, combination, prompts, max_bytes: int, params, seed: int = 0, draft_bytes: int = 3):
    """Rounds of every kind in turn (rounds.decode), from one text: what a measured choice of rounds runs."""
    start_all(members, combination, prompts)
    stopper = ByteStopper(max_bytes)
    generator = torch.Generator().manual_seed(seed)
    decode(members, combination, stopper, params, generator, MIXED, DraftLengths(draft_bytes))
    return stopper.output()


def test_rounds_of_every_kind_in_turn_give_the_naive_text_under_greedy():
    greedy = SamplingParams(temperature=0)
    for seed, (name, combination) in itertools.product(range(2), COMBINATIONS.items()):
        members = [table_member(PIECES_A, 20 + seed, prune=1e-4), table_member(PIECES_B, 30 + seed, prune=1e-4)]
        naive = generate_naive(members, combination, [[0, 2], [1, 3]], 24, greedy)
        assert generate_mixed(members, combination, [[0, 2], [1, 3]], 24, greedy) == naive.data, (seed, name)


def spec_l1(members, combination, prompts, n: int, mixed: bool = False, **options) -> float:
    params = SamplingParams(temperature=1.0)
    exact = ensemble_law(members, combination, params, prompts)
    if mixed:
        outputs = (generate_mixed(members, combination, prompts, N_SYMBOLS_MC, params, s, **options) for s in range(n))
    else:
        outputs = (generate_speculative(members, combination, prompts, N_SYMBOLS_MC, params, seed=s, **options).data
                   for s in range(n))
    counts = Counter(tuple(out) for out in outputs)
    return sum(abs(counts[o] / n - p) for o, p in exact.items())


N_SPEC = 3000
SPEC_BOUND = math.sqrt(2 * (len(OUTCOMES) * math.log(2) + math.log(1 / DELTA)) / N_SPEC)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SPEC_CASES))
def test_speculative_sampling_samples_r(case):
    name, drafter = SPEC_CASES[case]
    members = [table_member(PIECES_A, 6), table_member(PIECES_B, 7)]
    # adaptive lengths of 2 or 3 bytes: a length chosen from past rounds keeps the law
    l1 = spec_l1(members, COMBINATIONS[name], [[0, 2], [1, 3]], N_SPEC, drafter=drafter, draft_bytes=3)
    assert l1 < SPEC_BOUND, (l1, SPEC_BOUND)


@pytest.mark.slow
def test_rounds_of_every_kind_in_turn_sample_r():
    """Naive steps and drafts by either member, one after another from the same text (what the engine's
    measured choice of rounds runs): the text keeps r's law."""
    members = [table_member(PIECES_A, 6), table_member(PIECES_B, 7)]
    l1 = spec_l1(members, COMBINATIONS["we"], [[0, 2], [1, 3]], N_SPEC, mixed=True, draft_bytes=3)
    assert l1 < SPEC_BOUND, (l1, SPEC_BOUND)


@pytest.mark.slow
def test_speculative_sampling_alone_emits_the_drafters_law_with_end_verified():
    """r = the drafter's own law: every draft is accepted, so the text is the drafts'. A draft that ends at
    END must have END verified too: drawing a bonus in its place instead made L1 0.27 here."""
    members = [table_member(PIECES_B, 7)]
    l1 = spec_l1(members, WeightedEnsemble(n_members=1, weights=(1.0,)), [[1, 3]], N_SPEC, draft_bytes=2)
    assert l1 < SPEC_BOUND, (l1, SPEC_BOUND)


@pytest.mark.slow
def test_speculative_sampling_negative_control_fails(monkeypatch):
    """A residual drawn from r instead of norm(max(0, r - q)) must fail the same bound."""
    import cos.acceptance

    monkeypatch.setattr(cos.acceptance, "residual_distribution", lambda r, q: r)
    members = [table_member(PIECES_A, 6), table_member(PIECES_B, 7)]
    l1 = spec_l1(members, COMBINATIONS["we"], [[0, 2], [1, 3]], N_SPEC, drafter=0, draft_bytes=2)
    assert l1 > SPEC_BOUND, (l1, SPEC_BOUND)
