"""Compiled implementations of the step contract (DESIGN.md §2, §11): ``kernels.numba`` (CPU, one
``prange`` loop over trajectories, each running its own Levenberg-Marquardt to convergence).

Nothing here is imported by the NumPy engine; the Simulator picks a kernel once, at construction.
"""
