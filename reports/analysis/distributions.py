"""Student's t and normal distribution functions in pure Python (no numpy, no scipy).

The reports package must install with jinja2 alone, so the two distributions the analysis needs
are written here: the t CDF through the regularized incomplete beta function (Lentz's continued
fraction, as in Numerical Recipes §6.4) and its quantile by bisection. Accuracy is ~1e-10, far
below what a regression gate can notice. `df = math.inf` means the normal distribution.

The power of the one-sided t test (`noncentral_t_sf`, the noncentral t upper tail) is an
integral of the normal CDF over the chi distribution of the estimated scale (Simpson's rule on
2,000 panels); accurate to ~1e-6, which is ample for an MDE.

It deliberately implements nothing else.
"""

from __future__ import annotations

import math
from functools import lru_cache

_EPS = 1e-15
_TINY = 1e-300


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(log_front + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def normal_cdf(z: float) -> float:
    """Standard normal CDF."""
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def t_sf_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom (df = inf: normal)."""
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0
    if math.isinf(df):
        return 2.0 * normal_cdf(-abs(t))
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * t_sf_two_sided(t, df)
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Quantile: the t with P(T <= t) = p, for 0 < p < 1 (bisection to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_ppf needs 0 < p < 1, got {p}")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def noncentral_t_sf(x: float, df: float, ncp: float) -> float:
    """P(T' > x) for the noncentral t with `df` degrees of freedom and noncentrality `ncp`.

    T' = (Z + ncp) / S with S = sqrt(V / df), V ~ chi^2(df): P(T' > x) = E_S[Phi(ncp - x S)].
    The expectation is integrated over the density of S (Simpson's rule); df = inf is the
    shifted normal, 1 - Phi(x - ncp).
    """
    if math.isinf(df) or df > 1e6:
        return normal_cdf(ncp - x)
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
    half = df / 2.0
    # log density of S: log 2 + half*log(half) - lgamma(half) + (df-1) log s - half s^2
    log_front = math.log(2.0) + half * math.log(half) - math.lgamma(half)
    sd = 1.0 / math.sqrt(2.0 * df)  # S's standard deviation, asymptotically
    s_min = max(0.0, 1.0 - 14.0 * sd)  # the lower tail of chi is light: 14 SDs hold all of it
    s_max = 1.0 + 20.0 * sd + (2.0 if df < 4 else 0.0)  # its upper tail is heavier at small df
    panels = 600  # Simpson on a smooth integrand: ~1e-8 against 2,000 panels
    step = (s_max - s_min) / panels
    total = 0.0
    for i in range(panels + 1):
        s = s_min + i * step
        if s <= 0.0:
            continue  # the density vanishes at 0 for df > 1 and is integrable for df <= 1
        dens = math.exp(log_front + (df - 1.0) * math.log(s) - half * s * s)
        weight = 1.0 if i in (0, panels) else (4.0 if i % 2 else 2.0)
        total += weight * dens * normal_cdf(ncp - x * s)
    return min(1.0, max(0.0, total * step / 3.0))


@lru_cache(maxsize=4096)
def noncentral_t_ncp_for_power(x: float, df: float, power: float) -> float:
    """The noncentrality at which P(T' > x) = power (to 1e-9).

    Secant steps from Johnson's normal approximation `x (1 - 1/(4 df)) + z_power sqrt(1 +
    x^2 / (2 df))` (a handful of integrals), bisection when they do not settle.
    """
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    if math.isinf(df) or df > 1e6:
        return x + _normal_ppf(power)
    a = x * (1.0 - 1.0 / (4.0 * df)) + _normal_ppf(power) * math.sqrt(1.0 + x * x / (2.0 * df))
    b = a + 0.05
    fa, fb = noncentral_t_sf(x, df, a) - power, noncentral_t_sf(x, df, b) - power
    for _ in range(12):
        if abs(fb) < 1e-10 or fb == fa:
            break
        a, b, fa = b, b - fb * (b - a) / (fb - fa), fb
        fb = noncentral_t_sf(x, df, b) - power
    if abs(fb) < 1e-7:
        return b
    lo, hi = x - 10.0, x + 10.0
    for _ in range(60):  # widen until the power is reached (bounded: tiny df needs huge ncp)
        if noncentral_t_sf(x, df, hi) >= power:
            break
        lo, hi = hi, hi * 2.0 + 10.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if noncentral_t_sf(x, df, mid) < power:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return 0.5 * (lo + hi)


def _normal_ppf(p: float) -> float:
    return t_ppf(p, math.inf)
