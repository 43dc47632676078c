"""Block projected Gauss-Seidel: one contact (normal + up to two friction rows) solved exactly at a time.

A block is (head, t1, t2): the head is a non-friction row (a contact normal, or any plain boxed row), t1/t2 the
friction rows whose ``normal_index`` points to it (-1 where a contact has fewer). With the rest of λ frozen the
block is a 3x3 boxed LCP whose tangent boxes follow the head: ``|λ_t| ≤ μ λ_h``. We solve it exactly by
enumeration: the head is at lo, free or at hi, each tangent at its lower bound, free or at its upper bound
(27 active sets); each active set is a 3x3 linear system (Cramer's rule, batched). A ten-sweep inner PGS run from
the current values is added as a 28th candidate, and the candidate with the smallest block natural-map residual
is taken; it is zero when some active set solves the block, which is the case for SPD blocks with μ ≥ 0.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..arrays import to_numpy, xp_of
from .rules import psor_row

# (27, 3): state per slot, 0 = at lower bound, 1 = free (w = 0), 2 = at upper bound
_COMBOS = np.array(list(itertools.product(range(3), repeat=3)), dtype=np.int64)
_INNER_SWEEPS = 10


def build_blocks(normal_index, mask, batch: int, m: int, xp=np):
    """Blocks (B, c, 3) int, -1 where empty, from a friction layout (normal_index (B, m), or None: all rows
    are 1-row blocks) and mask (B, m) or None. Built on the host once per solve (O(B·m))."""
    ni = np.full((batch, m), -1, dtype=np.int64) if normal_index is None else \
        np.broadcast_to(to_numpy(normal_index), (batch, m)).astype(np.int64)
    msk = np.ones((batch, m), bool) if mask is None else np.broadcast_to(to_numpy(mask), (batch, m))
    is_head = (ni < 0) & msk
    rank = np.cumsum(is_head, axis=1) - 1
    c = int(is_head.sum(axis=1).max()) if m else 0
    blocks = np.full((batch, max(c, 1), 3), -1, dtype=np.int64)
    fill = np.zeros((batch, m), dtype=np.int64)  # friction rows already attached to each head row
    bi = np.arange(batch)
    for i in range(m):
        h = is_head[:, i]
        blocks[bi[h], rank[h, i], 0] = i
        t = (ni[:, i] >= 0) & msk[:, i]
        if t.any():
            n = ni[t, i]
            slot = fill[bi[t], n] + 1
            if slot.max() > 2:
                raise ValueError("block_pgs supports at most two friction rows per normal row")
            if not is_head[bi[t], n].all():
                raise ValueError("a friction row's normal_index must name an active non-friction row")
            blocks[bi[t], rank[bi[t], n], slot] = i
            fill[bi[t], n] += 1
    return xp.asarray(blocks)


def solve3(K, rhs):
    """Batched 3x3 solve by Cramer's rule: K (..., 3, 3), rhs (..., 3) -> x (..., 3), ok (...) (non-singular)."""
    xp = xp_of(K, rhs)
    c0 = xp.cross(K[..., 1, :], K[..., 2, :])
    c1 = xp.cross(K[..., 2, :], K[..., 0, :])
    c2 = xp.cross(K[..., 0, :], K[..., 1, :])
    det = xp.sum(K[..., 0, :] * c0, axis=-1)
    scale = xp.max(xp.abs(K), axis=(-2, -1)) ** 3
    ok = xp.abs(det) > 1e-13 * scale
    safe = xp.where(ok, det, 1.0)
    # x = K⁻¹ rhs with K⁻¹ = [c0 c1 c2] / det (columns are the cofactor rows)
    x = (c0 * rhs[..., 0:1] + c1 * rhs[..., 1:2] + c2 * rhs[..., 2:3]) / safe[..., None]
    return x, ok


def _block_residual(lam, Abb, r, lo_h, hi_h, mu):
    """max_s |λ_s - clip(λ_s - w_s, lo_s, hi_s)| for candidates lam (B, K, 3); tangent boxes follow λ_h."""
    xp = xp_of(lam, Abb)
    w = xp.einsum("bij,bkj->bki", Abb, lam) + r[:, None, :]
    cap = mu[:, None, :] * xp.maximum(lam[..., :1], 0.0)
    lo = xp.concatenate([xp.broadcast_to(lo_h[:, None, None], cap[..., :1].shape), -cap[..., 1:]], axis=-1)
    hi = xp.concatenate([xp.broadcast_to(hi_h[:, None, None], cap[..., :1].shape), cap[..., 1:]], axis=-1)
    res = xp.max(xp.abs(lam - xp.clip(lam - w, lo, hi)), axis=-1)
    return xp.where(xp.all(xp.isfinite(lam), axis=-1), res, xp.inf)


