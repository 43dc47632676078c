"""A census of the CUDA runtime calls that block the host, through CUPTI's callback API (ctypes; GPU machines).

:func:`pbad_gym.arrays.count_host_syncs` counts the synchronisations that go through the package's helpers and
CuPy's module functions; it cannot see ``bool(a)``, ``a.item()`` or boolean-mask indexing on a CuPy array. This
helper sees them where they end: CuPy reads device data with ``cudaMemcpy`` (and ``cudaStreamSynchronize`` after
asynchronous copies). It is a measurement for the GPU tests, used only where libcupti loads; every failure to set
it up raises :class:`CuptiUnavailable`.

    with RuntimeCalls() as calls:
        sim.step(tau)
    calls.blocking      # number of blocking runtime calls
    calls.names         # Counter of every runtime API call seen, by name
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from collections import Counter

RUNTIME_API = 2  # CUpti_CallbackDomain CUPTI_CB_DOMAIN_RUNTIME_API
API_ENTER = 0  # CUpti_ApiCallbackSite CUPTI_API_ENTER
# runtime calls that return only after the device caught up (cudaMemcpy is synchronous for every direction but
# device to device; CuPy's host reads use it or an async copy followed by cudaStreamSynchronize)
BLOCKING = ("cudaMemcpy", "cudaMemcpy2D", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
            "cudaStreamQuery")
MEMCPY_KINDS = {0: "HostToHost", 1: "HostToDevice", 2: "DeviceToHost", 3: "DeviceToDevice", 4: "Default"}


class CuptiUnavailable(RuntimeError):
    pass


class _CallbackData(ctypes.Structure):  # the head of CUpti_CallbackData
    _fields_ = [("callbackSite", ctypes.c_int), ("functionName", ctypes.c_char_p),
                ("functionParams", ctypes.c_void_p)]


_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)


def _candidates():
    env = os.environ.get("PBAD_CUPTI")
    if env:
        yield env
    for base in sys.path:
        for pattern in ("nvidia/*/lib/libcupti.so*", "nvidia/cuda_cupti/lib/libcupti.so*", "nvidia/lib/libcupti.so*"):
            yield from sorted(glob.glob(os.path.join(base, pattern)), reverse=True)
    for pattern in ("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*", "/usr/local/cuda*/lib64/libcupti.so*"):
        yield from sorted(glob.glob(pattern), reverse=True)
    found = ctypes.util.find_library("cupti")
    if found:
        yield found


def load_cupti():
    """The CUPTI shared library (ctypes.CDLL), or CuptiUnavailable."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), _CALLBACK, ctypes.c_void_p]
            lib.cuptiEnableDomain.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int]
            lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
            return lib
        except (OSError, AttributeError) as err:
            errors.append(f"{path}: {err}")
    raise CuptiUnavailable("libcupti not found or not loadable" + (f" ({'; '.join(errors[:3])})" if errors else ""))


class RuntimeCalls:
    """Context manager: every CUDA runtime API call entered inside the block, by name, and the blocking ones."""

    def __init__(self):
        self.names = Counter()
        self.copies = Counter()  # cudaMemcpy by kind
        self._lib = load_cupti()
        self._handle = ctypes.c_void_p()
        self._cb = _CALLBACK(self._on_call)

    @property
    def blocking(self) -> int:
        return sum(n for name, n in self.names.items() if name.split("_v")[0] in BLOCKING)

    def _on_call(self, userdata, domain, cbid, data):
        try:
            d = ctypes.cast(data, ctypes.POINTER(_CallbackData)).contents
            if d.callbackSite != API_ENTER:
                return
            name = (d.functionName or b"?").decode()
            self.names[name] += 1
            if name.split("_v")[0] == "cudaMemcpy" and d.functionParams:
                # cudaMemcpy_v3020_params: void *dst; const void *src; size_t count; enum cudaMemcpyKind kind
                kind = ctypes.cast(d.functionParams + 3 * ctypes.sizeof(ctypes.c_void_p),
                                   ctypes.POINTER(ctypes.c_int)).contents.value
                self.copies[MEMCPY_KINDS.get(kind, str(kind))] += 1
        except Exception:  # noqa: BLE001 - never raise into the CUDA runtime
            self.names["<callback error>"] += 1

    def __enter__(self):
        lib = self._lib
        res = lib.cuptiSubscribe(ctypes.byref(self._handle), self._cb, None)
        if res != 0:
            raise CuptiUnavailable(f"cuptiSubscribe returned {res} (another profiler subscribed?)")
        res = lib.cuptiEnableDomain(1, self._handle, RUNTIME_API)
        if res != 0:
            lib.cuptiUnsubscribe(self._handle)
            raise CuptiUnavailable(f"cuptiEnableDomain returned {res}")
        return self

    def __exit__(self, *exc):
        self._lib.cuptiUnsubscribe(self._handle)
        return False

    def __repr__(self):
        return f"RuntimeCalls(blocking={self.blocking}, copies={dict(self.copies)}, names={dict(self.names)})"
