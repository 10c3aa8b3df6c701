"""Level runners for the sweep: a real-time bench against a URL or the embedded simulated
engine, the offline (virtual-clock) simulator, or any ``module:callable`` a user plugs in."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from servetune.errors import ConfigError, EngineError
from servetune.results.schema import BenchConfig, RunResult
from servetune.sweep.runner import LevelRunner

if TYPE_CHECKING:
    from servetune.sim.config import EngineConfig
    from servetune.sim.embedded import EmbeddedServer


def bench_runner(
    *,
    progress: bool = True,
    scrape_metrics: bool = True,
    metrics_interval_s: float = 1.0,
    dcgm_url: str | None = None,
    num_prompts_given: bool = True,
    base_url: Callable[[], str] | None = None,
) -> LevelRunner:
    """One real-time bench per level. ``base_url``: a callable giving the URL at run time
    (the embedded engine's port is known only once it started)."""

    def run(cfg: BenchConfig, level_dir: Path) -> RunResult:
        from servetune.loadgen.bench import bench

        if base_url is not None:
            cfg = cfg.model_copy(update={"base_url": base_url()})
        return bench(
            cfg,
            level_dir,
            progress=progress,
            scrape_metrics=scrape_metrics,
            metrics_interval_s=metrics_interval_s,
            dcgm_url=dcgm_url,
            overwrite=True,
            num_prompts_given=num_prompts_given,
        )

    return run


def offline_runner(engine_cfg: EngineConfig, *, progress: bool = False) -> LevelRunner:
    """One virtual-clock simulation per level (``servetune.sim.offline``)."""

    def run(cfg: BenchConfig, level_dir: Path) -> RunResult:
        from servetune.sim.offline import run_offline

        return run_offline(
            cfg.model_copy(update={"base_url": None}), engine_cfg, level_dir, progress=progress
        )

    return run


class EmbeddedEngine:
    """The embedded simulated engine as a :class:`~servetune.sweep.runner.ServerControl`."""

    logs = False
    """The embedded engine runs in this process: it writes no log of its own."""

    def __init__(self, engine_cfg: EngineConfig) -> None:
        self.engine_cfg = engine_cfg
        self._server: EmbeddedServer | None = None
        self.base_url: str | None = None

    def start(self, log_path: Path) -> None:
        from servetune.sim.embedded import start_embedded

        self._server = start_embedded(self.engine_cfg)
        self.base_url = self._server.base_url

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def url(self) -> str:
        if self.base_url is None:
            raise EngineError("the embedded engine is not running")
        return self.base_url


def load_runner(spec: str) -> LevelRunner:
    """``module:attribute`` → a level runner (a callable ``(cfg, level_dir) -> RunResult``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError.over_fields(
            f"{{level_runner}} {spec!r}: expected MODULE:CALLABLE",
            hint="e.g. {level_runner}=servetune.sweep.synthetic:run_level",
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError.over_fields(
            f"{{level_runner}}: cannot import {module_name!r} ({exc})"
        ) from exc
    runner = getattr(module, attr, None)
    if runner is None or not callable(runner):
        raise ConfigError.over_fields(f"{{level_runner}}: {module_name} has no callable {attr!r}")
    result: LevelRunner = runner
    return result
