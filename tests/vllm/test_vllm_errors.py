"""Bad input gives a clear error: at build time, at load time (our API and vLLM itself), on the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_cases import ENGINE_OPTIONS
from tiny_members import BYTES, SPECIALS, save_member
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from cos.vllm_backend import VllmEngine, build_composite

ROOT = Path(__file__).resolve().parents[2]


def shuffled_tokenizer() -> PreTrainedTokenizerFast:
    """Same size as the byte tokenizer, different ids: a different vocabulary."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), reverse=True)
    vocab = {ch: i for i, ch in enumerate(alphabet)} | {s: BYTES + i for i, s in enumerate(SPECIALS)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def test_build_rejects_different_vocabulary_sizes(member_dirs, tmp_path):
    wide = save_member(tmp_path / "wide", seed=3, vocab=300)
    with pytest.raises(ValueError, match="different vocabulary sizes"):
        build_composite([member_dirs["small"], wide], tmp_path / "c", "we")
    assert not (tmp_path / "c").exists()  # nothing written on error


def test_build_rejects_different_tokenizers(member_dirs, tmp_path):
    other = save_member(tmp_path / "other", seed=3, tokenizer=shuffled_tokenizer())
    with pytest.raises(ValueError, match="tokenizers of .* differ"):
        build_composite([member_dirs["small"], other], tmp_path / "c", "we")


def test_build_rejects_missing_member_folder(member_dirs, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_composite([member_dirs["small"], tmp_path / "nowhere"], tmp_path / "c", "we")


@pytest.mark.parametrize("kind,kwargs,match", [
    ("nonsense", {}, "unknown combination 'nonsense'"),
    ("we", {"weights": [0.5, 0.3, 0.2]}, "3 weights for 2 members"),
    ("cd", {"alpha": -1.0}, "alpha must be >= 0"),
    ("custom", {"target": "no_such_module:fn", "space": "logits"}, "cannot import combination"),
])
def test_build_rejects_bad_combinations(member_dirs, tmp_path, kind, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_composite([member_dirs["small"], member_dirs["close"]], tmp_path / "c", kind, **kwargs)


def test_cli_reports_errors_and_builds(member_dirs, tmp_path):
    script = [sys.executable, str(ROOT / "scripts" / "build_composite.py")]
    bad = subprocess.run([*script, str(tmp_path / "c"), str(member_dirs["small"]), "--combination", "nonsense"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "build_composite: error: unknown combination" in bad.stderr
    good = subprocess.run([*script, str(tmp_path / "c"), str(member_dirs["small"]), str(member_dirs["close"]),
                           "--combination", "cd", "--alpha", "0.2", "--plausibility", "0.1"],
                          capture_output=True, text=True, check=True)
    assert json.loads(good.stdout)["composite"] == str(tmp_path / "c")
    cos = json.loads((tmp_path / "c" / "config.json").read_text())["cos"]
    assert cos["combination"] == {"kind": "cd", "alpha": 0.2, "plausibility": 0.1}
    assert (tmp_path / "c" / "members" / "m1").resolve() == member_dirs["close"].resolve()  # linked, not copied


@pytest.fixture()
def broken_composite(member_dirs, tmp_path) -> Path:
    """A composite whose second member folder was deleted after the build."""
    doomed = shutil.copytree(member_dirs["close"], tmp_path / "doomed")
    composite = build_composite([member_dirs["small"], doomed], tmp_path / "broken", "we")
    shutil.rmtree(doomed)
    return composite


def test_load_reports_missing_member(broken_composite):
    with pytest.raises(FileNotFoundError, match="member m1 folder .* is missing"):
        VllmEngine(broken_composite, **ENGINE_OPTIONS)


def test_vllm_itself_reports_missing_member(broken_composite):
    """Loading through vLLM directly (as `vllm serve` does) fails with the same message."""
    from vllm import LLM

    with pytest.raises(Exception) as info:
        LLM(str(broken_composite), **ENGINE_OPTIONS)
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("member m1 folder" in m for m in chain), chain


def test_load_reports_bad_combination(member_dirs, tmp_path):
    composite = build_composite([member_dirs["small"], member_dirs["close"]], tmp_path / "c", "we")
    config = json.loads((composite / "config.json").read_text())
    config["cos"]["combination"] = {"kind": "median"}  # hand-edited
    (composite / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unknown combination 'median'"):
        VllmEngine(composite, **ENGINE_OPTIONS)


def test_not_a_composite(member_dirs):
    with pytest.raises(ValueError, match="not a CoS composite"):
        VllmEngine(member_dirs["small"], **ENGINE_OPTIONS)


def test_bad_speculative_draft(composite_dirs):
    with pytest.raises(FileNotFoundError, match="neither a member name"):
        VllmEngine(composite_dirs["we2"], speculative_draft="m7", **ENGINE_OPTIONS)
