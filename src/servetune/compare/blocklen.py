"""How long a bootstrap block must be: Politis & White's automatic selection.

Requests that share a server share its state over time (a queue that builds up makes the next
hundred requests slow together), so resampling single requests understates the noise. A block
bootstrap resamples time-contiguous blocks instead; the block must outlast the correlation.
The length is chosen from the data (Politis & White 2004, corrected by Patton, Politis & White
2009) for the circular block bootstrap::

    m̂  = the smallest lag after which K_N = max(5, ⌈√log10 n⌉) autocorrelations in a row stay
          below c·√(log10 n / n), c = 2;  M = 2·m̂
    λ(t) = 1 (|t| ≤ ½), 2(1 − |t|) (½ < |t| ≤ 1), 0 beyond     (flat-top lag window)
    G   = Σ_{|k| ≤ M} λ(k/M)·|k|·R(k),    g0 = Σ_{|k| ≤ M} λ(k/M)·R(k)
    b   = (2·G² / ((4/3)·g0²))^{1/3} · n^{1/3}

with R(k) the sample autocovariance of the series.
"""

from __future__ import annotations

import math

import numpy as np


def _flat_top(t: np.ndarray) -> np.ndarray:
    a = np.abs(t)
    return np.where(a <= 0.5, 1.0, np.where(a <= 1.0, 2.0 * (1.0 - a), 0.0))


def optimal_block_length(x: np.ndarray, max_fraction: float = 0.25) -> float:
    """Block length (in elements of ``x``) for the circular block bootstrap of its mean;
    1.0 for a series too short or too flat to tell, at most ``max_fraction`` of its length."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    n = x.size
    if n < 8:
        return 1.0
    xc = x - x.mean()
    var = float(np.dot(xc, xc)) / n
    if var <= 0.0:
        return 1.0
    max_lag = min(n - 1, math.ceil(min(3.0 * math.sqrt(n), n / 3.0)) + 10)
    acov = np.array([float(np.dot(xc[: n - k], xc[k:])) / n for k in range(max_lag + 1)])
    rho = acov / var
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    threshold = 2.0 * math.sqrt(math.log10(n) / n)
    m_hat = max_lag - kn
    for m in range(1, max_lag - kn + 1):
        if np.all(np.abs(rho[m : m + kn]) < threshold):
            m_hat = m - 1
            break
    big_m = min(2 * max(m_hat, 1), max_lag)
    lags = np.arange(-big_m, big_m + 1)
    lam = _flat_top(lags / big_m)
    r = acov[np.abs(lags)]
    g = float(np.sum(lam * np.abs(lags) * r))
    g0 = float(np.sum(lam * r))
    if g0 <= 0.0 or g == 0.0:
        return 1.0
    d = (4.0 / 3.0) * g0 * g0
    b = (2.0 * g * g / d) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return float(min(max(b, 1.0), max(1.0, max_fraction * n)))
