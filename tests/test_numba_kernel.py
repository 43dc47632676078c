"""The compiled order-2 step (pbad_gym.kernels.numba) against the NumPy reference (integrators.pbad.pbad_step):
the same trajectories to 1e-10 (float64) over 200 steps and the same LM iteration counts, for every model and
option the kernel supports. Each rollout feeds each backend its own output back (the two trajectories are
independent), with the lagged contact memory carried by the engine's own contact_state."""
import numpy as np
import pytest

numba_kernel = pytest.importorskip("pbad_gym.kernels.numba")

from conftest import mixed_body  # noqa: E402

from pbad_gym.energies import contact_state, make_force_model  # noqa: E402
from pbad_gym.integrators.pbad import pbad_step  # noqa: E402
from pbad_gym.kinematics import forward_kinematics, integrate  # noqa: E402
from pbad_gym.model import chain, spider, swimmer  # noqa: E402

STEPS = 200


def _spider_start(body, B, rng, height):
    q0 = body.q0()
    q0[2] = height
    return integrate(body, np.tile(q0, (B, 1)), rng.uniform(-0.1, 0.1, (B, body.nv)))


def _random_start(body, B, rng, scale=0.3):
    return integrate(body, np.tile(body.q0(), (B, 1)), scale * rng.standard_normal((B, body.nv)))


def case(name):
    """(body, ForceModel, dt, solver options, q_prev, q, torque scale (nv,)) of a named case."""
    rng = np.random.default_rng(7)
    B = 3
    if name == "chain":
        body = chain(4)
        forces, dt, opts, act = make_force_model(body), 0.01, dict(max_iter=50, tol=1e-9), 0.01 * np.ones(body.nv)
        q = _random_start(body, B, rng)
    elif name in ("tree", "tree_limit_damping"):
        body = mixed_body(limited=True)
        forces = make_force_model(body, limit_stiffness=50.0, drag=(0.2, 1.0),
                                  limit_damping=0.5 if name == "tree_limit_damping" else 0.0)
        dt, opts, act = 0.01, dict(max_iter=50, tol=1e-9), 0.05 * np.ones(body.nv)
        q = _random_start(body, B, rng, 0.2)
    elif name == "free_ball":
        body = chain(3, floating=True, joint="ball")
        forces, dt, opts = make_force_model(body, damping=0.05), 0.01, dict(max_iter=50, tol=1e-9)
        q, act = _random_start(body, B, rng), 0.2 * np.ones(body.nv)
    elif name in ("swimmer_v0", "swimmer_v1"):
        v1 = name.endswith("v1")
        body = swimmer(joint_range=0.4 if v1 else None)  # narrower than the env's 100°: the limits act
        forces = make_force_model(body, gravity=(0.0, 0.0, 0.0), drag=(0.1, 10.0),
                                  limit_stiffness=3000.0 if v1 else 0.0)
        dt, opts = 0.05, dict(max_iter=50, tol=1e-7)
        q, act = _random_start(body, B, rng, 0.1), np.r_[np.zeros(6), 30.0 * np.ones(3)]
    elif name in ("spider_v0", "spider_v0_coulomb", "spider_v1", "spider_v1_viscous", "spider_v1_none",
                  "spider_v1_damped"):
        v1 = name.startswith("spider_v1")
        body = spider(density=5.0, armature=1.0) if v1 else spider()
        friction = {"spider_v0": "viscous", "spider_v0_coulomb": "coulomb", "spider_v1": "coulomb",
                    "spider_v1_viscous": "viscous", "spider_v1_none": "none", "spider_v1_damped": "coulomb"}[name]
        damped = name.endswith("damped")
        # Spider-v1 itself caps friction by the lagged spring force; the damped case by the step's applied force
        contact = dict(stiffness=5e3 if v1 else 5e4, friction=friction, damping=1000.0, mu=1.0, slip_velocity=0.01,
                       normal_damping=70.0 if damped else 0.0, friction_cap="applied" if damped else "lagged_spring")
        damping = np.r_[np.zeros(6), np.ones(12)]
        forces = make_force_model(body, contact=contact, limit_stiffness=1e3 if v1 else 1e4, damping=damping,
                                  limit_damping=20.0 if damped else 0.0)
        dt, opts = (0.05, dict(max_iter=100, tol=1e-7)) if v1 else (0.02, dict(max_iter=50, tol=1e-7))
        q = _spider_start(body, B, rng, body.meta["stand_height"] + 0.1)
        act = np.r_[np.zeros(6), 150.0 * np.ones(12)]
    else:
        raise KeyError(name)
    q_prev = integrate(body, q, -dt * 0.1 * rng.standard_normal((B, body.nv)))
    return body, forces, dt, opts, q_prev, q, act


