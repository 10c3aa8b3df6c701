"""servetune's Python API: the commands' entry points as functions with typed arguments and
results — the same pydantic models the result files hold. ``import servetune`` exposes them
(:data:`servetune.__all__`); this module is where they live. Bad input is a
:class:`~servetune.errors.ServetuneError` (``message``, ``hint``, ``code``), as on the command
line, with the model's own field names where the CLI says the flag.

    import servetune
    engine = servetune.EngineConfig(gpu="A100-80GB", model="Qwen/Qwen2.5-7B-Instruct")
    run = servetune.simulate(servetune.BenchConfig(num_prompts=200, request_rate=4), engine)
    run.summary.output_throughput

See docs/python.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.compare.model import CompareReport
from servetune.diagnose.model import Diagnosis
from servetune.results.cost_file import CostReport
from servetune.results.plan_file import PlanResult
from servetune.results.quality_file import QualityReport
from servetune.results.schema import BenchConfig, RunResult, Slo
from servetune.results.sweep_schema import SweepConfig, SweepResult
from servetune.results.tune_file import TuneResult, TuneSpec
from servetune.sim.config import EngineConfig

if TYPE_CHECKING:
    from servetune.plan.request import PlanRequest
    from servetune.quality.verdict import Thresholds

__all__ = [
    "bench",
    "compare",
    "cost",
    "diagnose",
    "plan",
    "quality",
    "simulate",
    "sweep",
    "tune",
]


def _quiet(_: str) -> None:
    """The library says nothing unless asked (``echo=print``)."""


def bench(config: BenchConfig, result_dir: str | Path, **options: Any) -> RunResult:
    """One load test against ``config.base_url`` (None: the embedded simulated engine is
    started), written to RESULT_DIR as ``servetune bench`` writes it. OPTIONS: those of
    :func:`servetune.loadgen.bench.run_bench` (``scrape_metrics``, ``progress``, …)."""
    from servetune.loadgen.bench import bench as run

    return run(config, result_dir, **options)


def simulate(
    config: BenchConfig,
    engine: EngineConfig,
    result_dir: str | Path | None = None,
    *,
    vllm_version: str | None = None,
) -> RunResult:
    """CONFIG's workload against the simulated ENGINE on a virtual clock (seconds of wall time
    for minutes of load): the ``run.json`` a real bench would write; files only with
    RESULT_DIR."""
    from servetune.sim.offline import simulate as run

    return run(config, engine, result_dir, vllm_version=vllm_version)


def sweep(
    config: SweepConfig,
    result_dir: str | Path,
    *,
    resume: bool = False,
    echo: Callable[[str], None] = _quiet,
) -> SweepResult:
    """A sweep: CONFIG's levels run one after another against its target — a URL
    (``config.bench.base_url``) or the simulated engine on a virtual clock (``target="offline"``
    with ``config.engine``) — then the curve, the knee and the SLO-max, in RESULT_DIR."""
    from servetune.errors import ConfigError
    from servetune.sweep import targets
    from servetune.sweep.runner import run_sweep

    if config.target == "offline":
        if config.engine is None:
            raise ConfigError("an offline sweep needs its engine (SweepConfig.engine)")
        runner = targets.offline_runner(EngineConfig.model_validate(config.engine))
    elif config.target == "url":
        if config.bench.base_url is None:
            raise ConfigError("a sweep of a server needs its URL (SweepConfig.bench.base_url)")
        runner = targets.bench_runner()
    else:
        raise ConfigError(
            f"the Python API sweeps a URL or the offline simulated engine, not {config.target!r}",
            hint="use target='url' or target='offline'",
        )
    return run_sweep(config, Path(result_dir), runner, resume=resume, echo=echo)


def diagnose(
    path: str | Path,
    *,
    server_cmd: str | None = None,
    gpu: str | None = None,
    model: str | None = None,
) -> Diagnosis:
    """The bottleneck of a run, a sweep or a ``watch`` recording, ranked with its evidence and
    the knob to turn."""
    from servetune.diagnose import diagnose_path

    return diagnose_path(path, server_cmd=server_cmd, gpu=gpu, model=model)


def compare(
    paths: Sequence[str | Path],
    slo: Slo | None = None,
    *,
    force: bool = False,
    seed: int = 0,
) -> CompareReport:
    """Did a change help? Two (or more) runs or sweeps, figure by figure, each difference
    tested against the runs' own noise."""
    from servetune.compare.build import build

    return build(paths, slo, force=force, seed=seed)


def tune(
    spec: TuneSpec,
    result_dir: str | Path,
    *,
    storage: str | None = None,
    resume: bool = False,
    echo: Callable[[str], None] = _quiet,
) -> TuneResult:
    """The engine configuration that serves the most traffic within SPEC's SLOs (a study in
    RESULT_DIR, resumable)."""
    from servetune.tune.run import run_tune

    return run_tune(spec, Path(result_dir), storage=storage, resume=resume, echo=echo)


def plan(
    request: PlanRequest,
    *,
    pricing: str = "on-demand",
    provider: str | None = None,
    prices: dict[str, float] | None = None,
) -> PlanResult:
    """The cheapest deployment (GPU, count, knobs) that holds REQUEST's traffic at its SLOs,
    on the simulated engine, priced from the GPU catalog (PRICES: $/GPU-hour overrides)."""
    from servetune.cost.prices import PriceBook
    from servetune.plan.search import make_plan

    return make_plan(request, PriceBook(pricing, provider, prices))


def cost(
    path: str | Path,
    *,
    gpu: str | None = None,
    gpus: int | None = None,
    pricing: str = "on-demand",
    provider: str | None = None,
    prices: dict[str, float] | None = None,
) -> CostReport:
    """$/Mtok of a run or a sweep from GPU list prices."""
    from servetune.cost.analyze import cost_of
    from servetune.cost.prices import PriceBook

    return cost_of(path, PriceBook(pricing, provider, prices), gpu=gpu, gpus=gpus)


def quality(
    baseline: str,
    candidate: str,
    *,
    model: str | None = None,
    texts: str | Path | None = None,
    prompts: int = 64,
    thresholds: Thresholds | None = None,
    api_key: str | None = None,
) -> QualityReport:
    """Does CANDIDATE (a base URL) still answer like BASELINE: next-token distributions on the
    same texts (the built-in corpus unless TEXTS), judged against THRESHOLDS."""
    import asyncio

    from servetune.quality.endpoint import Endpoint
    from servetune.quality.inputs import load_texts
    from servetune.quality.run import check
    from servetune.quality.verdict import Thresholds

    found, source = load_texts(texts, prompts)
    return asyncio.run(
        check(
            Endpoint(baseline, model, api_key, name="baseline"),
            Endpoint(candidate, model, api_key, name="candidate"),
            found,
            source,
            [],
            thresholds or Thresholds(),
        )
    )
