"""Ground contact as energies on the body's contact spheres (paper eq. 16, docs/physics.md §2).

Per sphere (centre P_s, radius r) against the plane z = h:
- normal penalty D1/2·d², d = max(0, r − (P_s,z − h)): C¹ in q, so LM sees a continuous gradient;
- normal damping (beyond the paper, off by default): a Kelvin-Voigt normal force D1·d + Dn·ḋ, clamped at 0 so
  that the ground never pulls, with ḋ = (d − d_k)/Δt and d_k the depth at q_k. Its energy in d is
  (D1 + Dn/Δt)/2·max(0, d − s0)² with s0 = d_k·Dn/(D1·Δt + Dn): the same penalty, stiffer by Dn/Δt within the
  step and shifted by s0, so it stays convex and C¹. It damps both the landing and the push-off (as MuJoCo's
  critically damped soft contacts do); without it the penalty returns an impact's energy when the step
  resolves the bounce and only the implicit step's own dissipation removes it, so a gait's hops depend on Δt;
- friction, only for spheres in contact at q_k (the contact set is lagged by one step, which keeps the step
  energy smooth: no term switches on or off inside a minimisation), either
  * "viscous" (the paper): D2/(2Δt)·‖Proj_∥(P_s(q) − P_s(q_k))‖², or
  * "coulomb" (smoothed, beyond the paper): μ·N·φ_ε(‖Proj_∥(P_s(q) − a_s)‖) with a normal force N held fixed
    within the minimisation, φ_ε the Huber function (quadratic below ε, linear above: force magnitude ≤ μN) and
    a_s a stick anchor that follows the sphere only when it slips further than ε. A tangential load below μN
    therefore holds the sphere within ε of its anchor: static friction that sticks, with no creep. Which N
    (``friction_cap``): "applied" (default) starts from the normal force the previous step applied (damping
    included, clamped at 0) and re-solves the step with the normal force the step itself applied until the two
    agree to ``cone_tol`` (at most ``cone_passes`` re-solves: a lagged fixed point, as incremental-potential
    contact lags its friction), so |F_t| ≤ μ·F_n holds for the force the step applies; "lagged_spring" (Spider-v1
    and v2) caps by the spring force D1·d(q_k) of the start of the step, which can exceed the applied one
    (docs/physics.md §2.3).
Point energies become link-pose derivatives through P = R p0 + t.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import NamedTuple

from ..arrays import xp_of
from ..kinematics import matvec, skew
from ..kinematics.algebra import rowsum
from .base import LinkTerms
from .penalty import DEFAULT_SPRINGS, check_springs, step_stiffness, trapezoidal_shift

FRICTION_MODELS = ("viscous", "coulomb", "none")
FRICTION_CAPS = ("applied", "lagged_spring")
FRICTION_ONSETS = ("lagged", "step")


@dataclass(frozen=True)
class GroundContact:
    """Penalty ground contact. stiffness D1 [N/m]; friction model; damping D2 [N s/m] ("viscous"); mu and
    slip_velocity [m/s] (the smoothing ε = slip_velocity·Δt) for "coulomb"; height of the ground plane [m];
    normal_damping Dn [N s/m] of the normal force's Kelvin-Voigt damping, clamped so the ground never pulls (0:
    off). Coulomb only: friction_cap "applied" (the step's own normal force, by a fixed point of at most
    cone_passes re-solves that stops once every sphere's normal force moved by at most cone_tol of it) or
    "lagged_spring" (D1·d at q_k, Spider-v1/v2). springs: where the normal spring D1·d sits in time within a
    step, "implicit" or "trapezoidal" (energies/penalty.py; the latter needs normal damping to damp the
    penalty's oscillation, which it no longer damps numerically). friction_onset (Coulomb with the applied cap):
    which spheres take friction in a step, "lagged" (those in contact at q_k: a sphere that lands slides free for
    its first step) or "step" (also those the step's own normal force pushes, joined by the cap's fixed point
    with their anchors where they crossed into contact: docs/physics.md §2.3)."""

    stiffness: float = 1e4
    friction: str = "viscous"
    damping: float = 100.0
    mu: float = 1.0
    slip_velocity: float = 1e-3
    height: float = 0.0
    normal_damping: float = 0.0
    friction_cap: str = "applied"
    cone_passes: int = 4
    cone_tol: float = 1e-3
    springs: str = DEFAULT_SPRINGS
    friction_onset: str = "lagged"

    def __post_init__(self):
        check_springs(self.springs, "contact springs")
        if self.friction_onset not in FRICTION_ONSETS:
            raise ValueError(f"contact friction_onset must be one of {FRICTION_ONSETS}, got {self.friction_onset!r}")
        if self.friction not in FRICTION_MODELS:
            raise ValueError(f"contact friction must be one of {FRICTION_MODELS}, got {self.friction!r}")
        if self.friction_cap not in FRICTION_CAPS:
            raise ValueError(f"contact friction_cap must be one of {FRICTION_CAPS}, got {self.friction_cap!r}")
        if (isinstance(self.cone_passes, bool) or not isinstance(self.cone_passes, numbers.Integral)
                or self.cone_passes < 0):
            raise ValueError(f"contact cone_passes must be a non-negative integer, got {self.cone_passes!r}")
        if isinstance(self.cone_tol, bool) or not isinstance(self.cone_tol, numbers.Real) or not self.cone_tol > 0:
            raise ValueError(f"contact cone_tol must be positive, got {self.cone_tol!r}")
        for name in ("stiffness", "damping", "mu", "slip_velocity", "normal_damping"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"contact {name} must be non-negative, got {getattr(self, name)!r}")
        if self.stiffness <= 0:
            raise ValueError("contact stiffness must be positive")
        if self.friction == "coulomb" and self.slip_velocity <= 0:
            raise ValueError("coulomb friction needs slip_velocity > 0")
        if self.friction_onset == "step" and not self.resolves_cone:
            raise ValueError("contact friction_onset='step' needs friction='coulomb', friction_cap='applied' and "
                             f"cone_passes > 0 (its fixed point joins the landing spheres), got friction="
                             f"{self.friction!r}, friction_cap={self.friction_cap!r}, cone_passes={self.cone_passes!r}")

    @property
    def resolves_cone(self):
        """True when steps re-solve until friction is capped by the normal force they apply."""
        return self.friction == "coulomb" and self.friction_cap == "applied" and self.cone_passes > 0


def sphere_centres(body, kin):
    """World centres of the contact spheres (B, S, 3)."""
    c = body.arrays(xp_of(kin.R), kin.R.dtype)
    link = c.contact_link
    return kin.t[:, link] + matvec(kin.R[:, link], c.contact_p0)


def penetration(body, P, height):
    """Depth d = max(0, r − (z − h)) (B, S) of sphere centres P (B, S, 3)."""
    xp = xp_of(P)
    r = body.arrays(xp, P.dtype).contact_r
    return xp.maximum(0.0, r - (P[..., 2] - height))


def _normal_depth(body, P, params, P_ref, dt, shift=None):
    """(d_eff (B, S) [m], k_eff [N/m]) of the normal penalty k_eff/2·d_eff²: the plain penalty (d, D1), or with the
    centres at q_k P_ref, a step ``dt`` [s] and Dn > 0 the clamped Kelvin-Voigt form (max(0, d − s0), D1 + Dn/Δt);
    with the step's ``shift`` s (B, S) (springs "trapezoidal": :func:`normal_shift`) max(0, r − (z − h) − s) and
    the stiffness of energies/penalty.py."""
    xp = xp_of(P)
    if shift is not None:
        r = body.arrays(xp, P.dtype).contact_r
        k = step_stiffness(params.stiffness, params.normal_damping, dt, params.springs)
        return xp.maximum(0.0, r - (P[..., 2] - params.height) - shift), k
    d = penetration(body, P, params.height)
    k = params.stiffness
    if P_ref is not None and params.normal_damping > 0:
        d = xp.maximum(0.0, d - kelvin_voigt_shift(body, P_ref, params, dt))
        k = k + params.normal_damping / dt
    return d, k


def kelvin_voigt_shift(body, P_ref, params, dt):
    """s0 = d_k·Dn/(D1·Δt + Dn) (B, S) [m]: the shift of the clamped Kelvin-Voigt penalty of a step ``dt`` [s] from
    sphere centres P_ref (B, S, 3) (0 where a centre is clear of the ground)."""
    k_d = params.normal_damping / dt
    return penetration(body, P_ref, params.height) * (k_d / (params.stiffness + k_d))


def normal_shift(body, P_ref, P_back, params, dt):
    """The normal penalty's shift (B, S) [m] of a step ``dt`` [s] from sphere centres P_back (q_{k−1}) and P_ref
    (q_k) (B, S, 3) for ``params.springs`` (energies/penalty.py), or None where :func:`_normal_depth` computes its
    own (springs "implicit")."""
    if params.springs != "trapezoidal":
        return None
    d_k, d_back = penetration(body, P_ref, params.height), penetration(body, P_back, params.height)
    return trapezoidal_shift(d_k, d_back, params.stiffness, params.normal_damping, dt)


def applied_normal(body, P, params, P_ref=None, dt=None, shift=None):
    """Normal force [N] (B, S) the ground applies on spheres with centres P (B, S, 3) in a step from centres P_ref
    (None: the spring force D1·d alone): D1·d + Dn·ḋ clamped at 0 (what :func:`normal_point_terms` pushes with);
    ``shift``: the step's (:func:`normal_shift`)."""
    d, k = _normal_depth(body, P, params, P_ref, dt, shift)
    return k * d


def normal_point_terms(body, P, params, derivatives, P_ref=None, dt=None, shift=None):
    """D1/2·d² per sphere: value (B,), ∂/∂P (B, S, 3), ∂²/∂P² (B, S, 3, 3). With the centres at q_k, P_ref
    (B, S, 3), a step ``dt`` [s] and ``params.normal_damping`` Dn > 0: the clamped Kelvin-Voigt form of the module
    docstring, (D1 + Dn/Δt)/2·max(0, d − s0)² with s0 = d_k·Dn/(D1·Δt + Dn); ``shift``: the step's
    (:func:`normal_shift`)."""
    xp = xp_of(P)
    d, k = _normal_depth(body, P, params, P_ref, dt, shift)
    val = 0.5 * k * rowsum(d * d)
    if not derivatives:
        return val, None, None
    g = xp.zeros_like(P)
    g[..., 2] = -k * d
    H = xp.zeros(P.shape + (3,), dtype=P.dtype)
    H[..., 2, 2] = k * (d > 0)
    return val, g, H


def viscous_point_terms(P, P_ref, active, damping, dt, derivatives):
    """D2/(2Δt)·‖Proj_∥(P − P_ref)‖² for active spheres."""
    xp = xp_of(P)
    k = damping / dt * active
    x = (P - P_ref)[..., :2]
    val = 0.5 * rowsum(k * xp.sum(x * x, -1))
    if not derivatives:
        return val, None, None
    g = xp.zeros_like(P)
    g[..., :2] = k[..., None] * x
    H = xp.zeros(P.shape + (3,), dtype=P.dtype)
    H[..., 0, 0] = H[..., 1, 1] = k
    return val, g, H


def coulomb_point_terms(P, anchor, active, normal_force, mu, eps, derivatives):
    """μ N φ_ε(‖Proj_∥(P − anchor)‖) for active spheres (Huber φ_ε)."""
    xp = xp_of(P)
    k = mu * normal_force * active
    x = (P - anchor)[..., :2]
    s = xp.sqrt(xp.sum(x * x, -1))
    phi = xp.where(s < eps, 0.5 * s * s / eps, s - 0.5 * eps)
    val = rowsum(k * phi)
    if not derivatives:
        return val, None, None
    inv = 1.0 / xp.maximum(s, eps)
    g = xp.zeros_like(P)
    g[..., :2] = (k * inv)[..., None] * x
    H = xp.zeros(P.shape + (3,), dtype=P.dtype)
    xh = x * inv[..., None]
    slip = (s >= eps)[..., None, None]
    # above ε the Huber term is ‖x‖: its Hessian (1 − x̂x̂ᵀ)/‖x‖ is singular along x̂, which is the sliding direction
    outer = xh[..., :, None] * xh[..., None, :]
    H[..., :2, :2] = (k * inv)[..., None, None] * (xp.eye(2, dtype=P.dtype) - slip * outer)
    return val, g, H


def update_anchors(P, anchor, active, eps):
    """Stick anchors after a step: new contacts anchor where they are; slipping ones are dragged to within ε."""
    xp = xp_of(P)
    x = (P - anchor)[..., :2]
    s = xp.sqrt(xp.sum(x * x, -1, keepdims=True))
    pulled = anchor[..., :2] + x * xp.maximum(0.0, 1.0 - eps / xp.maximum(s, 1e-300))
    out = P.copy()
    out[..., :2] = xp.where(active[..., None], pulled, P[..., :2])
    return out


def point_terms_to_links(body, P, g, H, gauss_newton=True):
    """Link-pose derivatives of a sum of point energies: G_l = Σ g p0ᵀ, f_l = Σ g and the Gauss-Newton form
    K_l = Σ Tᵀ H T with T = [−[P]×, 1] (dP = ω × P + v)."""
    xp = xp_of(P)
    c = body.arrays(xp, P.dtype)
    inc, p0 = c.contact_inc, c.contact_p0
    B, S = P.shape[:2]
    G = (inc @ (g[..., :, None] * p0[:, None, :]).reshape(B, S, 9)).reshape(B, -1, 3, 3)
    f = inc @ g
    if not gauss_newton:
        return G, f, None
    T = xp.concatenate([-skew(P), xp.broadcast_to(xp.eye(3, dtype=P.dtype), P.shape + (3,))], -1)  # (B, S, 3, 6)
    K = xp.swapaxes(T, -1, -2) @ H @ T
    return G, f, (inc @ K.reshape(B, S, 36)).reshape(B, -1, 6, 6)


class ContactMemory(NamedTuple):
    """Lagged contact data of q_k (what the friction terms of the next step read): sphere centres P (B, S, 3) [m],
    active (B, S) bool (in contact at q_k), normal force (B, S) [N] that caps Coulomb friction (friction_cap
    "lagged_spring": D1·d(q_k); "applied": the normal force of the step that arrived at q_k, the next step's first
    guess) and stick anchors (B, S, 3) [m] (Coulomb friction; the centres themselves for the other models).
    shift (B, S) [m]: the normal penalty's shift of the step from q_k (springs "trapezoidal", set by the step's
    data; None in a State's memory and with "implicit" springs)."""

    P: object
    active: object
    normal: object
    anchor: object
    shift: object = None


def contact_terms(body, kin, params, state, dt, derivatives=True, gauss_newton=True):
    """Ground-contact energy at poses ``kin`` -> LinkTerms. ``state``: the :class:`ContactMemory` of q_k."""
    P = sphere_centres(body, kin)
    val, g, H = _point_terms(body, P, params, state, dt, derivatives)
    if not derivatives:
        return LinkTerms(val)
    G, f, K = point_terms_to_links(body, P, g, H, gauss_newton)
    return LinkTerms(val, G, f, K)


def _point_terms(body, P, params, state, dt, derivatives):
    """Normal plus friction energy per sphere centre P (B, S, 3): value (B,), ∂/∂P, ∂²/∂P² (None without
    derivatives)."""
    val, g, H = normal_point_terms(body, P, params, derivatives, state.P, dt, state.shift)
    if params.friction == "viscous":
        fv, fg, fH = viscous_point_terms(P, state.P, state.active, params.damping, dt, derivatives)
    elif params.friction == "coulomb":
        fv, fg, fH = coulomb_point_terms(P, state.anchor, state.active, state.normal, params.mu,
                                         params.slip_velocity * dt, derivatives)
    else:
        return val, g, H
    return val + fv, (g + fg) if derivatives else None, (H + fH) if derivatives else None


def sphere_forces(body, kin, params, state, dt):
    """Ground force on each contact sphere (B, S, 3) [N, world frame] at poses ``kin``: −∂E/∂P of the contact
    energy with the lagged memory ``state`` — at a step's solution, the force that step applied (normal D1·d,
    friction from the viscous or Coulomb term)."""
    _, g, _ = _point_terms(body, sphere_centres(body, kin), params, state, dt, True)
    return -g


def contact_state(body, kin, params, dt, prev=None):
    """Lagged contact data at q_k for :func:`contact_terms`: centres, active set, normal forces and, for Coulomb
    friction, stick anchors carried over from the previous state ``prev`` (the memory of the step that arrived at
    ``kin``) for spheres that stayed in contact. The normal force is that step's applied one for friction_cap
    "applied" (the spring force D1·d without ``prev``), else D1·d."""
    P = sphere_centres(body, kin)
    d = penetration(body, P, params.height)
    active = d > 0
    anchor = P
    normal = params.stiffness * d
    if params.friction == "coulomb":
        if prev is None:
            anchor = P.copy()
        else:
            anchor = update_anchors(P, prev.anchor, active & prev.active, params.slip_velocity * dt)
            if params.friction_cap == "applied":
                normal = applied_normal(body, P, params, prev.P, dt, prev.shift)
    return ContactMemory(P, active, normal, anchor)


def join_pushed(body, memory, P, normal, params, dt):
    """(memory, joined (B, S) bool): with ``params.friction_onset`` "step", the spheres outside the memory's active
    set that the step pushes (applied normal force ``normal`` (B, S) [N] > 0 at centres P (B, S, 3)) made active,
    their anchors where their centres crossed into contact on the segment from the memory's centres (memory.P) to
    P: where the normal penalty's depth past the shift of a step ``dt`` [s] (:func:`_normal_depth`'s) turned
    positive. With the "lagged" onset the memory as it is and no sphere joined."""
    xp = xp_of(P)
    if params.friction_onset != "step":
        return memory, xp.zeros(normal.shape, dtype=bool)
    joined = (normal > 0) & ~memory.active
    r = body.arrays(xp, P.dtype).contact_r
    if memory.shift is not None:
        shift = memory.shift
    elif params.normal_damping > 0:
        shift = kelvin_voigt_shift(body, memory.P, params, dt)
    else:
        shift = 0.0
    lift = params.height + r - shift  # the height the force starts at
    above, below = memory.P[..., 2] - lift, lift - P[..., 2]
    alpha = xp.clip(above / xp.maximum(above + below, 1e-300), 0.0, 1.0) * (above > 0)
    cross = memory.P + alpha[..., None] * (P - memory.P)
    anchor = xp.where(joined[..., None], cross, memory.anchor)
    return memory._replace(active=memory.active | joined, anchor=anchor), joined


def cone_mismatch(memory, normal, rtol):
    """(B,) bool: rows where an active sphere's applied normal force ``normal`` (B, S) [N] differs from the one
    that capped its friction (``memory.normal``) by more than rtol of the larger (the fixed point's stop test)."""
    xp = xp_of(normal)
    gap = xp.abs(normal - memory.normal) > rtol * xp.maximum(normal, memory.normal)
    return xp.any(gap & memory.active, axis=-1)


def cone_excess(force, mu):
    """Friction beyond the Coulomb cone per sphere (B, S) [N]: max(0, ‖F_t‖ − μ·F_n) of ground forces ``force``
    (B, S, 3) (world frame, z up)."""
    xp = xp_of(force)
    ft = xp.sqrt(force[..., 0] ** 2 + force[..., 1] ** 2)
    return xp.maximum(0.0, ft - mu * xp.maximum(force[..., 2], 0.0))