def torques(act, steps, B, dt, seed=3):
    """(steps, B, nv) torques: half a 0.5 Hz sine with random phases per DOF, half noise, scaled by act (nv,)."""
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi, (B, act.size))
    t = dt * np.arange(steps)[:, None, None]
    return act * (0.5 * np.sin(np.pi * t + phase) + 0.5 * rng.uniform(-1, 1, (steps, B, act.size)))


def rollout(stepper, body, forces, dt, q_prev, q, taus):
    """(positions (T, B, nq), iterations (T, B)) of a rollout under torques taus (T, B, nv)."""
    qs, its, contact = [], [], None
    for tau in taus:
        if forces.contact is not None:
            contact = contact_state(body, forward_kinematics(body, q), forces.contact, dt, prev=contact)
        q_new, it = stepper(q_prev, q, tau, contact)
        q_prev, q = q, q_new
        qs.append(q)
        its.append(it)
    return np.array(qs), np.array(its)


def compare(name, hessian="exact", steps=STEPS, atol=1e-10, chaotic=False):
    """Roll out both backends; with ``chaotic`` (contact-rich gaits whose NumPy reference amplifies round-off by
    itself) the numba trajectory must stay within 100x the reference's own spread under two 1e-15 perturbations
    of the start (and within ``atol`` while that spread is below it: a wrong term shows from the first steps);
    iteration counts must match while the trajectories are round-off apart."""
    body, forces, dt, opts, q_prev, q, act = case(name)
    taus = torques(act, steps, q.shape[0], dt)

    def ref(qp, qc, tau, contact):
        qn, res = pbad_step(body, qp, qc, tau, dt, forces, hessian=hessian, contact=contact, **opts)
        assert res.converged.all()  # round-off stays round-off only where every step converges
        return qn, res.iterations

    def kern(qp, qc, tau, contact):
        qn, it, gn, conv = numba_kernel.pbad_step_numba(body, qp, qc, tau, dt, forces, hessian=hessian,
                                                        contact=contact, **opts)
        return qn, it

    qa, ia = rollout(ref, body, forces, dt, q_prev, q, taus)
    qb, ib = rollout(kern, body, forces, dt, q_prev, q, taus)
    assert np.all(np.isfinite(qa))
    err = np.abs(qa - qb).max(axis=(1, 2))
    if chaotic:
        spread = 0.0
        for axis, sign in ((2, 1.0), (0, -1.0)):
            q_pert = q_prev.copy()
            q_pert[:, axis] += sign * 1e-15
            qc = rollout(ref, body, forces, dt, q_pert, q, taus)[0]
            spread = np.maximum(spread, np.abs(qc - qa).max(axis=(1, 2)))
        spread = np.maximum.accumulate(spread)
        bound = np.maximum(atol, 100 * spread)
        assert np.all(err < bound), f"{name}: |Δq| above the reference's own spread at step {np.argmax(err >= bound)}"
        close = spread < 1e-9  # while the trajectories are round-off apart, every iteration count matches
        assert close[:50].all()
        np.testing.assert_array_equal(ia[close], ib[close])
        frac = np.mean(ia[~close] != ib[~close]) if (~close).any() else 0.0
        assert frac <= 0.01, f"{name}: iteration counts differ on {frac:.1%} of the steps past round-off"
        return ia
    np.testing.assert_array_equal(ia, ib)
    assert err.max() < atol, f"{name}: max |Δq| {err.max():.3g} first above tol at step {np.argmax(err >= atol)}"
    return ia


