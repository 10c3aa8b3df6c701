"""The one assembly of run.json: what every kind of run records the same way."""

from __future__ import annotations

from servetune.metrics.run_result import run_result, run_summary
from servetune.metrics.summary import METRIC_DEFINITIONS
from servetune.results.environment import this_machine
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, ClientHealth, TargetInfo

MS = 1_000_000


def record(i: int, send_ms: float) -> RequestRecord:
    t = int(send_ms * MS)
    return RequestRecord(
        id=i,
        status="ok",
        scheduled_ns=t,
        eligible_ns=t,
        send_ns=t,
        first_ns=t + 50 * MS,
        last_ns=t + 100 * MS,
        end_ns=t + 100 * MS,
        planned_input_len=10,
        prompt_tokens=10,
        output_tokens=5,
        chunk_ns=[t + 50 * MS + k * 10 * MS for k in range(5)],
    )


def test_label_key_definitions_and_warnings() -> None:
    cfg = BenchConfig(api_key="sk-secret", label="canary", warmup_s=1.0)
    records = [record(i, 500.0 * i) for i in range(10)]
    health = ClientHealth(warnings=["client behind"])
    result = run_result(
        cfg,
        run_summary(records, cfg),
        environment=this_machine(),
        target=TargetInfo(base_url="http://127.0.0.1:1/v1", model="m"),
        health=health,
        status="interrupted",
        warnings=["prompt lengths are approximate"],
    )
    assert result.label == "canary" and result.status == "interrupted"
    assert result.config.api_key is None and cfg.api_key == "sk-secret"
    assert result.metric_definitions == METRIC_DEFINITIONS
    assert result.warnings == ["client behind", "prompt lengths are approximate"]
    # the summary is over the configured window: the first second (2 requests) is warm-up
    assert result.summary.excluded == 2 and result.summary.completed == 8
