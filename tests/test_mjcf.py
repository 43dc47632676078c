"""from_mjcf: Gymnasium's locomotion robots read from their MJCF files equal MuJoCo's compiled models — kinematics,
mass matrix and bias forces at random states — and what the engine cannot model is refused by name."""
import os

import numpy as np
import pytest

from pbad_gym.dynamics import crba, rnea
from pbad_gym.kinematics import forward_kinematics

mujoco = pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")
from pbad_gym.model.mjcf import Ground, from_mjcf  # noqa: E402

ASSETS = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets")
ROBOTS = ["hopper.xml", "half_cheetah.xml", "walker2d_v5.xml", "ant.xml", "swimmer.xml"]


def _random_state(m, rng):
    """qpos near qpos0 (unit quaternions), qvel ~ N(0, 1)."""
    q = m.qpos0 + rng.uniform(-0.6, 0.6, m.nq)
    for j in range(m.njnt):
        if m.jnt_type[j] in (0, 1):  # free, ball: normalise the quaternion
            a = m.jnt_qposadr[j] + (3 if m.jnt_type[j] == 0 else 0)
            q[a:a + 4] /= np.linalg.norm(q[a:a + 4])
    return q, rng.standard_normal(m.nv)


@pytest.mark.parametrize("xml", ROBOTS)
def test_mass_matrix_bias_and_frames_equal_mujoco(xml):
    path = os.path.join(ASSETS, xml)
    body = from_mjcf(path)
    m = mujoco.MjModel.from_xml_path(path)
    d = mujoco.MjData(m)
    assert (body.nq, body.nv) == (m.nq, m.nv)
    assert body.total_mass == pytest.approx(m.body_subtreemass[0], rel=1e-12)
    rng = np.random.default_rng(len(xml))
    for _ in range(4):
        d.qpos[:], d.qvel[:] = _random_state(m, rng)
        mujoco.mj_forward(m, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, M, d.qM) if hasattr(d, "qM") else mujoco.mj_fullM(m, d, M)
        q, qd = d.qpos.copy()[None], d.qvel.copy()[None]
        np.testing.assert_allclose(crba(body, q)[0], M, rtol=0, atol=1e-9 * np.abs(M).max())
        h = rnea(body, q, qd, np.zeros_like(qd), gravity=tuple(m.opt.gravity))[0]
        np.testing.assert_allclose(h, d.qfrc_bias, rtol=0, atol=1e-9 * np.abs(d.qfrc_bias).max())
        kin = forward_kinematics(body, q)
        for name, (link, R, t) in body.meta["body_frames"].items():
            b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
            b = b if b >= 0 else int(name[4:])  # unnamed bodies are "body<id>"
            np.testing.assert_allclose(kin.R[0, link] @ R, d.xmat[b].reshape(3, 3), atol=1e-12)
            np.testing.assert_allclose(kin.R[0, link] @ t + kin.t[0, link], d.xpos[b], atol=1e-12)


def test_contact_spheres_actuators_and_floor_of_the_hopper():
    body = from_mjcf(os.path.join(ASSETS, "hopper.xml"))
    meta = body.meta
    assert meta["ground"] == Ground(height=0.0, mu=1.0)
    link, centre, radius = body.contact_points()
    assert len(link) == 8  # four capsules, two end spheres each
    # MuJoCo takes the larger friction of the two geoms: the foot's 2.0, the others' 0.9 < the floor's 1.0
    np.testing.assert_array_equal(meta["contact_mu"], [1.0] * 6 + [2.0] * 2)
    np.testing.assert_array_equal(meta["actuated"], [3, 4, 5])
    np.testing.assert_array_equal(meta["gear"], 200.0)
    np.testing.assert_array_equal(meta["ctrlrange"], [[-1.0, 1.0]] * 3)
    np.testing.assert_allclose(meta["qpos0"], [0.0, 1.25, 0.0, 0.0, 0.0, 0.0])
    # the foot capsule's end spheres touch z = 0 when the hopper stands at qpos0 − 1.25 m ... at qpos0 its
    # lowest sphere is 0.1 m up (foot at z = 0.1 m, radius 0.06 m)
    kin = forward_kinematics(body, meta["qpos0"][None])
    P = np.einsum("lab,lb->la", kin.R[0, link], centre) + kin.t[0, link]
    assert (P[:, 2] - radius).min() == pytest.approx(0.04, abs=1e-9)
    assert [lk.joint.damping for lk in body.links[3:]] == [1.0] * 3
    np.testing.assert_array_equal(body.armature, [0, 0, 0, 1, 1, 1])


def test_half_cheetah_springs_are_carried():
    meta = from_mjcf(os.path.join(ASSETS, "half_cheetah.xml")).meta
    np.testing.assert_array_equal(meta["spring"], [0, 0, 0, 240, 180, 120, 180, 120, 60])


def _xml(inner, extra=""):
    return f"""<mujoco><worldbody><geom type="plane" size="5 5 .1"/>{inner}</worldbody>{extra}</mujoco>"""


_LEG = '<body name="leg" pos="0 0 1"><joint name="hip" type="hinge" axis="0 1 0"/>{geom}</body>'


