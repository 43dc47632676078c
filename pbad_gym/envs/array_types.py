"""``array_type``: the array library the environments hand their results out in.

The vector environments compute observations, rewards and the terminated / truncated flags as NumPy arrays on the
host; :class:`ArrayExport` turns them into what the caller trains with:

- ``"numpy"`` (default): NumPy arrays, as Gymnasium specifies;
- ``"torch"``: torch tensors on the simulation's device — with ``device="cpu"`` CPU tensors that share memory with
  the env's NumPy arrays (``torch.from_numpy``, zero copy; float32 observations, float64 rewards, bool flags),
  with ``device="cuda"`` CUDA tensors (device data through DLPack, host data copied once);
- ``"cupy"``: CuPy arrays on the GPU (needs ``device="cuda"`` and CuPy).

Actions are accepted as NumPy or CuPy arrays or torch tensors of any device (:func:`pbad_gym.arrays.to_numpy`).
The ``info`` dict stays NumPy (Gymnasium's vector info convention). On ``device="cuda"`` the observations are
still computed on the host today, so "cupy"/"torch" cost one host->device copy per step; once observations are
computed on the device the same export is a zero-copy DLPack view.
"""
from __future__ import annotations

import numpy as np

from ..arrays import ARRAY_TYPES, check_array_type, to_cupy, to_numpy, to_torch

__all__ = ["ARRAY_TYPES", "ArrayExport", "check_env_array_type"]


def check_env_array_type(array_type, device) -> str:
    """Validate an environment's ``array_type`` against its ``device``: ValueError naming array_type and the
    accepted values, RuntimeError when the library is missing, ValueError for "cupy" off the GPU."""
    array_type = check_array_type(array_type)
    if array_type == "cupy" and device not in ("cuda", "gpu"):
        raise ValueError(f"array_type='cupy' hands out arrays on the simulation's GPU: it needs device='cuda', got "
                         f"device={device!r} (use array_type='numpy' or 'torch' on the CPU)")
    return array_type


class ArrayExport:
    """Converter of an environment's NumPy results into ``array_type`` on ``device`` (holds strings only, so
    environments pickle and deep-copy)."""

    def __init__(self, array_type="numpy", device="cpu"):
        self.array_type = check_env_array_type(array_type, device)
        self.device = "cuda" if device in ("cuda", "gpu") else "cpu"

    def __repr__(self):
        return f"ArrayExport({self.array_type!r}, {self.device!r})"

    def array(self, a):
        """One array as ``array_type`` (NumPy in: zero copy to torch on the CPU)."""
        t = self.array_type
        if t == "numpy":
            return to_numpy(a)
        if t == "cupy":
            return to_cupy(a)
        if self.device == "cpu":
            return to_torch(to_numpy(a))
        if isinstance(a, np.ndarray):  # host data: one copy by torch itself (no DLPack hop through CuPy)
            import torch

            return torch.as_tensor(a, device="cuda")
        return to_torch(to_cupy(a))

    def __call__(self, *arrays):
        """Each of ``arrays`` converted (a tuple); None stays None."""
        if self.array_type == "numpy":
            return arrays
        return tuple(None if a is None else self.array(a) for a in arrays)

    def obs(self, a):
        """An observation batch (or one row of it) converted."""
        return a if self.array_type == "numpy" else self.array(a)
