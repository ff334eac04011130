"""The composite model folder: n member LMs + a combination, as one model vLLM can load.

Layout written by `build_composite` (members are linked, never copied):

    composite/
      config.json              architectures [CosCollaborativeForCausalLM], model_type cos_collaborative,
                               the fields vLLM sizes things by (vocab_size, max_position_embeddings =
                               min over members, ...) and a "cos" section: members (name, relative path,
                               full HF config) and the combination {kind, ...make_combination kwargs}
      members/m0 -> /abs/member0 (symlink to the member's own folder: its weights are read from there)
      members/m1 -> ...
      cos_composite.safetensors  a one-tensor marker: vLLM's loader wants a weight file in the root
      tokenizer files            copied from member 0
      generation_config.json     token ids only: BOS / PAD of member 0, every member's EOS (where the HF
                                 engine stops). No member's sampling defaults (temperature, top_p,
                                 repetition_penalty, ...): vLLM applies those of the model folder to every
                                 request that leaves them out, and r is defined without them.

This module needs transformers only (no vLLM): the same spec is read by the builder, by the vLLM model
(`model.py`) and by `VllmEngine`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, GenerationConfig, PretrainedConfig

from ..combination import Combination
from ..presets import make_combination
from ..tokens import generation_eos

ARCHITECTURE = "CosCollaborativeForCausalLM"
MODEL_TYPE = "cos_collaborative"
FORMAT = 1
MARKER_FILE = "cos_composite.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja")


class CompositeConfig(PretrainedConfig):
    """HF config of a composite; the member configs and the combination live in `self.cos`."""

    model_type = MODEL_TYPE

    def __init__(self, cos: dict | None = None, vocab_size: int = 0, hidden_size: int = 0,
                 num_hidden_layers: int = 0, num_attention_heads: int = 1, num_key_value_heads: int = 1,
                 head_dim: int = 0, max_position_embeddings: int = 0, **kwargs) -> None:
        self.cos = cos or {}
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


def register_config() -> None:
    """Make AutoConfig (and so AutoTokenizer and vLLM) read composite folders. Idempotent."""
    AutoConfig.register(MODEL_TYPE, CompositeConfig, exist_ok=True)


register_config()


@dataclass(frozen=True)
class MemberSpec:
    name: str  # module name inside the composite: m0, m1, ... (never a bare integer: vLLM layer naming)
    path: Path  # absolute path of the member folder (through the link)
    config: PretrainedConfig


@dataclass(frozen=True)
class CompositeSpec:
    """What a composite folder says: members in config order and the combination."""

    root: Path
    members: tuple[MemberSpec, ...]
    combination_spec: Mapping

    @property
    def combination(self) -> Combination:
        kw = dict(self.combination_spec)
        return make_combination(kw.pop("kind"), len(self.members), **kw)

    @classmethod
    def from_config(cls, config: PretrainedConfig, root: str | os.PathLike) -> "CompositeSpec":
        cos = getattr(config, "cos", None)
        if not cos or cos.get("format") != FORMAT:
            raise ValueError(f"{root}: not a CoS composite folder of format {FORMAT} (no 'cos' section in "
                             f"config.json); build one with scripts/build_composite.py")
        root = Path(root)
        members = []
        for m in cos["members"]:
            path = (root / m["path"]).resolve()
            if not path.is_dir():
                raise FileNotFoundError(f"composite {root}: member {m['name']} folder {root / m['path']} is missing "
                                        f"(link to {m.get('source')}); rebuild the composite or restore the member")
            d = dict(m["config"])
            members.append(MemberSpec(m["name"], path, AutoConfig.for_model(d.pop("model_type"), **d)))
        check_member_configs([(m.name, m.config) for m in members])
        spec = cls(root, tuple(members), dict(cos["combination"]))
        spec.combination  # noqa: B018 -- validates the combination at load time, with make_combination's errors
        return spec

    def member_at(self, folder: str | os.PathLike) -> str | None:
        """The name of the member whose folder this is (links resolved, as member paths are), or None."""
        folder = Path(folder).resolve()
        return next((m.name for m in self.members if m.path == folder), None)

    @classmethod
    def load(cls, root: str | os.PathLike) -> "CompositeSpec":
        root = Path(root)
        if not (root / "config.json").is_file():
            raise FileNotFoundError(f"{root}: no config.json; build a composite with scripts/build_composite.py")
        return cls.from_config(AutoConfig.from_pretrained(str(root)), root)


def check_pipeline_parallel(size) -> None:
    """A composite runs its members side by side in one forward, which vLLM's pipeline stages would cut
    (model.py refuses intermediate tensors): refuse pipeline_parallel_size > 1 before vLLM starts."""
    if size is not None and int(size) > 1:
        raise ValueError(f"pipeline_parallel_size={size}: a CoS composite runs its members side by side in one "
                         f"forward, which pipeline stages would cut; use tensor_parallel_size to spread it over "
                         f"devices (and distributed_executor_backend='ray' over machines)")


def check_member_configs(configs: Sequence[tuple[str, PretrainedConfig]]) -> None:
    sizes = {name: c.vocab_size for name, c in configs}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"members have different vocabulary sizes {sizes}: collaborative decoding needs one "
                         f"shared vocabulary (same tokenizer); pick members of one model family")
    for name, c in configs:
        if not getattr(c, "architectures", None):
            raise ValueError(f"member {name}: config.json names no architectures (e.g. LlamaForCausalLM)")


def neutral_generation_config(paths: Sequence[Path], configs: Sequence[PretrainedConfig]) -> GenerationConfig:
    """Token ids only: BOS / PAD of member 0 and the EOS of every member (in member order), nothing else."""
    eos: list[int] = []
    for p, c in zip(paths, configs):
        eos += [t for t in generation_eos(p, c) if t not in eos]
    first = configs[0]
    return GenerationConfig(bos_token_id=first.bos_token_id, pad_token_id=first.pad_token_id,
                            eos_token_id=eos if len(eos) > 1 else eos[0] if eos else None)


def _check_tokenizers(paths: Sequence[Path]) -> None:
    vocabs = []
    for p in paths:
        try:
            vocabs.append(AutoTokenizer.from_pretrained(str(p)).get_vocab())
        except (OSError, ValueError):
            vocabs.append(None)  # no tokenizer in that folder: only vocabulary sizes can be compared
    known = [(p, v) for p, v in zip(paths, vocabs) if v is not None]
    if not known:
        raise ValueError(f"none of the members {[str(p) for p in paths]} has a tokenizer: a composite needs one")
    for p, v in known[1:]:
        if v != known[0][1]:
            raise ValueError(f"tokenizers of {known[0][0]} and {p} differ: collaborative decoding needs one shared "
                             f"tokenizer; pick members of one model family")


def build_composite(members: Sequence[str | os.PathLike], out_dir: str | os.PathLike, combination: str = "we", *,
                    link: bool = True, overwrite: bool = False, **combination_kwargs) -> Path:
    """Write a composite folder for `members` (config order [model, extra_1, ...]) and return its path.

    combination: a preset of `cos.presets.make_combination` (we, cd, mean, proxy_tuning, realignment,
    custom) with its keyword arguments (weights / lam, alpha, plausibility, target + space + kwargs).
    link: symlink member folders (default); False copies them (for filesystems without links).
    Raises ValueError / FileNotFoundError with a plain message on bad input, before writing anything.
    """
    paths = [Path(m).resolve() for m in members]
    if len(paths) < 1:
        raise ValueError("a composite needs at least one member folder")
    for p in paths:
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"member folder {p} does not exist or has no config.json (give local HF model "
                                    f"folders; download hub models first)")
    # 1. validate everything before touching out_dir
    comb = make_combination(combination, len(paths), **combination_kwargs)
    configs = [AutoConfig.from_pretrained(str(p)) for p in paths]
    names = [f"m{i}" for i in range(len(paths))]
    check_member_configs(list(zip(names, configs)))
    _check_tokenizers(paths)
    out = Path(out_dir)
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out} exists; pass overwrite=True (--overwrite) to replace it")
        shutil.rmtree(out)
    # 2. members: links (or copies) under members/
    (out / "members").mkdir(parents=True)
    entries = []
    for name, p, c in zip(names, paths, configs):
        dest = out / "members" / name
        if link:
            dest.symlink_to(p, target_is_directory=True)
        else:
            shutil.copytree(p, dest)
        entries.append({"name": name, "path": f"members/{name}", "source": str(p), "config": c.to_dict()})
    # 3. config.json: sizes vLLM reads, plus the cos section
    get = lambda c, k, default=None: getattr(c, k, None) or default  # noqa: E731
    first = configs[0]
    heads = get(first, "num_attention_heads", 1)
    config = CompositeConfig(
        cos={"format": FORMAT, "members": entries, "combination": {"kind": combination, **combination_kwargs}},
        vocab_size=first.vocab_size,
        hidden_size=sum(c.hidden_size for c in configs),  # forward returns the members' hidden states side by side
        num_hidden_layers=sum(c.num_hidden_layers for c in configs),
        num_attention_heads=heads,
        num_key_value_heads=get(first, "num_key_value_heads", heads),
        head_dim=get(first, "head_dim", first.hidden_size // heads),
        max_position_embeddings=min(get(c, "max_position_embeddings", 1 << 30) for c in configs),
        architectures=[ARCHITECTURE],
        bos_token_id=first.bos_token_id, eos_token_id=first.eos_token_id, pad_token_id=first.pad_token_id,
    )
    config.dtype = get(first, "dtype", None) or get(first, "torch_dtype", None)
    config.save_pretrained(str(out))
    # 4. marker weight file and tokenizer files (from member 0, the model)
    from safetensors.torch import save_file

    save_file({"cos_composite_format": torch.tensor([FORMAT])}, str(out / MARKER_FILE))
    for f in TOKENIZER_FILES:
        if (paths[0] / f).is_file():
            shutil.copy(paths[0] / f, out / f)
    neutral_generation_config(paths, configs).save_pretrained(str(out))
    assert comb.n_members == len(paths)
    return out
