"""The sweep runner: one level after another, each level a complete run directory, and
``sweep.json`` rewritten after every level so that a killed sweep keeps what it measured.

A level is run by an injected ``run_level(cfg, level_dir) -> RunResult`` (the real-time bench,
the offline simulator, or a test double). ``--resume`` reuses every level whose ``run.json`` is
complete and matches the level's configuration, and re-runs the others from scratch.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, Protocol

from servetune.errors import ConfigError, ResultError, ServetuneError
from servetune.results.io import RUN_FILE, SWEEP_FILE, ensure_result_dir, read_run_result
from servetune.results.schema import BenchConfig, RunResult
from servetune.results.sweep_schema import (
    LevelRow,
    PlannedLevel,
    SweepConfig,
    SweepResult,
    read_sweep_result,
    write_sweep_result,
)
from servetune.sweep import fmt
from servetune.sweep.analysis import analyse, failure_summary, usable
from servetune.sweep.curve import row_from_run
from servetune.sweep.levels import (
    auto_rates,
    level_config,
    level_label,
    plan_levels,
    probe_level,
)
from servetune.workload.seeds import attempt_of, attempt_seed

LevelRunner = Callable[[BenchConfig, Path], RunResult]
LEVELS_DIR = "levels"
STOP_AFTER_DEAD_LEVELS = 2
"""A sweep stops after this many levels in a row where not one request succeeded: more load
will not make a server that fails everything answer."""


class ServerControl(Protocol):
    """Starts and stops the server under test (``--server-cmd``)."""

    def start(self, log_path: Path) -> None: ...

    def stop(self) -> None: ...


_P = ParamSpec("_P")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): obj}


def config_differences(old: SweepConfig, new: SweepConfig) -> list[str]:
    a = _flatten(old.model_dump(mode="json"))
    b = _flatten(new.model_dump(mode="json"))
    return [
        f"{key}: {a.get(key)!r} → {b.get(key)!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


_FILLED_AT_RUN_TIME = ("base_url", "model")
"""Left open in the sweep's config and filled by the run (the embedded engine's URL, the model
/v1/models lists): a level that filled them still matches."""


def same_level_config(done: BenchConfig, wanted: BenchConfig) -> bool:
    """Whether a finished level ran with the configuration this sweep wants for it."""
    a = done.model_dump(mode="json")
    b = wanted.model_dump(mode="json")
    for key in set(a) | set(b):
        if key == "api_key" or (key in _FILLED_AT_RUN_TIME and b.get(key) is None):
            continue
        if a.get(key) != b.get(key):
            return False
    return True


def level_line(row: LevelRow, index: int, total: int, note: str = "") -> str:
    parts = [
        f"[{index}/{total}] {row.label}:",
        f"{fmt.num(row.request_throughput)} req/s",
        f"({fmt.num(row.output_throughput)} tok/s),",
        f"P99 TTFT {fmt.ms(row.ttft_p99)},",
        f"TPOT {fmt.ms(row.tpot_p99)},",
        f"E2E {fmt.ms(row.e2el_p99)}",
    ]
    if row.server and row.server.kv_cache_usage_mean is not None:
        parts.append(f"| KV {row.server.kv_cache_usage_mean:.0%}")
    if row.server and row.server.waiting_mean is not None:
        parts.append(f"waiting {fmt.num(row.server.waiting_mean, 2)}")
    if note:
        parts.append(f"[{note}]")
    return " ".join(parts)


class SweepRunner:
    """Runs the levels of one sweep into ``sweep_dir`` (see the module docstring)."""

    def __init__(
        self,
        config: SweepConfig,
        sweep_dir: str | Path,
        run_level: LevelRunner,
        *,
        resume: bool = False,
        server: ServerControl | None = None,
        command: Sequence[str] = (),
        echo: Callable[[str], None] = print,
    ) -> None:
        self.config = config
        self.sweep_dir = Path(sweep_dir)
        self.run_level = run_level
        self.resume = resume
        self.server = server
        self.echo = echo
        self.command = list(command)
        self.reused: list[str] = []
        self.ran: list[str] = []
        self._server_up = False
        self._created: Path | None = None
        self._dead_levels = 0
        self.result: SweepResult | None = None

    # --- set-up ---------------------------------------------------------------------
    def _open(self) -> SweepResult:
        probe = self.sweep_dir.expanduser()
        while not probe.exists() and probe != probe.parent:
            self._created = probe  # the topmost folder this sweep creates
            probe = probe.parent
        ensure_result_dir(self.sweep_dir)
        if (self.sweep_dir / RUN_FILE).exists():
            # a sweep.json beside a run's run.json would hide the run from every reader
            raise ConfigError.over_fields(
                f"{self.sweep_dir} holds a run ({RUN_FILE}): a sweep written there would hide it",
                hint="choose another {result_dir} (a sweep keeps its runs in levels/<label>/)",
            )
        path = self.sweep_dir / SWEEP_FILE
        now = _now()
        if path.exists():
            if not self.resume:
                raise ConfigError.over_fields(
                    f"{self.sweep_dir} already holds a sweep ({SWEEP_FILE})",
                    hint="give {resume} to continue it, or choose another {result_dir}",
                )
            old = read_sweep_result(self.sweep_dir)
            diffs = config_differences(old.config, self.config)
            if diffs:
                raise ConfigError.over_fields(
                    f"cannot resume {self.sweep_dir}: the sweep was started with other settings "
                    f"({'; '.join(diffs[:6])}{' …' if len(diffs) > 6 else ''})",
                    hint="resume with the same flags as the first run (its command is in "
                    f'{SWEEP_FILE} under "command"), or choose another {{result_dir}}',
                )
            old.status = "running"
            old.updated_at = now
            old.pid, old.hostname = os.getpid(), socket.gethostname()
            return old
        if self.resume:
            self.echo(f"nothing to resume in {self.sweep_dir}: starting a new sweep")
        return SweepResult(
            created_at=now,
            updated_at=now,
            command=self.command,
            config=self.config,
            pid=os.getpid(),
            hostname=socket.gethostname(),
        )

    def _save(self) -> None:
        assert self.result is not None
        self.result.updated_at = _now()
        analyse(self.result)
        write_sweep_result(self.sweep_dir, self.result)

    # --- one level ------------------------------------------------------------------
    def _level_dir(self, level: PlannedLevel) -> Path:
        return self.sweep_dir / LEVELS_DIR / level.label

    def _reusable(self, level: PlannedLevel, cfg: BenchConfig) -> RunResult | None:
        d = self._level_dir(level)
        if not (d / RUN_FILE).is_file():
            return None
        try:
            done = read_run_result(d)
        except ResultError:
            return None
        if done.status != "complete" or attempt_of(cfg.seed, done.config.seed) is None:
            return None  # (a re-run after a cut has a seed of its own, derived from the level's)
        if not same_level_config(done.config, cfg.model_copy(update={"seed": done.config.seed})):
            return None
        return done

    def _next_attempt(self, d: Path, level_seed: int) -> int:
        """The attempt a level's run is: 0 on a clean directory; after a run cut short in
        ``d`` (whose prompts the server may still cache), the one after it."""
        if not d.exists():
            return 0
        try:
            seed = read_run_result(d).config.seed
        except ResultError:
            return 1  # cut before its run.json: it sent the level's own prompts, if any
        k = attempt_of(level_seed, seed)
        return 1 if k is None else k + 1

    def _ensure_server(self, log_path: Path) -> None:
        if self.server is not None and not self._server_up:
            self.echo(
                f"starting the server (log: {log_path})"
                if getattr(self.server, "logs", True)
                else "starting the server"
            )
            self.server.start(log_path)
            self._server_up = True

    def _stop_server(self) -> None:
        if self.server is not None and self._server_up:
            self._server_up = False
            self.server.stop()

    def run_one(self, level: PlannedLevel, index: int, total: int) -> LevelRow:
        """Run (or reuse) one level and record its row; returns the row."""
        assert self.result is not None
        cfg = level_config(self.config.bench, level)
        d = self._level_dir(level)
        rows = [r for r in self.result.rows if r.label != level.label]
        done = self._reusable(level, cfg) if self.resume else None
        if done is not None:
            row = row_from_run(level, d, self.sweep_dir, done)
            self.reused.append(level.label)
            self.echo(level_line(row, index, total, "done before: reused"))
        else:
            attempt = self._next_attempt(d, cfg.seed)
            if attempt:
                cfg = cfg.model_copy(update={"seed": attempt_seed(cfg.seed, attempt)})
            if d.exists():
                # A level cut short by a kill: its partial files must not mix with a new run.
                shutil.rmtree(d)
            d.mkdir(parents=True)
            restart = self.config.restart_per_level
            self._ensure_server(d / "server.log" if restart else self.sweep_dir / "server.log")
            try:
                run = self.run_level(cfg, d)
            except BaseException:
                if not any(f.is_file() and f.stat().st_size for f in d.rglob("*.jsonl")):
                    shutil.rmtree(d, ignore_errors=True)  # it never sent a request
                raise
            finally:
                if restart:
                    self._stop_server()
            row = row_from_run(level, d, self.sweep_dir, run)
            self.ran.append(level.label)
            self.echo(level_line(row, index, total))
        self.result.rows = [*rows, row]
        self._save()
        if row.status == "interrupted":
            raise KeyboardInterrupt
        self._dead_levels = self._dead_levels + 1 if row.completed == 0 and row.failed else 0
        return row

    # --- the sweep ------------------------------------------------------------------
    def _plan(self) -> list[PlannedLevel]:
        cfg = self.config
        if cfg.mode == "concurrency":
            return plan_levels("concurrency", cfg.concurrencies or [], cfg.repeats)
        rates = cfg.request_rates
        if rates == "auto":
            return []  # planned after the probe
        return plan_levels("rate", list(rates or []), cfg.repeats)

    def run(self) -> SweepResult:
        self.result = self._open()
        result = self.result
        try:
            if self.config.mode == "rate" and self.config.request_rates == "auto":
                probe = probe_level()
                result.planned = [probe]
                self.echo("probing the saturation throughput with one unbounded-rate level")
                row = self.run_one(probe, 1, 1)
                if not usable(row):
                    self.echo(
                        f"the probe level {row.status}: {failure_summary([row])}; "
                        "no levels can be placed from it"
                    )
                    self._finish_status()
                    self._save()
                    return result
                rates = auto_rates(row.request_throughput, self.config.auto_levels)
                self.echo(
                    f"saturation ≈ {fmt.num(row.request_throughput)} req/s → levels "
                    f"{fmt.loads(rates)} req/s"
                )
                levels = plan_levels("rate", rates, self.config.repeats)
                result.planned = [probe, *levels]
            else:
                levels = self._plan()
                result.planned = levels
            if not levels:
                raise ConfigError.over_fields(
                    "the sweep has no levels", hint="give {request_rates} or {concurrencies}"
                )
            self._save()
            for i, level in enumerate(levels, 1):
                self.run_one(level, i, len(levels))
                if self._dead_levels >= STOP_AFTER_DEAD_LEVELS and i < len(levels):
                    self.echo(
                        f"stopping: not one request succeeded in the last {self._dead_levels} "
                        f"levels ({failure_summary(result.rows[-self._dead_levels :])}); "
                        f"{len(levels) - i} level(s) not run"
                    )
                    break
            self._confirm()
            self._finish_status()
        except KeyboardInterrupt:
            result.status = "interrupted"
            result.pid = None
            self._save()
            raise
        except ServetuneError:
            result.status = "failed"
            result.pid = None
            if self._created is not None and not result.rows:
                shutil.rmtree(self._created, ignore_errors=True)  # nothing was measured
            else:
                self._save()
            raise
        finally:
            self._stop_server()
        self._save()
        return result

    def _finish_status(self) -> None:
        """complete: every level complete; failed: none usable; degraded: in between."""
        assert self.result is not None
        rows = self.result.rows
        good = [r for r in rows if usable(r)]
        if not rows or not good:
            self.result.status = "failed"
        elif len(good) < len(rows) or len(rows) < len(self.result.planned):
            self.result.status = "degraded"
        else:
            self.result.status = "complete"
        self.result.pid = None

    def _confirm(self) -> None:
        """``--confirm``: one more level at the interpolated SLO-max load."""
        assert self.result is not None
        sm = self.result.slo_max
        if not self.config.confirm or sm is None or sm.status != "found" or not sm.interpolated:
            return
        if sm.offered is None:
            return
        mode = self.config.mode
        value = round(sm.offered, 3) if mode == "rate" else float(int(sm.offered))
        level = PlannedLevel(
            label=level_label(mode, value, "confirm"), mode=mode, value=value, role="confirm"
        )
        self.result.planned = [
            *(p for p in self.result.planned if p.label != level.label),
            level,
        ]
        at = fmt.load(value, mode, fmt.rate_unit(self.config.bench))
        self.echo(f"confirming the SLO-max with one more level at {at}")
        self.run_one(level, 1, 1)


def _whole_sweep(runner: Callable[_P, SweepRunner]) -> Callable[_P, SweepResult]:
    def run(*args: _P.args, **kwargs: _P.kwargs) -> SweepResult:
        return runner(*args, **kwargs).run()

    return run


run_sweep = _whole_sweep(SweepRunner)
"""Run a whole sweep: ``SweepRunner(...).run()`` with :class:`SweepRunner`'s arguments."""
