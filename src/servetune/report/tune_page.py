"""The report of a ``servetune tune`` result (``tune.json``): the best configuration as the
exact command line for its engine, its SLO-max rate with the spread of its repeats, the gain
over the baseline (``--baseline``, or the engine's default) measured in the same study (and
whether it beats the run-to-run noise), the search's setup, the repeats, the
one-knob-at-a-time table, the Pareto plot and the search's progress, every trial with its
verdict and every probe it ran."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servetune.report.figures import E2E as GOOD
from servetune.report.figures import GREY, KNEE, TTFT, Plot, new_figure, style_axes
from servetune.report.page import figure_of, render_page, write_page
from servetune.results.tune_file import (
    TUNE_FILE,
    Repeat,
    TrialRecord,
    TuneResult,
    TuneSpec,
    read_tune_result,
)
from servetune.sweep import fmt

HTML_FILE = "report.html"
UNITS = {
    "slo-max": "req/s within the SLOs",
    "goodput": "req/s of goodput",
    "throughput": "output tok/s",
    "pareto": "output tok/s",
}
STATUS_COLOURS = {
    "ok": TTFT,
    "no-rate": KNEE,
    "failed": KNEE,
    "pruned": GREY,
    "rejected": "#bcbd22",
    "duplicate": "#c7c7c7",
}


@dataclass
class Measured:
    """One configuration's objective: every measurement of it in the study."""

    label: str
    config: dict[str, Any]
    values: list[float]
    median: float | None
    mad: float | None
    unstable: bool

    @property
    def spread(self) -> str:
        if not self.values:
            return "not measured"
        if len(self.values) == 1:
            return f"{fmt.num(self.values[0])}, measured once (no spread: --repeats ≥ 2 gives one)"
        lo, hi = min(self.values), max(self.values)
        text = (
            f"median {fmt.num(self.median)} of {len(self.values)} measurements, "
            f"{fmt.num(lo)}–{fmt.num(hi)} (MAD {fmt.num(self.mad)})"
        )
        return text + (" — UNSTABLE" if self.unstable else "")


def _key(params: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in params.items()))


def measured(result: TuneResult, trial: TrialRecord | None, label: str) -> Measured | None:
    if trial is None:
        return None
    rep: Repeat | None = next(
        (r for r in result.repeats if _key(r.params) == _key(trial.params)), None
    )
    if rep is not None and rep.measured:
        return Measured(label, trial.config, rep.measured, rep.median, rep.mad, rep.unstable)
    values = [trial.value] if trial.value else []
    return Measured(label, trial.config, values, trial.value, None, False)


def pareto_plot(result: TuneResult) -> Plot | None:
    trials = [
        t
        for t in result.trials
        if t.throughput and t.p99_latency_ms is not None and t.status != "duplicate"
    ]
    if not trials:
        return None
    per_rate = result.spec.objective == "slo-max"
    fig = new_figure(9.5, 4.2, left=0.09, bottom=0.13)
    ax = fig.add_subplot(1, 1, 1)
    ax.scatter(
        [float(t.throughput or 0) for t in trials],
        [float(t.p99_latency_ms or 0) for t in trials],
        s=22,
        color=GREY,
        label="trials",
        zorder=2,
    )
    front = sorted(result.pareto, key=lambda t: t.throughput or 0.0)
    if front:
        ax.plot(
            [float(t.throughput or 0) for t in front],
            [float(t.p99_latency_ms or 0) for t in front],
            "o-",
            color=KNEE,
            label="Pareto front",
            zorder=3,
        )
    best = result.best
    if best is not None and best.throughput and best.p99_latency_ms is not None:
        ax.scatter(
            [float(best.throughput)],
            [float(best.p99_latency_ms)],
            s=140,
            marker="*",
            color=GOOD,
            label="best",
            zorder=5,
        )
    refs: list[tuple[TrialRecord | None, str, str]] = []
    if result.spec.baseline is not None:
        refs.append((result.baseline, "baseline", "s"))
        refs.append((result.default, "engine default", "D"))
    else:
        refs.append((result.baseline or result.default, "engine default", "s"))
    for ref, label, marker in refs:
        if ref is not None and ref.throughput and ref.p99_latency_ms is not None:
            ax.scatter(
                [float(ref.throughput)],
                [float(ref.p99_latency_ms)],
                s=70,
                marker=marker,
                facecolors="none",
                edgecolors="black",
                label=label,
                zorder=4,
            )
    unit = "req/s at its SLO-max rate" if per_rate else "output tok/s"
    ax.set_xlabel(f"throughput ({unit})", fontsize=9)
    ax.set_ylabel("P99 E2E latency there (ms)", fontsize=9)
    style_axes(ax)
    ax.legend(fontsize=8)
    caption = (
        "Each configuration measured: throughput against P99 end-to-end latency "
        + ("at its SLO-max rate" if per_rate else "at the workload's rate")
        + "; the red line joins the configurations no other beats on both."
    )
    return Plot("pareto", "Throughput vs P99 latency (Pareto front)", caption, fig)


