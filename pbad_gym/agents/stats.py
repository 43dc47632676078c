"""Running mean / variance statistics kept as (count, sum, sum of squares) in float64.

Kept as raw sums rather than Welford's (mean, M2) so that statistics gathered by separate workers merge by plain
addition and a saved state reproduces the normalisation exactly at evaluation time.
"""
from __future__ import annotations

import numpy as np

EPS = 1e-8


class RunningStats:
    """Per-component statistics of samples of shape ``shape``.

    ``update(x)`` takes a batch x of shape (n, *shape); ``mean``, ``var`` (population variance) and ``std``
    (sqrt(var + eps)) have shape ``shape``. With no samples the mean is 0 and the variance 1, so
    ``normalize`` is the identity (up to clipping) before the first update.
    """

    def __init__(self, shape=(), eps: float = EPS):
        self.shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        self.eps = float(eps)
        self.count = 0.0
        self.sum = np.zeros(self.shape, dtype=np.float64)
        self.sumsq = np.zeros(self.shape, dtype=np.float64)

    def update(self, x) -> None:
        """Add a batch x of shape (n, *shape)."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape[1:] != self.shape:
            raise ValueError(f"x must have shape (n, *{self.shape}), got {x.shape}")
        self.count += x.shape[0]
        self.sum += x.sum(axis=0)
        self.sumsq += np.square(x).sum(axis=0)

    def merge(self, other: "RunningStats") -> "RunningStats":
        """Add ``other``'s samples to these statistics (in place); returns self."""
        if other.shape != self.shape:
            raise ValueError(f"cannot merge statistics of shape {other.shape} into shape {self.shape}")
        self.count += other.count
        self.sum += other.sum
        self.sumsq += other.sumsq
        return self

    def __add__(self, other: "RunningStats") -> "RunningStats":
        return self.copy().merge(other)

    @property
    def mean(self) -> np.ndarray:
        if self.count == 0:
            return np.zeros(self.shape)
        return self.sum / self.count

    @property
    def var(self) -> np.ndarray:
        if self.count == 0:
            return np.ones(self.shape)
        # E[x²] − E[x]² can round slightly below 0 for near-constant components
        return np.maximum(self.sumsq / self.count - np.square(self.mean), 0.0)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var + self.eps)

    def normalize(self, x, clip: float | None = 10.0):
        """(x − mean) / std clipped to [−clip, clip] (no clipping when clip is None); same shape and dtype as x
        (float32 stays float32)."""
        x = np.asarray(x)
        dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
        y = (x - self.mean) / self.std
        if clip is not None:
            y = np.clip(y, -clip, clip)
        return y.astype(dtype, copy=False)

    def state_dict(self) -> dict:
        """Plain arrays (picklable, no class reference): count, sum, sumsq, eps."""
        return {"count": np.asarray(self.count, dtype=np.float64), "sum": self.sum.copy(),
                "sumsq": self.sumsq.copy(), "eps": np.asarray(self.eps)}

    @classmethod
    def from_state_dict(cls, d: dict) -> "RunningStats":
        s = cls(np.shape(d["sum"]), eps=float(d.get("eps", EPS)))
        s.count = float(d["count"])
        s.sum = np.array(d["sum"], dtype=np.float64)
        s.sumsq = np.array(d["sumsq"], dtype=np.float64)
        return s

    def copy(self) -> "RunningStats":
        return RunningStats.from_state_dict(self.state_dict())

    def __repr__(self):
        return f"RunningStats(shape={self.shape}, count={self.count:g})"
