"""The kernel's per-evaluation helpers that take the model NamedTuples are inlined on the CPU (jit.inlined) and stay
calls for the other targets; inlining changes no number."""
import numpy as np
import pytest

numba = pytest.importorskip("numba")


def _templates(fn):
    from numba.core.registry import cpu_target

    ctx = cpu_target.typing_context
    ctx.refresh()
    return ctx.resolve_value_type(fn).templates


def test_inlined_helpers_inline_on_the_cpu_only():
    from pbad_gym.kernels.numba.configuration import difference, integrate
    from pbad_gym.kernels.numba.joints import joint_hessian, joint_terms

    for fn in (joint_terms, joint_hessian, integrate, difference):
        kinds = sorted((t._inline.value, (t.metadata or {}).get("target", "generic")) for t in _templates(fn))
        assert kinds == [("always", "cpu"), ("never", "generic")], (fn.__name__, kinds)


def test_an_inlined_helper_computes_what_its_call_does():
    """integrate then difference through the compiled CPU path round-trip a free body's configuration (the inlined
    helpers run in the caller, with the caller's numbers)."""
    from numba import njit

    from pbad_gym.kernels.numba.configuration import difference, integrate
    from pbad_gym.model import spider

    body = spider(hip="hinge")
    m = body.arrays(np, np.float64)

    @njit
    def round_trip(m, q, dq, out, back):
        integrate(m, q, dq, out)
        difference(m, q, out, back)

    rng = np.random.default_rng(0)
    q = body.q0()
    dq = rng.normal(0.0, 0.1, body.nv)
    out, back = np.empty_like(q), np.empty_like(dq)
    round_trip(m, q, dq, out, back)
    np.testing.assert_allclose(back, dq, rtol=1e-12, atol=1e-14)


def test_the_step_helpers_are_inlined_by_llvm_on_the_cpu_only():
    """The helpers that take the model NamedTuples or a scratch set and run per step or per evaluation carry
    numba's ``forceinline`` (LLVM ``alwaysinline``) on the CPU, where a call passes their hundreds of flattened
    arguments through the stack; the generic overload (the CUDA target's) keeps the call; and a plain helper states
    ``forceinline`` off on the CPU, so it does not inherit it from an inlined caller."""
    from pbad_gym.kernels.numba.chain_rule import wrench_gradient
    from pbad_gym.kernels.numba.contact import sphere_point_terms
    from pbad_gym.kernels.numba.forward import _hinge_pose, forward_kinematics
    from pbad_gym.kernels.numba.hessian import hessian
    from pbad_gym.kernels.numba.joints import _limit_depth
    from pbad_gym.kernels.numba.lm import chord_trial, prepare_row, step_row, warm_start
    from pbad_gym.kernels.numba.spatial import twist_products
    from pbad_gym.kernels.numba.terms import _energy_grad, link_terms

    def forced(fn):
        return sorted(((t.metadata or {}).get("target", "generic"), t._jit_options.get("forceinline"))
                      for t in _templates(fn))

    for fn in (step_row, prepare_row, warm_start, chord_trial, _energy_grad, link_terms, wrench_gradient,
               forward_kinematics, _hinge_pose, hessian, _limit_depth, sphere_point_terms):
        assert forced(fn) == [("cpu", True), ("generic", None)], (fn.__name__, forced(fn))
    assert forced(twist_products) == [("cpu", False), ("generic", None)]
