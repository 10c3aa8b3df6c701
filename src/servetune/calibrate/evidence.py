"""The evidence a calibration reads: run and sweep directories of one deployment, each run
with its records and the server's own metrics, and the reason when a run cannot inform a fit.

A run is refused (kept in the profile's evidence list, with the reason) when its figures are
not the engine's: the client fell so far behind its schedule that its own delays are a
sizeable part of the latencies it measured (a lag that is not is harmless: the replay sends
each request when the client really sent it), more requests failed than the run's
``--max-failure-rate``, the server's prefix cache served more than the workload itself
implies (the run measured the cache, not the engine), too few requests finished, or the run
did not finish (killed, still running).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servetune.errors import ConfigError
from servetune.metrics.run_finish import open_run
from servetune.results.io import RUN_FILE, SWEEP_FILE, read_records
from servetune.results.record import RequestRecord
from servetune.results.schema import RunResult
from servetune.results.sweep_schema import read_sweep_result
from servetune.results.tune_file import SERVER_CMD_FILE, TUNE_FILE

MIN_REQUESTS = 30
"""Fewer finished requests cannot inform a fit (means and P99 of a handful are noise)."""

LAG_SHARE = 0.05
"""A run whose client's mean send lag is above this share of its mean TTFT is refused."""
LAG_P50_MS = 5.0
"""… or whose median send lag is above this (ms): the client was starved, not jittery."""

PREFIX_HIT_ALLOWANCE = 0.05
"""Hit rate above the workload's own (when it does not say its ceiling): a chat template or
a test request's blocks, not the engine's throughput."""


@dataclass
class RunEvidence:
    """One run directory as the calibration uses it."""

    path: Path
    label: str
    run: RunResult
    records: list[RequestRecord]
    server_cmd: str | None = None
    sweep_engine: dict[str, object] | None = None
    """A simulated sweep's engine configuration (``sweep.json`` config.engine)."""
    refused: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok_records(self) -> list[RequestRecord]:
        return [r for r in self.records if r.status == "ok"]


def _refusal(run: RunResult, records: list[RequestRecord]) -> str | None:
    if run.status not in ("complete", "degraded"):
        return f"the run did not finish (status {run.status})"
    ok = sum(1 for r in records if r.status == "ok")
    if ok < MIN_REQUESTS:
        return f"only {ok} requests finished (a fit needs at least {MIN_REQUESTS})"
    f = run.failures
    if f is not None and f.requests and f.share > f.max_share:
        return (
            f"{f.failed} of {f.requests} requests failed ({f.share:.1%}, above the run's "
            f"{f.max_share:.1%}): the figures are the failures'"
        )
    health = run.client_health
    if health.behind:
        # The replay sends each request when the client really sent it, so a late send is
        # not an error of the fit; a client so starved that its lag is a sizeable part of
        # the latencies it measured is (its receive side is starved too).
        lag = health.send_lag.mean or 0.0
        ttft = run.summary.ttft.mean or 0.0
        if lag > LAG_SHARE * ttft or (health.send_lag.p50 or 0.0) > LAG_P50_MS:
            return (
                f"the client fell behind its schedule (mean send lag {lag:.1f} ms against a "
                f"mean TTFT of {ttft:.0f} ms): its own delays are in the latencies it measured"
            )
    server = run.server.summary if run.server is not None else {}
    hit = server.get("prefix_cache_hit_rate")
    if isinstance(hit, int | float):
        ceiling = None
        if run.workload is not None:
            ceiling = run.workload.prefix_hit_rate_ceiling
        if ceiling is None:
            implied = run.workload.implied_prefix_hit_rate if run.workload else None
            ceiling = (implied or 0.0) + PREFIX_HIT_ALLOWANCE
        if hit > ceiling:
            return (
                f"the server's prefix cache served {hit:.0%} of prompt tokens, above the "
                f"{ceiling:.0%} the workload implies: the run measured the cache"
            )
    return None


def _run(
    path: Path, label: str, server_cmd: str | None, engine: dict[str, object] | None
) -> RunEvidence:
    run = open_run(path)
    records = read_records(path)
    ev = RunEvidence(path, label, run, records, server_cmd, engine)
    ev.refused = _refusal(run, records)
    return ev


def tune_runs(tune_dir: Path) -> list[RunEvidence]:
    """The probe runs of a tune's launched trials, each with the command its engine was
    started with (the trial's ``server-cmd.txt``), in trial order."""
    out: list[RunEvidence] = []
    for trial in sorted((tune_dir / "trials").glob("[0-9]*")):
        cmd_file = trial / SERVER_CMD_FILE
        if not cmd_file.is_file():
            continue  # the simulated engine's trial, or one that never launched
        cmd = cmd_file.read_text(encoding="utf-8").strip()
        probes = [d for d in trial.glob("probe-*") if (d / RUN_FILE).is_file()]
        for d in sorted(probes, key=lambda d: int(d.name.split("-")[1])):
            out.append(_run(d, f"trial {trial.name}/{d.name}", cmd, None))
    return out


def load_evidence(paths: list[str | Path]) -> list[RunEvidence]:
    """Every run of the given run and sweep directories, in the order given (a sweep's
    levels by load). A path that is neither is a :class:`ConfigError`."""
    out: list[RunEvidence] = []
    for given in paths:
        p = Path(given).expanduser()
        if (p / SWEEP_FILE).is_file():
            sweep = read_sweep_result(p)
            cmd = sweep.config.server_cmd
            engine = sweep.config.engine
            for row in sweep.measured_rows():
                d = p / row.level_dir
                if not (d / RUN_FILE).is_file():
                    continue
                out.append(_run(d, f"{p.name}/{row.label}", cmd, engine))
        elif (p / RUN_FILE).is_file():
            out.append(_run(p, p.name, None, None))
        elif (p / TUNE_FILE).is_file() or any((p / "trials").glob(f"*/{SERVER_CMD_FILE}")):
            out += tune_runs(p)
        else:
            raise ConfigError(
                f"{p} is neither a run directory ({RUN_FILE}), a sweep directory "
                f"({SWEEP_FILE}) nor a tune directory ({TUNE_FILE})",
                hint="give the result directory of a bench, a sweep or a tune of a real engine",
                code="calibrate.bad_input",
            )
    if not out:
        raise ConfigError(
            "no runs to calibrate on",
            hint="give the result directories of one or more benches or sweeps of the deployment",
            code="calibrate.bad_input",
        )
    return out
