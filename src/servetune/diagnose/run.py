"""One run's Diagnosis: read its files (going on without the ones that cannot be read, and
saying so), compute its figures, evaluate the rules, gate on failures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servetune.diagnose.actions.table import PROCEDURE
from servetune.diagnose.evaluate import evaluate
from servetune.diagnose.failures import gate_run
from servetune.diagnose.figures.client import compute_figures
from servetune.diagnose.figures.server import read_series_tolerant
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.knobs import KnownConfig, known_config
from servetune.diagnose.model import Diagnosis, Finding
from servetune.errors import ServetuneError
from servetune.metrics.run_finish import open_run
from servetune.results.io import REQUESTS_FILE, read_records
from servetune.results.record import RequestRecord
from servetune.results.schema import RunResult
from servetune.results.server_series import ServerSample


def headline(findings: Sequence[Finding]) -> str:
    if not findings:
        return "no finding"
    top = findings[0]
    line = top.title
    if top.kind in ("bottleneck", "warning") and top.actions:
        line += f" → {top.actions[0].title}"
    return line


def run_diagnosis(
    findings: list[Finding],
    fig: Figures,
    known: KnownConfig,
    notes: list[str],
    path: str | None,
) -> Diagnosis:
    """The diagnosis of one run (or one recorded window): its ranked findings, every figure
    and why the missing ones are missing, the knobs known, the seed's procedure."""
    return Diagnosis(
        kind="run",
        path=path,
        headline=headline(findings),
        healthy=findings[0].kind == "healthy" if findings else True,
        findings=findings,
        figures=dict(fig.values),
        missing=dict(fig.missing),
        knobs=dict(known.values),
        procedure=list(PROCEDURE),
        notes=notes,
    )


def diagnose_loaded(
    run: RunResult,
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    config: KnownConfig | None = None,
    series_error: str | None = None,
    path: str | None = None,
    records_error: str | None = None,
) -> Diagnosis:
    """Diagnose one run already in memory (``records_error``: why requests.jsonl could not be
    read, when it could not)."""
    known = known_config(run, config)
    fig = compute_figures(run, records, samples, known, series_error, records_error)
    findings = evaluate(fig)
    notes = []
    if records_error:
        notes.append(records_error)
    if series_error:
        notes.append(series_error)
    if known.defaults_assumed:
        notes.append(
            "knobs not on the command line taken at vLLM's defaults for the GPU: "
            + ", ".join(f"{k}={v}" for k, v in known.defaults_assumed.items())
        )
    if known.known:
        notes.append(f"engine configuration from {known.source}")
    diag = run_diagnosis(findings, fig, known, notes, path)
    # Failures above --max-failure-rate are the finding (no capacity advice); a cut-short
    # run says so first.
    return gate_run(diag, run)


def load_run(
    run_dir: Path,
) -> tuple[RunResult, list[RequestRecord], list[ServerSample], str | None, str | None]:
    """The run, its records, its server series, and why the series / the records could not
    be read (diagnose goes on without them, and says so)."""
    run = open_run(run_dir)  # a run cut short: summarised from its records
    records_error = None
    try:
        records = read_records(run_dir)
    except ServetuneError as exc:
        records = []
        records_error = f"{REQUESTS_FILE} could not be read ({exc.message})"
    samples, err = read_series_tolerant(run_dir)
    return run, records, samples, err, records_error


def diagnose_run(run_dir: str | Path, config: KnownConfig | None = None) -> Diagnosis:
    """Diagnose one RUN_DIR."""
    d = Path(run_dir).expanduser()
    run, records, samples, err, records_err = load_run(d)
    return diagnose_loaded(
        run, records, samples, config, err, path=str(d), records_error=records_err
    )
