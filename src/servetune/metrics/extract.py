"""One page of ``/metrics`` read as concepts: each concept's value (the first of its engine's
sources the page exposes), each histogram merged over label sets, and which name served it;
and the :class:`~servetune.metrics.prom_reducer.Reducer` that reads exactly what an engine map
needs. The scraper and the gateway's admission both read pages this way."""

from __future__ import annotations

import math
from collections.abc import Iterator

from servetune.metrics.engine_maps import EngineMap, Source
from servetune.metrics.prom_reducer import Reducer
from servetune.metrics.prometheus import MetricsView
from servetune.results.server_series import Histogram


def _value(parsed: MetricsView, src: Source) -> float | None:
    if not src.match:
        v = parsed.value(src.name, agg=src.agg)
    elif parsed.has(src.name):
        # A labelled counter series appears on first increment (vLLM V0): none yet = 0.
        v = parsed.value(src.name, src.match_dict, src.agg) or 0.0
    else:
        v = None
    return None if v is None else v * src.scale


def extract_values(parsed: MetricsView, emap: EngineMap) -> tuple[dict[str, float], dict[str, str]]:
    """(gauge/counter values, concept → name used) for one parsed page."""
    values: dict[str, float] = {}
    used: dict[str, str] = {}
    for concept, sources in emap.values.items():
        for src in sources:
            v = _value(parsed, src)
            if v is not None and math.isfinite(v):
                values[concept] = v
                used[concept] = src.display()
                break
    return values, used


def extract_histogram(
    parsed: MetricsView, sources: tuple[Source, ...]
) -> tuple[Histogram, str] | None:
    """The first of ``sources`` the page exposes, merged over label sets, and its name."""
    for src in sources:
        h = parsed.histogram(src.name, src.match_dict or None)
        if h is not None:
            return h, src.display()
    return None


def extract(
    parsed: MetricsView, emap: EngineMap
) -> tuple[dict[str, float], dict[str, Histogram], dict[str, str]]:
    """(values, histograms, concept → name used) for one parsed page."""
    values, used = extract_values(parsed, emap)
    hists: dict[str, Histogram] = {}
    for _ in extract_histograms(parsed, emap, hists, used):
        pass
    return values, hists, used


def extract_histograms(
    parsed: MetricsView, emap: EngineMap, hists: dict[str, Histogram], used: dict[str, str]
) -> Iterator[None]:
    """Fill ``hists`` (and ``used``) one histogram concept at a time, yielding after each: the
    scraper gives the event loop its turn between them."""
    for concept, sources in emap.histograms.items():
        found = extract_histogram(parsed, sources)
        if found is not None:
            hists[concept], used[concept] = found
        yield


def reducer_for(emap: EngineMap) -> Reducer | None:
    """A :class:`Reducer` that reads exactly what ``emap`` maps (None if a histogram source
    needs a label filter, which only the full parser serves)."""
    if any(src.match for srcs in emap.histograms.values() for src in srcs):
        return None
    plain = [src.name for srcs in emap.values.values() for src in srcs if not src.match]
    filtered = [(src.name, src.match) for srcs in emap.values.values() for src in srcs if src.match]
    hists = [src.name for srcs in emap.histograms.values() for src in srcs]
    return Reducer(plain, filtered, hists)
