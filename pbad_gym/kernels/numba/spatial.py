"""Spatial mass-moment forms of one link (kinematics/spatial.py)."""
from __future__ import annotations

from .jit import jitable


@jitable
def _world_moments(mi, c, S, R, t, i, cw, Sw, Rc, RS):
    """World first moment cw (3,) = R c_i + m_i t and second moment Sw (3, 3) = R S_i Rᵀ + t (Rc)ᵀ + Rc tᵀ + m_i t tᵀ
    of link i at pose (R[i], t[i]), from its body-frame moments c (L, 3), S (L, 3, 3); Rc, RS scratch."""
    for a in range(3):
        Rc[a] = R[i, a, 0] * c[i, 0] + R[i, a, 1] * c[i, 1] + R[i, a, 2] * c[i, 2]
        cw[a] = Rc[a] + mi * t[i, a]
        for b in range(3):
            RS[a, b] = R[i, a, 0] * S[i, 0, b] + R[i, a, 1] * S[i, 1, b] + R[i, a, 2] * S[i, 2, b]
    for a in range(3):
        for b in range(3):
            Sw[a, b] = (RS[a, 0] * R[i, b, 0] + RS[a, 1] * R[i, b, 1] + RS[a, 2] * R[i, b, 2]
                        + t[i, a] * Rc[b] + Rc[a] * t[i, b] + mi * t[i, a] * t[i, b])


@jitable
def _spatial_form(mi, cw, Sw, W, K, i, cx):
    """K += ∫ρ (ω×P + v)ᵀ W (ω×P + v) as a 6x6 form from world moments into K[i] (kinematics/spatial.py)."""
    # rotational block Σ_kl S_kl [e_k]×ᵀ W [e_l]× written out with the Levi-Civita symbol
    for a in range(3):
        a1, a2 = (a + 1) % 3, (a + 2) % 3
        for d in range(3):
            d1, d2 = (d + 1) % 3, (d + 2) % 3
            # ε_{b a k}: (b, k) = (a2, a1) sign +1, (a1, a2) sign −1; same for (c, d, l)
            K[i, a, d] += (W[a2, d2] * Sw[a1, d1] - W[a2, d1] * Sw[a1, d2]
                        - W[a1, d2] * Sw[a2, d1] + W[a1, d1] * Sw[a2, d2])
    # [c]× W and −W [c]×, m W
    cx[0, 0] = cx[1, 1] = cx[2, 2] = 0.0
    cx[0, 1], cx[0, 2], cx[1, 2] = -cw[2], cw[1], -cw[0]
    cx[1, 0], cx[2, 0], cx[2, 1] = cw[2], -cw[1], cw[0]
    for a in range(3):
        for b in range(3):
            s = cx[a, 0] * W[0, b] + cx[a, 1] * W[1, b] + cx[a, 2] * W[2, b]
            K[i, a, 3 + b] += s
            K[i, 3 + b, a] += s
            K[i, 3 + a, 3 + b] += mi * W[a, b]


@jitable
def _inertia_form(mi, c, S, R, t, i, al, K):
    """K[i] = al · the world spatial inertia of link i at pose (R[i], t[i]): :func:`_world_moments` then
    :func:`_spatial_form` with W = al·1 (the inertia term without drag; the mass matrix with al = 1), in locals
    and without the products by W's zeros: the same numbers bit for bit, for finite poses. Blocks:
    al·(tr(Sw) 1 − Sw), al·[cw]× and its transpose, al·m 1."""
    rc0 = R[i, 0, 0] * c[i, 0] + R[i, 0, 1] * c[i, 1] + R[i, 0, 2] * c[i, 2]
    rc1 = R[i, 1, 0] * c[i, 0] + R[i, 1, 1] * c[i, 1] + R[i, 1, 2] * c[i, 2]
    rc2 = R[i, 2, 0] * c[i, 0] + R[i, 2, 1] * c[i, 1] + R[i, 2, 2] * c[i, 2]
    rc = (rc0, rc1, rc2)
    for a in range(3):
        ra0, ra1, ra2 = R[i, a, 0], R[i, a, 1], R[i, a, 2]
        rs0 = ra0 * S[i, 0, 0] + ra1 * S[i, 1, 0] + ra2 * S[i, 2, 0]
        rs1 = ra0 * S[i, 0, 1] + ra1 * S[i, 1, 1] + ra2 * S[i, 2, 1]
        rs2 = ra0 * S[i, 0, 2] + ra1 * S[i, 1, 2] + ra2 * S[i, 2, 2]
        for b in range(3):  # −al·Sw[a, b] into K[b, a]; the diagonal's Sw[a, a] kept there for the trace below
            sw = (rs0 * R[i, b, 0] + rs1 * R[i, b, 1] + rs2 * R[i, b, 2]
                  + t[i, a] * rc[b] + rc[a] * t[i, b] + mi * t[i, a] * t[i, b])
            K[i, b, a] = sw if a == b else -(al * sw)
    s0, s1, s2 = K[i, 0, 0], K[i, 1, 1], K[i, 2, 2]
    K[i, 0, 0] = al * s1 + al * s2
    K[i, 1, 1] = al * s2 + al * s0
    K[i, 2, 2] = al * s0 + al * s1
    cw0, cw1, cw2 = rc0 + mi * t[i, 0], rc1 + mi * t[i, 1], rc2 + mi * t[i, 2]
    x01, x02, x12 = al * -cw2, al * cw1, al * -cw0  # al·[cw]×: (0, 1), (0, 2), (1, 2) and minus their mirrors
    x10, x20, x21 = al * cw2, al * -cw1, al * cw0
    K[i, 0, 3], K[i, 0, 4], K[i, 0, 5] = 0.0, x01, x02
    K[i, 1, 3], K[i, 1, 4], K[i, 1, 5] = x10, 0.0, x12
    K[i, 2, 3], K[i, 2, 4], K[i, 2, 5] = x20, x21, 0.0
    for a in range(3):
        for b in range(3):
            K[i, 3 + b, a] = K[i, a, 3 + b]
            K[i, 3 + a, 3 + b] = mi * al if a == b else 0.0


@jitable
def twist_products(hw, w, v, Xk, out):
    """out (nv, nv) = Σ over the joint pairs the chain weights hw (nv, nv) allow of hw_jk·(twist_j · Xk_k),
    symmetrised: the joint-space assembly of a spatial form Xk (nv, 6) (the kernel's crba and the exact Hessian's
    second-order part), with twists (w, v) (nv, 3) each. out is overwritten."""
    nv = hw.shape[0]
    for j in range(nv):
        for k in range(nv):
            out[j, k] = 0.0
    for j in range(nv):
        for k in range(nv):
            c = hw[j, k]
            if c != 0.0:
                p = c * (w[j, 0] * Xk[k, 0] + w[j, 1] * Xk[k, 1] + w[j, 2] * Xk[k, 2]
                         + v[j, 0] * Xk[k, 3] + v[j, 1] * Xk[k, 4] + v[j, 2] * Xk[k, 5])
                out[j, k] += p
                out[k, j] += p
