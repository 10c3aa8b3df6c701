"""The flags shared by every command that generates load (bench, sweep, sim run, tune).

Names follow ``vllm bench serve`` wherever it has one.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from servetune.checks import validated
from servetune.commands._flags import flag_of
from servetune.errors import ConfigError
from servetune.results.schema import (
    DEFAULT_MAX_FAILURE_RATE,
    DEFAULT_METRIC_PERCENTILES,
    DEFAULT_PERCENTILE_METRICS,
    BenchConfig,
    Slo,
)
from servetune.workload.seeds import fresh_seed

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


def parse_rate(text: str) -> float:
    """A request rate: a positive number or ``inf``."""
    t = text.strip().lower()
    if t in ("inf", "infinity", "unbounded"):
        return math.inf
    try:
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a rate: {text!r} (a number of req/s or 'inf')"
        ) from None


def parse_goodput(items: list[str] | None) -> Slo:
    """vLLM's ``--goodput ttft:500 tpot:50 e2el:10000`` (milliseconds)."""
    if not items:
        return Slo()
    values: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition(":")
        key = key.strip().lower()
        if not sep or key not in ("ttft", "tpot", "e2el"):
            raise ConfigError(
                f"--goodput {item!r}: expected KEY:MILLISECONDS with KEY one of ttft, tpot, e2el",
                hint="e.g. --goodput ttft:500 tpot:50 e2el:10000",
            )
        try:
            ms = float(value)
        except ValueError:
            raise ConfigError(
                f"--goodput {item!r}: {value!r} is not a number of milliseconds",
                hint="e.g. --goodput ttft:500 tpot:50 e2el:10000",
            ) from None
        if not ms > 0:  # NaN too: no latency is below it
            raise ConfigError(
                f"--goodput {item!r}: the SLO must be > 0 ms",
                hint="e.g. --goodput ttft:500 tpot:50 e2el:10000",
            )
        values[key] = ms
    return Slo(**values)


def parse_percentile_metrics(text: str) -> list[str]:
    """vLLM's ``--percentile-metrics ttft,tpot,itl`` (comma-separated metric names)."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in PERCENTILE_METRICS]
    if bad or not names:
        raise ConfigError(
            f"--percentile-metrics {text!r}: "
            + (f"unknown metric {bad[0]!r}" if bad else "no metric given"),
            hint=f"a comma-separated list of {', '.join(PERCENTILE_METRICS)}, "
            "e.g. --percentile-metrics ttft,tpot,itl,e2el",
        )
    return list(dict.fromkeys(names))


def parse_metric_percentiles(text: str) -> list[float]:
    """vLLM's ``--metric-percentiles 50,90,99`` (percentiles between 0 and 100)."""
    out: list[float] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            p = float(part)
        except ValueError:
            raise ConfigError(
                f"--metric-percentiles {text!r}: {part.strip()!r} is not a number",
                hint="e.g. --metric-percentiles 50,90,99,99.9",
            ) from None
        if not 0 < p <= 100 or math.isnan(p):
            raise ConfigError(
                f"--metric-percentiles {text!r}: {part.strip()} is not a percentile in (0, 100]",
                hint="e.g. --metric-percentiles 50,90,99,99.9",
            )
        out.append(p)
    if not out:
        raise ConfigError("--metric-percentiles is empty", hint="e.g. --metric-percentiles 99")
    return list(dict.fromkeys(out))


