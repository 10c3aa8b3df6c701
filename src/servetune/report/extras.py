"""What other commands wrote beside a run or a sweep, for the report: ``cost.json`` (servetune
cost) and ``quality.json`` (servetune quality ``--out`` into the same folder). A file that
cannot be read is a note in the report, never a failure of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servetune.errors import ServetuneError
from servetune.results.cost_file import COST_FILE, CostReport, read_cost_report
from servetune.results.quality_file import QUALITY_FILE, QualityReport, read_quality_report


@dataclass
class Extras:
    cost: CostReport | None = None
    quality: QualityReport | None = None
    notes: list[str] = field(default_factory=list)


def load_extras(path: Path) -> Extras:
    out = Extras()
    if (path / COST_FILE).is_file():
        try:
            out.cost = read_cost_report(path)
        except ServetuneError as exc:
            out.notes.append(f"{COST_FILE}: {exc.message}")
    if (path / QUALITY_FILE).is_file():
        try:
            out.quality = read_quality_report(path)
        except ServetuneError as exc:
            out.notes.append(f"{QUALITY_FILE}: {exc.message}")
    return out
