"""``sim run``: the simulated engine on a virtual clock over a whole workload.

The workload is the one ``bench`` would send (``make_plan``: same datasets, arrivals, seed);
the client is modelled as a perfect one (it sends on schedule; ``--max-concurrency`` holds
requests until a slot frees, first in first out). Writes the same files as a real bench:
``requests.jsonl`` (RequestRecord, ``tokens_source="sim"``, one chunk per token),
``server_metrics.jsonl`` (a scrape every 0.5 s of virtual time: KV use, running, waiting,
preemptions, token counters and cumulative TTFT/TPOT/ITL/E2E/queue/prefill/decode
histograms) and
``run.json`` (RunResult, with the engine configuration and memory plan in
``target.simulated``).
"""

from __future__ import annotations

import gc
import math
import sys
import time
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
from pydantic import BaseModel

from servetune.errors import ConfigError
from servetune.loadgen.health import client_health
from servetune.metrics.engine_maps import VLLM_V1
from servetune.metrics.run_result import run_result, run_summary
from servetune.metrics.server_summary import cache_config, summarize_server
from servetune.metrics.summary import assess_failures, run_status
from servetune.results import server_series as ss
from servetune.results.environment import this_machine
from servetune.results.io import (
    REQUESTS_FILE,
    SERVER_METRICS_FILE,
    LineAppender,
    ensure_result_dir,
    record_line,
    write_run_result,
)
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, Environment, RunResult, ServerInfo, TargetInfo
from servetune.results.server_series import Histogram, ServerSample
from servetune.sim.config import EngineConfig, ResolvedConfig
from servetune.sim.engine import Engine, SimRequest
from servetune.sim.exposition import cache_config_labels
from servetune.sim.frontend import ApiServer, SharedIntake
from servetune.sim.memory import MemoryPlan, plan_memory
from servetune.workload.arrivals import arrival_offsets
from servetune.workload.plan import Plan, make_plan, plan_size, validate_config
from servetune.workload.random_prompts import sample_lengths
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import ApproxTokenizer, load_tokenizer

SAMPLE_INTERVAL_S = 0.5
NS = 1_000_000_000

# What a real scrape of the simulated server's /metrics would map to each concept.
NAMES_FOUND = {
    ss.KV_CACHE_USAGE: "vllm:kv_cache_usage_perc",
    ss.RUNNING: "vllm:num_requests_running",
    ss.WAITING: "vllm:num_requests_waiting",
    ss.PREEMPTIONS_TOTAL: "vllm:num_preemptions_total",
    ss.PROMPT_TOKENS_TOTAL: "vllm:prompt_tokens_total",
    ss.GENERATION_TOKENS_TOTAL: "vllm:generation_tokens_total",
    ss.REQUESTS_FINISHED_TOTAL: "vllm:request_success_total",
    ss.REQUESTS_ABORTED_TOTAL: 'vllm:request_success_total{finished_reason="abort"}',
    ss.PREFIX_CACHE_HITS_TOTAL: "vllm:prefix_cache_hits_total",
    ss.PREFIX_CACHE_QUERIES_TOTAL: "vllm:prefix_cache_queries_total",
    ss.TTFT_SECONDS: "vllm:time_to_first_token_seconds",
    ss.TPOT_SECONDS: "vllm:request_time_per_output_token_seconds",
    ss.ITL_SECONDS: "vllm:inter_token_latency_seconds",
    ss.E2E_SECONDS: "vllm:e2e_request_latency_seconds",
    ss.QUEUE_SECONDS: "vllm:request_queue_time_seconds",
    ss.PREFILL_SECONDS: "vllm:request_prefill_time_seconds",
    ss.DECODE_SECONDS: "vllm:request_decode_time_seconds",
}


def as_server_sample(
    sample: dict[str, Any], last: dict[str, tuple[dict[str, Any], Histogram]] | None = None
) -> ServerSample:
    """A :func:`server_sample` dict as the object a scraper keeps (no validation: it is ours).
    ``last``: the previous scrape's histograms by name; one whose snapshot did not change
    (the same dict) is the same object again."""
    hists = {}
    for k, h in sample["histograms"].items():
        prev = last.get(k) if last is not None else None
        if prev is None or prev[0] is not h:
            prev = (h, _model(Histogram, {"sum": h["sum"], "count": h["count"], **h}, _HIST_SET))
            if last is not None:
                last[k] = prev
        hists[k] = prev[1]
    values = {"t": sample["t"], "values": sample["values"], "histograms": hists}
    return _model(ServerSample, values, _SAMPLE_SET)


