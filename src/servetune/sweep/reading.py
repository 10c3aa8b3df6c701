"""Opening a sweep directory as it stands — finished, still running, or cut short by a kill.

``sweep.json`` is rewritten after every level, so a killed sweep keeps every finished level;
the level that was running when it died has a ``run.json`` that still says ``running``. Read
here, such a sweep comes back with status ``cut_short``, that level summarised from the records
it wrote (status ``cut_short``, left out of the knee), and a warning saying so.
"""

from __future__ import annotations

from pathlib import Path

from servetune.metrics.run_finish import open_run
from servetune.results.io import RUN_FILE
from servetune.results.run_dir import process_gone
from servetune.results.sweep_schema import SweepResult, read_sweep_result
from servetune.sweep.analysis import analyse
from servetune.sweep.curve import row_from_run

LEVELS_DIR = "levels"


def open_sweep(sweep_dir: str | Path) -> SweepResult:
    """``sweep.json``, with the level under way (or cut) added when the sweep still runs or
    was killed; status ``cut_short`` when its process is gone."""
    d = Path(sweep_dir).expanduser()
    sweep = read_sweep_result(d)
    if sweep.status != "running":
        return sweep
    gone = process_gone(sweep.pid, sweep.hostname, [d])
    done = {r.label for r in sweep.rows}
    added: list[str] = []
    for level in sweep.planned:
        level_dir = d / LEVELS_DIR / level.label
        if level.label in done or not (level_dir / RUN_FILE).is_file():
            continue
        run = open_run(level_dir)
        if run.status not in ("running", "cut_short"):
            continue  # finished after sweep.json was written: the row comes next time
        sweep.rows.append(row_from_run(level, level_dir, d, run))
        added.append(f"{level.label} ({run.summary.completed + run.summary.failed} requests)")
    analyse(sweep)
    where = f"; partial level: {', '.join(added)}" if added else ""
    if gone:
        sweep.status = "cut_short"
        sweep.warnings.insert(
            0,
            f"the sweep was cut short: sweep.json still said running (last written "
            f"{sweep.updated_at} by process {sweep.pid}, which is gone); "
            f"{len(done)} level(s) finished{where}",
        )
    else:
        sweep.warnings.insert(
            0,
            f"the sweep is still running (process {sweep.pid}): {len(done)} level(s) so far"
            + where,
        )
    return sweep
