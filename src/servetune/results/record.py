"""RequestRecord: what one request did, as written to ``requests.jsonl``.

All times are integer nanoseconds on the run's shared monotonic clock
(``time.perf_counter_ns()``), measured from the run's start (``t0``), so records from several
worker processes line up. Derived latencies follow the metric contract in ``docs/metrics.md``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "failed", "cancelled"]
TokenSource = Literal["usage", "tokenizer", "chunks", "sim"]

NS_PER_MS = 1_000_000


class RequestRecord(BaseModel):
    """One request, from its planned send time to the end of its stream."""

    model_config = ConfigDict(extra="ignore")

    id: int
    """Index of the request in the run's plan."""
    worker: int = 0
    status: Status
    error: str | None = None
    http_status: int | None = None

    scheduled_ns: int
    """When the plan wanted the request sent."""
    eligible_ns: int
    """When the concurrency limiter released it (== scheduled_ns without a cap)."""
    send_ns: int
    """When the request left the client."""
    first_ns: int | None = None
    """First SSE chunk that carries a generated token (``choices`` non-empty)."""
    last_ns: int | None = None
    """Last SSE chunk that carries a generated token."""
    end_ns: int
    """When the response ended (stream closed, error or cancellation)."""

    chunk_ns: list[int] = []
    """Arrival of every content chunk, first included (run clock)."""
    chunk_tokens: list[int] | None = None
    """Tokens carried by each chunk, when the server tells (continuous usage stats)."""

    planned_input_len: int
    planned_output_len: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_source: TokenSource | None = None
    finish_reason: str | None = None

    # --- derived figures (milliseconds) -------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_ns is None else (self.first_ns - self.send_ns) / NS_PER_MS

    @property
    def e2e_ms(self) -> float | None:
        return None if self.last_ns is None else (self.last_ns - self.send_ns) / NS_PER_MS

    @property
    def tpot_ms(self) -> float | None:
        """(E2E − TTFT) / (output_tokens − 1), vLLM's definition; None for n ≤ 1."""
        n = self.output_tokens
        if n is None or n <= 1 or self.first_ns is None or self.last_ns is None:
            return None
        return (self.last_ns - self.first_ns) / NS_PER_MS / (n - 1)

    @property
    def ttft_from_scheduled_ms(self) -> float | None:
        return None if self.first_ns is None else (self.first_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def e2e_from_scheduled_ms(self) -> float | None:
        return None if self.last_ns is None else (self.last_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def send_lag_ms(self) -> float:
        """Client lateness: send − eligible (time the client itself was late)."""
        return (self.send_ns - self.eligible_ns) / NS_PER_MS

    @property
    def queue_delay_ms(self) -> float:
        """Client queue delay: send − scheduled (limiter wait plus client lateness)."""
        return (self.send_ns - self.scheduled_ns) / NS_PER_MS

    def itl_ms(self) -> list[float]:
        """Gaps between consecutive content chunks (one gap per chunk, whatever it carries)."""
        c = self.chunk_ns
        return [(c[i] - c[i - 1]) / NS_PER_MS for i in range(1, len(c))]