_HIST_SET = frozenset(("buckets", "sum", "count"))
_SAMPLE_SET = frozenset(("t", "values", "histograms"))


def _model(cls: type[_M], d: dict[str, Any], fields_set: frozenset[str]) -> _M:
    """``_construct(cls, values)`` when ``d`` already is the dict it would make (every field,
    in its order) and ``fields_set`` the fields given: a sample and its histograms per scrape.
    tests/sim/test_offline_api.py checks the samples against ``_construct``'s."""
    obj = cls.__new__(cls)
    _set(obj, "__dict__", d)
    _set(obj, "__pydantic_fields_set__", set(fields_set))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


def server_sample(eng: Engine, t: float) -> dict[str, Any]:
    """One scrape of the engine's state, in the ServerSample form."""
    c = eng.counters
    pool = eng.pool
    values = {
        ss.KV_CACHE_USAGE: pool.usage,
        ss.RUNNING: float(eng.num_running),
        ss.WAITING: float(eng.num_waiting),
        ss.PREEMPTIONS_TOTAL: float(c.preemptions),
        ss.PROMPT_TOKENS_TOTAL: float(c.prompt_tokens),
        ss.GENERATION_TOKENS_TOTAL: float(c.generation_tokens),
        ss.REQUESTS_FINISHED_TOTAL: float(sum(c.finished.values())),
        ss.REQUESTS_ABORTED_TOTAL: float(c.finished.get("abort", 0)),
        # counters, as vLLM V1 exposes them: a window's hit rate is Δhits / Δqueries
        ss.PREFIX_CACHE_HITS_TOTAL: float(pool.hits),
        ss.PREFIX_CACHE_QUERIES_TOTAL: float(pool.queries),
    }
    return {
        "t": t,
        "values": values,
        "histograms": {
            ss.TTFT_SECONDS: eng.h_ttft.snapshot(),
            ss.TPOT_SECONDS: eng.h_tpot.snapshot(),
            ss.ITL_SECONDS: eng.h_itl.snapshot(),
            ss.E2E_SECONDS: eng.h_e2e.snapshot(),
            ss.QUEUE_SECONDS: eng.h_queue.snapshot(),
            ss.PREFILL_SECONDS: eng.h_prefill.snapshot(),
            ss.DECODE_SECONDS: eng.h_decode.snapshot(),
        },
    }


_DEFAULTS: dict[type, tuple[dict[str, Any], dict[str, Callable[[], Any]]]] = {}
_set = object.__setattr__
_M = TypeVar("_M", bound=BaseModel)


def _construct(cls: type[_M], values: dict[str, Any]) -> _M:
    """``cls.model_construct(**values)`` without its per-field loop (a record per simulated
    request, a sample per 0.5 s): pydantic's own construct steps on a dict holding every
    field, the ones not given at their defaults. tests/sim/test_offline_api.py checks it
    against ``model_construct``."""
    known = _DEFAULTS.get(cls)
    if known is None:
        plain: dict[str, Any] = {}
        factories: dict[str, Callable[[], Any]] = {}
        for name, field in cls.model_fields.items():
            if field.default_factory is not None:
                factories[name] = field.default_factory  # type: ignore[assignment]
            elif not field.is_required():
                plain[name] = field.get_default()
        known = _DEFAULTS[cls] = (plain, factories)
    plain, factories = known
    d = {**plain, **values}
    for name, factory in factories.items():
        if name not in values:
            d[name] = factory()
    obj = cls.__new__(cls)
    _set(obj, "__dict__", d)
    _set(obj, "__pydantic_fields_set__", set(values))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


def _record(values: dict[str, Any]) -> RequestRecord:
    return _construct(RequestRecord, values)


_HASHES: dict[int, tuple[tuple[str, int, int], ...]] = {}


def _prompt_hashes(idx: int, nblocks: int) -> tuple[tuple[str, int, int], ...]:
    """Block keys of prompt ``idx`` (the same objects for every run that sends it)."""
    have = _HASHES.get(idx, ())
    if len(have) < nblocks:
        have = _HASHES[idx] = have + tuple(("p", idx, b) for b in range(len(have), nblocks))
    return have[:nblocks]


def _too_long_message(prompt: int, out: int, max_len: int) -> str:
    return (
        f"This model's maximum context length is {max_len} tokens. However, you requested "
        f"{prompt + out} tokens ({prompt} in the messages, {out} in the completion). Please "
        "reduce the length of the messages or completion."
    )


