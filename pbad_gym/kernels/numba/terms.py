"""The step energy and its gradient at one configuration: every link and joint term (integrators/pbad.py
step_terms, step_energy_grad)."""
from __future__ import annotations

from .chain_rule import wrench_gradient
from .contact import _sphere_idle, sphere_point_terms
from .drag import _drag_link
from .forward import forward_kinematics
from .inertia import _inertia_gravity
from .jit import inlined_by_llvm
from .joints import joint_terms


@inlined_by_llvm
def link_terms(m, fo, R, t, A, bt, Rr, tr, Wd, cP, cact, cnorm, canc, G, f, s33, s3):
    """Value of the link terms (inertia, gravity, drag, contact) at poses (R, t); their pose gradients G, f."""
    dt = fo.dt
    L = m.mass.shape[0]
    val_in, vg = _inertia_gravity(m.mass, m.c, m.S, R, t, A, bt, 0.5 / (dt * dt), fo.has_gravity != 0, fo.gravity,
                                  G, f)
    val = val_in
    if fo.has_gravity:
        val += -vg
    if fo.has_drag:
        vd = 0.0
        for i in range(L):
            vd += _drag_link(m.mass, m.c, m.S, i, R, t, Rr, tr, Wd, 0.5 / dt, G, f, s33)
        val += vd
    if fo.has_contact:
        gP, HP, P = s3[3], s33[3], s3[4]
        vc = 0.0
        sl, sp, sr_, fr, h = m.contact_link, m.contact_p0, m.contact_r, fo.friction, fo.height
        for s in range(sl.shape[0]):
            if _sphere_idle(sl, sp, sr_, h, s, R, t, cact, cP):  # adds exactly nothing: skip (most spheres, most steps)
                continue
            v_s = sphere_point_terms(sl, sp, sr_, fr, fo, s, R, t, cP, cact, cnorm, canc, gP, HP, False, P)
            vc += v_s
            l, p0 = m.contact_link[s], m.contact_p0
            for a in range(3):
                f[l, a] += gP[a]
                for k in range(3):
                    G[l, a, k] += gP[a] * p0[s, k]
        val += vc
    return val


@inlined_by_llvm
def _energy_grad(m, fo, x, qref, qpred, tau, A, bt, Rr, tr, Wd, cP, cact, cnorm, canc, R, t, w, v, Rj, R2, G, f,
                 wr, g, s33, s3):
    forward_kinematics(m, x, R, t, w, v, Rj, R2)
    E = link_terms(m, fo, R, t, A, bt, Rr, tr, Wd, cP, cact, cnorm, canc, G, f, s33, s3)
    for j in range(g.shape[0]):
        g[j] = 0.0
    wrench_gradient(m, R, t, w, v, G, f, wr, g)
    E += joint_terms(m, fo, x, qref, qpred, tau, g)
    return E

