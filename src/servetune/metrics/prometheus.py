"""A fast, tolerant parser of the Prometheus text exposition format (0.0.4) and the parts of
OpenMetrics 1.0 that servers put on ``/metrics``.

It reads comments, ``# HELP`` / ``# TYPE`` / ``# UNIT``, labels with escapes (``\\\\``, ``\\"``,
``\\n``), ``NaN`` / ``+Inf`` / ``-Inf``, optional timestamps, exemplars (dropped), ``# EOF``,
quoted UTF-8 metric names (``{"my.metric",a="b"} 1``), CRLF line ends. A line it cannot read is
counted in :attr:`ParsedMetrics.bad_lines` and skipped: one odd line never loses a scrape.

Speed matters because the scraper shares the load generator's event loop: pass ``wanted`` (the
sample names to keep) and every other line costs one ``find`` and one set lookup. Samples are
keyed by *sample* name (``foo_bucket``, ``foo_sum``, ``foo_total``), so nothing depends on a
``# TYPE`` line being present, as it often is not.

A label block and a value are read by :mod:`servetune.metrics.prom_labels`; the scraper's
hot path reduces a page to sums with :mod:`servetune.metrics.prom_reducer` instead.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from servetune.metrics.prom_labels import (
    Labels,
    fast_labels,
    parse_float,
    parse_labels,
    unescape,
)
from servetune.results.server_series import Histogram

_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
COUNTER_SUFFIXES = ("_total", "_created")


class MetricsView(Protocol):
    """What reading a page offers: :class:`ParsedMetrics` (every sample) and
    :class:`servetune.metrics.prom_reducer.Reducer` (only sums) both give it."""

    def names(self) -> set[str]: ...

    def has(self, name: str) -> bool: ...

    def value(
        self, name: str, match: Mapping[str, str] | None = None, agg: str = "sum"
    ) -> float | None: ...

    def histogram(self, base: str, match: Mapping[str, str] | None = None) -> Histogram | None: ...


@dataclass(slots=True)
class Sample:
    """One exposition line: ``name{labels} value [timestamp]``."""

    name: str
    labels: Labels
    value: float
    timestamp_ms: int | None = None


@dataclass(slots=True)
class ParsedMetrics:
    """What one scrape held, keyed by sample name."""

    samples: dict[str, list[Sample]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    """Family name → type from ``# TYPE`` (counter, gauge, histogram, summary, info, untyped…)."""
    helps: dict[str, str] = field(default_factory=dict)
    lines: int = 0
    """Sample lines seen (kept or not)."""
    bad_lines: int = 0
    """Lines that were neither a comment nor a readable sample."""

    def names(self) -> set[str]:
        return set(self.samples)

    def has(self, name: str) -> bool:
        return name in self.samples

    def series(self, name: str, match: Mapping[str, str] | None = None) -> list[Sample]:
        out = self.samples.get(name, [])
        if not match:
            return out
        return [s for s in out if all(s.labels.get(k) == v for k, v in match.items())]

    def value(
        self, name: str, match: Mapping[str, str] | None = None, agg: str = "sum"
    ) -> float | None:
        """Aggregate the series of ``name`` whose labels include ``match`` (sum, mean or max);
        None when no series matches. NaN series are ignored."""
        vals = [s.value for s in self.series(name, match) if not math.isnan(s.value)]
        if not vals:
            return None
        # plain sum: +Inf and -Inf series add to NaN rather than raising (as math.fsum does)
        if agg == "sum":
            return sum(vals)
        if agg == "mean":
            return sum(vals) / len(vals)
        if agg == "max":
            return max(vals)
        raise ValueError(f"unknown aggregation {agg!r}")

    def histogram(self, base: str, match: Mapping[str, str] | None = None) -> Histogram | None:
        """The histogram ``base`` summed over label sets (``model_name``, ``engine``, …).

        Cumulative bucket counts add up per upper bound across series. The ``+Inf`` bucket is
        not kept in :attr:`Histogram.buckets` (JSON has no infinity): ``count`` carries it.
        None when the server exposes no ``base_bucket`` series.
        """
        buckets = self.series(base + "_bucket", match)
        if not buckets:
            return None
        by_le: dict[float, float] = {}
        inf_total = 0.0
        for s in buckets:
            le_text = s.labels.get("le")
            if le_text is None:
                continue
            le = parse_float(le_text)
            if le is None or math.isnan(le) or math.isnan(s.value):
                continue
            if math.isinf(le):
                inf_total += s.value
            else:
                by_le[le] = by_le.get(le, 0.0) + s.value
        total = self.value(base + "_count", match)
        count = total if total is not None else inf_total
        if inf_total and count < inf_total:
            count = inf_total
        hsum = self.value(base + "_sum", match) or 0.0
        return Histogram.model_construct(buckets=sorted(by_le.items()), sum=hsum, count=count)