class OfflineRun:
    """The virtual-clock loop: arrivals → engine → records and scrapes."""

    def __init__(
        self,
        plan: Plan,
        cfg: BenchConfig,
        r: ResolvedConfig,
        mem: MemoryPlan,
        requests_out: LineAppender | None = None,
        samples_out: LineAppender | None = None,
        progress: bool = False,
        warm_prompts: int = 0,
        engine: Engine | None = None,
        prompt_ids: bool = False,
        token_times: bool = True,
        keep_series: bool = False,
    ) -> None:
        """``warm_prompts``: the first N prompts of the plan are already in the prefix cache
        (a server that served them before, e.g. ``vllm bench serve``'s test request).
        ``engine``: run on this engine (its clock, prefix cache and counters carry over from
        what it ran before: a series of runs against one server); records are timed from
        this run's start. ``prompt_ids``: prompt ``i`` of every run is the same text, so its
        full blocks are shared across runs (vLLM's seeded random dataset does this: prompt
        ``i`` starts with the same tokens whatever the number of prompts or their length)."""
        self.plan = plan
        self.warm_prompts = warm_prompts
        self.prompt_ids = prompt_ids
        self.token_times = token_times
        """False: records keep the first and last token times only (no chunk_ns)."""
        self.cfg = cfg
        self.r = r
        self.eng = engine if engine is not None else Engine(r, mem)
        self.t0 = self.eng.now
        self.id_base = self.eng.next_id
        self.requests_out = requests_out
        self.samples_out = samples_out
        self.progress = progress
        self.records: list[RequestRecord] = []
        self.api = ApiServer(0, 0)
        self.samples = 0
        self.keep_series = keep_series or samples_out is not None
        self.series: list[ServerSample] = []
        """The scrapes (written to ``samples_out`` or kept with ``keep_series``), for the
        run's server summary."""
        self._buf: list[bytes] = []
        self._hist_last: dict[str, tuple[dict[str, Any], Histogram]] = {}
        self._done: list[tuple[SimRequest, int, int, int]] = []
        self._step0 = self.eng.step
        """The engine's first step of this run (``_deliv`` is indexed from it)."""
        self._shift = round(self.t0 * NS)
        """This run's start on the engine clock (ns): records are timed from it."""
        self._deliv: list[int] = []
        self._deliv_a = array("q")
        """``_deliv`` as int64s (what ``requests.jsonl`` lines are written from)."""
        """When the tokens of each step since ``_step0`` reached the clients (run clock, ns).
        One int per step, shared: a record's token times are slices of this list (the
        requests of a step all get its delivery time), so a run makes one int per step, not
        one per token."""
        """Finished requests whose records are not made yet (made by the 256)."""

    def _record(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        if self.requests_out is not None:
            self._buf.append(record_line(rec))
            if len(self._buf) >= 256:
                self.requests_out.write(b"".join(self._buf))
                self._buf.clear()

    def _flush(self) -> None:
        if self.requests_out is not None and self._buf:
            self.requests_out.write(b"".join(self._buf))
            self._buf.clear()

    def run(self) -> None:
        plan, eng, cfg = self.plan, self.eng, self.cfg
        specs = plan.requests
        t0 = self.t0
        t0_ns = round(t0 * NS)
        base = self.id_base
        eff = eng.model.eff
        chat = self.cfg.endpoint == "chat"
        # the chat template is rendered for the whole burst first (shared), then the intake
        # proper takes the requests one by one (servetune.sim.frontend)
        render_ns = round(eff.frontend_chat_per_request_ms * 1e6) if chat else 0
        render = SharedIntake(render_ns)
        api = self.api = ApiServer(
            round(eff.frontend_per_request_ms * 1e6),
            round(eff.frontend_latency_ms * 1e6),
            round(
                (eff.frontend_per_token_us + (eff.frontend_chat_per_token_us if chat else 0.0))
                * 1e3
            ),
        )
        offsets = plan.offsets_ns
        n = len(offsets)
        eng.next_id = base + n
        cap = cfg.max_concurrency
        max_len = self.r.max_model_len
        caching = self.r.enable_prefix_caching
        B = self.r.block_size
        prefix_blocks = cfg.prefix_len // B if cfg.dataset_name == "prefix" else 0
        eligible: dict[int, int] = {}
        pending: deque[int] = deque()
        inflight = 0
        i = 0
        next_sample = 0.0
        samples: list[bytes] = []
        last_report = time.monotonic()
        if self.warm_prompts and caching:
            # the most recently used last: prompt 0 (the test request) is the freshest
            keys = [
                ("p", j, b)
                for j in reversed(range(min(self.warm_prompts, n)))
                for b in reversed(range(specs[j].input_len // B))
            ]
            eng.pool.prewarm(keys[-eng.pool.total :])

        def submit(idx: int, at_ns: int) -> None:
            """Request ``idx`` is sent at ``at_ns`` (run clock)."""
            nonlocal inflight
            spec = specs[idx]
            eligible[idx] = at_ns
            if spec.input_len + spec.output_len > max_len:
                self._record(
                    RequestRecord.model_construct(
                        id=idx,
                        worker=0,
                        status="failed",
                        http_status=400,
                        error="HTTP 400: "
                        + _too_long_message(spec.input_len, spec.output_len, max_len),
                        scheduled_ns=offsets[idx],
                        eligible_ns=at_ns,
                        send_ns=at_ns,
                        first_ns=None,
                        last_ns=None,
                        end_ns=at_ns,
                        chunk_ns=[],
                        chunk_tokens=None,
                        planned_input_len=spec.input_len,
                        planned_output_len=spec.output_len,
                        prompt_tokens=None,
                        output_tokens=None,
                        tokens_source=None,
                        finish_reason=None,
                    )
                )
                return
            hashes: tuple[Any, ...] = ()
            if caching and spec.group is not None and prefix_blocks:
                hashes = tuple(("g", spec.group, b) for b in range(prefix_blocks))
            elif caching and (self.prompt_ids or idx < self.warm_prompts):
                hashes = _prompt_hashes(idx, spec.input_len // B)
            req = SimRequest(
                base + idx, spec.input_len, spec.output_len, (t0_ns + at_ns) / NS, hashes, idx
            )
            self._drain(t0_ns + at_ns)  # outputs of steps that ended before it come first
            if render_ns:
                api.reserve(t0_ns + at_ns, render_ns)
                render.arrive(max(t0_ns + at_ns, render.now_ns))
                rendering.append(req)
            else:
                take_in(req, t0_ns + at_ns)
            inflight += 1

        def take_in(req: SimRequest, at_ns: int) -> None:
            """The intake proper (one by one) from ``at_ns`` (engine ns), after the outputs of
            the steps that ended before it (the loop's jobs in time order)."""
            self._drain(at_ns)
            at_engine = api.accept(at_ns) - t0_ns
            if at_engine > round(eng.now * NS) - t0_ns:
                arriving.append((at_engine, req))
            else:
                eng.add(req)

        arriving: deque[tuple[int, SimRequest]] = deque()
        rendering: deque[SimRequest] = deque()
        """Chat requests whose template is being rendered, oldest first (they leave in order)."""
        while True:
            now_ns = round(eng.now * NS) - t0_ns
            while i < n and offsets[i] <= now_ns + 1:  # +1 ns: float round trip
                if cap is not None and inflight >= cap:
                    pending.append(i)
                else:
                    submit(i, offsets[i])
                i += 1
            if rendering:
                for d in render.depart_until(t0_ns + now_ns + 1):
                    take_in(rendering.popleft(), d)
            while arriving and arriving[0][0] <= now_ns + 1:
                eng.add(arriving.popleft()[1])
            while next_sample <= eng.now - t0:
                if self.keep_series:
                    samples.append(self._scrape(next_sample))
                next_sample += SAMPLE_INTERVAL_S
            if eng.idle():
                if arriving:
                    eng.now = max(eng.now, (t0_ns + arriving[0][0]) / NS)
                    continue
                nd = render.next_departure() if rendering else None
                if nd is not None:
                    eng.now = max(eng.now, nd / NS)
                    continue
                if pending:
                    submit(pending.popleft(), now_ns)
                    continue
                if i >= n:
                    break
                eng.now = max(eng.now, (t0_ns + offsets[i]) / NS)
                continue
            t_next = math.inf
            if i < n and (cap is None or inflight < cap):
                t_next = offsets[i]
            if arriving:
                t_next = min(t_next, arriving[0][0])
            nd = render.next_departure() if rendering else None
            if nd is not None:
                t_next = min(t_next, nd - t0_ns)
            eng.advance(min(t0 + t_next / NS, t0 + next_sample))
            if eng.finished:
                # a client slot frees when the last token reaches the client
                freed = sorted(self._finish(req, eligible, offsets) for req in eng.finished)
                inflight -= len(freed)
                eng.finished.clear()
                for t_ns in freed:
                    if not pending:
                        break
                    submit(pending.popleft(), t_ns)
            if self.progress and time.monotonic() - last_report > 1.0:
                last_report = time.monotonic()
                print(
                    f"  sim t={eng.now:8.1f}s done={len(self.records)}/{n} "
                    f"running={eng.num_running} waiting={eng.num_waiting} "
                    f"kv={eng.pool.usage:.0%} preempted={eng.counters.preemptions}",
                    file=sys.stderr,
                )
        # a last scrape after the last request, as a scraper stopping at the end would see
        if self.keep_series:
            samples.append(self._scrape(eng.now - t0))
        self.samples = len(samples)
        self._flush_done()
        self._flush()
        if self.samples_out is not None:
            self.samples_out.write(b"".join(samples))

    def _scrape(self, t: float) -> bytes:
        sample = server_sample(self.eng, t)
        self.series.append(as_server_sample(sample, self._hist_last))
        return orjson.dumps(sample) + b"\n" if self.samples_out is not None else b""

    def _drain(self, upto_ns: int | None = None) -> None:
        """The API server's work on the outputs of the steps the engine ran since the last
        call (those that ended by ``upto_ns``): when each step's tokens reach the clients."""
        eng = self.eng
        i0 = self._step0 + len(self._deliv)
        all_ends = eng.step_end_ns
        i1 = len(all_ends)
        if i1 <= i0:
            return
        if upto_ns is not None:
            if all_ends[i0] > upto_ns:
                return
            if all_ends[i1 - 1] > upto_ns:
                i1 = bisect_right(all_ends, upto_ns, i0, i1)
        shift = self._shift
        if i1 - i0 <= 16:  # a few steps: cheaper than numpy's per-call overhead
            got = self.api.outputs_few(all_ends[i0:i1].tolist(), eng.step_tokens[i0:i1].tolist())
            if shift:
                got = [t - shift for t in got]
            self._deliv.extend(got)
            self._deliv_a.extend(got)
            return
        ends = np.frombuffer(all_ends, dtype=np.int64)[i0:i1]
        tokens = np.frombuffer(eng.step_tokens, dtype=np.int64)[i0:i1]
        out = self.api.outputs(ends, tokens) - shift
        self._deliv.extend(out.tolist())
        self._deliv_a.frombytes(out.tobytes())

    def _times(self, req: SimRequest) -> list[int]:
        """When ``req``'s tokens reached its client (ns, run clock): a new list."""
        d, s0 = self._deliv, self._step0
        segs = req.segments
        if len(segs) == 1:
            a, b = segs[0]
            return d[a - s0 : b - s0]
        out: list[int] = []
        for a, b in segs:
            out += d[a - s0 : b - s0]
        return out

    def _finish(self, req: SimRequest, eligible: dict[int, int], offsets: list[int]) -> int:
        """A request finished: returns when its last token reaches the client (which frees a
        client slot); its record is made with the next batch (:meth:`_flush_done`)."""
        idx = req.id - self.id_base
        last = req.segments[-1][1] - 1 - self._step0 if req.segments else -1
        if last >= len(self._deliv):
            self._drain()  # the outputs of its steps (and all before them) are worked now
        end = self._deliv[last] if last >= 0 else int((req.finish_t or 0.0) * NS) - self._shift
        self._done.append((req, idx, eligible[idx], end))
        if len(self._done) >= 256:
            self._flush_done()
        return end

    def _flush_done(self) -> None:
        """Records of the finished requests (256 at a time: the lines are written in one)."""
        done = self._done
        if not done:
            return
        self._done = []
        offsets = self.plan.offsets_ns
        specs = self.plan.requests
        token_times = self.token_times
        records = self.records
        lines = self._buf if self.requests_out is not None else None
        dv = np.frombuffer(self._deliv_a, dtype=np.int64) if lines is not None else None
        s0 = self._step0
        for req, idx, at, end in done:
            times = self._times(req)
            spec = specs[idx]
            first, last = (times[0], times[-1]) if times else (None, None)
            chunks = times if token_times else []
            rec = _ok_record(
                idx,
                offsets[idx],
                at,
                first,
                last,
                end,
                chunks,
                spec.input_len,
                spec.output_len,
                req.prompt_len,
                req.out,
                req.finish_reason,
            )
            records.append(rec)
            if lines is not None and dv is not None:
                # the same line as record_line(rec): the token times go to orjson as an int64
                # array, which it writes ~2.6x faster than a list of ints
                line = dict(rec.__dict__)
                if token_times:
                    segs = req.segments
                    if len(segs) == 1:
                        line["chunk_ns"] = dv[segs[0][0] - s0 : segs[0][1] - s0]
                    elif segs:
                        line["chunk_ns"] = np.concatenate([dv[a - s0 : b - s0] for a, b in segs])
                lines.append(orjson.dumps(line, option=_LINE_OPTS))
        del dv
        if lines is not None and len(lines) >= 256:
            self._flush()


_LINE_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
_OK_FIELDS = frozenset(
    (
        "id",
        "worker",
        "status",
        "error",
        "http_status",
        "scheduled_ns",
        "eligible_ns",
        "send_ns",
        "first_ns",
        "last_ns",
        "end_ns",
        "chunk_ns",
        "chunk_tokens",
        "planned_input_len",
        "planned_output_len",
        "prompt_tokens",
        "output_tokens",
        "tokens_source",
        "finish_reason",
    )
)
"""The fields a successful simulated record is given (the rest keep their defaults)."""


def _ok_record(
    idx: int,
    scheduled: int,
    sent: int,
    first: int | None,
    last: int | None,
    end: int,
    chunks: list[int],
    input_len: int,
    output_len: int | None,
    prompt_tokens: int,
    output_tokens: int,
    finish_reason: str | None,
) -> RequestRecord:
    """A successful simulated request's record: ``_record`` of its values (the same fields,
    in the same order, so the same line), made in one dict (a record per simulated request).
    tests/sim/test_offline_api.py checks it against ``_record`` and ``record_line``."""
    obj = RequestRecord.__new__(RequestRecord)
    _set(
        obj,
        "__dict__",
        {
            "worker": 0,
            "error": None,
            "error_class": None,
            "http_status": 200,
            "first_ns": first,
            "last_ns": last,
            "chunk_ns": chunks,
            "chunk_tokens": None,
            "planned_output_len": output_len,
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "tokens_source": "sim",
            "finish_reason": finish_reason,
            "id": idx,
            "status": "ok",
            "scheduled_ns": scheduled,
            "eligible_ns": sent,
            "send_ns": sent,
            "end_ns": end,
            "planned_input_len": input_len,
        },
    )
    _set(obj, "__pydantic_fields_set__", set(_OK_FIELDS))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


def simulated_info(r: ResolvedConfig, mem: MemoryPlan) -> dict[str, Any]:
    info = r.summary()
    info["memory"] = mem.model_dump()
    info["vllm_serve_args"] = None
    return info


@lru_cache(maxsize=16)
def _dataset(cfg_json: str) -> tuple[Plan, str, bool]:
    """The plan of a configuration (its requests are what later plans of the same dataset
    reuse), the tokenizer's name and whether its counts are exact."""
    cfg = BenchConfig.model_validate_json(cfg_json)
    tok = load_tokenizer(cfg.tokenizer)
    if isinstance(tok, ApproxTokenizer) and cfg.dataset_name == "random" and not cfg.duration_s:
        return _random_lengths_plan(cfg), tok.name, tok.exact
    return make_plan(cfg, tok), tok.name, tok.exact


def _random_lengths_plan(cfg: BenchConfig) -> Plan:
    """The ``random`` dataset's requests as the simulator needs them: ``random_requests``
    draws the input and then the output lengths from ``cfg.seed`` before any prompt text, and
    under the approximate counter a prompt's count is its drawn length; so the same lengths,
    without the text (tests/sim/test_offline_api.py compares them with ``make_plan``'s)."""
    validate_config(cfg)
    n = plan_size(cfg)
    rng = np.random.default_rng(cfg.seed)
    ins = sample_lengths(cfg.random_input_len, cfg.random_range_ratio, n, rng).tolist()
    outs = sample_lengths(cfg.random_output_len, cfg.random_range_ratio, n, rng).tolist()
    requests = [
        _construct(RequestSpec, {"prompt": "", "input_len": i, "output_len": o})
        for i, o in zip(ins, outs, strict=True)
    ]
    return Plan.model_construct(requests=requests, offsets_ns=[0] * n, duration_ns=None)


def workload_plan(bench_cfg: BenchConfig) -> tuple[Plan, str, bool]:
    """The plan ``bench`` would send for ``bench_cfg`` (``make_plan``'s draws), as the
    simulator needs it: (plan, tokenizer name, exact counts). The requests are drawn once per
    dataset: configurations that differ only in their arrivals (rate, burstiness, arrival
    process: a rate sweep, a tuner trying many rates) share them and draw only their
    arrivals, as ``make_plan`` does (tests/sim/test_offline_api.py compares the two); random
    prompts under the approximate counter carry no text (the simulator reads lengths)."""
    if bench_cfg.duration_s is not None:  # the plan's size depends on the rate
        return _dataset(bench_cfg.model_dump_json())
    key = bench_cfg.model_copy(update={"request_rate": 1.0, "burstiness": 1.0}).model_dump_json(
        exclude={"arrival"}
    )
    base, name, exact = _dataset(key)
    validate_config(bench_cfg)
    arrival = bench_cfg.arrival
    if arrival == "poisson" and bench_cfg.burstiness != 1.0:
        arrival = "gamma"
    offsets = arrival_offsets(
        arrival, bench_cfg.request_rate, len(base), bench_cfg.seed, bench_cfg.burstiness
    )
    planned = None
    if not math.isinf(bench_cfg.request_rate) and len(offsets) > 1 and offsets[-1] > 0:
        planned = (len(offsets) - 1) / float(offsets[-1])
    plan = Plan.model_construct(
        requests=base.requests,
        offsets_ns=(offsets * 1e9).astype(np.int64).tolist(),
        duration_ns=None,
        planned_rate=planned,
    )
    return plan, name, exact


def simulate(
    bench_cfg: BenchConfig,
    engine_cfg: EngineConfig | ResolvedConfig,
    result_dir: Path | str | None = None,
    *,
    vllm_version: str | None = None,
    server_metrics: bool = True,
    progress: bool = False,
    command: list[str] | None = None,
) -> RunResult:
    """Simulate ``bench_cfg`` (the workload, rate, concurrency cap) against ``engine_cfg`` on
    a virtual clock and return the run's :class:`RunResult` — the ``run.json`` a real
    ``servetune bench`` of that server would write: ``result.summary`` (throughput, TTFT,
    TPOT, ITL, E2E with percentiles and p99 intervals, goodput under ``bench_cfg.goodput``),
    ``result.server.summary`` (KV-cache use, running/waiting, preemptions, prefix-cache hits
    over the measured window) and ``result.target.simulated`` (the resolved configuration
    and its memory plan).

    This is the fast path for callers that simulate many configurations (the tuner, the
    planner): nothing is written unless ``result_dir`` is given (then ``requests.jsonl``,
    ``server_metrics.jsonl`` and ``run.json`` exactly as ``sim run`` writes them); the
    workload is drawn once per distinct ``bench_cfg`` (:func:`workload_plan`). About 1–2 ms
    of wall time per simulated second on one core.

    ``vllm_version``: the vLLM release whose memory planner sizes the KV pool (default: the
    0.10.2–0.16 rules, :mod:`servetune.sim.memory`). ``server_metrics=False`` skips the 0.5 s
    scrapes (and the server summary) when only the client-side figures are wanted.
    Raises :class:`~servetune.errors.SimError` where vLLM would refuse to start and
    :class:`~servetune.errors.ConfigError` for a workload that cannot be built."""
    if bench_cfg.base_url is not None:
        raise ConfigError(
            "sim run simulates the engine itself: --base-url does not apply",
            hint="use `servetune bench --base-url ...` to load-test a real server",
        )
    with collector_paused():
        return _simulate(
            bench_cfg, engine_cfg, result_dir, vllm_version, server_metrics, progress, command
        )


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the duration (restored as it was).

    A run allocates a few hundred thousand container objects that all stay alive until it
    ends (records with their token times, scrapes, histogram snapshots); each collection that
    allocation triggers walks them again and frees nothing, which cost ~20% of a ``sim run``
    of the seed's sweep (gc callbacks: ~210 collections a sweep, ~125 ms). Reference counting
    still frees everything that is not a cycle; the cycles a run leaves (if any) are collected
    by the first collection after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _simulate(
    bench_cfg: BenchConfig,
    engine_cfg: EngineConfig | ResolvedConfig,
    result_dir: Path | str | None,
    vllm_version: str | None,
    server_metrics: bool,
    progress: bool,
    command: list[str] | None,
) -> RunResult:
    r = engine_cfg.resolve() if isinstance(engine_cfg, EngineConfig) else engine_cfg
    mem = plan_memory(r, vllm_version)
    plan, tok_name, tok_exact = workload_plan(bench_cfg)
    env = this_machine(command)
    if result_dir is None:
        sim = OfflineRun(plan, bench_cfg, r, mem, progress=progress, keep_series=server_metrics)
        sim.run()
        return build_result(bench_cfg, r, mem, sim, env, tok_name, tok_exact)
    out = ensure_result_dir(result_dir)
    (out / REQUESTS_FILE).unlink(missing_ok=True)
    (out / SERVER_METRICS_FILE).unlink(missing_ok=True)
    req_out = LineAppender(out / REQUESTS_FILE)
    smp_out = LineAppender(out / SERVER_METRICS_FILE) if server_metrics else None
    try:
        sim = OfflineRun(plan, bench_cfg, r, mem, req_out, smp_out, progress)
        sim.run()
    finally:
        req_out.close()
        if smp_out is not None:
            smp_out.close()
    result = build_result(bench_cfg, r, mem, sim, env, tok_name, tok_exact)
    write_run_result(out, result)
    return result


def run_offline(
    bench_cfg: BenchConfig,
    engine_cfg: EngineConfig,
    result_dir: Path | str,
    progress: bool = False,
    command: list[str] | None = None,
) -> RunResult:
    """``sim run``: :func:`simulate` into ``result_dir``."""
    return simulate(bench_cfg, engine_cfg, result_dir, progress=progress, command=command)


def build_result(
    cfg: BenchConfig,
    r: ResolvedConfig,
    mem: MemoryPlan,
    sim: OfflineRun,
    env: Environment,
    tokenizer: str,
    exact: bool,
) -> RunResult:
    summary = run_summary(sim.records, cfg)
    failures = assess_failures(sim.records, cfg.max_failure_rate)
    # The modelled client is perfect (sends on schedule), judged as a real one is.
    health = client_health(sim.records, cfg.request_rate, cfg.max_concurrency, workers=1)
    eng = sim.eng
    info = simulated_info(r, mem)
    info["vllm_serve_args"] = [
        "vllm",
        "serve",
        *EngineConfig(
            gpu=r.gpu.name,
            model=r.model.name,
            tensor_parallel_size=r.tensor_parallel_size,
            max_num_seqs=r.max_num_seqs,
            max_num_batched_tokens=r.max_num_batched_tokens,
            gpu_memory_utilization=r.gpu_memory_utilization,
            max_model_len=r.max_model_len,
            enable_chunked_prefill=r.enable_chunked_prefill,
            enable_prefix_caching=r.enable_prefix_caching,
            quantization=r.quantization,  # type: ignore[arg-type]
            kv_cache_dtype=r.kv_cache_dtype,  # type: ignore[arg-type]
            block_size=r.block_size,
            long_prefill_token_threshold=r.long_prefill_token_threshold,
        ).vllm_args(),
    ]
    info["virtual_duration_s"] = eng.now
    info["engine_busy_share"] = eng.busy_s / eng.now if eng.now > 0 else 0.0
    info["steps"] = eng.counters.steps
    # What a real bench records: summarize_server over the client's measured window, plus
    # what the scraper adds (the cache config from /metrics, the engine map's version); the
    # simulator's own whole-run figures go under "sim", apart from the window's.
    server_summary: dict[str, Any] = (
        summarize_server(sim.series, summary.window_start_s, summary.window_end_s)
        if sim.series
        else {}
    )
    server_summary.update(cache_config([cache_config_labels(r, mem)]))
    server_summary["engine_version"] = VLLM_V1.version
    server_summary["sim"] = {
        "preemptions_total": eng.counters.preemptions,
        "num_gpu_blocks": mem.num_gpu_blocks,
        "kv_cache_tokens": mem.kv_cache_tokens,
        "max_concurrency": mem.max_concurrency,
        "prefix_cache_hit_rate": (eng.pool.hits / eng.pool.queries) if eng.pool.queries else None,
    }
    server = ServerInfo(
        engine="servetune-sim",
        metrics_url=None,
        names_found=dict(NAMES_FOUND),
        names_missing=[ss.GPU_UTILIZATION, ss.GPU_MEMORY_USED_BYTES, ss.GPU_MEMORY_TOTAL_BYTES],
        samples=sim.samples,
        summary=server_summary,
    )
    warnings = [failures.verdict] if failures.failed else []
    if not exact:
        warnings.append(
            "prompt lengths counted with the approximate tokenizer (the simulator counts the "
            "planned lengths as exact)"
        )
    return run_result(
        cfg,
        summary,
        environment=env,
        target=TargetInfo(
            base_url="sim://offline",
            model=r.served_model_name,
            served_models=[r.served_model_name],
            max_model_len=r.max_model_len,
            simulated=info,
            tokenizer=tokenizer,
            tokens_approximate=not exact,
        ),
        health=health,
        server=server,
        status=run_status(failures),
        failures=failures,
        warnings=warnings,
    )
