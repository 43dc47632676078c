"""How the kernel's functions are compiled and cached.

Every helper is a ``register_jitable`` function (:data:`jitable`): it compiles into the entry points that call it
(kernels/numba/batch.py, and on the GPU kernels/cuda/kernel.py), so one entry is one cache entry and one fast load,
and no helper pays a CPython wrapper. numba keys an entry's on-disk cache on the source of the file that defines
the entry alone; the helpers live in other files (one per reference module), so :class:`PackageLocator` keys every
cached function of this package on a hash of all the source files it compiles in instead: an edit of any helper,
or of a constant imported from the NumPy engine, recompiles the entries.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from numba.core.caching import CacheImpl, InTreeCacheLocator, UserProvidedCacheLocator, UserWideCacheLocator
from numba.extending import overload, register_jitable


def _with_cpu_overload(fn, **overload_options):
    """``register_jitable(fn)`` (the generic overload, the one CUDA compiles) and a CPU-specific overload of ``fn``
    with ``overload_options`` (numba picks the CPU-specific overload over the generic one on the CPU)."""
    register_jitable(fn)

    @overload(fn, target="cpu", strict=False, **overload_options)
    def _on_cpu(*args, **kwargs):
        return fn

    return fn


def jitable(fn):
    """``register_jitable``, and on the CPU an overload compiled with ``forceinline`` stated off: numba passes that
    flag down the call tree to every helper first compiled under a caller that has it, so without this every helper
    of an :func:`inlined_by_llvm` caller would be inlined too, the whole step flattened at each of its call sites
    (measured: the step entry's first compile took 75 s instead of 55 s, the default test suite 136 s longer, for
    5–8 % more speed)."""
    return _with_cpu_overload(fn, jit_options={"forceinline": False})


def inlined(fn):
    """A helper, and on the CPU inlined into every caller in numba's IR (``inline="always"``): for the
    helpers that take the BodyArrays or StepConstants and run once per energy evaluation, where a call that stays a
    call passes every field of those NamedTuples (about 70 arrays): inlining these four took a 10-link chain's
    physics step from 7.0 to 6.2 µs and Spider-v3's from 13.2 to 11.6 µs (one thread, bit-identical). Small
    helpers only: inlining every helper made the CPU compile take over ten minutes. The CUDA target keeps the call
    (its typing rejects the inlined IR)."""
    return _with_cpu_overload(fn, inline="always")


def inlined_by_llvm(fn):
    """A helper, and on the CPU marked ``alwaysinline`` for LLVM (numba's ``forceinline``): for the helpers that
    take the BodyArrays, StepConstants or a scratch set and run once or a few times per step (the row's step, its
    preparation, warm start and chord trial, the energy and gradient, forward kinematics, the Hessian); their own
    helpers are :func:`jitable` calls. numba passes a NamedTuple argument field by field and an array as its seven
    to eleven words, so a call of one of these moved 390 to 1,050 scalar arguments through the stack (1,200–2,000
    stores at each call site of the row loop): inlined, a 10-link chain's physics step went from 7.9 to about 4 µs
    (one thread, same arithmetic). Unlike :func:`inlined` this inlines the compiled code, not numba's IR, so it
    works for helpers with any control flow, and it costs LLVM time only. The CUDA target keeps the calls."""
    return _with_cpu_overload(fn, jit_options={"forceinline": True})


_HERE = Path(__file__).resolve().parent
# the files whose source the compiled code depends on: this package and the NumPy modules it imports constants from
_SOURCES = (_HERE, _HERE.parent.parent / "optim" / "lm.py", _HERE.parent.parent / "model" / "joints.py",
            _HERE.parent.parent / "model" / "body_arrays.py", _HERE.parent.parent / "integrators" / "newton.py",
            _HERE.parent.parent / "integrators" / "bdf2.py")


@functools.lru_cache(maxsize=None)
def source_hash() -> bytes:
    """sha256 over the kernel's source files (sorted by path), computed once per process."""
    h = hashlib.sha256()
    for src in _SOURCES:
        for path in sorted(src.rglob("*.py")) if src.is_dir() else [src]:
            h.update(str(path.relative_to(_HERE.parent.parent)).encode())
            h.update(path.read_bytes())
    return h.digest()


class _PackageStamp:
    """Mixin for numba's cache locators: stamp entries with :func:`source_hash` (numba's own stamp is the defining
    file's mtime and size, blind to the helpers in other files); decline functions defined outside this package, so
    numba asks its next locator."""

    def get_source_stamp(self):
        return source_hash()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not py_file or not os.path.exists(py_file) or Path(py_file).resolve().parent != _HERE:
            return None
        return super().from_function(py_func, py_file)


# numba's own order, each stamped: NUMBA_CACHE_DIR when set, else __pycache__ beside the file when writable, else the
# user-wide cache (a read-only install)
class PackageUserProvidedLocator(_PackageStamp, UserProvidedCacheLocator):
    pass


class PackageLocator(_PackageStamp, InTreeCacheLocator):
    pass


class PackageUserWideLocator(_PackageStamp, UserWideCacheLocator):
    pass


PACKAGE_LOCATORS = (PackageUserProvidedLocator, PackageLocator, PackageUserWideLocator)
if PACKAGE_LOCATORS[0] not in CacheImpl._locator_classes:
    CacheImpl._locator_classes[:0] = PACKAGE_LOCATORS


def _row_loop_options():
    """njit options of the loops that run rows on preallocated scratch: no reference counting (numba's private
    ``_nrt`` target option — nothing there allocates, and the counts' atomic traffic on every helper call's array
    arguments cost two thirds of an energy-and-gradient evaluation; where a numba lacks the option the loops
    compile with counting: the same numbers, about half the speed) and IEEE division (``error_model="numpy"``:
    no ZeroDivisionError branches; a division by zero gives inf or NaN, which the LM's finite test and the
    divergence guard catch, as in NumPy's reference)."""
    from numba.core.cpu import CPUTargetOptions

    options = dict(cache=True, nogil=True, error_model="numpy")
    if hasattr(CPUTargetOptions, "_nrt"):
        options["_nrt"] = False
    return options


ROW_LOOP_OPTIONS = _row_loop_options()
