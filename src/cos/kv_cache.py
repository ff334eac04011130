"""A preallocated KV cache per member: a rollback moves the valid length, nothing is reallocated per round.

transformers' DynamicCache grows each layer by `torch.cat` on every forward (a copy of the whole cache)
and crops by slicing; its StaticCache attends over the full preallocated length on every call (a mask
of max_cache_len columns), which costs attention time on CPU when contexts are short. This cache keeps
one buffer per layer, [B, H, capacity, D], writes each call's keys/values in place at the valid length,
and hands attention a view of the valid prefix: attention sees exactly the tokens a DynamicCache would
hold, in the same layout of values, so logits are those of a fresh forward over the same tokens (tested:
tests/test_runtime.py::test_rollback_then_redecode_equals_fresh_forward). A rollback (crop) only lowers the length; stale entries past it are overwritten
by the next write and never read. Capacity doubles, with one copy, if a request outgrows it.

Models whose layers are not all full attention (sliding windows, linear attention, ...) get the
DynamicCache of their config instead; `make_cache` says why once in the log.

`static`: transformers' StaticCache (fixed shapes and addresses, what CUDA graphs need): attention
covers all `capacity` positions under a causal mask built from the positions fed, so a rollback only
rewinds each layer's write position, on the device (stale entries past it are masked, then overwritten).
"""

from __future__ import annotations

import logging

import torch
from transformers import DynamicCache, StaticCache

log = logging.getLogger(__name__)
_warned: set[str] = set()

try:  # transformers >= 5 splits caches into layers; older versions fall back to DynamicCache
    from transformers.cache_utils import Cache, DynamicLayer, get_layer_types_and_kwargs
except ImportError:  # pragma: no cover - depends on the installed transformers
    Cache = DynamicLayer = get_layer_types_and_kwargs = None


if DynamicLayer is not None:

    class PreallocatedLayer(DynamicLayer):
        """One layer's keys/values in a buffer with a valid length; `keys`/`values` view the valid prefix."""

        def __init__(self, capacity: int = 256) -> None:
            super().__init__()
            self.capacity = capacity
            self.length = 0
            self._k: torch.Tensor | None = None  # [B, H, capacity, D]
            self._v: torch.Tensor | None = None

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.dtype, self.device = key_states.dtype, key_states.device
            b, h, _, d = key_states.shape
            if self._k is None or self._k.shape[0] != b or self._k.dtype != key_states.dtype \
                    or self._k.device != key_states.device:
                self._k = key_states.new_empty(b, h, self.capacity, d)
                self._v = value_states.new_empty(b, value_states.shape[1], self.capacity, value_states.shape[-1])
            self.length = 0
            self.is_initialized = True

        def _grow(self, needed: int) -> None:
            capacity = self.capacity
            while capacity < needed:
                capacity *= 2
            k = self._k.new_empty(*self._k.shape[:2], capacity, self._k.shape[-1])
            v = self._v.new_empty(*self._v.shape[:2], capacity, self._v.shape[-1])
            k[:, :, : self.length] = self._k[:, :, : self.length]
            v[:, :, : self.length] = self._v[:, :, : self.length]
            self._k, self._v, self.capacity = k, v, capacity

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            if end > self.capacity:
                self._grow(end)
            self._k[:, :, self.length : end] = key_states
            self._v[:, :, self.length : end] = value_states
            self.length = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length if self.is_initialized else 0

        def crop(self, tokens_to_remove: int) -> None:
            """Negative: drop that many positions; positive: keep that many (transformers' two forms)."""
            keep = self.length + tokens_to_remove if tokens_to_remove < 0 else min(tokens_to_remove, self.length)
            self.length = max(0, keep)
            if self.is_initialized:
                self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

        def reset(self) -> None:
            """Forget the contents, keep the buffers (a new request allocates nothing)."""
            self.length = 0
            self.is_initialized = False
            self.keys = self.values = None


def _unsupported_reason(layer_types: list[str] | None) -> str | None:
    if layer_types is None:
        return "this transformers version has no cache layers (needs >= 5.0)"
    other = sorted(set(layer_types) - {"full_attention"})
    if other:
        return f"layer types {other} need their own cache (only full attention is preallocated)"
    return None


CACHE_KINDS = ("preallocated", "dynamic", "static")


def make_cache(config, capacity: int = 256, kind: str = "preallocated"):
    """A cache for one member: preallocated where every layer is full attention, else DynamicCache;
    static: transformers' StaticCache of `capacity` positions."""
    if kind == "static":
        return StaticCache(config=config, max_cache_len=capacity)
    if kind == "preallocated":
        layer_types = None if DynamicLayer is None else \
            get_layer_types_and_kwargs(config.get_text_config(decoder=True))[0]
        reason = _unsupported_reason(layer_types)
        if reason is None:
            return Cache(layers=[PreallocatedLayer(capacity) for _ in layer_types])
        name = getattr(config, "model_type", "model")
        if name not in _warned:
            _warned.add(name)
            log.warning("%s: dynamic KV cache instead of a preallocated one: %s", name, reason)
    elif kind != "dynamic":
        raise ValueError(f"unknown cache kind {kind!r}: use one of {', '.join(CACHE_KINDS)}")
    return DynamicCache(config=config)


def is_preallocated(cache) -> bool:
    return DynamicLayer is not None and bool(cache.layers) and isinstance(cache.layers[0], PreallocatedLayer)


def is_static(cache) -> bool:
    return isinstance(cache, StaticCache)


def truncate(cache, cached: int, keep: int) -> None:
    """Keep the first `keep` of `cached` positions (keep < cached)."""
    if is_static(cache):
        for layer in cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(keep)  # on the device: no host sync
    else:
        cache.crop(keep - cached)  # negative: drop that many


def empty(cache) -> None:
    """Forget every position, keeping the buffers of a preallocated or static cache."""
    if is_static(cache):
        truncate(cache, 1, 0)
    else:
        cache.reset()


def compact(cache, start: int, slots: list[int], length: int) -> None:
    """Keep positions 0..start-1 and then the given slots (absolute, each >= start, in any order: the
    gather copies before it writes) of a cache holding `length` positions: slot slots[j] moves to
    start + j (a draft tree's accepted path laid out as a chain, tree.py); everything after is dropped."""
    keep = start + len(slots)
    if slots != list(range(start, keep)):
        index = torch.tensor(slots)
        for layer in cache.layers:
            if not layer.is_initialized:
                continue
            if isinstance(layer, PreallocatedLayer):
                buffers = (layer._k, layer._v)
            else:  # transformers' own layers: static (fixed buffers) or dynamic (the valid prefix)
                buffers = (layer.keys, layer.values)
            for b in buffers:
                b[:, :, start:keep] = b[:, :, index.to(b.device)]
    if keep < length:
        truncate(cache, length, keep)