@pytest.mark.parametrize("xml, match", [
    (_xml(_LEG.format(geom='<geom name="c" type="cylinder" size=".1 .2"/>')), "'c': cylinder"),
    (_xml(_LEG.format(geom='<geom type="sphere" size=".1"/><site name="s"/>'),
          '<tendon><fixed name="t"><joint joint="hip" coef="1"/></fixed></tendon>'), "tendons"),
    (_xml(_LEG.format(geom='<geom type="sphere" size=".1"/>'),
          '<actuator><position name="servo" joint="hip"/></actuator>'), "'servo'"),
    (_xml(_LEG.format(geom='<geom type="sphere" size=".1"/>') + '<geom name="rock" type="box" size=".1 .1 .1"/>'),
     "'rock'"),
    (_xml('<body name="a"><joint name="j" type="hinge" frictionloss="1"/><geom type="sphere" size=".1"/></body>'),
     "'j': frictionloss"),
    ("<mujoco><worldbody><body><geom type='sphere' size='.1'></worldbody></mujoco>", "could not compile"),
])
def test_unsupported_and_malformed_models_are_refused_by_name(xml, match):
    with pytest.raises(ValueError, match=match):
        from_mjcf(xml)


def test_missing_file_and_wrong_type():
    with pytest.raises(FileNotFoundError, match="no_such_robot.xml"):
        from_mjcf("no_such_robot.xml")
    with pytest.raises(TypeError, match="from_mjcf"):
        from_mjcf(42)


def test_visual_geoms_are_not_contact_and_welded_bodies_join_their_parent():
    xml = _xml('<body name="a" pos="0 0 1"><joint type="slide" axis="0 0 1"/><geom type="sphere" size=".1"/>'
               '<geom type="cylinder" size=".1 .1" contype="0" conaffinity="0" mass="0"/>'
               '<body name="b" pos="0 0 .5"><geom type="sphere" size=".2" mass="3"/></body></body>')
    body = from_mjcf(xml)
    assert body.L == 1 and len(body.contact_points()[0]) == 2
    m = mujoco.MjModel.from_xml_string(xml)
    assert body.total_mass == pytest.approx(m.body_subtreemass[0], rel=1e-12)


def test_massless_links_need_zero_moments_and_a_body_with_mass():
    from pbad_gym.model import Body, Link

    massless = dict(mass=0.0, com=np.zeros(3), inertia=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="no mass"):
        Body([Link("a", **massless)])
    with pytest.raises(ValueError, match="mass must be positive"):
        Link("b", mass=0.0, com=np.zeros(3), inertia=np.eye(3))


def _contact_free_mujoco(path):
    """MuJoCo's model of ``path`` without contact, joint limits and fluid forces, integrated by RK4."""
    m = mujoco.MjModel.from_xml_path(path)
    m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT | mujoco.mjtDisableBit.mjDSBL_LIMIT
    m.opt.integrator, m.opt.density, m.opt.viscosity = mujoco.mjtIntegrator.mjINT_RK4, 0.0, 0.0
    return m


@pytest.mark.parametrize("xml", ROBOTS)
def test_contact_free_motion_converges_to_mujoco_at_order_one(xml):
    """Gravity, actuation, joint damping, armature and springs, from a random state for 0.05 s: PBAD's error
    against MuJoCo's RK4 at 1e-5 s halves with Δt (order 1, the PBAD step's), and the kernel equals NumPy."""
    from pbad_gym import Simulator

    path = os.path.join(ASSETS, xml)
    body, m = from_mjcf(path), _contact_free_mujoco(path)
    meta, d, rng = body.meta, mujoco.MjData(m), np.random.default_rng(3)
    q0, v0 = _random_state(m, rng)
    ctrl = rng.uniform(-0.5, 0.5, m.nu)
    m.opt.timestep = 1e-5
    d.qpos[:], d.qvel[:], d.ctrl[:] = q0, 0.5 * v0, ctrl
    mujoco.mj_step(m, d, nstep=5000)
    tau = np.zeros(m.nv)
    np.add.at(tau, meta["actuated"], meta["gear"] * ctrl)
    springs = dict(spring=meta["spring"], spring_rest=meta["spring_rest"]) if meta["spring"].any() else {}
    err, ends = [], {}
    for dt, backends in ((2e-3, ("numba",)), (1e-3, ("numba", "numpy")), (5e-4, ("numba",))):
        for backend in backends:
            # (memoryless: at 1e-12 rad the memory's third-order starts lie within the step energy's round-off of
            # the solution, where LM's accept test is decided by each engine's round-off; docs/physics.md §2.5)
            sim = Simulator(body, dt, gravity=tuple(m.opt.gravity), tol=1e-12, backend=backend, newton_memory=False,
                            **springs)
            sim.reset(q0[None], 0.5 * v0[None])
            for _ in range(round(0.05 / dt)):
                sim.step(tau[None])
            ends[backend] = np.asarray(sim.q)[0]
        err.append(np.abs(ends["numba"] - d.qpos).max())
        if dt == 1e-3:
            np.testing.assert_allclose(ends["numba"], ends["numpy"], rtol=0, atol=1e-10)
    order = np.log2(err[1] / err[2])
    assert 0.9 < order < 1.1, (err, order)
    assert err[2] < 0.01 * np.abs(d.qpos - q0).max() + 1e-3, err
