"""A real queueing curve, and the seed's "change one knob at a time", on real engines.

With max_num_seqs (llama.cpp: -np) = 2 the engine runs two requests at once and queues the
rest. A rate sweep from well below to above its saturation throughput must show what the seed
says a knee looks like: the engine's own waiting gauge climbing, TTFT rising with rate, and a
knee found by servetune.sweep. Then raising the one knob to 8 must raise the saturation
throughput measurably, everything else unchanged.

The rates are fractions of the saturation throughput measured first (every request at once),
so the curve has the same shape on a fast or a loaded machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_engines import llama_serving, unexpected_failures, vllm_serving

from servetune.engines import EngineProcess, provisioned
from servetune.loadgen.bench import bench
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import LevelRow, SweepConfig, SweepResult
from servetune.sweep.runner import run_sweep
from servetune.sweep.targets import bench_runner

pytestmark = pytest.mark.real_engine

N = 32  # requests per level, at most
LEVEL_S = 10.0  # and at most this long: the low levels stop early
# Of the saturation throughput with 2 slots. It is measured on a busy 2-core box, within
# ±30%: the ends sit far enough out to be under- and over-loaded whatever the error.
FRACTIONS = (0.15, 0.5, 0.9, 1.4, 3.0)
# What "measurably raises" means, per engine: vLLM batches 8 decodes for little more than the
# cost of 2; llama.cpp on one thread gains less (its matmuls are compute-bound at batch 8).
GAIN = {"vllm-cpu": 1.5, "llama.cpp": 1.25}


def base_config(eng: EngineProcess, tiny: provisioned.TinyModel) -> BenchConfig:
    return BenchConfig(
        base_url=eng.base_url,
        model="tiny",
        random_input_len=64,
        random_output_len=64,
        num_prompts=N,
        # Evenly spaced arrivals: below saturation nothing waits, past it the queue grows —
        # the curve's shape comes from the engine, not from the burstiness of the arrivals.
        arrival="constant",
        tokenizer=str(tiny.hf_dir),
        seed=11,
        request_timeout_s=300.0,
    )


def saturation(engine: str, eng: EngineProcess, tiny: provisioned.TinyModel, out: Path) -> float:
    """Completed req/s with all N requests sent at once."""
    cfg = base_config(eng, tiny).model_copy(update={"request_rate": math.inf, "arrival": "poisson"})
    result = bench(cfg, out, progress=False, scrape_metrics=False)
    assert not unexpected_failures(out, engine)
    return result.summary.request_throughput


def sweep(eng: EngineProcess, tiny: provisioned.TinyModel, x_sat: float, out: Path) -> SweepResult:
    rates = [round(f * x_sat, 3) for f in FRACTIONS]
    base = base_config(eng, tiny).model_copy(update={"duration_s": LEVEL_S})
    config = SweepConfig(bench=base, mode="rate", request_rates=rates)
    runner = bench_runner(progress=False, metrics_interval_s=0.5)
    return run_sweep(config, out, runner, echo=lambda _line: None)


def describe(rows: list[LevelRow]) -> str:
    return "; ".join(
        f"{r.label}: {r.request_throughput:.2f} req/s, TTFT p50 {r.ttft_p50:.0f} ms, "
        f"waiting mean {r.server.waiting_mean if r.server else None}"
        for r in rows
    )


def check_curve(engine: str, result: SweepResult, x_sat: float, sweep_dir: Path) -> None:
    rows = result.measured_rows()
    assert len(rows) == len(FRACTIONS)
    for r in rows:
        assert not unexpected_failures(sweep_dir / r.level_dir, engine), describe(rows)
    low, high = rows[0], rows[-1]
    why = describe(rows)
    assert low.server is not None and high.server is not None, "the sweep scraped /metrics"
    # The engine's own gauge: requests wait once the offered rate passes what 2 slots serve.
    assert (high.server.waiting_max or 0) >= 2, why
    assert (high.server.waiting_mean or 0) > (low.server.waiting_mean or 0) + 0.5, why
    assert (high.server.running_max or 0) <= 2, "never more than max_num_seqs running"
    # TTFT rises with rate: the queue is in front of the first token.
    assert low.ttft_p50 is not None and high.ttft_p50 is not None
    assert high.ttft_p50 > 3 * low.ttft_p50 and high.ttft_p50 - low.ttft_p50 > 100, why
    # And servetune names the knee, at or below what 2 slots can serve.
    knee = result.knee
    assert knee is not None and knee.status == "found", (knee, why)
    assert knee.throughput is not None and knee.throughput <= 1.3 * x_sat, (knee, why)


@pytest.fixture(scope="module")
def vllm2(
    vllm_python: Path, tiny: provisioned.TinyModel, engine_logs: Path
) -> Iterator[EngineProcess]:
    with vllm_serving(vllm_python, tiny, engine_logs, max_num_seqs=2) as eng:
        yield eng


@pytest.fixture(scope="module")
def llama2(
    llama_server: Path, tiny: provisioned.TinyModel, engine_logs: Path
) -> Iterator[EngineProcess]:
    with llama_serving(llama_server, tiny, engine_logs, max_num_seqs=2) as eng:
        yield eng


@pytest.mark.parametrize(
    ("engine", "two", "eight"),
    [
        ("vllm-cpu", "vllm2", "vllm8"),
        ("llama.cpp", "llama2", "llama8"),
    ],
)
def test_queueing_curve_and_one_knob(
    engine: str,
    two: str,
    eight: str,
    tiny: provisioned.TinyModel,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    eng2: EngineProcess = request.getfixturevalue(two)
    x2 = saturation(engine, eng2, tiny, tmp_path / "sat-2")
    result = sweep(eng2, tiny, x2, tmp_path / "sweep-2")
    check_curve(engine, result, x2, tmp_path / "sweep-2")
    x8 = saturation(engine, request.getfixturevalue(eight), tiny, tmp_path / "sat-8")
    print(f"{engine}: saturation {x2:.2f} req/s with 2 slots, {x8:.2f} with 8")
    assert x8 >= GAIN[engine] * x2, f"{engine}: {x2:.2f} req/s with 2 slots, {x8:.2f} with 8"
