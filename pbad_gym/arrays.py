"""Array-module selection: one code path for NumPy (CPU) and CuPy (GPU).

Engine functions never import numpy directly for array math; they call :func:`xp_of` on their inputs so the
same code runs on device arrays. Torch interop goes through DLPack.

Host synchronisation: every place where device data decides host control flow (``bool()``, ``int()``,
``float()``, ``.item()``, a host copy) waits for the GPU. :func:`host_bool`, :func:`host_int` and
:func:`to_numpy` are the sanctioned ways to do it, and :func:`count_host_syncs` is the test hook that counts them
(plus CuPy's module-level functions that synchronise, such as ``cupy.nonzero``) per site.
"""
from __future__ import annotations

import contextlib
import numbers
import sys
from collections import Counter

import numpy as np

DEVICES = ("cpu", "cuda")
ARRAY_TYPES = ("numpy", "cupy", "torch")


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


def is_device_array(a) -> bool:
    """True for a CuPy array or a torch tensor on a CUDA device (reading it on the host synchronises)."""
    if isinstance(a, _HOST):
        return False
    mod = type(a).__module__
    if mod.startswith("cupy"):
        return True
    return mod.startswith("torch") and getattr(getattr(a, "device", None), "type", "cpu") != "cpu"


def to_numpy(a):
    """Host copy of an array from NumPy, CuPy or torch (a NumPy array and a CPU tensor are returned without a
    copy). Copying a device array is a host synchronisation, counted by :func:`count_host_syncs`."""
    if isinstance(a, np.ndarray):
        return a
    if type(a).__module__.startswith("torch"):
        if a.device.type != "cpu":
            note_host_sync("to_numpy")
        return a.detach().cpu().numpy()
    if hasattr(a, "get"):
        if is_device_array(a):
            note_host_sync("to_numpy")
        return a.get()
    return np.asarray(a)


# --- host synchronisation counter (a test hook) ---------------------------------------------------------------
class HostSyncCounter:
    """Device->host synchronisations seen inside one :func:`count_host_syncs` block: ``count`` in all and
    ``sites`` (a Counter keyed by the site's label: "host_bool", "to_numpy", "cupy.nonzero", ...)."""

    def __init__(self):
        self.count = 0
        self.sites = Counter()

    def note(self, site):
        self.count += 1
        self.sites[site] += 1

    def __repr__(self):
        return f"HostSyncCounter(count={self.count}, sites={dict(self.sites)})"


_COUNTERS: list = []  # the active counters (nested blocks each count)
# CuPy functions that wait for the device to size or return their result; wrapped while a counter is active
CUPY_SYNCING = ("nonzero", "flatnonzero", "argwhere", "asnumpy", "unique", "extract", "compress")


def note_host_sync(site: str) -> None:
    """Record one device->host synchronisation at ``site`` in every active :func:`count_host_syncs` block."""
    for c in _COUNTERS:
        c.note(site)


def host_bool(a, site: str = "host_bool") -> bool:
    """``bool(a)`` of a 0-d array (e.g. "has every trajectory converged?"): the sanctioned host decision, counted
    as a synchronisation when ``a`` lives on a device."""
    if is_device_array(a):
        note_host_sync(site)
    return bool(a)


def host_int(a, site: str = "host_int") -> int:
    """``int(a)`` of a 0-d array, counted as a synchronisation when ``a`` lives on a device."""
    if is_device_array(a):
        note_host_sync(site)
    return int(a)


def _wrap_cupy(cupy):
    """Replace CuPy's synchronising module functions by counting wrappers; returns the undo function."""
    saved = {}
    for name in CUPY_SYNCING:
        fn = getattr(cupy, name, None)
        if fn is None or getattr(fn, "_pbad_counting", False):
            continue

        def counting(*args, _fn=fn, _site=f"cupy.{name}", **kwargs):
            note_host_sync(_site)
            return _fn(*args, **kwargs)

        counting._pbad_counting = True
        saved[name] = fn
        setattr(cupy, name, counting)

    def undo():
        for name, fn in saved.items():
            setattr(cupy, name, fn)

    return undo