@pytest.mark.parametrize("name", ["chain", "tree", "tree_limit_damping", "free_ball", "swimmer_v0", "swimmer_v1",
                                  "spider_v0"])
def test_same_trajectories_exact(name):
    its = compare(name)
    assert its.mean() > 1  # the solver did real work


def test_same_trajectories_spider_v1():
    """Spider-v1 (Coulomb friction, armature, light body) under random gaits is chaotic: the NumPy reference
    turns a 1e-15 change of its start into ~1e-4 m after 200 steps, so 1e-10 holds for the first ~70 steps only;
    numba stays within the reference's own spread, with equal iteration counts on all 200 steps."""
    its = compare("spider_v1", chaotic=True)
    assert its.mean() > 5


def test_same_trajectories_spider_with_contact_and_limit_damping():
    """Spider-v1 with the clamped Kelvin-Voigt contact and limits (Spider-v2's terms); 100 steps: the first 50
    must stay round-off close with equal iteration counts, the rest within the reference's own spread."""
    compare("spider_v1_damped", steps=100, chaotic=True)


@pytest.mark.parametrize("name", ["chain", "swimmer_v1", "spider_v0"])
def test_same_trajectories_gauss_newton(name):
    compare(name, hessian="gauss_newton")


@pytest.mark.parametrize("name", [pytest.param("spider_v0_coulomb", marks=pytest.mark.slow),
                                  pytest.param("spider_v1_viscous", marks=pytest.mark.slow),
                                  pytest.param("spider_v1_none", marks=pytest.mark.slow)])
def test_same_trajectories_friction_models(name):
    compare(name, chaotic=True)


def test_one_step_diagnostics_match():
    body, forces, dt, opts, q_prev, q, act = case("spider_v1")
    tau = act * np.random.default_rng(1).uniform(-1, 1, (q.shape[0], body.nv))
    contact = contact_state(body, forward_kinematics(body, q), forces.contact, dt)
    qa, res = pbad_step(body, q_prev, q, tau, dt, forces, contact=contact, **opts)
    qb, it, gn, conv = numba_kernel.pbad_step_numba(body, q_prev, q, tau, dt, forces, contact=contact, **opts)
    np.testing.assert_allclose(qb, qa, atol=1e-12)
    np.testing.assert_array_equal(it, res.iterations)
    np.testing.assert_array_equal(conv, res.converged)
    np.testing.assert_allclose(gn, res.grad_norm, rtol=1e-3, atol=1e-14)
    assert it.dtype == np.int64 and conv.dtype == np.bool_ and qb.shape == q.shape


