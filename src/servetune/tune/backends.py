"""Where a trial runs: the simulated engine on its virtual clock, or a real engine launched
for the trial (its own process group, stopped afterwards, never by name).

A backend screens a configuration (the memory planner; the knob registry's rules), predicts
its SLO-max on the simulated engine when it can (the rate search starts there; a prediction
far below the best so far prunes the trial without launching it), and opens a *session*: the
engine started and warmed up, a ``measure(rate) -> Probe`` to load it, then stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from servetune.errors import ConfigError, EngineError, ServetuneError, SimError
from servetune.metrics.slo_spec import SloSpec, as_goodput, check
from servetune.profiles import NEUTRAL, profile
from servetune.results.calibration_file import Calibration
from servetune.results.schema import BenchConfig, RunResult
from servetune.results.tune_file import SERVER_CMD_FILE, Probe
from servetune.tune.search import find_slo_max

Measure = Callable[[float], Probe]
PREDICT_PROMPTS = 300


UNDERSENT = 0.9
"""A probe whose client sent less than 90% of its planned rate measured a lower load."""


def undersent(result: RunResult) -> bool:
    """The client could not send the load it planned (a few milliseconds of send lag on a
    busy machine do not count: latencies are measured from the actual send)."""
    h = result.client_health
    plan = h.planned_rate or h.target_rate
    if plan is None or h.achieved_rate is None or not math.isfinite(plan):
        return False
    return h.achieved_rate < UNDERSENT * plan


def probe_of(rate: float, result: RunResult, slos: list[SloSpec]) -> Probe:
    """A probe from one run's result."""
    s = result.summary
    c = check(s, slos)
    server = result.server.summary if result.server is not None else {}
    short = undersent(result)
    planned = result.client_health.planned_rate
    return Probe(
        rate=rate,
        offered=planned if planned is not None and math.isfinite(planned) else None,
        meets=c.meets and not short,
        throughput=s.request_throughput,
        limiting="the client could not send the planned rate" if short else c.limiting,
        worst_ratio=c.worst_ratio,
        failed_share=c.failed_share,
        figures={
            "p50_ttft_ms": s.ttft.p50,
            "p99_ttft_ms": s.ttft.p99,
            "p50_tpot_ms": s.tpot.p50,
            "p99_tpot_ms": s.tpot.p99,
            "p99_itl_ms": s.itl.p99,
            "p99_e2el_ms": s.e2el.p99,
            "request_throughput": s.request_throughput,
            "output_throughput": s.output_throughput,
            "request_goodput": s.request_goodput,
            "kv_cache_usage_mean": server.get("kv_cache_usage_mean"),
            "gpu_utilization_mean": server.get("gpu_utilization_mean"),
        },
    )


Run = Callable[[BenchConfig, Path | None, bool], Probe]
"""One probe against a started target: the workload for it, where its run may go, whether to
scrape the server's metrics."""


def probe_workload(
    workload: BenchConfig, rate: float, seed: int | None = None, length: int = 1
) -> BenchConfig:
    """The workload of one probe: at RATE, drawn with SEED when given, LENGTH times as many
    requests (or as long) as the workload's."""
    update: dict[str, Any] = {"request_rate": rate}
    if seed is not None:
        update["seed"] = seed
    if length != 1:
        update["num_prompts"] = workload.num_prompts * length
        if workload.duration_s is not None:
            update["duration_s"] = workload.duration_s * length
    return workload.model_copy(update=update)


