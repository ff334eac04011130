"""Example combinations for custom methods named in a config (configs/method/custom.yaml).

A custom combination is any importable callable `f(values, **kwargs) -> tensor`: `values` is the
list of member tensors in config order [model, *extra_model], each [..., V]; what they are and what
f returns depends on the declared `space` (docs/algorithm.md §2):
  probs       processed probabilities in, (unnormalised) probabilities out
  logits      processed logits in, logits out (softmax follows)
  raw-logits  raw logits in, logits out (temperature / top-k / top-p follow, then softmax)
A module of your own works the same way (`target: my_module:my_function`), as long as Python can
import it, e.g. a file beside main_dataset.py or any installed package.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def realignment(values: Sequence[torch.Tensor], lam: float = 1.0) -> torch.Tensor:
    """Decoding-time realignment (Liu et al. 2024): l_ref + λ (l_aligned - l_ref). Space: raw-logits.

    Members [reference, aligned]; λ = 1 is the aligned model alone, λ > 1 extrapolates past it.
    """
    ref, aligned = values
    return ref + lam * (aligned - ref)


def proxy_tuning(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Proxy-tuning (Liu et al. 2024): l_base + l_tuned - l_untuned. Space: raw-logits.

    Members [base, tuned, untuned]: a small tuned/untuned pair steers a large base model.
    """
    base, tuned, untuned = values
    return base + tuned - untuned
