"""The shape of a metric-name map: which Prometheus names feed which concept for one engine
and version. Each engine's maps are data in its profile (:mod:`servetune.profiles`);
:mod:`servetune.metrics.engine_maps` picks one from a page's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Agg = Literal["sum", "mean", "max"]


@dataclass(frozen=True)
class Source:
    """One exposed series set: a sample name (or a histogram's base name), an optional label
    filter, how several label sets combine, and a scale to our units."""

    name: str
    match: tuple[tuple[str, str], ...] = ()
    agg: Agg = "sum"
    """sum for counts and counters; mean for ratios such as KV use (one series per DP engine)."""
    scale: float = 1.0

    @property
    def match_dict(self) -> dict[str, str]:
        return dict(self.match)

    def display(self) -> str:
        """The name as a person would grep for it: ``name{label="value"}``."""
        if not self.match:
            return self.name
        inner = ",".join(f'{k}="{v}"' for k, v in self.match)
        return f"{self.name}{{{inner}}}"


def names(*names: str, agg: Agg = "sum") -> tuple[Source, ...]:
    return tuple(Source(n, agg=agg) for n in names)


@dataclass(frozen=True)
class EngineMap:
    engine: str
    """The engine's profile id (:mod:`servetune.profiles`)."""
    name: str
    """The map's own name (``servetune export --engine NAME``); empty: not offered by name."""
    version: str
    """Which releases this map describes, for people (``V1 (>=0.10)``)."""
    prefix: str
    """Every name of this engine starts with it; it decides the engine."""
    values: Mapping[str, tuple[Source, ...]]
    """Gauge / counter concept → candidates, first exposed wins."""
    histograms: Mapping[str, tuple[Source, ...]] = field(default_factory=dict)
    """Histogram concept (seconds) → candidate base names (``foo`` for ``foo_bucket`` …)."""
    markers: tuple[str, ...] = ()
    """All of these must be exposed for this version to be chosen."""
    absent: tuple[str, ...] = ()
    """None of these may be exposed for this version to be chosen."""
    unexported: tuple[str, ...] = ()
    """Names the map asks for that this release does not export (llama.cpp's recent builds
    dropped the KV gauge the map still asks for, so that its absence is reported)."""

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"

    def concepts(self) -> list[str]:
        return [*self.values, *self.histograms]

    def base_names(self) -> set[str]:
        names = {src.name for srcs in self.values.values() for src in srcs}
        names |= {src.name for srcs in self.histograms.values() for src in srcs}
        names.update(self.markers, self.absent)
        return names