class Backend:
    """Where trials run. A backend screens a configuration, predicts its SLO-max when it can,
    and starts a target for it (:meth:`_started`: the offline simulated engine, or an engine
    launched and warmed up); :meth:`session` is the same for every backend."""

    workload: BenchConfig

    def screen(self, config: Mapping[str, Any]) -> str | None:
        """Why the configuration cannot start (None: it can, as far as can be told)."""
        raise NotImplementedError

    def predict(self, config: Mapping[str, Any], slos: list[SloSpec]) -> float | None:
        """The simulated engine's SLO-max for it, or None when it cannot be simulated."""
        raise NotImplementedError

    def engine_values(self, config: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        """The value the engine uses for each of NAMES under CONFIG — the configuration's
        own, or the engine's default for a knob it leaves out (a default that depends on
        what is not known here is left out)."""
        raise NotImplementedError

    def _registry_values(
        self, engine: str, config: Mapping[str, Any], names: list[str]
    ) -> dict[str, Any]:
        from servetune.knobs import default

        out: dict[str, Any] = {}
        for name in names:
            if name in config:
                out[name] = config[name]
                continue
            with contextlib.suppress(ConfigError):
                value = default(engine, name)
                if value is not None:
                    out[name] = value
        return out

    def _started(
        self, config: Mapping[str, Any], trial_dir: Path
    ) -> contextlib.AbstractContextManager[Run]:
        """The target running with the configuration, as the way to run one probe on it."""
        raise NotImplementedError

    @contextlib.contextmanager
    def session(
        self,
        config: Mapping[str, Any],
        trial_dir: Path,
        seed: int | None = None,
        server_metrics: bool = False,
        length: int = 1,
    ) -> Iterator[Measure]:
        """The target running with the configuration; yields ``measure(rate)`` (the workload
        drawn with ``seed`` when given, ``length`` times as long), each probe's run under
        ``trial_dir``."""
        with self.draws(config, trial_dir, [seed], server_metrics, length) as (measure,):
            yield measure

    @contextlib.contextmanager
    def draws(
        self,
        config: Mapping[str, Any],
        trial_dir: Path,
        seeds: Sequence[int | None],
        server_metrics: bool = False,
        length: int = 1,
    ) -> Iterator[tuple[Measure, ...]]:
        """As :meth:`session`, one launch, with a ``measure(rate)`` for each of SEEDS: the
        same target loaded with independent draws of the workload."""
        probes = 0
        with self._started(config, trial_dir) as run:

            def measurer(seed: int | None) -> Measure:
                def measure(rate: float) -> Probe:
                    nonlocal probes
                    probes += 1
                    out = trial_dir / f"probe-{probes}-rate-{rate:.3g}"
                    wl = probe_workload(self.workload, rate, seed, length)
                    return run(wl, out, server_metrics)

                return measure

            yield tuple(measurer(s) for s in seeds)


def _sim_engine_config(
    gpu: str, model: str, config: Mapping[str, Any], calibration: Calibration | None = None
) -> Any:
    from servetune.sim.config import EngineConfig

    fields = dict(config)
    try:
        return EngineConfig(gpu=gpu, model=model, calibration=calibration, **fields)
    except ValueError as exc:  # pydantic: a value the simulated engine does not model
        raise SimError(f"the simulated engine cannot run {dict(config)}: {exc}") from None


def sim_screen(
    gpu: str, model: str, config: Mapping[str, Any], calibration: Calibration | None = None
) -> str | None:
    """vLLM's start-up checks and memory plan for the configuration, in milliseconds (with a
    calibration: the KV pool its server showed, where it applies)."""
    from servetune.sim.memory import plan_memory

    try:
        plan_memory(_sim_engine_config(gpu, model, config, calibration))
    except ServetuneError as exc:
        return exc.message
    return None


class SimBackend(Backend):
    """The simulated engine, offline (``servetune.sim.offline.simulate``): nothing to start,
    and a probe's run is not written (``out`` unused)."""

    def __init__(
        self,
        gpu: str,
        model: str,
        workload: BenchConfig,
        slos: list[SloSpec] | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.gpu, self.model, self.workload = gpu, model, workload
        self.slos = list(slos or [])
        self.calibration = calibration

    def _engine(self, config: Mapping[str, Any]) -> Any:
        return _sim_engine_config(self.gpu, self.model, config, self.calibration)

    def screen(self, config: Mapping[str, Any]) -> str | None:
        return sim_screen(self.gpu, self.model, config, self.calibration)

    def calibration_notes(self, config: Mapping[str, Any]) -> list[str]:
        """What of ``config`` (and the workload's lengths) the calibration did not measure:
        another GPU or model than the profile's (its constants transferred), larger batches,
        longer contexts or prompts."""
        if self.calibration is None:
            return []
        from servetune.sim.calibration_use import use_warnings
        from servetune.sim.config import resolve

        try:
            r = resolve(self._engine(config))
        except ServetuneError:
            return []
        w = self.workload
        if w.dataset_name != "random":  # the lengths are the dataset's: not known here
            return use_warnings(r)
        return use_warnings(r, w.random_input_len, w.random_output_len)

    def _runner(self, config: Mapping[str, Any], slos: list[SloSpec]) -> Run:
        engine = self._engine(config)

        def run(cfg: BenchConfig, out: Path | None, server_metrics: bool) -> Probe:
            from servetune.sim.offline import simulate

            result = simulate(
                cfg.model_copy(update={"base_url": None}), engine, server_metrics=server_metrics
            )
            return probe_of(cfg.request_rate, result, slos)

        return run

    def _started(
        self, config: Mapping[str, Any], trial_dir: Path
    ) -> contextlib.AbstractContextManager[Run]:
        return contextlib.nullcontext(self._runner(config, self.slos))

    def measurer(
        self,
        config: Mapping[str, Any],
        slos: list[SloSpec],
        *,
        num_prompts: int | None = None,
    ) -> Measure:
        """``measure(rate)`` outside a session (the prediction, the benchmarks)."""
        run = self._runner(config, slos)
        workload = self.workload
        if num_prompts is not None:
            workload = workload.model_copy(update={"num_prompts": num_prompts})
        return lambda rate: run(probe_workload(workload, rate), None, False)

    def saturation(self, config: Mapping[str, Any], num_prompts: int | None = None) -> float:
        """Requests/s the configuration completes with every request sent at once."""
        return self.measurer(config, [], num_prompts=num_prompts)(math.inf).throughput

    def engine_values(self, config: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        from servetune.sim.config import resolve

        try:
            resolved = resolve(self._engine(config))
        except ServetuneError:
            return self._registry_values(NEUTRAL, config, names)
        return {n: getattr(resolved, n) for n in names if hasattr(resolved, n)}

    def predict(self, config: Mapping[str, Any], slos: list[SloSpec]) -> float | None:
        if self.screen(config) is not None:
            return None
        n = min(self.workload.num_prompts, PREDICT_PROMPTS)
        sat = self.saturation(config, n)
        out = find_slo_max(
            self.measurer(config, slos, num_prompts=n),
            0.7 * sat,
            max_probes=7,
            tol=0.1,
            saturation=sat,
        )
        return out.slo_max if out.slo_max is not None else 0.0


class EngineBackend(Backend):
    """A real engine: launched per trial, loaded by ``servetune bench``, stopped."""

    def __init__(
        self,
        engine: str,
        model: str,
        workload: BenchConfig,
        slos: list[SloSpec],
        options: Mapping[str, Any] | None = None,
        gpus: list[str] | None = None,
        sim: SimBackend | None = None,
        ready_timeout_s: float = 300.0,
        warmup_requests: int = 8,
    ) -> None:
        self.engine, self.model, self.workload, self.slos = engine, model, workload, slos
        self.options = dict(options or {})
        self.gpus = list(gpus or [])
        self.sim = sim
        self.ready_timeout_s = ready_timeout_s
        self.warmup_requests = warmup_requests

    def screen(self, config: Mapping[str, Any]) -> str | None:
        from servetune.knobs import check_config

        try:
            check_config(self.engine, config)
        except ConfigError as exc:
            return exc.message
        if self.sim is not None and profile(self.engine).has_screen("memory"):
            return self.sim.screen(config)
        return None

    def predict(self, config: Mapping[str, Any], slos: list[SloSpec]) -> float | None:
        if self.sim is None:
            return None
        try:
            return self.sim.predict(config, slos)
        except ServetuneError:
            return None

    def engine_values(self, config: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        if self.sim is not None and profile(self.engine).has_screen("vllm_defaults"):
            return self.sim.engine_values(config, names)  # vLLM's rules, with the GPU's size
        return self._registry_values(self.engine, config, names)

    def _spec(self, config: Mapping[str, Any]) -> Any:
        from servetune.engines.commands import EngineOptions, build_command
        from servetune.engines.knobs import EngineKnobs
        from servetune.engines.process import free_port

        opts = dict(self.options)
        env = dict(opts.pop("env", {}) or {})
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        return build_command(
            self.engine,
            self.model,
            EngineKnobs(**config),
            EngineOptions(**opts, env=env),
            port=free_port(),
        )

    @contextlib.contextmanager
    def _started(self, config: Mapping[str, Any], trial_dir: Path) -> Iterator[Run]:
        """The engine launched in its own process group and warmed up; each probe a bench
        run against it (the server's metrics scraped); stopped on the way out."""
        from servetune.engines.failures import last_error_line
        from servetune.engines.process import launch
        from servetune.loadgen.bench import bench

        trial_dir.mkdir(parents=True, exist_ok=True)
        spec = self._spec(config)
        (trial_dir / SERVER_CMD_FILE).write_text(shlex.join(spec.argv) + "\n", encoding="utf-8")
        log = trial_dir / "engine.log"
        eng = asyncio.run(launch(spec, log, self.ready_timeout_s))
        target = {"base_url": spec.base_url, "model": spec.served_model_name}

        def died() -> str | None:
            if eng.alive():
                return None
            found = eng.failure()
            line = found.line if found is not None else last_error_line(eng.engine_lines())
            return (
                f"{self.engine} exited with status {eng.returncode()} under load: "
                f"{line or 'nothing in its log'} (log: {log})"
            )

        def run(cfg: BenchConfig, out: Path | None, server_metrics: bool) -> Probe:
            rate = cfg.request_rate
            cfg = cfg.model_copy(update={**target, "goodput": as_goodput(self.slos)})
            try:
                result = bench(cfg, out or trial_dir / "probe", progress=False, overwrite=True)
            except ServetuneError as exc:
                return Probe(rate=rate, meets=False, error=died() or exc.message)
            dead = died()
            if dead is not None:
                return Probe(rate=rate, meets=False, error=dead)
            return probe_of(rate, result, self.slos)

        try:
            if self.warmup_requests:
                warm = self.workload.model_copy(
                    update={
                        **target,
                        "request_rate": math.inf,
                        "max_concurrency": 4,
                        "num_prompts": self.warmup_requests,
                        "duration_s": None,
                    }
                )
                bench(
                    warm, trial_dir / "warmup", progress=False, overwrite=True, scrape_metrics=False
                )
            yield run
        finally:
            eng.stop()


def engine_error_reason(exc: BaseException) -> str:
    """One line for a trial that failed to start."""
    if isinstance(exc, EngineError):
        return exc.message + (f" ({exc.hint})" if exc.hint else "")
    if isinstance(exc, ServetuneError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"
