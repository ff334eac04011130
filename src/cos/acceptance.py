"""The one acceptance rule (docs/algorithm.md §3), for a whole block in one batched call.

For a draft token x at a position with proposal distribution q and combined distribution r:
- sampling: accept with probability min(1, r(x)/q(x)); at the first rejection emit a residual
  drawn from norm(max(0, r - q)) and discard the rest of the block;
- greedy: accept iff x == argmax r; the residual is argmax r.
If r has one row more than the block (the distribution at the position after it) and every draft
is accepted, a bonus token is drawn from that row. The emitted tokens are then distributed exactly
as token-by-token sampling from r (Leviathan et al. 2023; Chen et al. 2023).

Pure math: no model, no cache, no host sync. The caller reads the two returned scalars with one
`.tolist()` per round.
"""

from __future__ import annotations

import torch

from .sampling import sample

NO_TOKEN = -1


def residual_distribution(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, r - q)) row-wise [..., V]; rows with no positive mass fall back to r."""
    diff = (r - q).clamp_min(0)
    mass = diff.sum(-1, keepdim=True)
    return torch.where(mass > 0, diff / mass.clamp_min(torch.finfo(diff.dtype).tiny), r)


def verify_block(
    draft: torch.Tensor,  # [k] token ids
    q: torch.Tensor | None,  # [k, V] proposal distributions (unused when greedy)
    r: torch.Tensor,  # [k, V] or [k+1, V] combined distributions (last row: bonus position)
    greedy: bool,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a block of drafts against r. Returns (n_accepted, next_token), both 0-d tensors.

    next_token is the residual at the first rejection, the bonus after a fully accepted block when
    r has a bonus row, else NO_TOKEN.
    """
    k = draft.shape[0]
    assert r.dim() == 2 and r.shape[0] in (k, k + 1), (tuple(draft.shape), tuple(r.shape))
    has_bonus_row = r.shape[0] == k + 1
    if greedy:
        target = r.argmax(-1)  # [k(+1)]: the residual and the bonus are argmax r
        accepted = draft == target[:k]
        candidates = target if has_bonus_row else torch.cat([target, target.new_full((1,), NO_TOKEN)])
        n_accepted = accepted.long().cumprod(0).sum()  # accepted prefix length, stays on device
        return n_accepted, candidates[n_accepted]
    assert q is not None and q.shape == (k, r.shape[1]), "sampling needs q of shape [k, V]"
    rows = torch.arange(k, device=r.device)
    u = torch.rand(k, generator=generator, device=r.device, dtype=r.dtype)
    accepted = u * q[rows, draft] < r[rows, draft]  # P(accept) = min(1, r(x)/q(x))
    n_accepted = accepted.long().cumprod(0).sum()
    # the distribution the next token comes from: a residual row, or the bonus row (or a dummy
    # row when there is none); only row n_accepted is drawn, without reading it on the host
    dists = [residual_distribution(r[:k], q), r[k:] if has_bonus_row else torch.ones_like(r[:1]) / r.shape[1]]
    token = sample(torch.cat(dists).index_select(0, n_accepted.view(1)), generator)[0]
    if not has_bonus_row:
        token = torch.where(n_accepted == k, torch.full_like(token, NO_TOKEN), token)
    return n_accepted, token
