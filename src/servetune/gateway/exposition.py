"""The gateway's ``/metrics``: Prometheus text, per tenant and per upstream.

Counters (``servetune_gateway_`` prefix): ``requests_total{tenant,group,code}``,
``rejections_total{tenant,reason}``, ``tokens_total{tenant,kind=prompt|completion}``,
``upstream_failures_total{upstream,kind}``, ``retries_total{upstream}``.
Gauges: ``upstream_inflight{upstream}``, ``upstream_limit{upstream}``,
``upstream_circuit_open{upstream}``, ``queue_depth{group}``, ``tenant_inflight{tenant}``,
``group_weight{group}``, ``canary_step``, ``canary_state{state}``, ``replicas``.
Histograms (seconds): ``ttft_seconds``, ``tpot_seconds``, ``e2e_seconds`` by
``{tenant,group}`` and ``queue_seconds`` by ``{tenant}``.

Observing is a bisect and three increments on a preallocated list: no allocation per request.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable

LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
)  # fmt: skip
PREFIX = "servetune_gateway_"


class Hist:
    __slots__ = ("bounds", "counts", "n", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.n = 0
        self.total = 0.0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.n += 1
        self.total += v


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in zip(names, values, strict=True))


class GatewayMetrics:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self.rejections: dict[tuple[str, str], int] = defaultdict(int)
        self.tokens: dict[tuple[str, str], int] = defaultdict(int)
        self.failures: dict[tuple[str, str], int] = defaultdict(int)
        self.retries: dict[str, int] = defaultdict(int)
        self.hists: dict[tuple[str, str, str], Hist] = {}
        self.queue: dict[str, Hist] = {}
        self.gauges: list[Callable[[], Iterable[tuple[str, str, float]]]] = []
        """Callbacks yielding (name, label text, value) at scrape time."""
        self.counter_sources: list[Callable[[], Iterable[tuple[str, str, str, float]]]] = []
        """Callbacks yielding counters (name, help, label text, value) at scrape time."""

    def hist(self, metric: str, tenant: str, group: str) -> Hist:
        key = (metric, tenant, group)
        h = self.hists.get(key)
        if h is None:
            h = self.hists[key] = Hist(TPOT_BUCKETS if metric == "tpot" else LATENCY_BUCKETS)
        return h

    def observe_request(
        self,
        tenant: str,
        group: str,
        code: int,
        ttft: float | None,
        tpot: float | None,
        e2e: float | None,
        prompt_tokens: int,
        completion_tokens: int,
    ) -> None:
        self.requests[(tenant, group, str(code))] += 1
        if ttft is not None:
            self.hist("ttft", tenant, group).observe(ttft)
        if tpot is not None:
            self.hist("tpot", tenant, group).observe(tpot)
        if e2e is not None:
            self.hist("e2e", tenant, group).observe(e2e)
        if prompt_tokens:
            self.tokens[(tenant, "prompt")] += prompt_tokens
        if completion_tokens:
            self.tokens[(tenant, "completion")] += completion_tokens

    def observe_queue(self, tenant: str, seconds: float) -> None:
        h = self.queue.get(tenant)
        if h is None:
            h = self.queue[tenant] = Hist(LATENCY_BUCKETS)
        h.observe(seconds)

    def reject(self, tenant: str, reason: str) -> None:
        self.rejections[(tenant, reason)] += 1

    def render(self) -> bytes:
        out: list[str] = []

        def counter(name: str, help_: str, labels: tuple[str, ...], data: dict) -> None:  # type: ignore[type-arg]
            out.append(f"# HELP {PREFIX}{name} {help_}")
            out.append(f"# TYPE {PREFIX}{name} counter")
            for key, v in sorted(data.items()):
                vals = key if isinstance(key, tuple) else (key,)
                out.append(f"{PREFIX}{name}{{{_labels(labels, vals)}}} {v}")

        counter("requests_total", "Requests answered, by HTTP status.", ("tenant", "group", "code"),
                self.requests)  # fmt: skip
        counter("rejections_total", "Requests refused by the gateway, by reason.",
                ("tenant", "reason"), self.rejections)  # fmt: skip
        counter("tokens_total", "Tokens used (the engine's usage), prompt and completion.",
                ("tenant", "kind"), self.tokens)  # fmt: skip
        counter("upstream_failures_total", "Upstream failures (connect, reset, timeout, 5xx).",
                ("upstream", "kind"), self.failures)  # fmt: skip
        counter("retries_total", "Requests retried on another try before their first byte.",
                ("upstream",), self.retries)  # fmt: skip
        seen: set[str] = set()
        for src in self.counter_sources:
            for name, help_, labels, value in src():
                if name not in seen:
                    seen.add(name)
                    out.append(f"# HELP {PREFIX}{name} {help_}")
                    out.append(f"# TYPE {PREFIX}{name} counter")
                out.append(f"{PREFIX}{name}{{{labels}}} {value!r}")
        for cb in self.gauges:
            for name, labels, value in cb():
                if name not in seen:
                    seen.add(name)
                    out.append(f"# TYPE {PREFIX}{name} gauge")
                out.append(f"{PREFIX}{name}{{{labels}}} {value!r}" if labels else
                           f"{PREFIX}{name} {value!r}")  # fmt: skip
        by_metric: dict[str, list[tuple[tuple[str, str], Hist]]] = defaultdict(list)
        for (metric, tenant, group), h in self.hists.items():
            by_metric[metric].append(((tenant, group), h))
        for metric in ("ttft", "tpot", "e2e"):
            rows = by_metric.get(metric)
            if not rows:
                continue
            name = f"{PREFIX}{metric}_seconds"
            out.append(f"# HELP {name} {metric.upper()} measured at the gateway.")
            out.append(f"# TYPE {name} histogram")
            for (tenant, group), h in sorted(rows, key=lambda r: r[0]):
                _hist_lines(out, name, _labels(("tenant", "group"), (tenant, group)), h)
        if self.queue:
            name = f"{PREFIX}queue_seconds"
            out.append(f"# HELP {name} Time requests waited in the gateway for an upstream slot.")
            out.append(f"# TYPE {name} histogram")
            for tenant, h in sorted(self.queue.items()):
                _hist_lines(out, name, _labels(("tenant",), (tenant,)), h)
        out.append("")
        return "\n".join(out).encode()


def _hist_lines(out: list[str], name: str, labels: str, h: Hist) -> None:
    cum = 0
    for bound, c in zip(h.bounds, h.counts, strict=False):
        cum += c
        out.append(f'{name}_bucket{{{labels},le="{bound!r}"}} {cum}')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {h.n}')
    out.append(f"{name}_sum{{{labels}}} {h.total!r}")
    out.append(f"{name}_count{{{labels}}} {h.n}")


def labels(**kv: str) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in kv.items())
