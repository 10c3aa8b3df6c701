"""When the server failed the requests, the failures are the finding.

A run (or a sweep level) whose failure share is above ``--max-failure-rate`` measured the
server refusing, dropping or garbling work, not its capacity: latencies describe only the
requests that happened to succeed, a saturated-looking queue may be a rate limiter, an idle GPU
may be a crashed engine. So the diagnosis names the failures — by class, with an example and
what to look at — and gives no capacity advice from such a run: no knob, no GPUs.

A run that was cut short (killed) or interrupted is said first, so its figures are read as
partial.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from servetune.diagnose.model import Diagnosis, Finding
from servetune.results.record import ERROR_CLASSES, classify_error
from servetune.results.schema import DEFAULT_MAX_FAILURE_RATE, Failures, RunResult
from servetune.results.sweep_schema import LevelRow

WHAT_TO_DO: dict[str, str] = {
    "server_error": "read the server's log around the failures: an exception, an engine that "
    "died or restarted, a request it cannot serve",
    "rate_limited": "something in front of the engine (or the engine's own limit) refuses the "
    "rate: lower --request-rate / --max-concurrency, or raise the limit",
    "client_error": "the server refused the requests as sent: check --model, the API key, "
    "--endpoint and the prompt lengths against max_model_len",
    "connection_refused": "nothing listens at --base-url (the server is down, starting, or "
    "elsewhere)",
    "connection_reset": "the server or a proxy dropped connections mid-response: look for a "
    "crash or an out-of-memory kill in its log, or a proxy timeout",
    "timeout": "responses took longer than --request-timeout: the server is stuck or far past "
    "its capacity",
    "truncated": "streams ended without finish_reason or [DONE]: a proxy or load balancer cut "
    "them, or the server stopped mid-response",
    "malformed_event": "the stream carried events that do not parse: a proxy rewriting the body, "
    "or a server that is not OpenAI-compatible",
    "no_output": "the server answered with no token at all",
    "protocol_error": "the HTTP responses themselves were malformed: a proxy or a broken server",
    "other": "see the example message",
}

CAPACITY_KINDS = ("bottleneck", "healthy", "advisory")


def failures_of(run: RunResult) -> Failures:
    """The run's failure verdict; computed from the summary for files written before it."""
    if run.failures is not None:
        return run.failures
    s = run.summary
    classes: Counter[str] = Counter(s.error_classes)
    if not classes:
        for reason, n in s.errors.items():
            classes[classify_error(reason)] += n
    total = s.completed + s.failed
    return Failures(
        requests=total,
        failed=s.failed,
        share=s.failed / total if total else 0.0,
        max_share=run.config.max_failure_rate or DEFAULT_MAX_FAILURE_RATE,
        classes=dict(classes.most_common()),
        examples={c: next((e for e in s.errors if classify_error(e) == c), c) for c in classes},
    )


def _describe(classes: dict[str, int]) -> str:
    return ", ".join(f"{n} {c}" for c, n in classes.items())


def failure_finding(f: Failures, where: str = "") -> Finding | None:
    """The finding for failures above the threshold (None when within it)."""
    if not f.over:
        return None
    who = f" {where}" if where else ""
    top = next(iter(f.classes), "other")
    title = (
        f"The server failed {f.share:.0%} of the requests{who} ({_describe(f.classes)}): "
        "these failures are the finding — fix them before reading latencies or capacity"
    )
    evidence = [
        f"{f.failed} of {f.requests} requests failed; --max-failure-rate allows {f.max_share:.0%}"
    ]
    for cls, n in f.classes.items():
        example = f.examples.get(cls, "")
        evidence.append(
            f"{n} {cls} ({ERROR_CLASSES.get(cls, cls)})"
            + (f", e.g. {example!r}" if example else "")
        )
    evidence += [f"{cls}: {WHAT_TO_DO[cls]}" for cls in f.classes if cls in WHAT_TO_DO]
    return Finding(
        rule="failures",
        kind="warning",
        title=title,
        seed="(measurement validity) a run whose requests fail measures the failures, not the "
        "server's capacity: no capacity advice from it",
        confidence="high",
        priority=130,
        evidence=evidence,
        figures={
            "failed_share": f.share,
            **{f"failed_{c}": float(n) for c, n in f.classes.items()},
        },
        cause=top,
    )


def _partial_note(run: RunResult) -> str | None:
    if run.status == "cut_short":
        return next((w for w in run.warnings if "cut short" in w), "the run was cut short")
    if run.status == "interrupted":
        return "the run was interrupted (Ctrl-C): its figures cover only the requests it finished"
    if run.status == "running":
        return next((w for w in run.warnings if "still going" in w), "the run is still going")
    return None


def gate_run(diag: Diagnosis, run: RunResult) -> Diagnosis:
    """A run's diagnosis with failures as its finding and no capacity advice, when the run
    failed more requests than allowed; and a note first when it was cut short."""
    note = _partial_note(run)
    if note is not None:
        diag.notes.insert(0, note)
        diag.headline = f"({run.status.replace('_', ' ')}) {diag.headline}"
    gate = failure_finding(failures_of(run))
    if gate is None:
        return diag
    kept = [
        f.model_copy(update={"actions": [a for a in f.actions if not a.cost_step]})
        for f in diag.findings
        if f.kind == "warning" and f.rule != "failures"
    ]
    diag.findings = [gate, *kept]
    diag.healthy = False
    diag.headline = (f"({run.status.replace('_', ' ')}) " if note else "") + gate.title
    return diag


def failing_levels(rows: Sequence[LevelRow]) -> list[LevelRow]:
    return [r for r in rows if r.status in ("degraded", "failed")]


def sweep_failure_finding(rows: Sequence[LevelRow]) -> Finding | None:
    """The curve's finding when levels failed more requests than allowed."""
    bad = failing_levels(rows)
    if not bad:
        return None
    classes: Counter[str] = Counter()
    for r in bad:
        classes.update(r.error_classes)
    everything = len(bad) == len(rows)
    labels = ", ".join(r.label for r in bad)
    title = (
        f"The server failed requests at {'every level' if everything else labels} "
        f"({_describe(dict(classes.most_common()))})"
        + (
            ": the failures are the finding — no knee, no capacity advice from this sweep"
            if everything
            else ": those levels are left out of the knee and the SLO-max"
        )
    )
    evidence = [
        f"{r.label}: {r.failure_share:.0%} failed ({_describe(r.error_classes)}), status {r.status}"
        if r.failure_share is not None
        else f"{r.label}: status {r.status}"
        for r in bad
    ]
    evidence += [f"{cls}: {WHAT_TO_DO[cls]}" for cls in classes if cls in WHAT_TO_DO]
    return Finding(
        rule="failures",
        kind="warning",
        scope="curve",
        title=title,
        seed="(measurement validity) levels whose requests fail measure the failures, not the "
        "server's capacity",
        confidence="high",
        priority=130,
        evidence=evidence,
        figures={"failing_levels": float(len(bad)), "levels": float(len(rows))},
    )