def parse_failure_rate(text: str) -> float:
    """``--max-failure-rate``: a share (0.05) or a percentage (5%)."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a failure rate: {text!r} (a share such as 0.05, or 5%)"
        ) from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(
            f"--max-failure-rate {text!r} is outside 0–1 (0 = no failure allowed, 1 = any)"
        )
    return v


def _endpoint(text: str) -> str:
    t = text.strip().lower().rstrip("/")
    if t in ("chat", "/v1/chat/completions", "chat/completions", "openai-chat"):
        return "chat"
    if t in ("completions", "/v1/completions", "openai"):
        return "completions"
    raise argparse.ArgumentTypeError(f"unknown endpoint {text!r}: use completions or chat")


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target")
    g.add_argument(
        "--base-url",
        default=None,
        help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 "
        "(default: start the embedded simulated engine)",
    )
    g.add_argument(
        "--model",
        default=None,
        help="the model, as `vllm bench serve --model` and `vllm serve` mean it: the name the "
        "requests carry unless --served-model-name says otherwise (default: the only one "
        "/v1/models lists); without --base-url, the model the simulated engine serves (from "
        "`servetune sim models`, a Hugging Face id or a config.json; default "
        "Qwen/Qwen2.5-7B-Instruct)",
    )
    g.add_argument(
        "--served-model-name",
        default=None,
        help="the name the server answers to, when it is not --model's (vLLM's "
        "--served-model-name)",
    )
    g.add_argument(
        "--endpoint",
        type=_endpoint,
        default="completions",
        help="completions (/v1/completions) or chat (/v1/chat/completions)",
    )
    g.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer token (default: $OPENAI_API_KEY)",
    )


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """Dataset, arrivals and client-behaviour flags."""
    g = p.add_argument_group("workload")
    g.add_argument(
        "--dataset-name",
        choices=["random", "sharegpt", "jsonl", "prefix", "multiturn", "trace"],
        default="random",
        help="multiturn: sessions whose turns carry the conversation so far (synthetic, or "
        "from --dataset-path: ShareGPT multi-turn JSON or a JSONL of sessions); trace: "
        "replay a Mooncake JSONL, an Azure LLM trace CSV or a servetune requests.jsonl at its "
        "own times (docs/workloads.md)",
    )
    g.add_argument(
        "--dataset-path", default=None, help="file for sharegpt / jsonl / multiturn / trace"
    )
    g.add_argument("--random-input-len", type=int, default=1024)
    g.add_argument("--random-output-len", type=int, default=128)
    g.add_argument(
        "--random-range-ratio",
        type=float,
        default=0.0,
        help="lengths uniform in [L·(1−r), L·(1+r)]",
    )
    g.add_argument(
        "--prefix-len",
        type=int,
        default=512,
        help="shared prefix tokens per group (--dataset-name prefix)",
    )
    g.add_argument(
        "--prefix-num-groups",
        type=int,
        default=8,
        help="number of distinct prefixes (--dataset-name prefix)",
    )
    g.add_argument("--sharegpt-output-len", type=int, default=None)
    add_session_arguments(p)
    g.add_argument(
        "--tokenizer",
        default=None,
        help="local HF tokenizer folder or tokenizer.json (loaded offline); "
        "default: the server's /tokenize, else an approximate count",
    )
    g.add_argument(
        "--num-prompts",
        type=int,
        default=None,
        help="requests to send (default 1000; with --duration: no limit)",
    )
    g.add_argument(
        "--duration",
        type=float,
        default=None,
        dest="duration_s",
        help="stop sending after this many seconds",
    )
    g.add_argument(
        "--request-rate",
        type=parse_rate,
        default=math.inf,
        help="req/s, or inf to send all at once (closed loop with --max-concurrency)",
    )
    g.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        help="gamma shape of the gaps: 1 = Poisson, lower = burstier",
    )
    g.add_argument("--arrival", choices=["poisson", "gamma", "constant"], default="poisson")
    g.add_argument("--max-concurrency", type=int, default=None, help="cap on requests in flight")
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the prompts and arrivals (default: a fresh one per run, recorded in "
        "run.json, so that a server's prefix cache never answers an earlier run's prompts; "
        "give a run's seed to repeat it exactly)",
    )
    g.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        dest="warmup_s",
        help="seconds at the start left out of the summary",
    )
    g.add_argument(
        "--cooldown",
        type=float,
        default=0.0,
        dest="cooldown_s",
        help="seconds at the end left out of the summary",
    )
    g.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="ask the server to generate exactly the planned output length (off by default, "
        "as in vllm bench serve: outputs may stop at EOS, and the summary counts the ones "
        "that came back shorter than asked)",
    )
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--request-timeout", type=float, default=600.0, dest="request_timeout_s")
    g.add_argument(
        "--workers",
        type=int,
        default=None,
        help="load-generating processes (default: as many as the rate needs)",
    )
    g.add_argument(
        "--http-client",
        choices=["fast", "aiohttp"],
        default="fast",
        help="transport: fast (lean HTTP/1.1, kernel arrival stamps; the default) or aiohttp "
        "(the general-purpose client, stamps taken when its reader wakes: a cross-check); "
        "neither uses an HTTP proxy nor follows a redirect",
    )
    g.add_argument(
        "--goodput",
        nargs="+",
        default=None,
        metavar="KEY:MS",
        help="SLOs, e.g. ttft:500 tpot:50 e2el:10000",
    )
    g.add_argument("--label", default=None)
    r = p.add_argument_group("verdict and reporting")
    r.add_argument(
        "--max-failure-rate",
        type=parse_failure_rate,
        default=DEFAULT_MAX_FAILURE_RATE,
        metavar="SHARE",
        help="share of failed requests above which the run ends with status degraded or "
        f"failed and a non-zero exit code (default {DEFAULT_MAX_FAILURE_RATE:g}; vllm bench "
        "serve has no such check and exits 0 whatever failed)",
    )
    r.add_argument(
        "--percentile-metrics",
        default=",".join(DEFAULT_PERCENTILE_METRICS),
        metavar="M1,M2,…",
        help="metrics whose percentiles the summary reports, from ttft, tpot, itl, e2el "
        "(default ttft,tpot,itl, as vllm bench serve)",
    )
    r.add_argument(
        "--metric-percentiles",
        default=",".join(f"{p:g}" for p in DEFAULT_METRIC_PERCENTILES),
        metavar="P1,P2,…",
        help='percentiles of those metrics, e.g. "25,50,75" (default 99, as vllm bench serve)',
    )


def turn_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    try:
        a = int(lo)
        b = int(hi) if sep else a
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a number of turns: {text!r} (N, or MIN:MAX)"
        ) from None
    return a, b


def _window(text: str) -> tuple[float, float | None]:
    lo, sep, hi = text.partition(":")
    try:
        a = float(lo) if lo.strip() else 0.0
        b = float(hi) if sep and hi.strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a window: {text!r} (START:END seconds of the trace, e.g. 0:600 or 300:)"
        ) from None
    if not sep:
        raise argparse.ArgumentTypeError(f"not a window: {text!r} (START:END, e.g. 0:600)")
    return a, b


def add_session_arguments(p: argparse.ArgumentParser) -> None:
    """Sessions (``--dataset-name multiturn``) and trace replay (``--dataset-name trace``)."""
    g = p.add_argument_group("sessions and traces")
    g.add_argument(
        "--multiturn-turns",
        type=turn_range,
        default=(4, 4),
        metavar="N|MIN:MAX",
        help="turns per synthetic session, fixed or uniform in MIN:MAX (default 4); a user "
        "message is --random-input-len tokens, an answer --random-output-len",
    )
    g.add_argument(
        "--multiturn-system-len",
        type=int,
        default=0,
        help="tokens of the system prompt each synthetic session starts with (default 0: none)",
    )
    g.add_argument(
        "--multiturn-system-prompts",
        type=int,
        default=1,
        help="distinct system prompts the sessions share (each draws one; default 1)",
    )
    g.add_argument(
        "--multiturn-think-time",
        type=float,
        default=0.0,
        metavar="S",
        help="mean seconds between an answer's end and the next turn (default 0)",
    )
    g.add_argument(
        "--multiturn-think-dist",
        choices=["exponential", "constant"],
        default="exponential",
        help="distribution of the think time (default exponential)",
    )
    g.add_argument(
        "--multiturn-max-context",
        type=int,
        default=None,
        metavar="TOKENS",
        help="the client's context cap, prompt + max_tokens (default: the server's "
        "max_model_len when it says, else none)",
    )
    g.add_argument(
        "--multiturn-on-overflow",
        choices=["truncate", "end"],
        default="truncate",
        help="a turn past the cap: truncate (drop the oldest exchanges, keep the system "
        "prompt; default) or end the session",
    )
    g.add_argument(
        "--request-rate-unit",
        choices=["sessions", "requests"],
        default="sessions",
        help="for session workloads, what --request-rate counts: new sessions/s (default) "
        "or requests/s (sessions then start at rate / mean turns)",
    )
    g.add_argument(
        "--session-header",
        default="X-Session-ID",
        help="header carrying each request's session id ('' for none; the OpenAI 'user' "
        "field carries it always; default X-Session-ID)",
    )
    g.add_argument(
        "--trace-format",
        choices=["auto", "mooncake", "azure", "servetune"],
        default="auto",
        help="the trace file's format (default: told from the file)",
    )
    g.add_argument(
        "--trace-time-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="multiply the trace's gaps by F (0.5 = twice as fast; default 1). A finite "
        "--request-rate instead replays the trace's shape at that mean rate",
    )
    g.add_argument(
        "--trace-window",
        type=_window,
        default=None,
        metavar="START:END",
        help="replay only the trace's requests in [START, END) seconds from its first",
    )


def session_configs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``multiturn`` and ``trace`` parts of a BenchConfig from the flags (a refusal is
    over the models' fields; the CLI shows the flags that set them, commands/_flags.py)."""
    from servetune.results.conversation import MultiturnConfig, TraceConfig

    out: dict[str, Any] = {}
    if hasattr(args, "multiturn_turns"):
        lo, hi = args.multiturn_turns
        out["multiturn"] = validated(
            MultiturnConfig,
            dict(
                turns_min=lo,
                turns_max=hi,
                system_prompt_len=args.multiturn_system_len,
                system_prompts=args.multiturn_system_prompts,
                think_time_s=args.multiturn_think_time,
                think_dist=args.multiturn_think_dist,
                max_context=args.multiturn_max_context,
                on_overflow=args.multiturn_on_overflow,
                rate_unit=args.request_rate_unit,
                session_header=args.session_header,
            ),
        )
    if hasattr(args, "trace_format"):
        start, end = args.trace_window if args.trace_window is not None else (0.0, None)
        out["trace"] = validated(
            TraceConfig,
            dict(
                format=args.trace_format,
                time_scale=args.trace_time_scale,
                window_start_s=start,
                window_end_s=end,
            ),
        )
    return out


