"""Are two runs comparable? The workload, the client and the target, field by field.

A *refusal* (``severity="refuse"``) is a difference that changes what the server was asked to
do — another dataset, lengths, arrival process or rate, concurrency cap, model, endpoint,
warm-up, run length — or requests that came out a different size; ``compare`` stops unless
``--force`` (then each is printed as a warning). A *note* is a difference expected between
runs of one configuration (the seed) or one that does not shape the load.

The engine flags that differ are read from what each run recorded: the simulated engine's
configuration, the server command a sweep started, and the KV-cache configuration the
server's ``/metrics`` showed (``vllm:cache_config_info``) and its version.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel

from servetune.results.schema import BenchConfig, RunResult

Severity = Literal["refuse", "warn", "note"]
LENGTH_TOLERANCE = 0.02
"""Measured mean prompt / output lengths may differ by 2% (tokenizer rounding)."""
LENGTH_SAMPLING_Z = 4.0
"""…and by what drawing the requests alone makes of their means: a difference within this
many standard errors (from each run's spread of lengths) is another draw of the same lengths
(two seeds of ``--random-range-ratio 0.9`` differ by 2.4% ± 2.4%; a ShareGPT sample more)."""


class Difference(BaseModel):
    field: str
    a: Any = None
    b: Any = None
    severity: Severity
    why: str = ""

    def text(self) -> str:
        why = f" — {self.why}" if self.why else ""
        return f"{self.field}: {_show(self.a)} vs {_show(self.b)}{why}"


class FlagDifference(BaseModel):
    flag: str
    a: Any = None
    b: Any = None
    source: str
    """Where the values were read: sim config, server command, /metrics."""


def _show(v: Any) -> str:
    if v is None:
        return "unset"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:g}"
    return str(v)


_WORKLOAD: tuple[tuple[str, str], ...] = (
    ("dataset_name", "another dataset"),
    ("dataset_path", "another dataset file"),
    ("endpoint", "another API endpoint"),
    ("request_rate", "another offered load"),
    ("arrival", "another arrival process"),
    ("burstiness", "another arrival burstiness"),
    ("max_concurrency", "another concurrency cap"),
    ("ignore_eos", "outputs may stop at EOS in one run only"),
    ("warmup_s", "another warm-up excluded from the figures"),
    ("cooldown_s", "another cool-down excluded from the figures"),
    ("num_prompts", "another run length (tail percentiles and a growing queue depend on it)"),
    ("duration_s", "another run length"),
)
_BY_DATASET: dict[str, tuple[str, ...]] = {
    "random": ("random_input_len", "random_output_len", "random_range_ratio"),
    "prefix": (
        "random_input_len",
        "random_output_len",
        "random_range_ratio",
        "prefix_len",
        "prefix_num_groups",
    ),
    "sharegpt": ("sharegpt_output_len",),
    "jsonl": (),
}
_NOTES: tuple[tuple[str, str], ...] = (
    ("seed", "another draw of the same workload (expected between repeats)"),
    ("temperature", ""),
    ("tokenizer", "another token counter shaped the prompts"),
    ("workers", ""),
    ("http_client", ""),
    ("request_timeout_s", ""),
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def config_differences(a: BenchConfig, b: BenchConfig) -> list[Difference]:
    out: list[Difference] = []
    fields = list(_WORKLOAD)
    if a.dataset_name == b.dataset_name:
        fields += [(f, "other lengths") for f in _BY_DATASET.get(a.dataset_name, ())]
    for name, why in fields:
        va, vb = getattr(a, name), getattr(b, name)
        if not _same(va, vb):
            out.append(Difference(field=name, a=va, b=vb, severity="refuse", why=why))
    for name, why in _NOTES:
        va, vb = getattr(a, name), getattr(b, name)
        if not _same(va, vb):
            out.append(Difference(field=name, a=va, b=vb, severity="note", why=why))
    ga, gb = a.goodput, b.goodput
    if ga != gb:
        out.append(
            Difference(
                field="goodput SLO",
                a=ga.model_dump(exclude_none=True),
                b=gb.model_dump(exclude_none=True),
                severity="note",
                why="goodput is recomputed for both with one SLO",
            )
        )
    return out


def _mean_len(run: RunResult, which: str) -> float | None:
    stats = getattr(run.summary, which)
    return None if stats.mean is None else float(stats.mean)


def _mean_len_se(run: RunResult, which: str) -> float:
    """Standard error of a run's mean length (0 when every request had the same length)."""
    stats = getattr(run.summary, which)
    if stats.std is None or not stats.count:
        return 0.0
    return float(stats.std) / math.sqrt(stats.count)


def lengths_differ(la: float, lb: float, se_a: float, se_b: float) -> bool:
    """Whether two runs' mean lengths differ beyond tokenizer rounding *and* beyond the
    chance of drawing the requests (:data:`LENGTH_SAMPLING_Z` standard errors)."""
    diff = abs(la - lb)
    return diff / max(la, lb) > LENGTH_TOLERANCE and diff > LENGTH_SAMPLING_Z * math.hypot(
        se_a, se_b
    )


def run_differences(a: RunResult, b: RunResult) -> list[Difference]:
    """Everything that keeps two runs from measuring the same thing (see the module doc)."""
    out = config_differences(a.config, b.config)
    if a.target.model != b.target.model:
        out.append(
            Difference(
                field="model",
                a=a.target.model,
                b=b.target.model,
                severity="refuse",
                why="another model",
            )
        )
    for which, name in (
        ("input_tokens_per_request", "measured prompt length (mean tokens)"),
        ("output_tokens_per_request", "measured output length (mean tokens)"),
    ):
        la, lb = _mean_len(a, which), _mean_len(b, which)
        if la and lb and lengths_differ(la, lb, _mean_len_se(a, which), _mean_len_se(b, which)):
            out.append(
                Difference(
                    field=name,
                    a=round(la, 1),
                    b=round(lb, 1),
                    severity="refuse",
                    why="the requests were not the same size (a server stopping at EOS, "
                    "another tokenizer?)",
                )
            )
    for run, side in ((a, "A"), (b, "B")):
        if run.status != "complete":
            out.append(
                Difference(
                    field=f"run {side} status",
                    a=a.status,
                    b=b.status,
                    severity="refuse",
                    why=(
                        "more of its requests failed than its --max-failure-rate allows: its "
                        "latencies describe only the requests that succeeded"
                        if run.status == "degraded"
                        else "a run that did not finish measured only part of its load"
                    ),
                )
            )
            break
    behind = [s for s, r in (("A", a), ("B", b)) if r.client_health.behind]
    if behind:
        out.append(
            Difference(
                field="client behind",
                a=a.client_health.behind,
                b=b.client_health.behind,
                severity="warn",
                why=f"the client fell behind its schedule in run {', '.join(behind)}: "
                "the load offered was lower than planned",
            )
        )
    return out


_SIM_SKIP = {
    "defaults_applied",
    "memory",
    "vllm_serve_args",
    "engine",
    "virtual_duration_s",
    "engine_busy_share",
    "steps",
}
_CACHE_KEYS = ("kv_cache_blocks", "kv_block_size", "gpu_memory_utilization", "kv_cache_dtype")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def engine_flags(run: RunResult, server_cmd: str | None = None) -> dict[str, tuple[Any, str]]:
    """flag → (value, source) from everything the run recorded about its engine."""
    out: dict[str, tuple[Any, str]] = {}
    if run.server is not None:
        summary = run.server.summary or {}
        for key in _CACHE_KEYS:
            if key in summary:
                name = "KV-cache blocks" if key == "kv_cache_blocks" else _flag(key)
                if key == "kv_block_size":
                    name = "--block-size"
                out[name] = (summary[key], "/metrics cache_config_info")
        if summary.get("engine_version"):
            out["engine version"] = (summary["engine_version"], "/metrics")
        if run.server.engine:
            out["engine"] = (run.server.engine, "/metrics")
    if server_cmd:
        from servetune.errors import ConfigError
        from servetune.knobs import flag, parse_command

        try:
            parsed = parse_command(server_cmd)
        except ConfigError:
            out["server command"] = (server_cmd, "server command")
        else:
            for key, value in parsed.values.items():
                name = flag(parsed.engine, key) or _flag(key)
                out[name] = (value, "server command")
    sim = run.target.simulated
    if sim:
        for key, value in sim.items():
            if key in _SIM_SKIP or isinstance(value, dict | list):
                continue
            out[_flag(key) if key not in ("gpu", "model") else key] = (value, "simulated engine")
    return out


def flag_differences(
    a: RunResult, b: RunResult, cmd_a: str | None = None, cmd_b: str | None = None
) -> tuple[list[FlagDifference], bool]:
    """The engine flags that differ, and whether anything was recorded to tell."""
    fa, fb = engine_flags(a, cmd_a), engine_flags(b, cmd_b)
    out: list[FlagDifference] = []
    for flag in sorted(fa.keys() | fb.keys()):
        va, sa = fa.get(flag, (None, ""))
        vb, sb = fb.get(flag, (None, ""))
        both = flag in fa and flag in fb
        # a flag one run recorded and the other did not counts only from the same source
        # (the other run simply had no such record otherwise)
        if (both and not _same(va, vb)) or (not both and sa == sb):
            out.append(FlagDifference(flag=flag, a=va, b=vb, source=sa or sb))
    return out, bool(fa or fb)
