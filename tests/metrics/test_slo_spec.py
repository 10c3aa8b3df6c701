"""One SLO syntax for tune and plan (metrics/slo_spec.py)."""

from __future__ import annotations

import pytest

from servetune.errors import ConfigError
from servetune.metrics.slo_spec import p99_slo, parse_slos
from servetune.results.schema import Slo


def test_both_forms_read_the_same() -> None:
    a = parse_slos(["ttft:p99<=500", "tpot:p99<50", "e2el:10000"])
    b = parse_slos(["ttft:500,tpot:50", "e2el:p99<=10000ms"])
    assert a == b
    assert p99_slo(a) == Slo(ttft=500, tpot=50, e2el=10000)


@pytest.mark.parametrize("text", ["ttft:p50<=100", "itl:p99<=50", "tpot:mean<=20"])
def test_what_a_p99_judge_cannot_hold_is_refused_by_name(text: str) -> None:
    with pytest.raises(ConfigError, match="P99 TTFT, TPOT and E2E only"):
        p99_slo(parse_slos([text]))


@pytest.mark.parametrize("text", ["ttft", "ttft:fast", "queue:p99<=5", "ttft:p42<=5", "ttft:0"])
def test_bad_slos_say_what_is_wrong(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_slos([text])
