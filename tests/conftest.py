import numpy as np
import pytest

from pbad_gym.integrators.collocation import prepare_collocation, residual
from pbad_gym.kinematics import integrate
from pbad_gym.model import Body, Joint, Link, Sphere, chain


def mixed_body(limited=False):
    """A tree with every joint type: free base, a ball, a universal, a slide and two hinges on two branches.
    limited: ranges on the universal and slide joints (so that limit terms act), damping on the ball and armature
    on the hinge."""
    sh = lambda: [Sphere(radius=0.05, pos=(0.05, 0.0, 0.0))]  # noqa: E731
    off = (np.eye(3), np.array([0.1, 0.0, 0.0]))
    extra = (lambda **kw: kw) if limited else (lambda **kw: {})
    links = [
        Link("base", -1, Joint("free"), shapes=sh()),
        Link("ball", 0, Joint("ball", **extra(damping=0.01)), placement=off, shapes=sh()),
        Link("uni", 1, Joint("universal", axis=(0, 0, 1), axis2=(0, 1, 0), **extra(range=(-0.3, 0.3))),
             placement=off, shapes=sh()),
        Link("slide", 0, Joint("slide", axis=(1, 1, 0), **extra(range=(-0.02, 0.02))),
             placement=(np.eye(3), np.array([0.0, 0.1, 0.0])), shapes=sh()),
        Link("hinge", 3, Joint("hinge", axis=(1, 0, 0), **extra(armature=1e-3)), placement=off, shapes=sh()),
    ]
    return Body(links, name="tree" if limited else "mixed")


BODIES = {
    "hinge": lambda: chain(4),
    "ball": lambda: chain(3, joint="ball"),
    "free_hinge": lambda: chain(3, floating=True),
    "free_ball": lambda: chain(3, floating=True, joint="ball"),
    "universal": lambda: chain(3, joint="universal"),
    "mixed": mixed_body,
}


@pytest.fixture(params=sorted(BODIES))
def body(request):
    return BODIES[request.param]()


def random_q(body, B, rng, scale=0.7):
    return integrate(body, np.tile(body.q0(), (B, 1)), scale * rng.standard_normal((B, body.nv)))


def fd_gradient(f, body, q, eps=1e-6):
    """Central differences of a scalar batch function f(q) -> (B,) along the tangent coordinates."""
    B = q.shape[0]
    g = np.zeros((B, body.nv))
    for j in range(body.nv):
        e = np.zeros((B, body.nv))
        e[:, j] = eps
        g[:, j] = (f(integrate(body, q, e)) - f(integrate(body, q, -e))) / (2 * eps)
    return g


def fd_hessian(f, body, q, eps=1e-4):
    """Second differences of f at δ = 0 of δ -> f(q ⊕ δ) (symmetric by construction)."""
    B = q.shape[0]
    H = np.zeros((B, body.nv, body.nv))
    for j in range(body.nv):
        for k in range(j, body.nv):
            ej, ek = np.zeros((B, body.nv)), np.zeros((B, body.nv))
            ej[:, j] += eps
            ek[:, k] += eps
            val = (f(integrate(body, q, ej + ek)) - f(integrate(body, q, ej - ek))
                   - f(integrate(body, q, ek - ej)) + f(integrate(body, q, -ej - ek))) / (4 * eps * eps)
            H[:, j, k] = H[:, k, j] = val
    return H


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def collocation_fd_error(body, forces, K, rng, low=False, B=2):
    """Relative error of the collocation residual Jacobian against central differences at random nodes."""
    n = K - 1
    qk = random_q(body, B, rng)
    if low:
        qk[:, 2] = 0.03
    qp = integrate(body, qk, -0.01 * rng.standard_normal((B, body.nv)))
    tau = 0.01 * rng.standard_normal((B, body.nv))
    data = prepare_collocation(body, qp, qk, tau, 0.02, forces, K)
    X = np.stack([integrate(body, qk, 0.02 * rng.standard_normal((B, body.nv))) for _ in range(n)], 1)
    r, Jr = residual(body, X, data)
    eps, Jfd = 1e-6, np.zeros_like(Jr)
    for a in range(n):
        for j in range(body.nv):
            e = np.zeros((B, body.nv))
            e[:, j] = eps
            Xp, Xm = X.copy(), X.copy()
            Xp[:, a], Xm[:, a] = integrate(body, X[:, a], e), integrate(body, X[:, a], -e)
            Jfd[:, :, :, a, j] = (residual(body, Xp, data, False)[0] - residual(body, Xm, data, False)[0]) / (2 * eps)
    return np.abs(Jr - Jfd).max() / np.abs(Jfd).max()


def spider_random_action_run(cls, num_envs, steps, seed=0):
    """Deepest contact-sphere penetration (fraction of its radius), all-converged and all-finite flags of a run of
    uniformly random actions on Spider vector env class ``cls`` (no time limit, no termination)."""
    from pbad_gym.energies.contact import sphere_centres

    env = cls(num_envs=num_envs, max_episode_steps=None, terminate_when_unhealthy=False)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    r = env.body.contact_points()[2]
    depth, converged, finite = 0.0, True, True
    for _ in range(steps):
        obs, reward, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        P = np.asarray(sphere_centres(env.body, env.sim.kinematics()))
        depth = max(depth, float(np.max((r - P[..., 2]) / r)))
        converged &= bool(info["converged"].all()) and not info["diverged"].any()
        finite &= bool(np.all(np.isfinite(obs)) and np.all(np.isfinite(reward)))
    return depth, converged, finite