def progress_plot(result: TuneResult) -> Plot | None:
    trials = [t for t in result.trials if t.status != "duplicate"]
    if len(trials) < 2:
        return None
    fig = new_figure(9.5, 3.4, left=0.09, bottom=0.16)
    ax = fig.add_subplot(1, 1, 1)
    for status, colour in STATUS_COLOURS.items():
        pts = [(t.number, float(t.value or 0.0)) for t in trials if t.status == status]
        if pts:
            ax.scatter(
                [x for x, _ in pts], [y for _, y in pts], s=26, color=colour, label=status, zorder=3
            )
    best = 0.0
    xs, ys = [], []
    for t in sorted(trials, key=lambda t: t.number):
        if t.status == "ok" and t.value:
            best = max(best, float(t.value))
        xs.append(t.number)
        ys.append(best)
    ax.step(xs, ys, where="post", color=GOOD, label="best so far", zorder=2)
    ax.set_xlabel("trial", fontsize=9)
    ax.set_ylabel(UNITS[result.spec.objective], fontsize=9)
    style_axes(ax)
    ax.legend(fontsize=8, ncol=4)
    caption = (
        "Each trial's objective as the search went (pruned: the prediction or the first probes "
        "showed it could not win; rejected: the memory planner refused it, nothing launched)."
    )
    return Plot("trials", "The search, trial by trial", caption, fig)


def _space_rows(spec: TuneSpec) -> list[tuple[str, str]]:
    rows = [
        (d.name, ", ".join("engine default" if v == "default" else str(v) for v in d.values))
        for d in spec.space.dims
    ]
    rows += [(name, f"fixed at {v}") for name, v in spec.space.fixed.items()]
    return rows


def _workload(spec: TuneSpec) -> str:
    w = spec.workload
    if w.dataset_name == "random":
        what = f"random prompts of {w.random_input_len} tokens, {w.random_output_len} out"
        if w.random_range_ratio:
            what += f" (±{w.random_range_ratio:.0%})"
    else:
        what = f"{w.dataset_name} {w.dataset_path or ''}".strip()
    return f"{what}; {w.num_prompts} requests per probe, {w.arrival} arrivals, seed {w.seed}"


def _gain_text(result: TuneResult, best: Measured | None, base: Measured | None) -> str:
    label = result.spec.reference_label
    if result.gain_over_baseline is None or best is None or base is None:
        if result.baseline is None:
            if result.spec.baseline is not None:
                return f"{label.capitalize()} was not measured (the study stopped before it)."
            return (
                "The engine's default configuration is not a point of this space (a --fix "
                "changed it), so no gain over it was measured."
            )
        if result.baseline.status != "ok":
            why = result.baseline.reason or result.baseline.limiting
            return (
                f"{label.capitalize()} was measured but served no rate "
                f"({result.baseline.status}{': ' + why if why else ''})."
            )
        if result.best is not None and _key(result.best.params) == _key(result.baseline.params):
            return f"None: no configuration searched beat {label}."
        return f"No gain over {label} could be computed."
    text = f"{result.gain_over_baseline:+.0%} over {label}, both measured in this study. "
    if result.gain_beyond_noise is True:
        text += (
            f"The best's lowest measurement is above {label}'s highest: the gain is beyond "
            "the run-to-run spread."
        )
    elif result.gain_beyond_noise is False:
        text += (
            "The two configurations' measurements overlap: the difference is within the "
            "run-to-run spread (not shown to be real)."
        )
    else:
        text += (
            "One of them was measured once (--repeats < 2, or a repeat failed): no spread to "
            "judge the gain against."
        )
    if (
        result.spec.baseline is not None
        and result.gain_over_default is not None
        and result.default is not None
    ):
        text += f" Over the engine's default: {result.gain_over_default:+.0%}."
    return text


def build_tune_report(path: Path, out_dir: Path | None = None, *, png: bool = True) -> Path:
    """Write ``report.html`` (and the plots' PNGs) for the tune result at ``path``."""
    result = read_tune_result(path)
    src = path / TUNE_FILE if path.is_dir() else path
    out = out_dir or src.parent
    plots = [p for p in (pareto_plot(result), progress_plot(result)) if p is not None]
    if png:
        out.mkdir(parents=True, exist_ok=True)
    figures = [figure_of(p, out if png else None) for p in plots]
    spec = result.spec
    best = measured(result, result.best, "best")
    base = measured(result, result.baseline, result.spec.reference_label)
    default = measured(result, result.default, "engine default")
    counts: dict[str, int] = {}
    for t in result.trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    where = f" ({spec.gpu})" if spec.gpu else ""
    html = render_page(
        "tune.html.j2",
        title=f"Tune: {spec.model} on {spec.engine}{where}",
        path=str(src),
        r=result,
        spec=spec,
        unit=UNITS[spec.objective],
        best=best,
        base=base,
        base_label="baseline" if spec.baseline is not None else "engine default",
        default=default if spec.baseline is not None else None,
        gain=_gain_text(result, best, base),
        counts=sorted(counts.items()),
        space=_space_rows(spec),
        workload=_workload(spec),
        figures=figures,
    )
    return write_page(out / HTML_FILE, html)