def solve_block(Abb, r, lam0, lo_h, hi_h, mu):
    """Exact solution of the block LCP  w = Abb λ + r, head in [lo_h, hi_h], |λ_t| ≤ μ_t λ_h.

    Abb (B, 3, 3) with identity rows/columns for empty slots, r (B, 3) (0 on empty slots), lam0 (B, 3) current
    values (start of the inner-PGS candidate), lo_h/hi_h (B,), mu (B, 3) (mu[:, 0] unused; 0 on empty slots).
    Returns λ (B, 3).
    """
    xp = xp_of(Abb, r)
    B = Abb.shape[0]
    eye = xp.eye(3, dtype=Abb.dtype)
    zero = xp.zeros(B, dtype=Abb.dtype)
    # candidate rows R[b, slot, state, :] and right-hand sides S[b, slot, state]
    head_rows = xp.stack([xp.broadcast_to(eye[0], (B, 3)), Abb[:, 0], xp.broadcast_to(eye[0], (B, 3))], axis=1)
    head_rhs = xp.stack([xp.where(xp.isfinite(lo_h), lo_h, 0.0), -r[:, 0], xp.where(xp.isfinite(hi_h), hi_h, 0.0)],
                        axis=1)
    R = [head_rows]
    S = [head_rhs]
    for s in (1, 2):
        # lower: λ_s + μλ_h = 0; free: w_s = 0; upper: λ_s - μλ_h = 0
        lower = eye[s][None, :] + mu[:, s:s + 1] * eye[0][None, :]
        upper = eye[s][None, :] - mu[:, s:s + 1] * eye[0][None, :]
        R.append(xp.stack([lower, Abb[:, s], upper], axis=1))
        S.append(xp.stack([zero, -r[:, s], zero], axis=1))
    R = xp.stack(R, axis=1)  # (B, 3, 3, 3)
    S = xp.stack(S, axis=1)  # (B, 3, 3)
    combos = xp.asarray(_COMBOS)
    slots = xp.arange(3)[None, :]
    K = R[:, slots, combos, :]  # (B, 27, 3, 3)
    rhs = S[:, slots, combos]  # (B, 27, 3)
    cand, ok = solve3(K, rhs)
    # an infinite head bound makes that active set meaningless
    inf_state = (~xp.isfinite(lo_h))[:, None] & (combos[None, :, 0] == 0) | \
        (~xp.isfinite(hi_h))[:, None] & (combos[None, :, 0] == 2)
    cand = xp.where((ok & ~inf_state)[..., None], cand, xp.nan)
    inner = _inner_pgs(Abb, r, lam0, lo_h, hi_h, mu)
    cand = xp.concatenate([cand, inner[:, None, :]], axis=1)
    res = _block_residual(cand, Abb, r, lo_h, hi_h, mu)
    best = xp.argmin(res, axis=1)
    return xp.take_along_axis(cand, best[:, None, None], axis=1)[:, 0, :]


def _inner_pgs(Abb, r, lam0, lo_h, hi_h, mu):
    """A few PGS sweeps on the block (fallback candidate for degenerate blocks)."""
    xp = xp_of(Abb, r)
    lam = lam0
    for _ in range(_INNER_SWEEPS):
        for s in range(3):
            rs = xp.sum(Abb[:, s] * lam, axis=1) - Abb[:, s, s] * lam[:, s] + r[:, s]
            a = xp.where(Abb[:, s, s] > 0, Abb[:, s, s], 1.0)
            if s == 0:
                lo, hi = lo_h, hi_h
            else:
                cap = mu[:, s] * xp.maximum(lam[:, 0], 0.0)
                lo, hi = -cap, cap
            v = psor_row(lam[:, s], rs, a, lo, hi, 1.0)
            lam = xp.concatenate([lam[:, :s], v[:, None], lam[:, s + 1:]], axis=1)
    return lam
