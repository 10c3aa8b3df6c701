"""A synthetic level runner: run directories from a closed-form model of a serving engine.

``SyntheticEngine`` is a FCFS queue in front of ``slots`` batch slots (vLLM's max_num_seqs):
a request waits for a free slot, then spends ``prefill_ms`` before its first token and
``tpot_ms × (1 + batch_slowdown × busy/slots)`` per further token. It writes the same
``requests.jsonl``, ``server_metrics.jsonl`` and ``run.json`` as a real level, in milliseconds of
CPU, so sweeps, knees, reports and ``--resume`` can be tested (and tried) without any server.
Use it with ``servetune sweep --level-runner servetune.sweep.synthetic:run_level``.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servetune.metrics.client_health import client_health
from servetune.metrics.run_result import run_result, run_summary
from servetune.results import server_series as ss
from servetune.results.environment import this_machine
from servetune.results.io import (
    REQUESTS_FILE,
    SERVER_METRICS_FILE,
    append_lines,
    ensure_result_dir,
    record_line,
    sample_line,
    write_run_result,
)
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, RunResult, ServerInfo, TargetInfo
from servetune.workload.arrivals import arrival_offsets

NS = 1_000_000_000
NS_PER_MS = 1_000_000


@dataclass
class SyntheticEngine:
    """A callable ``run_level(cfg, level_dir) -> RunResult`` (see the module docstring)."""

    slots: int = 32
    prefill_ms: float = 60.0
    tpot_ms: float = 25.0
    batch_slowdown: float = 0.6
    output_len: int | None = None
    """Tokens per request (default: the config's ``random_output_len``, capped at 64)."""
    jitter: float = 0.1
    kv_per_slot: float = 0.028
    scrape_interval_s: float = 1.0
    wall_sleep_s: float = 0.0
    """Real seconds to sleep after writing requests.jsonl (to test kills mid-level)."""
    preempt_above_kv: float = 0.9
    kv_blocks_ratio: float = 1.0

    def __call__(self, cfg: BenchConfig, level_dir: Path) -> RunResult:
        return self.run(cfg, level_dir)

    # ------------------------------------------------------------------------------
    def _arrivals(self, cfg: BenchConfig) -> np.ndarray:
        n = cfg.num_prompts
        kind = cfg.arrival if cfg.burstiness == 1.0 or cfg.arrival != "poisson" else "gamma"
        return arrival_offsets(kind, cfg.request_rate, n, cfg.seed, cfg.burstiness)

    def simulate(self, cfg: BenchConfig) -> tuple[list[RequestRecord], list[ss.ServerSample]]:
        rng = np.random.default_rng([cfg.seed, 7])
        arrivals = self._arrivals(cfg)
        n_out = self.output_len or min(cfg.random_output_len, 64)
        cap = cfg.max_concurrency
        in_flight: list[float] = []  # client-side end times (concurrency cap)
        slot_free = [0.0] * self.slots  # engine slots, earliest free first
        heapq.heapify(slot_free)
        records: list[RequestRecord] = []
        spans: list[tuple[float, float, float]] = []  # (eligible, start, end) seconds
        for i, t in enumerate(arrivals):
            eligible = float(t)
            if cap is not None:
                while len(in_flight) >= cap:
                    eligible = max(eligible, heapq.heappop(in_flight))
                in_flight = [e for e in in_flight if e > eligible]
                heapq.heapify(in_flight)
            free_at = heapq.heappop(slot_free)
            start = max(eligible, free_at)
            busy = sum(1 for _, s, e in spans[-4 * self.slots :] if s <= start < e)
            noise = float(rng.lognormal(0.0, self.jitter))
            tpot = self.tpot_ms / 1000 * (1 + self.batch_slowdown * busy / self.slots) * noise
            first = start + self.prefill_ms / 1000 * noise
            end = first + tpot * (n_out - 1)
            heapq.heappush(slot_free, end)
            if cap is not None:
                heapq.heappush(in_flight, end)
            spans.append((eligible, start, end))
            chunks = np.linspace(first, end, n_out)
            records.append(
                RequestRecord(
                    id=i,
                    status="ok",
                    scheduled_ns=int(t * NS),
                    eligible_ns=int(eligible * NS),
                    send_ns=int(eligible * NS),
                    first_ns=int(first * NS),
                    last_ns=int(end * NS),
                    end_ns=int(end * NS) + 1000,
                    chunk_ns=[int(c * NS) for c in chunks],
                    planned_input_len=cfg.random_input_len,
                    planned_output_len=n_out,
                    prompt_tokens=cfg.random_input_len,
                    output_tokens=n_out,
                    tokens_source="sim",
                    finish_reason="length",
                )
            )
        return records, self._series(spans, n_out)

    def _series(self, spans: list[tuple[float, float, float]], n_out: int) -> list[ss.ServerSample]:
        if not spans:
            return []
        elig = np.array([s[0] for s in spans])
        start = np.array([s[1] for s in spans])
        end = np.array([s[2] for s in spans])
        samples = []
        preempted = 0.0
        t = 0.0
        horizon = float(end.max())
        while t <= horizon + self.scrape_interval_s:
            running = float(np.sum((start <= t) & (end > t)))
            waiting = float(np.sum((elig <= t) & (start > t)))
            kv = min(1.0, running * self.kv_per_slot * self.kv_blocks_ratio)
            if kv >= self.preempt_above_kv:
                preempted += waiting * 0.05
            samples.append(
                ss.ServerSample(
                    t=t,
                    values={
                        ss.KV_CACHE_USAGE: kv,
                        ss.RUNNING: running,
                        ss.WAITING: waiting,
                        ss.PREEMPTIONS_TOTAL: math.floor(preempted),
                        ss.GENERATION_TOKENS_TOTAL: float(np.sum(end <= t) * n_out),
                    },
                )
            )
            t += self.scrape_interval_s
        return samples

    def run(self, cfg: BenchConfig, level_dir: Path) -> RunResult:
        out = ensure_result_dir(level_dir)
        env = this_machine()
        records, series = self.simulate(cfg)
        append_lines(out / REQUESTS_FILE, map(record_line, records))
        append_lines(out / SERVER_METRICS_FILE, map(sample_line, series))
        if self.wall_sleep_s > 0:
            time.sleep(self.wall_sleep_s)
        result = run_result(
            cfg,
            run_summary(records, cfg),
            environment=env,
            target=TargetInfo(
                base_url="synthetic://",
                model=cfg.model or "synthetic",
                simulated={"synthetic": True, "slots": self.slots},
            ),
            health=client_health(records, cfg.request_rate, cfg.max_concurrency, workers=1),
            server=ServerInfo(engine="synthetic", samples=len(series)),
        )
        write_run_result(out, result)
        return result


run_level = SyntheticEngine()
"""The default synthetic engine: 32 slots, ≈12 req/s at 64 output tokens."""
