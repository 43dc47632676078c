"""A differentiable step's whole backward for one row (diff/functions.py Step.backward): the cotangent conversions
at the torch boundary (kinematics/configuration.py tangent_cotangent, coordinate_cotangent), the contact memory's
anchor update (integrators/contact_adjoint.py memory_vjp) and the step's adjoint (:func:`.adjoint.vjp_row`)."""
from __future__ import annotations

import math

from .adjoint import _sphere_centre, load_row, vjp_row
from .algebra import quat_mul
from .chain_rule import wrench_gradient
from .jit import jitable


@jitable
def backward_row(m, fo, q_prev, q_cur, tau, q_next, cP, cact, cnorm, canc, gin, abar, coords, fresh, out_lam,
                 out_prev, out_cur, out_tau, out_anchor, r, sc, V, gt, anc, amem):
    """Row r of a step's backward from (q_prev, q_cur) (B, nq) under tau (B, nv) to q_next (B, nq), with the
    contact memory of q_cur (cP, cact, cnorm, canc: (B, S, …)).

    gin: the cotangent on q_next, on its coordinates (B, nq) when ``coords``, else on its tangent space (B, nv);
    abar (B, S, 3): the cotangent on the anchors of the step's new contact memory (zeros when none). Writes λ
    (out_lam (B, nv)), the cotangents of q_prev and q_cur (out_prev, out_cur: (B, nq) coordinates when ``coords``,
    else (B, nv) tangents), of tau (out_tau (B, nv)) and of the anchors of q_cur's memory (out_anchor (B, S, 3),
    heights 0). ``fresh``: those anchors were the sphere centres of q_cur (a fresh memory), so their cotangent goes
    to q_cur as well. gt (nv,), anc, amem (S, 3): row scratch."""
    nv = m.dof_link.shape[0]
    if coords:
        _tangent_cotangent(m, q_next, gin, r, gt)
    else:
        for k in range(nv):
            gt[k] = gin[r, k]
    n_s = cP.shape[1]
    for s in range(n_s):
        amem[s, 0] = amem[s, 1] = amem[s, 2] = 0.0
    load_row(m, fo, q_prev, q_cur, tau, q_next, cP, cact, cnorm, canc, r, sc)
    if fo.friction == 1 and n_s > 0:
        _memory_vjp(m, fo, sc.car, sc.canr, abar[r], sc, gt, amem, anc)  # (anc: scratch until vjp_row)
    vjp_row(m, fo, gt, sc, V, anc)
    for s in range(n_s):
        for a in range(2):
            anc[s, a] += amem[s, a]
            out_anchor[r, s, a] = anc[s, a]
        anc[s, 2] = out_anchor[r, s, 2] = 0.0  # the anchors' height is never read
    if fresh and n_s > 0:  # the anchors were the centres of q_cur: J_kᵀ ā (q_cur's poses and axes from load_row)
        G, f = sc.Gs[1], sc.fs[1]
        _points_to_links(m, anc, G, f)
        wrench_gradient(m, sc.Rr, sc.tr, sc.ws[1], sc.vs[1], G, f, sc.wr, sc.xv)
    for k in range(nv):
        out_lam[r, k] = sc.dx[k]
        out_tau[r, k] = sc.zv[k]
    if coords:
        _coordinate_cotangent(m, q_prev, sc.ev, r, out_prev)
        _coordinate_cotangent(m, q_cur, sc.xv, r, out_cur)
    else:
        for k in range(nv):
            out_prev[r, k], out_cur[r, k] = sc.ev[k], sc.xv[k]


