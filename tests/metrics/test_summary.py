"""The summary against hand-computed figures and vLLM bench serve's formulas."""

import numpy as np
import pytest

from servetune.metrics.summary import summarize
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, Slo
from servetune.results.vllm_keys import vllm_keys

MS = 1_000_000


def rec(
    i: int,
    send: float,
    ttft: float,
    gaps: list[float],
    n: int | None = None,
    status: str = "ok",
    sched: float | None = None,
) -> RequestRecord:
    """A record from milliseconds: send time, TTFT and chunk gaps."""
    first = send + ttft
    chunks = [first]
    for g in gaps:
        chunks.append(chunks[-1] + g)
    return RequestRecord(
        id=i,
        status=status,
        scheduled_ns=int((send if sched is None else sched) * MS),
        eligible_ns=int((send if sched is None else sched) * MS),
        send_ns=int(send * MS),
        first_ns=int(first * MS),
        last_ns=int(chunks[-1] * MS),
        end_ns=int(chunks[-1] * MS) + 1,
        chunk_ns=[int(c * MS) for c in chunks],
        planned_input_len=100,
        planned_output_len=n,
        output_tokens=len(chunks) if n is None else n,
        tokens_source="usage",
    )


def test_hand_computed_summary() -> None:
    records = [
        rec(0, 0, 100, [10, 10, 10]),  # 4 tokens, e2e 130, tpot 10
        rec(1, 50, 200, [20, 40]),  # 3 tokens, e2e 260, tpot 30
        rec(2, 100, 50, [5, 5, 5, 5], n=9),  # 9 tokens in 5 chunks: tpot = 20/8
    ]
    s = summarize(records)
    assert s.completed == 3 and s.failed == 0
    assert s.duration_s == pytest.approx(0.310 + 1e-6, rel=1e-3)  # last end
    assert s.ttft.mean == pytest.approx((100 + 200 + 50) / 3)
    assert s.tpot.mean == pytest.approx((10 + 30 + 2.5) / 3)
    assert s.e2el.max == pytest.approx(260)
    pooled = [10, 10, 10, 20, 40, 5, 5, 5, 5]
    assert s.itl.count == 9 and s.itl.mean == pytest.approx(np.mean(pooled))
    assert s.itl.p99 == pytest.approx(np.percentile(pooled, 99))
    assert s.total_output_tokens == 16 and s.total_input_tokens == 300
    assert s.request_throughput == pytest.approx(3 / s.duration_s)
    assert s.max_concurrent_requests == 3


def test_tpot_matches_vllm_formula_and_single_token_has_none() -> None:
    r = rec(0, 0, 30, [7, 9, 11], n=4)
    assert r.tpot_ms == pytest.approx((r.e2e_ms - r.ttft_ms) / (4 - 1))
    one = rec(1, 0, 30, [], n=1)
    assert one.tpot_ms is None
    assert summarize([one]).tpot.count == 0


def test_goodput_counts_requests_meeting_every_slo() -> None:
    records = [rec(0, 0, 100, [10] * 3), rec(1, 0, 300, [10] * 3), rec(2, 0, 100, [60] * 3)]
    s = summarize(records, slo=Slo(ttft=200, tpot=50))
    assert s.good_requests == 1
    assert s.request_goodput == pytest.approx(1 / s.duration_s)
    # a request with one token meets any TPOT SLO (vLLM counts its TPOT as 0)
    assert summarize([rec(0, 0, 10, [], n=1)], slo=Slo(tpot=1)).good_requests == 1


def test_failed_and_cancelled_are_counted_not_measured() -> None:
    ok = rec(0, 0, 100, [10])
    bad = rec(1, 0, 100, [10], status="failed")
    cancel = rec(2, 0, 100, [10], status="cancelled")
    s = summarize([ok, bad, cancel])
    assert (s.completed, s.failed, s.cancelled) == (1, 1, 1)
    assert s.ttft.count == 1


def test_warmup_and_cooldown_windows_exclude_requests() -> None:
    records = [rec(i, i * 100, 10, [10]) for i in range(10)]  # sends 0..900 ms
    s = summarize(records, warmup_s=0.25, cooldown_s=0.2)
    # window [250, last_end − 200]: sends 300..700 → 5 requests in
    assert s.completed == 5 and s.excluded == 5
    assert s.window_start_s == pytest.approx(0.25)


def test_latency_from_scheduled_includes_client_queueing() -> None:
    r = rec(0, 40, 100, [10], sched=0)
    s = summarize([r])
    assert s.ttft.mean == pytest.approx(100)
    assert s.ttft_from_scheduled.mean == pytest.approx(140)


def test_p99_ci_brackets_the_estimate() -> None:
    rng = np.random.default_rng(0)
    records = [rec(i, 0, float(t), [1]) for i, t in enumerate(rng.exponential(100, 2000))]
    st = summarize(records).ttft
    assert st.p99_ci is not None
    lo, hi = st.p99_ci
    assert lo <= st.p99 <= hi and hi - lo < st.p99


def test_vllm_keys_are_flat_and_named_like_vllm() -> None:
    from servetune.metrics.client_health import client_health
    from servetune.metrics.run_result import run_result, run_summary
    from servetune.results.environment import this_machine
    from servetune.results.schema import TargetInfo

    records = [rec(i, i * 10, 50, [5, 5]) for i in range(20)]
    cfg = BenchConfig(request_rate=100)
    result = run_result(
        cfg,
        run_summary(records, cfg),
        environment=this_machine(),
        target=TargetInfo(base_url="http://x/v1", model="m"),
        health=client_health(records, 100, None, 1),
    )
    k = vllm_keys(result)
    for key in (
        "duration",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
        "request_goodput",
    ):
        assert key in k, key
    assert k["mean_ttft_ms"] == pytest.approx(50)
    assert k["mean_tpot_ms"] == pytest.approx(5)
    assert k["request_rate"] == 100


def test_large_sample_ci_uses_order_statistics_and_brackets_p99() -> None:
    from servetune.metrics.stats import describe

    rng = np.random.default_rng(1)
    vals = rng.lognormal(1.0, 0.5, 200_000)
    st = describe(vals)
    assert st.p99_ci is not None
    lo, hi = st.p99_ci
    assert lo < st.p99 < hi and (hi - lo) / st.p99 < 0.05


def test_only_the_servers_own_count_judges_an_output_short() -> None:
    """A short output is judged on the server's token count (usage) or the simulator's: a
    count of chunks undercounts, and a local tokenizer re-counting the text can merge tokens
    across the stream's pieces, so neither may call an output short (with --ignore-eos that
    would warn that the server ignores it)."""
    base = rec(0, 0, 10, [5] * 10)  # 11 chunks
    asked = {"planned_output_len": 12, "output_tokens": 11}
    usage = base.model_copy(update={**asked, "tokens_source": "usage"})
    counted = base.model_copy(update={**asked, "id": 1, "tokens_source": "tokenizer"})
    chunks = base.model_copy(update={**asked, "id": 2, "tokens_source": "chunks"})
    s = summarize([usage, counted, chunks])
    assert s.short_outputs == 1 and s.short_output_tokens == 1