def test_contact_memory_as_dict_and_computed():
    """The lagged contact memory read through one adapter: a NamedTuple, a dict of its fields, or None (computed
    from q_cur) give the same step."""
    body, forces, dt, opts, q_prev, q, act = case("spider_v0")
    tau = np.zeros((q.shape[0], body.nv))
    mem = contact_state(body, forward_kinematics(body, q), forces.contact, dt)
    a = numba_kernel.pbad_step_numba(body, q_prev, q, tau, dt, forces, contact=mem, **opts)[0]
    b = numba_kernel.pbad_step_numba(body, q_prev, q, tau, dt, forces, contact=mem._asdict(), **opts)[0]
    c = numba_kernel.pbad_step_numba(body, q_prev, q, tau, dt, forces, contact=None, **opts)[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_batch_rows_independent_of_batch_and_threads():
    """A row's numbers do not depend on the batch it is in, nor on how the batch is split over threads."""
    body, forces, dt, opts, q_prev, q, act = case("swimmer_v1")
    rng = np.random.default_rng(5)
    B = 9
    q = integrate(body, np.tile(q[0], (B, 1)), 0.1 * rng.standard_normal((B, body.nv)))
    q_prev = integrate(body, q, 0.01 * rng.standard_normal((B, body.nv)))
    tau = act * rng.uniform(-1, 1, (B, body.nv))
    full = numba_kernel.pbad_step_numba(body, q_prev, q, tau, dt, forces, **opts)
    one = numba_kernel.pbad_step_numba(body, q_prev[4:5], q[4:5], tau[4:5], dt, forces, **opts)
    np.testing.assert_array_equal(full[0][4:5], one[0])
    n0 = numba_kernel.threads.num_threads()
    try:
        numba_kernel.threads.set_threads(1)
        serial = numba_kernel.pbad_step_numba(body, q_prev, q, tau, dt, forces, **opts)
    finally:
        numba_kernel.threads.set_threads(n0)
    np.testing.assert_array_equal(full[0], serial[0])
    np.testing.assert_array_equal(full[1], serial[1])


def test_float32_close_to_numpy():
    body, forces, dt, opts, q_prev, q, act = case("swimmer_v1")
    tau = act * np.random.default_rng(2).uniform(-1, 1, (q.shape[0], body.nv))
    f32 = lambda a: a.astype(np.float32)  # noqa: E731
    qa, res = pbad_step(body, f32(q_prev), f32(q), f32(tau), dt, forces, max_iter=50, tol=1e-5)
    qb, it, gn, conv = numba_kernel.pbad_step_numba(body, f32(q_prev), f32(q), f32(tau), dt, forces, max_iter=50,
                                                    tol=1e-5)
    assert qb.dtype == np.float32 and conv.all()
    np.testing.assert_allclose(qb, qa, atol=1e-4)


def test_kernel_cache_is_keyed_on_every_source_file(tmp_path, monkeypatch):
    """numba keys a cached entry on its own file; the kernel's helpers live in other files (and import the LM
    schedule from optim/lm.py), so the entries are stamped with a hash of every source they compile in: an edit of
    any helper file must change the stamp, and the entries must use that locator."""
    import shutil

    from pbad_gym.kernels.numba import entries, jit

    for entry in (entries.step_batch, entries.step_batch_serial, entries.finish_batch, entries.kinematics_batch,
                  entries.guard_batch, entries.guard_batch_serial):
        assert isinstance(entry._cache._impl._locator, jit.PACKAGE_LOCATORS)
    pkg = tmp_path / "numba"
    shutil.copytree(jit._HERE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(jit, "_HERE", pkg)
    monkeypatch.setattr(jit, "_SOURCES", (pkg,))
    jit.source_hash.cache_clear()
    before = jit.source_hash()
    helper = pkg / "contact.py"
    helper.write_text(helper.read_text() + "\n# an edit\n")
    jit.source_hash.cache_clear()
    assert jit.source_hash() != before
    jit.source_hash.cache_clear()



def test_cache_stamp_covers_the_constants_compiled_in():
    """Every module outside the kernel package that a kernel file imports an UPPER_CASE constant from is in the
    stamp's sources: an edit there (a tolerance, a schedule) must recompile, not load a stale entry."""
    import ast

    from pbad_gym.kernels.numba import jit

    root = jit._HERE.parent.parent
    sources = {p.resolve() for p in jit._SOURCES}
    missing = []
    for path in jit._HERE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 3 and node.module:
                if any(a.name.isupper() for a in node.names):
                    target = root.joinpath(*node.module.split(".")).with_suffix(".py")
                    if target.resolve() not in sources:
                        missing.append(f"{path.name}: {node.module}")
    assert not missing, missing
    assert len(sources) >= 5

def test_row_loops_compile_without_reference_counting():
    """The kernel's row loops run without the runtime's reference counts (half the kernel's time when they came
    back): the options ask for it, and this numba honours them — a helper taking arrays, called from a function
    compiled with those options, leaves no NRT_incref in the IR (one compiled with the defaults does)."""
    from numba import njit
    from numba.extending import register_jitable

    from pbad_gym.kernels.numba import jit

    assert jit.ROW_LOOP_OPTIONS.get("_nrt") is False and jit.ROW_LOOP_OPTIONS["error_model"] == "numpy"

    @register_jitable
    def helper(a, b, i):
        return a[i % a.shape[0]] + b[i % b.shape[0]]

    def loop(a, b, n):
        s = 0.0
        for i in range(n):
            s += helper(a[1:], b[:-1], i)
        return s

    options = {k: v for k, v in jit.ROW_LOOP_OPTIONS.items() if k != "cache"}
    without, default = njit(**options)(loop), njit(loop)
    x = np.arange(4.0)
    assert without(x, x, 5) == default(x, x, 5)
    ir = lambda f: "".join(f.inspect_llvm().values())  # noqa: E731
    assert "NRT_incref" in ir(default)
    assert "NRT_incref" not in ir(without)


def test_supports_reasons():
    body = chain(3)
    forces = make_force_model(body)
    assert numba_kernel.supports(body, forces) is None
    assert "collocation order 3" in numba_kernel.supports(body, forces, order=3)
    assert "lbfgs" in numba_kernel.supports(body, forces, optimizer="lbfgs")
    assert "impulse" in numba_kernel.supports(body, forces, contact_model="impulse")
    assert "cuda" in numba_kernel.supports(body, forces, device="cuda")
    assert "rk4" in numba_kernel.supports(body, forces, integrator="rk4")


def test_bad_hessian_name():
    body, forces, dt, opts, q_prev, q, act = case("chain")
    with pytest.raises(ValueError, match="hessian"):
        numba_kernel.pbad_step_numba(body, q_prev, q, np.zeros((3, body.nv)), dt, forces, hessian="newton", **opts)


@pytest.mark.parametrize("name", ["tree", "free_ball", "swimmer_v1", "spider_v1"])
def test_forward_kinematics_matches_numpy(name):
    body, forces, dt, opts, q_prev, q, act = case(name)
    a = forward_kinematics(body, q)
    b = numba_kernel.forward_kinematics_numba(body, q)
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, rtol=0, atol=1e-13)


def _child_step(conn, env_id, actions):
    """In a forked process: a 16-row batch (the parallel entry) stepped through ``actions``; sends observations."""
    import gymnasium

    env = gymnasium.make_vec(env_id, num_envs=16, vectorization_mode="vector_entry_point")
    env.reset(seed=1)
    conn.send([env.step(a)[0] for a in actions])
    conn.close()


def test_a_process_forked_after_a_parallel_launch_still_steps():
    """GNU OpenMP is not fork-safe: a child forked (multiprocessing "fork", AsyncVectorEnv's default on Linux)
    after the parent ran a parallel batch used to be terminated by numba at its own first parallel batch. It now
    steps on its calling thread, with the parent's numbers."""
    import multiprocessing
    import time

    import gymnasium

    import pbad_gym  # noqa: F401

    env_id = "pbad_gym/Swimmer-v1"
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 16, 3)).astype(np.float32)
    env = gymnasium.make_vec(env_id, num_envs=16, vectorization_mode="vector_entry_point")
    env.reset(seed=1)
    expected = [env.step(a)[0] for a in actions]  # the parent's own parallel launches
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=_child_step, args=(child_end, env_id, actions))
    child.start()
    got, deadline = None, time.monotonic() + 180
    while time.monotonic() < deadline:  # fail fast when the child dies instead of sending
        if parent_end.poll(0.5):
            got = parent_end.recv()
            break
        if not child.is_alive():
            break
    child.join(30)
    if child.is_alive():
        child.kill()
    assert got is not None, f"the forked child did not step (exit code {child.exitcode})"
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
