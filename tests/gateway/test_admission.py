"""Admission at the knee: the limit from a sweep, tightened on the engine's live signals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from harness import client, complete, gateway_config, running, sim

from servetune.errors import ConfigError
from servetune.gateway.admission import comfortable_concurrency, next_limit
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import Knee, SweepConfig, SweepResult, write_sweep_result


def a_sweep(tmp: Path, knee: Knee | None) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    write_sweep_result(
        tmp,
        SweepResult(
            created_at="t", updated_at="t", config=SweepConfig(bench=BenchConfig()), knee=knee
        ),
    )
    return tmp


def test_limit_from_the_sweeps_knee(tmp_path: Path) -> None:
    knee = Knee(status="found", method="m", k=2.0, concurrency=12.7, throughput=40.0)
    limit, why = comfortable_concurrency(a_sweep(tmp_path, knee))
    assert limit == 12 and "Little's law" in why
    knee = Knee(status="found", method="m", k=2.0, concurrency_client=5.2)
    assert comfortable_concurrency(a_sweep(tmp_path, knee))[0] == 5


def test_sweep_without_a_knee_is_refused(tmp_path: Path) -> None:
    knee = Knee(status="above_range", method="m", k=2.0, verdict="the sweep never saturated")
    with pytest.raises(ConfigError, match="never saturated"):
        comfortable_concurrency(a_sweep(tmp_path, knee))
    with pytest.raises(ConfigError, match="not found"):
        comfortable_concurrency(tmp_path / "nowhere")


def test_gateway_takes_its_limit_from_the_sweep(tmp_path: Path) -> None:
    sweep = a_sweep(tmp_path / "sw", Knee(status="found", method="m", k=2.0, concurrency=6.4))
    cfg = gateway_config(
        tmp_path,
        groups=[{"name": "g", "urls": ["http://127.0.0.1:9/v1"], "from_sweep": str(sweep)}],
    )
    from servetune.gateway.app import Gateway

    gw = Gateway(cfg)
    assert gw.pools["g"].upstreams[0].limit == 6


def test_adaptive_rule() -> None:
    assert next_limit(8, 8, 8, waiting=3, kv=0.5) == 5  # the engine queues 3: hold them back
    assert next_limit(8, 8, 2, waiting=1, kv=0.5) == 1  # never below what runs minus waiting
    assert next_limit(5, 8, 5, waiting=0, kv=0.97) == 4  # KV nearly full
    assert next_limit(5, 8, 5, waiting=0, kv=0.5) == 6  # all clear: additive increase
    assert next_limit(8, 8, 8, waiting=0, kv=0.5) == 8  # never above the configured limit
    assert next_limit(5, 8, 5, waiting=0, kv=0.9) == 5  # between the marks: hold


def test_limit_tightens_on_the_engines_waiting_queue(tmp_path: Path) -> None:
    """The engine runs 2 at a time; the gateway was told 16: its queue makes the gateway hold
    requests back (they wait in the gateway's fair queue instead of the engine's)."""
    engine = sim(max_num_seqs=2)
    try:

        async def main() -> tuple[int | None, int]:
            cfg = gateway_config(
                tmp_path,
                groups=[{"name": "g", "urls": [engine.base_url], "max_concurrency": 16}],
                metrics_interval_s=0.2,
            )
            async with running(cfg) as gw, client() as s:
                u = gw.pools["g"].upstreams[0]
                load = [asyncio.create_task(complete(s, gw, max_tokens=150)) for _ in range(8)]
                lowest = u.limit
                for _ in range(100):
                    await asyncio.sleep(0.1)
                    lowest = min(lowest or 99, u.limit or 99)
                    if lowest <= 4:
                        break
                codes = [r[0] for r in await asyncio.gather(*load)]
                assert codes == [200] * 8
                return lowest, int(u.signals.get("waiting", -1))

        lowest, _waiting = asyncio.run(main())
        assert lowest is not None and lowest <= 4
    finally:
        engine.stop()
