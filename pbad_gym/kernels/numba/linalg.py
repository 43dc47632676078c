"""The damped Newton system's solve: Cholesky, LU with partial pivoting when the exact Hessian makes it
indefinite (as LAPACK's solve would)."""
from __future__ import annotations

import math

from .jit import jitable


@jitable
def solve_damped(H, D, mu, g, A, dx, piv):
    """dx = −(H + μ·diag(D))⁻¹ g by Cholesky (A's lower triangle then holds the factor; returns 1), or LU with
    partial pivoting when the matrix is not positive definite (returns 2); returns 0 when it is singular."""
    n = g.shape[0]
    for i in range(n):
        for j in range(n):
            A[i, j] = H[i, j]
        A[i, i] += mu * D[i]
    spd = True
    for j in range(n):  # Cholesky, lower triangle in place
        s = A[j, j]
        for k in range(j):
            s -= A[j, k] * A[j, k]
        if not s > 0.0:
            spd = False
            break
        s = math.sqrt(s)
        A[j, j] = s
        # column j below the diagonal, and the forward solve's dx[j] (L dx = −g, the row an augmented column −g
        # would add to L), two at a time: two independent chains of additions, each in its own order, where one
        # after the other each waited on its own
        i = j + 1
        while i + 1 < n:
            x0, x1 = A[i, j], A[i + 1, j]
            for k in range(j):
                ajk = A[j, k]
                x0 -= A[i, k] * ajk
                x1 -= A[i + 1, k] * ajk
            A[i, j], A[i + 1, j] = x0 / s, x1 / s
            i += 2
        y = -g[j]
        if i < n:
            x = A[i, j]
            for k in range(j):
                ajk = A[j, k]
                x -= A[i, k] * ajk
                y -= ajk * dx[k]
            A[i, j] = x / s
        else:
            for k in range(j):
                y -= A[j, k] * dx[k]
        dx[j] = y / s
    if spd:
        for i in range(n - 1, -1, -1):
            x = dx[i]
            for k in range(i + 1, n):
                x -= A[k, i] * dx[k]
            dx[i] = x / A[i, i]
        return 1
    return 2 if solve_lu(H, D, mu, g, A, dx, piv) else 0


@jitable
def solve_lu(H, D, mu, g, A, dx, piv):
    """dx = −(H + μ·diag(D))⁻¹ g by LU with partial pivoting (H need not be symmetric: the adjoint's coupled
    system); returns False when the matrix is singular."""
    n = g.shape[0]
    for i in range(n):
        for j in range(n):
            A[i, j] = H[i, j]
        A[i, i] += mu * D[i]
        dx[i] = -g[i]
        piv[i] = i
    for j in range(n):
        p = j
        big = abs(A[j, j])
        for i in range(j + 1, n):
            if abs(A[i, j]) > big:
                big, p = abs(A[i, j]), i
        if big == 0.0:
            return False
        if p != j:
            for k in range(n):
                A[j, k], A[p, k] = A[p, k], A[j, k]
            dx[j], dx[p] = dx[p], dx[j]
        for i in range(j + 1, n):
            r = A[i, j] / A[j, j]
            if r != 0.0:
                for k in range(j, n):
                    A[i, k] -= r * A[j, k]
                dx[i] -= r * dx[j]
    for i in range(n - 1, -1, -1):
        x = dx[i]
        for k in range(i + 1, n):
            x -= A[i, k] * dx[k]
        dx[i] = x / A[i, i]
    return True


@jitable
def _damped_step(H, D, mu, g, A, dx, piv):
    """:func:`solve_damped`'s code (1 Cholesky, 2 LU), and 0 unless the step is finite as well."""
    code = solve_damped(H, D, mu, g, A, dx, piv)
    if code != 0:
        for j in range(dx.shape[0]):
            if not math.isfinite(dx[j]):
                return 0
    return code


@jitable
def chord_solve(A, g, dx):
    """dx = −(L Lᵀ)⁻¹ g with a Cholesky factor L in A's lower triangle (:func:`solve_damped`'s, kept from an
    earlier solve); returns False unless dx is finite."""
    n = g.shape[0]
    for j in range(n):
        y = -g[j]
        for k in range(j):
            y -= A[j, k] * dx[k]
        dx[j] = y / A[j, j]
    for i in range(n - 1, -1, -1):
        x = dx[i]
        for k in range(i + 1, n):
            x -= A[k, i] * dx[k]
        dx[i] = x / A[i, i]
    for j in range(n):
        if not math.isfinite(dx[j]):
            return False
    return True


@jitable
def _length2(dx, D):
    """The step's squared D-norm Σ_j D_j dx_j²."""
    out = 0.0
    for j in range(dx.shape[0]):
        out += D[j] * dx[j] * dx[j]
    return out


@jitable
def _measure(g, D):
    out = 0.0
    for j in range(g.shape[0]):
        out = max(out, abs(g[j]) / D[j])
    return out

