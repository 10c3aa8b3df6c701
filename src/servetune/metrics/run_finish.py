"""A run's figures and verdict from its records: at the end of a bench (:func:`finish`), and
when a run directory whose ``run.json`` still says ``running`` is opened (:func:`open_run`) —
a run still going, or one killed before it could finish, summarised from the records on disk.

Reading the files and telling whether their writer is alive is :mod:`servetune.results`'s
(``io``, ``run_dir``); what is here is the summarising, so every reader of a run (diagnose,
report, a sweep's reader) gets the same figures the bench would have written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servetune.metrics.client_health import client_health
from servetune.metrics.run_result import run_result, run_summary
from servetune.metrics.summary import assess_failures, empty_window, run_status
from servetune.results.io import read_records, read_run_result
from servetune.results.record import RequestRecord
from servetune.results.run_dir import now_iso, process_gone
from servetune.results.schema import RunResult


def finish(
    base: RunResult,
    records: Sequence[RequestRecord],
    *,
    interrupted: bool,
    workers: int,
) -> RunResult:
    """The run's figures and verdict from its records (the summary, the client's health, the
    failures and the status): the end of a run, or the rebuilding of a cut-short one. What the
    records do not tell (target, environment, workload, server) comes from ``base``."""
    cfg = base.config
    health = client_health(records, cfg.request_rate, cfg.max_concurrency, workers)
    failures = assess_failures(records, cfg.max_failure_rate)
    summary = run_summary(records, cfg)
    warnings: list[str] = []
    if base.target.tokens_approximate:
        warnings.append(
            "prompt lengths are approximate (no local tokenizer and no server /tokenize); "
            "pass --tokenizer DIR for exact lengths"
        )
    if failures.failed:
        warnings.append(failures.verdict)
    nothing = None if interrupted else empty_window(cfg, summary, failures)
    if nothing is not None:
        warnings.append(nothing)
    by_chunks = summary.tokens_source.get("chunks", 0)
    if by_chunks:
        warnings.append(
            f"{by_chunks} of {summary.completed} responses carried no usage: their output "
            "tokens are their content chunks, fewer than the tokens whenever a chunk carries "
            "several (output throughput too low, TPOT too high); pass --tokenizer DIR to "
            "count their text"
        )
    if summary.short_outputs and cfg.ignore_eos:
        warnings.append(
            f"{summary.short_outputs} of {summary.completed} outputs came back shorter than "
            f"asked although ignore_eos was sent ({summary.short_output_tokens} tokens short "
            "in all): the server ignores it, or stopped them for another reason "
            "(max_model_len, a stop string)"
        )
    out = run_result(
        cfg,
        summary,
        environment=base.environment,
        target=base.target,
        health=health,
        server=base.server,
        status=run_status(failures, interrupted, measured_nothing=nothing is not None),
        failures=failures,
        workload=base.workload,
        warnings=warnings,
    )
    out.updated_at = now_iso()
    return out


def open_run(run_dir: str | Path) -> RunResult:
    """``run.json`` as it stands — or, while it still says ``running``, the run summarised
    from the records on disk: status ``cut_short`` when its process is gone (killed), else
    ``running`` (figures so far)."""
    d = Path(run_dir).expanduser()
    run = read_run_result(d)
    if run.status != "running":
        return run
    gone = process_gone(run.pid, run.environment.hostname, [d])
    records = read_records(d)
    workers = run.client_health.workers or 1
    out = finish(run, records, interrupted=False, workers=workers)
    out.server = run.server
    out.pid, out.updated_at = run.pid, run.updated_at
    when = run.updated_at or "?"
    if gone:
        out.status = "cut_short"
        out.warnings.insert(
            0,
            f"the run was cut short: run.json still said running (last written {when} by "
            f"process {run.pid}, which is gone); the {len(records)} requests recorded by then "
            "are summarised here",
        )
    else:
        out.status = "running"
        out.warnings.insert(
            0,
            f"the run is still going (process {run.pid}, run.json last written {when}): "
            f"figures over the {len(records)} requests recorded so far",
        )
    return out
