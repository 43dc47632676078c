"""Gradients through the simulator (docs/gradients.md; the ``rl`` extra, torch).

- :func:`rollout`: configurations after T order-2 PBAD steps of a Simulator, differentiable with respect to the
  generalised forces and the initial state;
- :class:`DiffVecEnv`: a vector env's observations and rewards as torch functions of its state, for first-order
  policy learning (``algo: shac`` in ``pbad-train``).

Forward runs on the Simulator's backend (the numba kernel or the NumPy engine); backward, in NumPy, is one linear
solve per step and trajectory with the step's own Hessian (the implicit-function theorem,
:mod:`pbad_gym.integrators.adjoint`).
"""
from .env import DiffVecEnv
from .rollout import rollout

__all__ = ["rollout", "DiffVecEnv"]