@jitable
def _memory_vjp(m, fo, cact, canc, abar, sc, gt, amem, gP):
    """contact_adjoint.memory_vjp of the row :func:`.adjoint.load_row` put in ``sc`` (its memory's cact (S,), canc
    (S, 3); q_next's poses and axes in slot 0): the anchor cotangent abar (S, 3) of the new memory pulled back
    through the anchor update, onto q_next (added to gt through the sphere centres' Jacobians) and onto the anchors
    of q_cur's memory (amem (S, 3)). gP (S, 3): scratch (the gradient on the centres of q_next)."""
    R, t, w, v = sc.Rs[0], sc.ts[0], sc.ws[0], sc.vs[0]
    eps = fo.slip_eps
    for s in range(m.contact_link.shape[0]):
        P0, P1, P2 = _sphere_centre(m.contact_link, m.contact_p0, s, R, t)
        ab0, ab1 = abar[s, 0], abar[s, 1]
        gP[s, 0], gP[s, 1], gP[s, 2] = ab0, ab1, 0.0  # not touching at both q_k and q_next: a' = P
        if m.contact_r[s] - (P2 - fo.height) > 0 and cact[s]:
            x0, x1 = P0 - canc[s, 0], P1 - canc[s, 1]
            sn = math.sqrt(x0 * x0 + x1 * x1)
            if sn > eps:  # slipping: a' = P − ε x̂
                xh0, xh1 = x0 / sn, x1 / sn
                dot = xh0 * ab0 + xh1 * ab1
                pr0, pr1 = eps / sn * (ab0 - xh0 * dot), eps / sn * (ab1 - xh1 * dot)
                gP[s, 0], gP[s, 1] = ab0 - pr0, ab1 - pr1
                amem[s, 0], amem[s, 1] = pr0, pr1
            else:  # sticking: a' = a
                gP[s, 0] = gP[s, 1] = 0.0
                amem[s, 0], amem[s, 1] = ab0, ab1
    _points_to_links(m, gP, sc.Gs[1], sc.fs[1])
    wrench_gradient(m, R, t, w, v, sc.Gs[1], sc.fs[1], sc.wr, gt)


@jitable
def _points_to_links(m, g, G, f):
    """(G, f) = the link pose gradients of Σ_s g_s · P_s (g (S, 3) on the sphere centres; every link written)."""
    for i in range(m.mass.shape[0]):
        for a in range(3):
            f[i, a] = 0.0
            for b in range(3):
                G[i, a, b] = 0.0
    p0 = m.contact_p0
    for s in range(m.contact_link.shape[0]):
        l = m.contact_link[s]
        for a in range(3):
            f[l, a] += g[s, a]
            for b in range(3):
                G[l, a, b] += g[s, a] * p0[s, b]


@jitable
def _tangent_cotangent(m, q, c, r, g):
    """g (nv,) = configuration.tangent_cotangent of row r of c (B, nq) at q (B, nq): ½ vec(q* ⊗ c) on quaternions."""
    for i in range(m.lin_q.shape[0]):
        g[m.lin_v[i]] = c[r, m.lin_q[i]]
    for i in range(m.quat_q.shape[0]):
        a, v0 = m.quat_q[i], m.quat_v[i]
        _, x, y, z = quat_mul(q[r, a], -q[r, a + 1], -q[r, a + 2], -q[r, a + 3], c[r, a], c[r, a + 1], c[r, a + 2],
                              c[r, a + 3])
        g[v0], g[v0 + 1], g[v0 + 2] = 0.5 * x, 0.5 * y, 0.5 * z


@jitable
def _coordinate_cotangent(m, q, g, r, out):
    """out[r] (nq,) = configuration.coordinate_cotangent of g (nv,) at row r of q (B, nq): 2 q ⊗ (0, g) on
    quaternions."""
    for i in range(m.lin_q.shape[0]):
        out[r, m.lin_q[i]] = g[m.lin_v[i]]
    for i in range(m.quat_q.shape[0]):
        a, v0 = m.quat_q[i], m.quat_v[i]
        w, x, y, z = quat_mul(q[r, a], q[r, a + 1], q[r, a + 2], q[r, a + 3], 0.0, g[v0], g[v0 + 1], g[v0 + 2])
        out[r, a], out[r, a + 1], out[r, a + 2], out[r, a + 3] = 2.0 * w, 2.0 * x, 2.0 * y, 2.0 * z