def wanted_sample_names(bases: Iterable[str]) -> frozenset[str]:
    """Every sample name a metric family ``base`` can produce (as gauge, counter or histogram)."""
    out: set[str] = set()
    for b in bases:
        out.add(b)
        out.update(b + s for s in HISTOGRAM_SUFFIXES)
        out.update(b + s for s in COUNTER_SUFFIXES)
    return frozenset(out)


def _parse_comment(line: str, out: ParsedMetrics, wanted: Collection[str] | None) -> None:
    # Fast reject first: most comment lines on a big page name a family we do not keep.
    if line.startswith(("# TYPE ", "# HELP ")):
        kind = line[2:6]
        end = line.find(" ", 7)
        name = line[7:] if end < 0 else line[7:end]
        rest = "" if end < 0 else line[end + 1 :]
    else:
        parts = line[1:].lstrip().split(None, 2)
        if len(parts) < 2 or parts[0] not in ("HELP", "TYPE"):
            return  # a plain comment, # UNIT or # EOF
        kind, name = parts[0], parts[1]
        rest = parts[2] if len(parts) > 2 else ""
    if wanted is not None and name not in wanted:
        return
    if kind == "TYPE":
        out.types[name] = rest.strip().lower()
    else:
        out.helps[name] = unescape(rest)


def parse(text: str, wanted: Collection[str] | None = None) -> ParsedMetrics:
    """Parse exposition text. With ``wanted`` (sample names, see :func:`wanted_sample_names`)
    only those samples (and their HELP/TYPE) are kept; the rest is skipped cheaply."""
    out = ParsedMetrics()
    parse_lines(text.split("\n"), out, wanted)
    return out


def parse_lines(
    lines: Iterable[str], out: ParsedMetrics, wanted: Collection[str] | None = None
) -> None:
    """Parse ``lines`` into ``out``: the same page can be fed in slices (the scraper yields
    to the event loop between slices, so no slice holds the loop long)."""
    samples = out.samples
    for line in lines:
        if not line:
            continue
        if line[-1] == "\r":
            line = line[:-1]
        c = line[0]
        if c == "#":
            _parse_comment(line, out, wanted)
            continue
        if c in " \t":
            line = line.strip()
            if not line:
                continue
            if line[0] == "#":
                _parse_comment(line, out, wanted)
                continue
        out.lines += 1
        brace = line.find("{")
        space = line.find(" ")
        if brace < 0 or (0 <= space < brace):
            # no labels
            if space < 0:
                tab = line.find("\t")
                if tab < 0:
                    out.bad_lines += 1
                    continue
                space = tab
            name = line[:space]
            if wanted is not None and name not in wanted:
                continue
            labels: Labels = {}
            rest_at = space
            quoted = False
        else:
            quoted = False
            name = line[:brace]
            if name:
                if wanted is not None and name not in wanted:
                    continue
                labels, end = fast_labels(line, brace)
                if end < 0:
                    labels, _, end = parse_labels(line, brace)
            else:
                labels, qname, end = parse_labels(line, brace)
                if qname is None:
                    out.bad_lines += 1
                    continue
                name = qname
                if wanted is not None and name not in wanted:
                    continue
                quoted = True
            if end < 0:
                out.bad_lines += 1
                continue
            rest_at = end
        fields = line[rest_at:].split()
        if not fields:
            out.bad_lines += 1
            continue
        value = parse_float(fields[0])
        if value is None or not (quoted or name[0] in _NAME_FIRST):
            out.bad_lines += 1
            continue
        ts: int | None = None
        if len(fields) > 1 and fields[1] != "#":  # "#" starts an OpenMetrics exemplar
            try:
                ts = int(float(fields[1]))
            except ValueError:
                out.bad_lines += 1
                continue
        sample = Sample(name, labels, value, ts)
        lst = samples.get(name)
        if lst is None:
            samples[name] = [sample]
        else:
            lst.append(sample)
