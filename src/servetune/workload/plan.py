"""The plan of a run: every request and its scheduled send time, fixed before the start."""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict

from servetune.checks import validated
from servetune.errors import ConfigError
from servetune.results.schema import BenchConfig
from servetune.workload.arrivals import arrival_offsets, count_for_duration
from servetune.workload.datasets import build_dataset
from servetune.workload.sessions import Session
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import TokenCounter

DEFAULT_NUM_PROMPTS = 1000
_CLOSED_LOOP_DURATION_PROMPTS = 200_000
_CLOSED_LOOP_SESSIONS = 10_000


class Plan(BaseModel):
    """Requests in send order with their offsets (ns from the run's start)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    requests: list[RequestSpec]
    offsets_ns: list[int]
    duration_ns: int | None = None
    """Stop sending at this offset (``--duration``)."""
    planned_rate: float | None = None
    """The realized rate of the plan: (n − 1) / span of offsets; None when unbounded. For
    sessions: requests/s when every session runs all its turns."""
    sessions: list[Session] | None = None
    """Session workloads: the sessions in start order. ``requests`` then holds every turn
    (session by session) with its user message as the prompt and its nominal prompt length
    (answers as long as planned), ``offsets_ns`` each turn's session start; ``session_offsets_ns``
    when each session starts. A later turn is sent when the answer before it has ended and the
    think time passed (closed loop within a session)."""
    session_offsets_ns: list[int] | None = None

    def __len__(self) -> int:
        return len(self.offsets_ns)


def validate_config(cfg: BenchConfig) -> None:
    """CFG's ranges and rules, as the model states them (a copy made with ``model_copy``
    skipped them): a ConfigError naming the fields."""
    validated(BenchConfig, cfg.model_dump(exclude_unset=True))


def plan_size(cfg: BenchConfig, num_prompts_given: bool = True) -> int:
    """Number of requests to plan: --num-prompts, or enough to fill --duration."""
    if cfg.duration_s is None:
        return cfg.num_prompts
    if math.isinf(cfg.request_rate):
        cap = _CLOSED_LOOP_DURATION_PROMPTS
    else:
        cap = count_for_duration(cfg.request_rate, cfg.duration_s)
    return min(cfg.num_prompts, cap) if num_prompts_given else cap


def session_rate(cfg: BenchConfig) -> float:
    """New sessions per second: ``--request-rate`` in sessions/s, or requests/s over the mean
    turns per session (``--request-rate-unit``)."""
    if cfg.multiturn.rate_unit == "sessions" or math.isinf(cfg.request_rate):
        return cfg.request_rate
    if cfg.dataset_path is not None:
        return cfg.request_rate  # the file's turns are known only once read: see _sessions_plan
    return cfg.request_rate / cfg.multiturn.mean_turns


def make_plan(cfg: BenchConfig, tok: TokenCounter, num_prompts_given: bool = True) -> Plan:
    """Draw the dataset and the arrivals, reproducibly from ``cfg.seed``."""
    validate_config(cfg)
    if cfg.dataset_name == "multiturn":
        return _sessions_plan(cfg, tok)
    if cfg.dataset_name == "trace":
        return _trace_plan(cfg, tok, num_prompts_given)
    n = plan_size(cfg, num_prompts_given)
    arrival = "poisson" if cfg.arrival == "poisson" and cfg.burstiness == 1.0 else cfg.arrival
    if arrival == "poisson" and cfg.burstiness != 1.0:
        arrival = "gamma"
    offsets = arrival_offsets(arrival, cfg.request_rate, n, cfg.seed, cfg.burstiness)
    duration_ns = None if cfg.duration_s is None else int(cfg.duration_s * 1e9)
    if duration_ns is not None:
        offsets = offsets[offsets < cfg.duration_s]
        n = len(offsets)
    # A long closed-loop duration run reuses a bounded set of distinct prompts.
    distinct = min(n, 5000) if cfg.duration_s is not None else n
    base = build_dataset(cfg, tok, distinct)
    requests = base if distinct == n else [base[i % distinct] for i in range(n)]
    offsets_ns = (offsets * 1e9).astype(np.int64).tolist()
    planned = None
    if not math.isinf(cfg.request_rate) and n > 1 and offsets[-1] > 0:
        planned = (n - 1) / float(offsets[-1])
    if n == 0:
        raise ConfigError(
            "the plan is empty: the duration is too short for the request rate",
            hint="lengthen the duration or raise the rate",
        )
    return Plan(
        requests=requests, offsets_ns=offsets_ns, duration_ns=duration_ns, planned_rate=planned
    )


def _arrivals(cfg: BenchConfig, rate: float, n: int) -> np.ndarray:
    arrival = "poisson" if cfg.arrival == "poisson" and cfg.burstiness == 1.0 else cfg.arrival
    if arrival == "poisson" and cfg.burstiness != 1.0:
        arrival = "gamma"
    return arrival_offsets(arrival, rate, n, cfg.seed, cfg.burstiness)


def _sessions_plan(cfg: BenchConfig, tok: TokenCounter) -> Plan:
    """Sessions arriving open-loop at the session rate; ``--num-prompts`` counts sessions."""
    from servetune.workload.datasets.conversations import file_sessions
    from servetune.workload.datasets.multiturn import synthetic_sessions

    rate = session_rate(cfg)
    n = cfg.num_prompts
    if cfg.duration_s is not None:
        cap = (
            _CLOSED_LOOP_SESSIONS if math.isinf(rate) else count_for_duration(rate, cfg.duration_s)
        )
        n = min(n, cap)
    if cfg.dataset_path is not None:
        sessions = file_sessions(cfg, tok, n)
        if cfg.multiturn.rate_unit == "requests" and not math.isinf(cfg.request_rate):
            mean = sum(len(s.turns) for s in sessions) / len(sessions)
            rate = cfg.request_rate / mean
    else:
        sessions = synthetic_sessions(cfg, tok, n)
    starts = _arrivals(cfg, rate, len(sessions))
    if cfg.duration_s is not None:
        keep = int(np.searchsorted(starts, cfg.duration_s, side="left"))
        sessions, starts = sessions[:keep], starts[:keep]
    if not sessions:
        raise ConfigError.over_fields(
            "the plan is empty: {duration_s} is too short for {request_rate}"
        )
    starts_ns = (starts * 1e9).astype(np.int64).tolist()
    requests: list[RequestSpec] = []
    offsets_ns: list[int] = []
    for s, at in zip(sessions, starts_ns, strict=True):
        for t, p in zip(s.turns, s.nominal_prompt_tokens(), strict=True):
            requests.append(RequestSpec(prompt=t.user, input_len=p, output_len=t.output_len))
            offsets_ns.append(at)
    planned = None
    if not math.isinf(rate) and len(starts) > 1 and starts[-1] > 0:
        planned = (len(starts) - 1) / float(starts[-1]) * len(requests) / len(sessions)
    return Plan(
        requests=requests,
        offsets_ns=offsets_ns,
        duration_ns=None if cfg.duration_s is None else int(cfg.duration_s * 1e9),
        planned_rate=planned,
        sessions=sessions,
        session_offsets_ns=starts_ns,
    )


def _trace_plan(cfg: BenchConfig, tok: TokenCounter, num_prompts_given: bool) -> Plan:
    """The trace's requests at its own times: windowed (``--trace-window``, trace seconds),
    then scaled — to ``--request-rate`` when it is finite (the trace's shape at that mean
    rate), else by ``--trace-time-scale``; ``--num-prompts`` (when given) keeps the first N."""
    from servetune.workload.datasets.trace import trace_path, trace_requests

    specs, t = trace_requests(cfg, tok)
    tc = cfg.trace
    end = math.inf if tc.window_end_s is None else tc.window_end_s
    keep = (t >= tc.window_start_s) & (t < end)
    if not keep.any():
        raise ConfigError.over_fields(
            f"{{trace_window}} {tc.window_start_s:g}:{'' if tc.window_end_s is None else end:} "
            f"holds no request of {trace_path(cfg)} (it spans 0 to {float(t[-1]):.3f} s)",
            hint="pick a window inside the trace's span",
        )
    idx = np.flatnonzero(keep)
    if num_prompts_given:
        idx = idx[: cfg.num_prompts]
    specs = [specs[int(i)] for i in idx]
    t = t[idx] - t[idx[0]]
    span = float(t[-1]) if len(t) else 0.0
    if not math.isinf(cfg.request_rate) and len(t) > 1 and span > 0:
        t = t * ((len(t) - 1) / cfg.request_rate / span)
    else:
        t = t * tc.time_scale
    duration_ns = None
    if cfg.duration_s is not None:
        duration_ns = int(cfg.duration_s * 1e9)
        cut = int(np.searchsorted(t, cfg.duration_s, side="left"))
        specs, t = specs[:cut], t[:cut]
    if not specs:
        raise ConfigError.over_fields(
            "the plan is empty: {duration_s} ends before the trace's first request"
        )
    planned = (len(t) - 1) / float(t[-1]) if len(t) > 1 and t[-1] > 0 else None
    return Plan(
        requests=specs,
        offsets_ns=(t * 1e9).astype(np.int64).tolist(),
        duration_ns=duration_ns,
        planned_rate=planned,
    )
