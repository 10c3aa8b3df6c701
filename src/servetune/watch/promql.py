"""Diagnose's figures as PromQL, per engine map: what Grafana plots and what the alerting rules
test, written from the same names the scraper reads (:mod:`servetune.metrics.engine_maps`).

Every expression is per ``instance`` (one engine process). A figure over a window ``W`` with a
resolution ``S`` (the scrape interval) is, for the engine's gauges and counters:

=========================  ===================================================================
kv_mean / kv_max / kv_p95  avg / max / quantile(0.95) over W of the KV-use gauge (averaged
                           over the instance's series)
kv_share_above_90 (_below) share of W with KV use > 0.9 (< 0.5): ``avg_over_time((g > bool
                           0.9)[W:S])``
running_/waiting_mean/max  avg / max over W; waiting_share = share of W with waiting > 0
running_at_cap_share       share of W with running ≥ max(cap − 0.5, 0.95 cap) (cap known)
preemptions (_per_s)       ``increase`` (``rate``) of the preemption counter over W
preemptions_per_request    preemptions ÷ requests finished over W
request_throughput         rate of finished requests; output_throughput of generated tokens
ttft/tpot/itl/e2e_p50/p99  ``histogram_quantile`` over ``rate(…_bucket[W])``, in ms
inflight_growth_*          in flight = running + waiting; arrivals = finished rate + its
                           ``deriv`` over W (``offered_rate``); the late growth is the smaller
                           ``deriv`` of the window's last two quarters; inflight_growth_z
                           = deriv × W ÷ √(finished over W + deriv × W)
                           (see diagnose.growth)
compute_use_est            (prompt tok/s × FLOPs/prompt token + generated tok/s × FLOPs/token)
                           ÷ the GPUs' peak, with --gpu/--model (and the lengths given)
=========================  ===================================================================

A knob's figure (``chunked_prefill``, ``max_num_seqs`` …) is a constant when the engine's
configuration is given (``--server-cmd``), else unknown. A figure the engine does not expose is
None, and so is every expression that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servetune.diagnose.knobs import KnownConfig
from servetune.metrics.engine_maps import EngineMap, Source
from servetune.profiles import metric_map
from servetune.results import server_series as ss

BY = "instance"


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds (``90s``), minutes when exact (``2m``)."""
    s = max(1, round(seconds))
    return f"{s // 60}m" if s % 60 == 0 else f"{s}s"


def find_map(name: str) -> tuple[EngineMap, frozenset[str]]:
    """An engine map by its name (:func:`servetune.profiles.metric_map`: ``vllm``,
    ``vllm-0.8-v0``, ``llama.cpp-old``, ``trtllm`` …; an engine's alias works too), and the
    names that release does not export."""
    emap = metric_map(name)
    return emap, frozenset(emap.unexported)


def _selector(src: Source, matcher: str | None = None, suffix: str = "") -> str:
    parts = [f'{k}="{v}"' for k, v in src.match] + ([matcher] if matcher else [])
    return f"{src.name}{suffix}{{{','.join(parts)}}}" if parts else f"{src.name}{suffix}"


