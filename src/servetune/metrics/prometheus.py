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
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from servetune.results.server_series import Histogram

Labels = dict[str, str]

_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
COUNTER_SUFFIXES = ("_total", "_created")


class MetricsView(Protocol):
    """What reading a page offers: :class:`ParsedMetrics` (every sample) and :class:`Reducer`
    (only sums) both give it."""

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


def parse_float(text: str) -> float | None:
    """A sample value or ``le``: Go-style floats, ``NaN``, ``+Inf``, ``-Inf`` (any case)."""
    try:
        return float(text)
    except ValueError:
        return None


def wanted_sample_names(bases: Iterable[str]) -> frozenset[str]:
    """Every sample name a metric family ``base`` can produce (as gauge, counter or histogram)."""
    out: set[str] = set()
    for b in bases:
        out.add(b)
        out.update(b + s for s in HISTOGRAM_SUFFIXES)
        out.update(b + s for s in COUNTER_SUFFIXES)
    return frozenset(out)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            out.append("\n" if nxt == "n" else nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _fast_labels(line: str, brace: int) -> tuple[Labels, int]:
    """The common case in a few C-level string calls: no backslash, ``k="v"`` pairs joined by
    ``,`` with no spaces. Anything else returns index -1 and takes the careful path."""
    if "\\" in line:
        return {}, -1
    end = line.find('"}', brace)
    if end < 0:
        return {}, -1
    labels: Labels = {}
    for part in line[brace + 1 : end].split('",'):
        key, sep, val = part.partition('="')
        if not sep or not key or '"' in key or "=" in key or " " in key or "," in key:
            return {}, -1
        labels[key] = val
    return labels, end + 2


def _parse_labels(text: str, start: int) -> tuple[Labels, str | None, int]:
    """Parse ``{...}`` from ``text[start] == '{'``. Returns (labels, quoted metric name or None,
    index after ``}``); index -1 when the block is malformed."""
    labels: Labels = {}
    qname: str | None = None
    i = start + 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n:
            return labels, qname, -1
        if text[i] == "}":
            return labels, qname, i + 1
        # label name: bare, or quoted (UTF-8 names, Prometheus 3)
        if text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return labels, qname, -1
            key = _unescape(text[i + 1 : j])
            i = j + 1
            while i < n and text[i] in " \t":
                i += 1
            if i < n and text[i] in ",}":
                # a lone quoted string is the metric name
                qname = key
                continue
        else:
            j = i
            while j < n and text[j] not in "= \t":
                j += 1
            key = text[i:j]
            i = j
            while i < n and text[i] in " \t":
                i += 1
        if i >= n or text[i] != "=" or not key:
            return labels, qname, -1
        i += 1
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] != '"':
            return labels, qname, -1
        j = i + 1
        has_escape = False
        while j < n and text[j] != '"':
            if text[j] == "\\":
                has_escape = True
                j += 2
            else:
                j += 1
        if j >= n:
            return labels, qname, -1
        raw = text[i + 1 : j]
        labels[key] = _unescape(raw) if has_escape else raw
        i = j + 1


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
        out.helps[name] = _unescape(rest)


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
                labels, end = _fast_labels(line, brace)
                if end < 0:
                    labels, _, end = _parse_labels(line, brace)
            else:
                labels, qname, end = _parse_labels(line, brace)
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


class _Acc:
    """Running sum / count / max of one series set (NaN skipped, as ``ParsedMetrics.value``)."""

    __slots__ = ("max", "n", "sum")

    def __init__(self) -> None:
        self.sum = 0.0
        self.n = 0
        self.max = -math.inf

    def add(self, v: float) -> None:
        if v != v:  # NaN
            return
        self.sum += v
        self.n += 1
        if v > self.max:
            self.max = v

    def get(self, agg: str) -> float | None:
        if self.n == 0:
            return None
        if agg == "sum":
            return self.sum
        if agg == "mean":
            return self.sum / self.n
        if agg == "max":
            return self.max
        raise ValueError(f"unknown aggregation {agg!r}")


def _label_value(line: str, key: str, start: int) -> str | None:
    """``key``'s value in a label block without escapes (``{key="`` or ``,key="``)."""
    probe = key + '="'
    i = line.find(probe, start)
    while i > 0 and line[i - 1] not in "{,":
        i = line.find(probe, i + 1)
    if i < 0:
        return None
    j = line.find('"', i + len(probe))
    return None if j < 0 else line[i + len(probe) : j]