@contextlib.contextmanager
def count_host_syncs():
    """Count device->host synchronisations inside the block (a test hook)::

        with count_host_syncs() as syncs:
            sim.step(tau)
        assert syncs.count <= info["iterations"].max() + 1

    Counted: :func:`host_bool`, :func:`host_int` and :func:`to_numpy` on device arrays, and, when CuPy is
    imported, calls of its synchronising module functions (:data:`CUPY_SYNCING`) through the ``cupy`` module
    (``xp.nonzero(...)``). Not seen: implicit synchronisations on a CuPy array itself (``bool(a)``, ``int(a)``,
    ``a.item()``, ``a.get()``, boolean-mask indexing ``a[mask]``), which CuPy does not let Python intercept —
    engine code routes its host decisions through the helpers above so that they are counted. On NumPy arrays
    nothing synchronises and the count stays 0.
    """
    counter = HostSyncCounter()
    _COUNTERS.append(counter)
    cupy = sys.modules.get("cupy")
    undo = _wrap_cupy(cupy) if cupy is not None and len(_COUNTERS) == 1 else None
    try:
        yield counter
    finally:
        if undo is not None:
            undo()
        _COUNTERS.remove(counter)


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def to_torch(a):
    """Zero-copy view of a NumPy / CuPy array as a torch tensor on the same device (DLPack; NumPy through
    ``torch.from_numpy``, which also takes the dtypes DLPack export refuses, such as read-only arrays)."""
    import torch

    if isinstance(a, torch.Tensor):
        return a
    if isinstance(a, (np.ndarray, np.generic)):
        a = np.asarray(a)
        if not a.flags.writeable:  # torch tensors are writable: a read-only array is copied (torch would warn)
            a = a.copy()
        return torch.from_numpy(a)
    return torch.from_dlpack(a)


def to_cupy(a):
    """``a`` as a CuPy array: zero copy from a CUDA torch tensor or a CuPy array (DLPack), one host->device copy
    from NumPy or a CPU tensor."""
    import cupy

    if isinstance(a, cupy.ndarray):
        return a
    if type(a).__module__.startswith("torch"):
        if a.device.type == "cpu":
            return cupy.asarray(a.detach().numpy())
        return cupy.from_dlpack(a.detach())
    return cupy.asarray(a)


def check_array_type(array_type) -> str:
    """Validate ``array_type`` ("numpy", "cupy" or "torch") and that its library imports: ValueError naming
    array_type and the accepted values, RuntimeError naming the missing library and how to install it."""
    if not isinstance(array_type, str) or array_type not in ARRAY_TYPES:
        raise ValueError(f"array_type must be one of {ARRAY_TYPES}, got {array_type!r}")
    if array_type == "cupy":
        try:
            import cupy  # noqa: F401
        except ImportError as err:
            raise RuntimeError("array_type='cupy' needs CuPy and a CUDA device: pip install 'pbad_gym[gpu]' "
                               "(or cupy-cuda12x / cupy-cuda13x matching the driver)") from err
    elif array_type == "torch":
        try:
            import torch  # noqa: F401
        except ImportError as err:
            raise RuntimeError("array_type='torch' needs PyTorch: pip install 'pbad_gym[rl]'") from err
    return array_type


def as_array_type(a, array_type: str):
    """``a`` (NumPy or CuPy array, or torch tensor) as ``array_type``: torch and CuPy views share memory with
    ``a`` where DLPack allows (same device); "numpy" makes a host copy of device data."""
    if array_type == "numpy":
        return to_numpy(a)
    if array_type == "torch":
        return to_torch(a)
    if array_type == "cupy":
        return to_cupy(a)
    raise ValueError(f"array_type must be one of {ARRAY_TYPES}, got {array_type!r}")


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
