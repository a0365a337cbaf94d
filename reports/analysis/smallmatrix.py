"""Small dense matrices as lists (a handful of probe kinds): solve, inverse, symmetric eigen.

The reports never import numpy (they read JSON only, DESIGN §1); the timing model's matrices
are as wide as the probe kinds, two to four.

Deliberately not here: what the matrices mean (`timing_model`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Matrix = list[list[float]]


def solve(a: Sequence[Sequence[float]], b: Sequence[float]) -> list[float] | None:
    """x with a x = b (Gauss-Jordan with partial pivoting); None when a is singular."""
    n = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def symmetric_eigen(a: Sequence[Sequence[float]]) -> tuple[list[float], Matrix]:
    """Eigenvalues and eigenvectors (the columns) of a small symmetric matrix, by Jacobi
    rotations."""
    n = len(a)
    m = [list(row) for row in a]
    v = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
    for _ in range(100):
        pairs = [(abs(m[i][j]), i, j) for i in range(n) for j in range(i + 1, n)]
        if not pairs:
            break
        size, p, q = max(pairs)
        if size <= 1e-15 * max(1e-300, *(abs(m[i][i]) for i in range(n))):
            break
        theta = 0.5 * math.atan2(2.0 * m[p][q], m[q][q] - m[p][p])
        c, s = math.cos(theta), math.sin(theta)
        for k in range(n):
            m[k][p], m[k][q] = c * m[k][p] - s * m[k][q], s * m[k][p] + c * m[k][q]
        for k in range(n):
            m[p][k], m[q][k] = c * m[p][k] - s * m[q][k], s * m[p][k] + c * m[q][k]
        for k in range(n):
            v[k][p], v[k][q] = c * v[k][p] - s * v[k][q], s * v[k][p] + c * v[k][q]
    return [m[i][i] for i in range(n)], v


def quad(v: Sequence[float], m: Sequence[Sequence[float]]) -> float:
    """v' m v."""
    return sum(v[i] * m[i][j] * v[j] for i in range(len(v)) for j in range(len(v)))
