"""Array-module selection: one code path for NumPy (CPU) and CuPy (GPU).

Engine functions never import numpy directly for array math; they call :func:`xp_of` on their inputs so the
same code runs on device arrays. Torch interop goes through DLPack.
"""
from __future__ import annotations

import numbers

import numpy as np

DEVICES = ("cpu", "cuda")


_HOST = (np.ndarray, np.generic, float, int, bool, type(None))


def xp_of(*arrays):
    """The array module (numpy or cupy) that owns ``arrays`` (numpy when none is a CuPy array)."""
    for a in arrays:
        if not isinstance(a, _HOST) and type(a).__module__.startswith("cupy"):  # isinstance first: it is cheap
            import cupy

            return cupy
    return np


def get_xp(device: str = "cpu"):
    """The array module for ``device`` ("cpu" -> numpy, "cuda" -> cupy); clear error when CuPy is missing."""
    if device == "cpu":
        return np
    if device in ("cuda", "gpu"):
        try:
            import cupy
        except ImportError as err:  # pragma: no cover - depends on the machine
            raise RuntimeError("device='cuda' needs CuPy: pip install 'pbad_gym[gpu]'") from err
        return cupy
    raise ValueError(f"device must be one of {DEVICES}, got {device!r}")


def check_dtype(dtype):
    """Validate and normalise a floating dtype (float32 or float64)."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dt}")
    return dt


def to_numpy(a):
    """Host copy of an array from either module."""
    if hasattr(a, "get"):
        return a.get()
    return np.asarray(a)


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def to_torch(a):
    """Zero-copy view of a NumPy / CuPy array as a torch tensor (DLPack)."""
    import torch

    return torch.from_dlpack(a)


def real_number(value, name, *, positive=False, nonnegative=False) -> float:
    """``value`` as a float, checked once where an option enters: TypeError naming ``name`` unless it is a real
    number (strings and bools are not), ValueError unless it is finite (and > 0 or >= 0 when asked)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    x = float(value)
    if not np.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and not x > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    if nonnegative and not x >= 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    return x


def tree_map(fn, tree, *rest):
    """``fn`` applied to every array leaf of ``tree`` (nested NamedTuples / tuples of arrays), with the matching
    leaves of ``rest`` as further arguments; None and Python scalars are kept as they are."""
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, tuple):
        out = [tree_map(fn, t, *(r[i] for r in rest)) for i, t in enumerate(tree)]
        return type(tree)(*out) if hasattr(tree, "_fields") else tuple(out)
    return fn(tree, *rest)
