"""Whether the fused GPU kernel can run here, and on what: a CUDA device through numba.cuda, or numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1`` in the environment before numba is imported: the kernel then runs as plain
Python on NumPy arrays, for tests on machines without a GPU)."""
from __future__ import annotations


def simulated() -> bool:
    """True when numba's CUDA simulator stands in for a device (NUMBA_ENABLE_CUDASIM=1)."""
    try:
        from numba.core import config
    except ImportError:
        return False
    return bool(config.ENABLE_CUDASIM)


def unavailable_reason(device: str):
    """None when the fused kernel can run for Simulator(device=device), else a one-line reason (for a ValueError):
    a real device needs device="cuda" and a numba.cuda that sees it; the simulator needs device="cpu" (its arrays
    are NumPy)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return "backend='cuda' needs numba with its CUDA target: pip install numba numba-cuda"
    if simulated():
        if device != "cpu":
            return ("backend='cuda' under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) runs on NumPy arrays: "
                    f"it needs device='cpu', got device={device!r}")
        return None
    if device != "cuda":
        return f"backend='cuda' is the fused GPU kernel: it needs device='cuda', got device={device!r}"
    try:
        from numba import cuda

        if cuda.is_available():
            return None
        why = "numba.cuda sees no CUDA device"
    except Exception as err:  # noqa: BLE001 - any import or driver failure means: not usable
        why = f"numba.cuda does not load ({type(err).__name__}: {err})"
    return f"backend='cuda' needs numba.cuda with a CUDA device: {why} (pip install 'numba-cuda[cu12]')"