class Reducer:
    """Reduces exposition text straight to the sums the scraper needs, keeping no object per
    line: the hot-path twin of :func:`parse` (about half its cost, and no garbage).

    Give it the plain sample names to aggregate, the (name, label filter) pairs, and the
    histogram base names; read the result through the same methods as :class:`ParsedMetrics`
    (``has``, ``names``, ``value``, ``histogram``). Lines with escapes or unusual spacing take
    the careful label parser, so the answers equal :func:`parse`'s.
    """

    _PLAIN, _BUCKET = 1, 2

    def __init__(
        self,
        names: Iterable[str],
        filtered: Iterable[tuple[str, tuple[tuple[str, str], ...]]],
        histograms: Iterable[str],
    ) -> None:
        self._plan: dict[str, tuple[int, str]] = {}
        for n in names:
            self._plan[n] = (self._PLAIN, n)
        self._filters: dict[str, list[tuple[tuple[str, str], ...]]] = {}
        for n, match in filtered:
            self._plan.setdefault(n, (self._PLAIN, n))
            self._filters.setdefault(n, []).append(match)
        for base in histograms:
            self._plan[base + "_bucket"] = (self._BUCKET, base)
            self._plan.setdefault(base + "_count", (self._PLAIN, base + "_count"))
            self._plan.setdefault(base + "_sum", (self._PLAIN, base + "_sum"))
        self.reset()

    def reset(self) -> None:
        self._accs: dict[str, _Acc] = {}
        self._faccs: dict[tuple[str, tuple[tuple[str, str], ...]], _Acc] = {}
        self._buckets: dict[str, dict[str, float]] = {}
        self.lines = 0
        self.bad_lines = 0

    def feed(self, lines: Iterable[str]) -> None:
        # One pass, locals only, no object per line: this loop is the scraper's hot path.
        plan = self._plan
        accs = self._accs
        buckets = self._buckets
        filters = self._filters
        bucket_kind = self._BUCKET
        n_lines = 0
        for line in lines:
            if not line or line[0] == "#":
                continue
            if line[-1] == "\r" or line[0] in " \t":
                line = line.strip()
                if not line or line[0] == "#":
                    continue
            n_lines += 1
            brace = line.find("{")
            space = line.find(" ")
            labels: Labels | None = None
            if brace < 0 or 0 <= space < brace:
                if space < 0:
                    continue  # not a sample line we could want
                name = line[:space]
                entry = plan.get(name)
                if entry is None:
                    continue
                rest = line[space + 1 :]
                labels = {}
            else:
                name = line[:brace]
                entry = plan.get(name)
                if entry is None:
                    continue
                end = -1
                if "\\" not in line:
                    end = line.find('"}', brace)
                    if end >= 0:
                        end += 2
                        if line.find(" ", brace, end) >= 0 and not _fast_labels(line, brace)[0]:
                            end = -1  # spaced syntax: the careful parser
                if end < 0:
                    labels, _, end = _parse_labels(line, brace)
                    if end < 0:
                        self.bad_lines += 1
                        continue
                rest = line[end:]
            if rest[:1] == " ":
                rest = rest.lstrip()
            sp = rest.find(" ")
            try:
                v = float(rest if sp < 0 else rest[:sp])
            except ValueError:
                self.bad_lines += 1
                continue
            kind, key = entry
            if kind == bucket_kind:
                d = buckets.get(key)
                if d is None:
                    d = buckets[key] = {}
                if labels is None:
                    i = line.find(',le="', brace)
                    if i < 0:
                        i = line.find('{le="', brace)
                    if i < 0:
                        continue
                    j = line.find('"', i + 5)
                    le: str | None = line[i + 5 : j]
                else:
                    le = labels.get("le")
                if le is None or v != v:
                    continue
                d[le] = d.get(le, 0.0) + v
                continue
            acc = accs.get(name)
            if acc is None:
                acc = accs[name] = _Acc()
            if v == v:
                acc.sum += v
                acc.n += 1
                if v > acc.max:
                    acc.max = v
            matches = filters.get(name)
            if matches:
                self._filter(name, matches, line, brace, labels, v)
        self.lines += n_lines

    def _filter(
        self,
        name: str,
        matches: list[tuple[tuple[str, str], ...]],
        line: str,
        brace: int,
        labels: Labels | None,
        v: float,
    ) -> None:
        for match in matches:
            for k, want in match:
                if labels is not None:
                    got = labels.get(k)
                else:
                    got = _label_value(line, k, brace) if brace >= 0 else None
                if got != want:
                    break
            else:
                fkey = (name, match)
                facc = self._faccs.get(fkey)
                if facc is None:
                    facc = self._faccs[fkey] = _Acc()
                facc.add(v)

    # -- the ParsedMetrics read interface --------------------------------------------------

    def names(self) -> set[str]:
        return set(self._accs) | {base + "_bucket" for base in self._buckets}

    def has(self, name: str) -> bool:
        return name in self._accs or (
            name.endswith("_bucket") and name[: -len("_bucket")] in self._buckets
        )

    def value(
        self, name: str, match: Mapping[str, str] | None = None, agg: str = "sum"
    ) -> float | None:
        if match:
            key = (name, tuple(match.items()))
            facc = self._faccs.get(key)
            return None if facc is None else facc.get(agg)
        acc = self._accs.get(name)
        return None if acc is None else acc.get(agg)

    def histogram(self, base: str, match: Mapping[str, str] | None = None) -> Histogram | None:
        if match:
            raise ValueError("Reducer histograms take no label filter")
        raw = self._buckets.get(base)
        if raw is None:
            return None
        by_le: dict[float, float] = {}
        inf_total = 0.0
        for le_text, c in raw.items():
            le = parse_float(le_text)
            if le is None or math.isnan(le):
                continue
            if math.isinf(le):
                inf_total += c
            else:
                by_le[le] = by_le.get(le, 0.0) + c
        total = self.value(base + "_count")
        count = total if total is not None else inf_total
        if inf_total and count < inf_total:
            count = inf_total
        hsum = self.value(base + "_sum") or 0.0
        return Histogram.model_construct(buckets=sorted(by_le.items()), sum=hsum, count=count)