def _check_numbers(args: argparse.Namespace) -> None:
    """What the flags set that is not the workload's model (BenchConfig checks its own)."""
    interval = getattr(args, "metrics_interval", None)
    if interval is not None and not 0 < interval < math.inf:  # was the scraper's ValueError
        raise ConfigError(
            f"--metrics-interval must be > 0 seconds (got {interval:g})",
            hint="e.g. --metrics-interval 1, or --no-metrics to scrape nothing",
        )


def workload_config_from_args(
    args: argparse.Namespace, *, fresh_seed_by_default: bool = True
) -> BenchConfig:
    """A BenchConfig from the target and workload flags. Without ``--seed`` a fresh seed is
    drawn (or 0 with ``fresh_seed_by_default=False``: the offline simulator keeps no cache
    between runs, and a fixed default makes its what-ifs repeat)."""
    _check_numbers(args)
    special = ("goodput", "percentile_metrics", "metric_percentiles")
    fields: dict[str, Any] = {
        k: getattr(args, k)
        for k in BenchConfig.model_fields
        if hasattr(args, k) and getattr(args, k) is not None and k not in special
    }
    if getattr(args, "percentile_metrics", None) is not None:
        fields["percentile_metrics"] = parse_percentile_metrics(args.percentile_metrics)
    if getattr(args, "metric_percentiles", None) is not None:
        fields["metric_percentiles"] = parse_metric_percentiles(args.metric_percentiles)
    if getattr(args, "num_prompts", None) is None:
        fields["num_prompts"] = 1000 if getattr(args, "duration_s", None) is None else 10**9
    if getattr(args, "seed", None) is None:
        fields["seed"] = fresh_seed() if fresh_seed_by_default else 0
    if getattr(args, "served_model_name", None) is not None:
        fields["model"] = args.served_model_name  # the name the requests carry
    fields["goodput"] = parse_goodput(getattr(args, "goodput", None))
    fields.update(session_configs(args))
    out: BenchConfig = validated(BenchConfig, fields, name=flag_of)
    return out


def num_prompts_given(args: argparse.Namespace) -> bool:
    return getattr(args, "num_prompts", None) is not None
