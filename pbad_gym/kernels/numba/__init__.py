"""numba backend of the order-2 PBAD step (DESIGN.md §11): one ``@njit(parallel=True, cache=True)`` kernel loops
over the trajectories with ``prange``, each running its own Levenberg-Marquardt to convergence.

Entry points: :func:`pbad_step_numba` (the step, same semantics as ``integrators.pbad.pbad_step`` with
optimizer="lm") and :func:`supports` (None, or the one-line reason a case falls back to NumPy). The threading layer
is chosen in :mod:`.threads` when this package is imported.
"""
from . import threads

threads.configure()

from .step import contact_fields, forward_kinematics_numba, pbad_step_numba, supports  # noqa: E402

__all__ = ["pbad_step_numba", "supports", "contact_fields", "forward_kinematics_numba", "threads"]
