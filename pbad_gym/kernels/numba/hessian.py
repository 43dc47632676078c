"""The step energy's Hessian, exact or Gauss-Newton (integrators/pbad.py step_hessian,
kinematics/chain_rule.py generalized_hessian)."""
from __future__ import annotations

from .contact import _sphere_idle, sphere_point_terms
from .jit import inlined_by_llvm
from .joints import joint_hessian
from .spatial import _inertia_form, _spatial_form, _world_moments, twist_products


@inlined_by_llvm
def hessian(m, fo, q, qref, qpred, tau, R, t, w, v, G, f, Wd, cP, cact, cnorm, canc, K, Z, F, Xk, H, D, s33, s3,
            s36):
    """Step Hessian H (nv, nv) at q and the diagonal D (nv,) of its Gauss-Newton part (armature included)."""
    dt = fo.dt
    L, nv = m.mass.shape[0], m.dof_link.shape[0]
    exact = fo.exact != 0
    Wl, Sw, RS = s33[4], s33[5], s33[6]
    cw, Rc = s3[5], s3[6]
    drag = fo.has_drag != 0
    for i in range(L):
        mi = m.mass[i]
        if drag:
            _world_moments(mi, m.c, m.S, R, t, i, cw, Sw, Rc, RS)
            for a in range(6):
                for b in range(6):
                    K[i, a, b] = 0.0
            for a in range(3):
                for b in range(3):
                    Wl[a, b] = Wd[i, a, b] / dt + (1.0 / (dt * dt) if a == b else 0.0)
            _spatial_form(mi, cw, Sw, Wl, K, i, s33[7])
        else:
            _inertia_form(mi, m.c, m.S, R, t, i, 1.0 / (dt * dt), K)
        if exact:
            for a in range(3):
                F[i, a] = f[i, a]
                for b in range(3):
                    Z[i, a, b] = ((R[i, a, 0] * G[i, b, 0] + R[i, a, 1] * G[i, b, 1] + R[i, a, 2] * G[i, b, 2])
                                  + t[i, a] * f[i, b])
    if fo.has_contact:
        gP, HP, P = s3[3], s33[3], s3[4]
        T, HT = s36[0], s36[1]
        sl, sp, sr_, fr, h = m.contact_link, m.contact_p0, m.contact_r, fo.friction, fo.height
        for s in range(sl.shape[0]):
            if _sphere_idle(sl, sp, sr_, h, s, R, t, cact, cP):  # zero Hessian block
                continue
            sphere_point_terms(sl, sp, sr_, fr, fo, s, R, t, cP, cact, cnorm, canc, gP, HP, True, P)
            P0, P1, P2 = P[0], P[1], P[2]
            # T = [−[P]×, 1]
            T[0, 0], T[0, 1], T[0, 2] = 0.0, P2, -P1
            T[1, 0], T[1, 1], T[1, 2] = -P2, 0.0, P0
            T[2, 0], T[2, 1], T[2, 2] = P1, -P0, 0.0
            for a in range(3):
                for b in range(3):
                    T[a, 3 + b] = 1.0 if a == b else 0.0
            for a in range(3):
                for b in range(6):
                    HT[a, b] = HP[a, 0] * T[0, b] + HP[a, 1] * T[1, b] + HP[a, 2] * T[2, b]
            l = m.contact_link[s]
            for a in range(6):
                for b in range(6):
                    K[l, a, b] += T[0, a] * HT[0, b] + T[1, a] * HT[1, b] + T[2, a] * HT[2, b]
    # composite (subtree) sums
    for n in range(L - 1, -1, -1):
        i = m.order[n]
        p = m.parent[i]
        if p >= 0:
            for a in range(6):
                for b in range(6):
                    K[p, a, b] += K[i, a, b]
            if exact:
                for a in range(3):
                    F[p, a] += F[i, a]
                    for b in range(3):
                        Z[p, a, b] += Z[i, a, b]
    for k in range(nv):
        l = m.dof_link[k]
        s6 = (w[k, 0], w[k, 1], w[k, 2], v[k, 0], v[k, 1], v[k, 2])
        dk = 0.0
        for a in range(6):
            x = 0.0
            for b in range(6):
                x += K[l, a, b] * s6[b]
            Xk[k, a] = x
            dk += s6[a] * x
        D[k] = dk
        if exact:
            tr = Z[l, 0, 0] + Z[l, 1, 1] + Z[l, 2, 2]
            wk0, wk1, wk2 = w[k, 0], w[k, 1], w[k, 2]
            vk0, vk1, vk2 = v[k, 0], v[k, 1], v[k, 2]
            Xk[k, 0] += ((Z[l, 0, 0] * wk0 + Z[l, 0, 1] * wk1 + Z[l, 0, 2] * wk2) - tr * wk0
                         + (vk1 * F[l, 2] - vk2 * F[l, 1]))
            Xk[k, 1] += ((Z[l, 1, 0] * wk0 + Z[l, 1, 1] * wk1 + Z[l, 1, 2] * wk2) - tr * wk1
                         + (vk2 * F[l, 0] - vk0 * F[l, 2]))
            Xk[k, 2] += ((Z[l, 2, 0] * wk0 + Z[l, 2, 1] * wk1 + Z[l, 2, 2] * wk2) - tr * wk2
                         + (vk0 * F[l, 1] - vk1 * F[l, 0]))
    twist_products(m.hess_weight, w, v, Xk, H)
    joint_hessian(m, fo, q, qref, qpred, tau, H)
    if fo.has_armature:
        for k in range(nv):
            D[k] += fo.chart[2, k]

