"""The fused GPU step (DESIGN.md §11): one CUDA thread per trajectory runs its own Levenberg-Marquardt to
convergence inside ONE kernel launch per step, compiled by numba.cuda from the CPU kernel's own scalar-style
functions (the modules of kernels/numba), on CuPy arrays that stay on the device.

Entry points: :func:`supports` (None, or the reason a case falls back to the lock-step CuPy path),
:func:`unavailable_reason` (why backend="cuda" cannot run here) and ``contract.step`` / ``contract.finish`` (the
step contract). Importing this package does not import numba.cuda; :mod:`.kernel` does, on first use.
"""
from ..numba.step import supports as _cpu_supports
from .device import simulated, unavailable_reason


def supports(integrator="pbad", order=2, optimizer="lm", contact_model="penalty", hessian="exact", dtype="float64"):
    """None when the fused kernel handles this case, else a one-line reason (the CPU kernel's cases: order 2,
    LM, penalty contact, exact or Gauss-Newton Hessian, float32 / float64; the order-2 step only)."""
    if integrator == "bdf2":  # (the kernel's code computes it, but the launch does not carry its history)
        return "integrator='bdf2' is compiled for the CPU kernel only"
    return _cpu_supports(None, integrator=integrator, order=order, optimizer=optimizer, contact_model=contact_model,
                         hessian=hessian, dtype=dtype, device="cpu")


__all__ = ["supports", "unavailable_reason", "simulated"]