@dataclass
class Promql:
    """Figure → PromQL for one engine map, a window and a resolution."""

    emap: EngineMap
    window_s: float = 120.0
    step_s: float = 15.0
    known: KnownConfig = field(default_factory=KnownConfig)
    exposed: set[str] | None = None
    """Metric names a live server exposes (None: take each concept's preferred name)."""
    absent: frozenset[str] = frozenset()
    """Names this engine release is known not to export (skipped like unexposed ones)."""
    input_len: float = 1024.0
    output_len: float = 128.0
    """Lengths at which the compute estimate's attention term is evaluated."""
    matcher: str | None = None
    """A label matcher added to every selector (Grafana: ``instance=~"$instance"``)."""
    window_text: str | None = None
    """A window written as-is (Grafana: ``$__rate_interval``) instead of ``window_s``."""

    @property
    def w(self) -> str:
        return self.window_text or duration(self.window_s)

    @property
    def s(self) -> str:
        return duration(self.step_s)

    @property
    def quarter(self) -> str:
        return duration(self.window_s / 4)

    # -- sources -------------------------------------------------------------------------

    def source(self, concept: str, histogram: bool = False) -> Source | None:
        table = self.emap.histograms if histogram else self.emap.values
        for src in table.get(concept, ()):
            if src.name in self.absent:
                continue
            if self.exposed is None:
                return src
            probe = f"{src.name}_bucket" if histogram else src.name
            if probe in self.exposed:
                return src
        return None

    def gauge(self, concept: str) -> str | None:
        src = self.source(concept)
        if src is None:
            return None
        agg = "avg" if src.agg == "mean" else src.agg
        scale = f" * {src.scale:g}" if src.scale != 1.0 else ""
        return f"{agg} by ({BY}) ({_selector(src, self.matcher)}){scale}"

    def counter_rate(self, concept: str, fn: str = "rate", window: str | None = None) -> str | None:
        src = self.source(concept)
        if src is None:
            return None
        return f"sum by ({BY}) ({fn}({_selector(src, self.matcher)}[{window or self.w}]))"

    def quantile_ms(self, concept: str, q: float, window: str | None = None) -> str | None:
        src = self.source(concept, histogram=True)
        if src is None:
            return None
        bucket = _selector(src, self.matcher, "_bucket")
        return (
            f"1000 * histogram_quantile({q:g}, sum by ({BY}, le) "
            f"(rate({bucket}[{window or self.w}])))"
        )

    def inflight(self) -> str | None:
        run, wait = self.gauge(ss.RUNNING), self.gauge(ss.WAITING)
        if run is None or wait is None:
            return None
        return f"({run} + {wait})"

    def over(self, fn: str, inner: str | None, q: str = "") -> str | None:
        if inner is None:
            return None
        return f"{fn}({q}({inner})[{self.w}:{self.s}])"

    # -- figures -------------------------------------------------------------------------

    def knob(self, name: str) -> float | None:
        v = self.known.get(name)
        if isinstance(v, bool):
            return float(v)
        if isinstance(v, int | float):
            return float(v)
        return None

    def figure(self, name: str) -> str | None:
        kv = self.gauge(ss.KV_CACHE_USAGE)
        run = self.gauge(ss.RUNNING)
        wait = self.gauge(ss.WAITING)
        if name == "kv_mean":
            return self.over("avg_over_time", kv)
        if name == "kv_max":
            return self.over("max_over_time", kv)
        if name == "kv_p95":
            return None if kv is None else f"quantile_over_time(0.95, ({kv})[{self.w}:{self.s}])"
        if name == "kv_share_above_90":
            return None if kv is None else self.over("avg_over_time", f"{kv} > bool 0.9")
        if name == "kv_share_below_50":
            return None if kv is None else self.over("avg_over_time", f"{kv} < bool 0.5")
        if name in ("running_mean", "running_max", "waiting_mean", "waiting_max"):
            g = run if name.startswith("running") else wait
            return self.over("avg_over_time" if name.endswith("mean") else "max_over_time", g)
        if name == "waiting_share":
            return None if wait is None else self.over("avg_over_time", f"{wait} > bool 0")
        if name == "prefix_cache_hit_rate":
            hits = self.counter_rate(ss.PREFIX_CACHE_HITS_TOTAL, "increase")
            queries = self.counter_rate(ss.PREFIX_CACHE_QUERIES_TOTAL, "increase")
            if hits is not None and queries is not None:
                return f"({hits} / {queries})"
            return self.over("avg_over_time", self.gauge(ss.PREFIX_CACHE_HIT_RATE))
        if name == "running_at_cap_share":
            cap = self.knob("max_num_seqs")
            if run is None or cap is None:
                return None
            at = max(cap - 0.5, 0.95 * cap)
            return self.over("avg_over_time", f"{run} >= bool {at:g}")
        if name == "running_cap":
            cap = self.knob("max_num_seqs")
            return None if cap is None else f"vector({cap:g})"
        if name == "preemptions":
            return self.counter_rate(ss.PREEMPTIONS_TOTAL, "increase")
        if name == "preemptions_per_s":
            return self.counter_rate(ss.PREEMPTIONS_TOTAL)
        if name in ("preemptions_per_request", "completed"):
            done = self.counter_rate(ss.REQUESTS_FINISHED_TOTAL, "increase")
            if name == "completed":
                return done
            pre = self.counter_rate(ss.PREEMPTIONS_TOTAL, "increase")
            return None if pre is None or done is None else f"({pre} / {done})"
        if name == "request_throughput":
            return self.counter_rate(ss.REQUESTS_FINISHED_TOTAL)
        if name == "output_throughput":
            return self.counter_rate(ss.GENERATION_TOKENS_TOTAL)
        for metric, concept in (
            ("ttft", ss.TTFT_SECONDS),
            ("tpot", ss.TPOT_SECONDS),
            ("itl", ss.ITL_SECONDS),
            ("e2e", ss.E2E_SECONDS),
        ):
            for pct in (50, 99):
                if name == f"{metric}_p{pct}_ms":
                    return self.quantile_ms(concept, pct / 100)
        if name == "ttft_spike_ratio":
            p99, p50 = self.figure("ttft_p99_ms"), self.figure("ttft_p50_ms")
            return None if p99 is None or p50 is None else f"({p99} / {p50})"
        inflight = self.inflight()
        if name == "inflight_growth_per_s":
            return None if inflight is None else f"deriv({inflight}[{self.w}:{self.s}])"
        if name == "offered_rate":
            done = self.counter_rate(ss.REQUESTS_FINISHED_TOTAL)
            growth = self.figure("inflight_growth_per_s")
            return None if done is None or growth is None else f"({done} + {growth})"
        if name == "inflight_growth_late_share":
            arrivals = self.figure("offered_rate")
            if inflight is None or arrivals is None:
                return None
            q = self.quarter
            g4 = f"deriv({inflight}[{q}:{self.s}])"
            g3 = f"deriv({inflight}[{q}:{self.s}] offset {q})"
            return f"((({g3} <= {g4}) or {g4}) / {arrivals})"
        if name == "inflight_growth_z":
            # the rise over W in σ of the arrivals' count noise: rise / √arrivals, arrivals =
            # finished + rise (diagnose.growth.growth_z); NaN (never true) when ≤ 0 under √
            done = self.counter_rate(ss.REQUESTS_FINISHED_TOTAL, "increase")
            growth = self.figure("inflight_growth_per_s")
            if done is None or growth is None:
                return None
            rise = f"({growth} * {self.window_s:g})"
            return f"({rise} / sqrt({done} + {rise}))"
        if name == "compute_use_est":
            return self._compute()
        return None

    def _compute(self) -> str | None:
        cfg = self.known
        if not (cfg.gpu and cfg.model):
            return None
        from servetune.arch.flops import model_flops, peak_flops
        from servetune.arch.gpus import find_gpu
        from servetune.arch.models import find_model
        from servetune.errors import ServetuneError

        try:
            gpu, model = find_gpu(cfg.gpu), find_model(cfg.model)
        except ServetuneError:
            return None
        prompt = self.counter_rate(ss.PROMPT_TOKENS_TOTAL)
        gen = self.counter_rate(ss.GENERATION_TOKENS_TOTAL)
        if prompt is None or gen is None:
            return None
        fp, fg = model_flops(model).per_token(self.input_len, self.output_len)
        tp = int(self.knob("tensor_parallel_size") or 1)
        quant = cfg.values.get("quantization")
        peak = peak_flops(gpu, quant if isinstance(quant, str) else None, tp)
        return f"(({prompt} * {fp:.6g} + {gen} * {fg:.6g}) / {peak:.6g})"

    def names(self, expr: str) -> set[str]:
        """The metric names an expression reads (for checks against what an engine exports)."""
        return metric_names(expr)


_KEYWORDS = {
    "sum", "avg", "max", "min", "by", "without", "rate", "increase", "deriv", "bool", "or",
    "and", "unless", "offset", "vector", "histogram_quantile", "sqrt", "avg_over_time",
    "max_over_time", "min_over_time", "quantile_over_time", "le", "instance",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers followed by ``{``, ``[`` or ``)``
    that are not functions, keywords, labels or durations."""
    import re

    out: set[str] = set()
    for m in re.finditer(r"(?<![\w:\"])([a-zA-Z_:][a-zA-Z0-9_:]*)(?=\s*[\[{)])", expr):
        word = m.group(1)
        if word in _KEYWORDS:
            continue
        out.add(word)
    return out


def exposed_names(text: str) -> set[str]:
    """Every sample name on a /metrics page (histogram series with their suffixes)."""
    from servetune.metrics.prometheus import parse

    return set(parse(text).names())


def known_dict(known: KnownConfig) -> dict[str, Any]:
    return dict(known.values)
