"""Test and benchmark problems built from real contact Jacobians (and synthetic SPD boxes).

Rigid bodies have 6 velocity DOF (v, ω) in world coordinates, mass matrix M = diag(m I₃, I_world). A contact at
point p (offset r from body A's centre of mass) with unit direction d has Jacobian row [d, r × d] for body A (and
-[d, r_B × d] for body B when it touches another body), so J v is the relative velocity along d. Each contact
has rows (n, t1, t2) in that order. The LCP is A = J M⁻¹ Jᵀ, b = J (v + Δt M⁻¹ f_ext) with gravity -9.81 ẑ.
All problems are returned with a batch axis of 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .friction import Friction

GRAVITY = 9.81


@dataclass
class ContactProblem:
    """A batched boxed LCP with its matrix-free factors.

    A (B, m, m), b (B, m), lo/hi (B, m), friction (Friction or None), J (B, m, n), MinvJT (B, n, m),
    mask (B, m) bool or None (padding), name.
    """

    A: Any
    b: Any
    lo: Any
    hi: Any
    friction: Friction | None
    J: Any
    MinvJT: Any
    mask: Any = None
    name: str = ""

    @property
    def m(self) -> int:
        return self.b.shape[-1]

    def kwargs(self) -> dict:
        """Keyword arguments of :func:`pbad_gym.lcp.solve` for this problem (dense form)."""
        return dict(A=self.A, b=self.b, lo=self.lo, hi=self.hi, friction=self.friction, mask=self.mask)

    def mf_kwargs(self) -> dict:
        """Keyword arguments of :func:`pbad_gym.lcp.solve` for this problem (matrix-free form)."""
        return dict(A=None, b=self.b, lo=self.lo, hi=self.hi, friction=self.friction, mask=self.mask,
                    J=self.J, MinvJT=self.MinvJT)


def tangent_basis(n):
    """Two unit tangents (t1, t2) orthogonal to unit normal n (3,), t1 in the plane of n and world x when possible."""
    ref = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    t1 = ref - n * (ref @ n)
    t1 /= np.linalg.norm(t1)
    return t1, np.cross(n, t1)


def contact_rows(r, n):
    """(3, 6) Jacobian rows (n, t1, t2) of a contact at offset r (3,) from the centre of mass, normal n (3,)."""
    t1, t2 = tangent_basis(n)
    return np.stack([np.concatenate([d, np.cross(r, d)]) for d in (n, t1, t2)])


def rigid_mass(mass, inertia):
    """6x6 mass matrix diag(m I₃, I) of one body."""
    M = np.zeros((6, 6))
    M[:3, :3] = mass * np.eye(3)
    M[3:, 3:] = inertia
    return M


def _assemble(J, M, v, mu, dt, name):
    """ContactProblem from J (m, n), M (n, n), pre-contact velocity v (n,), μ per contact (or None: frictionless
    rows only, J holding only normal rows)."""
    Minv = np.linalg.inv(M)
    f_ext = np.zeros_like(v)
    f_ext[2::6] = -GRAVITY * np.diag(M)[0::6]  # gravity on each body's linear z
    v_pre = v + dt * Minv @ f_ext
    MinvJT = Minv @ J.T
    A = J @ MinvJT
    A = 0.5 * (A + A.T)  # exact symmetry (round-off of the product)
    b = J @ v_pre
    m = J.shape[0]
    lo = np.zeros(m)
    hi = np.full(m, np.inf)
    friction = None if mu is None else Friction.per_contact(m // 3, mu)
    return ContactProblem(A=A[None], b=b[None], lo=lo[None], hi=hi[None], friction=friction, J=J[None],
                          MinvJT=MinvJT[None], name=name)


def sliding_capsule(mass=10.0, mu=1.0, speed=10.0, spin=1.0, radius=0.1, half_length=0.5, dt=0.01):
    """Seed 002's capsule: radius 0.1 m, half-length 0.5 m (cylinder of length 1 m plus hemispherical caps),
    axis along world x, lying on the plane z = 0 (centre at z = radius). Two contacts, at the lowest points of
    the caps, (±half_length, 0, 0) in the world (offsets (±half_length, 0, -radius)). Mass 10 kg (uniform
    density); velocity 10 m/s along (cos 30°, sin 30°, 0), i.e. partly along and partly across the axis, and
    spin 1 rad/s about +z; μ = 1; gravity over Δt = 0.01 s. Rows (n, t1, t2) = (ẑ, x̂, ŷ) per contact: m = 6.
    """
    r, L = radius, 2.0 * half_length
    v_cyl, v_sph = np.pi * r * r * L, 4.0 / 3.0 * np.pi * r ** 3
    m_c = mass * v_cyl / (v_cyl + v_sph)
    m_h = 0.5 * (mass - m_c)  # each hemispherical cap
    i_axis = 0.5 * m_c * r * r + 2 * (2.0 / 5.0) * m_h * r * r
    # hemisphere: centroid 3r/8 from its flat face, I about its centroid (transverse) = 83/320 m r²
    i_trans = m_c * (3 * r * r + L * L) / 12.0 + 2 * (83.0 / 320.0 * m_h * r * r + m_h * (L / 2 + 3 * r / 8) ** 2)
    M = rigid_mass(mass, np.diag([i_axis, i_trans, i_trans]))
    n = np.array([0.0, 0.0, 1.0])
    J = np.concatenate([contact_rows(np.array([s * half_length, 0.0, -r]), n) for s in (-1.0, 1.0)])
    ang = np.deg2rad(30.0)
    v = np.array([speed * np.cos(ang), speed * np.sin(ang), 0.0, 0.0, 0.0, spin])
    return _assemble(J, M, v, mu, dt, "capsule")


def three_sphere_body(mass=10.0, mu=1.0, speed=10.0, spin=1.0, radius=0.1, circumradius=0.5, dt=0.01):
    """Seed 002's three-sphere body: three solid spheres (radius 0.1 m, 10/3 kg each) rigidly joined by massless
    rods, centres at the vertices of an equilateral triangle of circumradius 0.5 m in the plane z = radius, one
    vertex on +x. Contacts at each sphere's lowest point (offset (p_k, -radius) from the centroid). Velocity
    10 m/s along +x (towards the leading vertex), spin 1 rad/s about +z; μ = 1; gravity over Δt = 0.01 s.
    Rows (n, t1, t2) = (ẑ, x̂, ŷ) per contact: m = 9.
    """
    ms = mass / 3.0
    angles = np.deg2rad([0.0, 120.0, 240.0])
    centres = np.stack([circumradius * np.cos(angles), circumradius * np.sin(angles), np.zeros(3)], axis=1)
    inertia = np.zeros((3, 3))
    for c in centres:
        inertia += 2.0 / 5.0 * ms * radius ** 2 * np.eye(3) + ms * (c @ c * np.eye(3) - np.outer(c, c))
    M = rigid_mass(mass, inertia)
    n = np.array([0.0, 0.0, 1.0])
    J = np.concatenate([contact_rows(c + np.array([0.0, 0.0, -radius]), n) for c in centres])
    v = np.array([speed, 0.0, 0.0, 0.0, 0.0, spin])
    return _assemble(J, M, v, mu, dt, "three_sphere")


def random_contact_problem(rng, n_contacts=20, n_bodies=None, mu=0.5, mass_ratio=1.0, ground_fraction=0.3,
                           speed=1.0, dt=0.01):
    """Random multi-body contact problem: n_bodies spheres (radius 0.2 m) with masses log-spaced in
    [1, mass_ratio] kg (mass_ratio ≫ 1: light bodies pressed by heavy ones, the ill-conditioned case),
    ``n_contacts`` contacts, each between a random body and the ground (probability ``ground_fraction``) or a
    second body, normal within ~25° of +z, offsets within 0.3 m of the centres. Random velocities (N(0, speed²)).
    mu=None gives a frictionless problem (normal rows only, m = n_contacts), else rows (n, t1, t2): m = 3c.
    Default n_bodies = ceil(3c/4.5) keeps 3c ≤ 6·n_bodies, so A is generically positive definite.
    """
    c = n_contacts
    nb = n_bodies or max(2, int(np.ceil(3 * c / 4.5)))
    masses = np.logspace(0.0, np.log10(mass_ratio), nb)
    rng.shuffle(masses)
    M = np.zeros((6 * nb, 6 * nb))
    for k, mk in enumerate(masses):
        M[6 * k:6 * k + 6, 6 * k:6 * k + 6] = rigid_mass(mk, 0.4 * mk * 0.2 ** 2 * np.eye(3))
    rows = []
    for _ in range(c):
        n = np.array([0.0, 0.0, 1.0]) + 0.45 * rng.normal(size=3) * np.array([1.0, 1.0, 0.0])
        n /= np.linalg.norm(n)
        a = rng.integers(nb)
        Jc = np.zeros((3, 6 * nb))
        Jc[:, 6 * a:6 * a + 6] = contact_rows(rng.uniform(-0.3, 0.3, 3), n)
        if rng.random() >= ground_fraction and nb > 1:
            bb = (a + 1 + rng.integers(nb - 1)) % nb
            Jc[:, 6 * bb:6 * bb + 6] = -contact_rows(rng.uniform(-0.3, 0.3, 3), n)
        rows.append(Jc if mu is not None else Jc[:1])
    J = np.concatenate(rows)
    v = speed * rng.normal(size=6 * nb)
    name = f"random_c{c}_{'fric' if mu is not None else 'nofric'}_ratio{mass_ratio:g}"
    return _assemble(J, M, v, mu, dt, name)


def random_spd_problem(rng, batch=1, m=10, cond=1e2, boxed=True):
    """Random SPD boxed LCPs with fixed bounds (a unique solution): A = Q diag(σ) Qᵀ with σ log-spaced in
    [1/cond, 1], b ~ N(0, 1). boxed=True: each row is [0, ∞), [-l, h] (l, h ~ U(0.1, 1)), or [0, h]; else the plain
    LCP. Matrix-free factors J = Lᵀ-free Cholesky form: J = L (A = L Lᵀ), M = I, so MinvJT = Lᵀ.
    """
    A = np.empty((batch, m, m))
    for k in range(batch):
        Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
        sig = np.logspace(0.0, -np.log10(cond), m)
        A[k] = (Q * sig) @ Q.T
        A[k] = 0.5 * (A[k] + A[k].T)
    b = rng.normal(size=(batch, m))
    lo = np.zeros((batch, m))
    hi = np.full((batch, m), np.inf)
    if boxed:
        kind = rng.integers(3, size=(batch, m))
        lo = np.where(kind == 1, -rng.uniform(0.1, 1.0, (batch, m)), lo)
        hi = np.where(kind >= 1, rng.uniform(0.1, 1.0, (batch, m)), hi)
    L = np.linalg.cholesky(A)
    return ContactProblem(A=A, b=b, lo=lo, hi=hi, friction=None, J=L, MinvJT=np.swapaxes(L, 1, 2).copy(),
                          name=f"spd_m{m}_cond{cond:g}")


def stack_problems(problems):
    """Batch problems of different sizes: pad rows (m) and DOFs (n) to the largest, with a row mask.

    Each input has batch axis 1. Padded rows have A = 0, b = 0, box [0, 0], J = 0; padded DOFs are zero columns.
    Friction normal_index keeps its row numbering (rows are not moved, only appended).
    """
    m = max(p.m for p in problems)
    n = max(p.J.shape[-1] for p in problems)
    B = len(problems)
    A = np.zeros((B, m, m))
    b = np.zeros((B, m))
    lo = np.zeros((B, m))
    hi = np.zeros((B, m))
    J = np.zeros((B, m, n))
    MinvJT = np.zeros((B, n, m))
    mask = np.zeros((B, m), bool)
    ni = np.full((B, m), -1, dtype=np.int64)
    mu = np.zeros((B, m))
    any_fric = any(p.friction is not None for p in problems)
    for k, p in enumerate(problems):
        mk, nk = p.m, p.J.shape[-1]
        A[k, :mk, :mk] = p.A[0]
        b[k, :mk] = p.b[0]
        lo[k, :mk] = p.lo[0]
        hi[k, :mk] = p.hi[0]
        J[k, :mk, :nk] = p.J[0]
        MinvJT[k, :nk, :mk] = p.MinvJT[0]
        mask[k, :mk] = True
        if p.friction is not None:
            ni[k, :mk] = np.asarray(p.friction.normal_index)[0]
            mu[k, :mk] = np.asarray(p.friction.mu)[0]
    friction = Friction(normal_index=ni, mu=mu) if any_fric else None
    return ContactProblem(A=A, b=b, lo=lo, hi=hi, friction=friction, J=J, MinvJT=MinvJT, mask=mask,
                          name="stack")
