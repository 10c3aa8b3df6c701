import math

import numpy as np
import pytest

from servetune.errors import ConfigError
from servetune.workload.arrivals import arrival_offsets

N = 20_000


def gaps(kind: str, rate: float, burst: float = 1.0, seed: int = 1) -> np.ndarray:
    return np.diff(arrival_offsets(kind, rate, N, seed, burst))  # type: ignore[arg-type]


@pytest.mark.parametrize("rate", [1.0, 32.0, 1000.0])
def test_poisson_rate_and_cv(rate: float) -> None:
    g = gaps("poisson", rate)
    # mean gap within 4 standard errors; an exponential's CV is 1
    assert abs(g.mean() - 1 / rate) < 4 * (1 / rate) / math.sqrt(N)
    assert 0.95 < g.std() / g.mean() < 1.05


@pytest.mark.parametrize("burst", [0.25, 0.5, 2.0, 4.0])
def test_gamma_burstiness_sets_cv(burst: float) -> None:
    g = gaps("gamma", 10.0, burst)
    cv_expected = 1 / math.sqrt(burst)
    assert abs(g.mean() - 0.1) < 4 * 0.1 * cv_expected / math.sqrt(N)
    assert abs(g.std() / g.mean() - cv_expected) < 0.06 * cv_expected


def test_constant_and_unbounded() -> None:
    g = gaps("constant", 4.0)
    assert np.allclose(g, 0.25)
    assert not arrival_offsets("poisson", math.inf, 10, 0).any()


def test_reproducible_and_seed_dependent() -> None:
    a = arrival_offsets("poisson", 5.0, 100, 7)
    assert np.array_equal(a, arrival_offsets("poisson", 5.0, 100, 7))
    assert not np.array_equal(a, arrival_offsets("poisson", 5.0, 100, 8))
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_non_positive_rate_is_refused(rate: float) -> None:
    with pytest.raises(ConfigError, match="must be > 0"):
        arrival_offsets("poisson", rate, 10, 0)
