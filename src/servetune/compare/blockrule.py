"""How long the blocks are when two runs cut into the same windows are set against each other
block by block: one rule for the sign-flip test of two runs (:mod:`.runs`, :mod:`.signflip`)
and the swap of two sweeps' runs level by level (:mod:`.swap`).

1. Politis–White's block for the runs' *difference* series
   (:func:`.bootstrap.pair_block_length`), capped so that the stretch where requests arrived
   holds :data:`.signflip.MIN_BLOCKS` blocks;
2. unless both runs were past capacity (:func:`past_capacity`), at least
   :data:`.signflip.LIFETIMES` times the longer run's median decode: a request shares the
   server's batch with the requests that arrive while it decodes, so a shorter block shares
   its load with the next one — and a level's few blocks cannot show that in their own
   correlation. Past capacity in both runs, a decode lasts as long as the full batch takes and
   the queue's own dependence is taken as it is (the test then leaves every per-request
   latency out, :data:`.runs.PAST_CAPACITY_UNTESTED`, and tests throughput alone: a longer
   block does not make those latencies comparable — their chance difference lasts the run);
3. at most the whole run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servetune.compare.bootstrap import pair_block_length
from servetune.compare.figures import FigureDef
from servetune.compare.signflip import LIFETIMES, MIN_BLOCKS
from servetune.compare.windows import WindowedRun

GROWTH_WARN = 3.0
"""A run whose median TTFT rose this many times from its first quarter of requests to its
last was past capacity (its queue grew through the run)."""


def arrival_windows(run: WindowedRun) -> int:
    """Windows up to the last one a measured request was scheduled in."""
    vs = run.sets.get("ttft")
    return int(vs.window.max()) + 1 if vs is not None and vs.size else 0


def queue_growth(run: WindowedRun) -> float | None:
    """Median TTFT of the last quarter of the requests (in the order they were scheduled)
    over the first quarter's: well above 1 when the queue grew through the run."""
    vs = run.sets.get("ttft")
    if vs is None or vs.size < 8:
        return None
    order = np.argsort(vs.window, kind="stable")
    q = max(1, vs.size // 4)
    first = vs.values[order[:q]]
    last = vs.values[order[-q:]]
    lo = float(np.median(first))
    return float(np.median(last)) / lo if lo > 0 else None


def past_capacity(run: WindowedRun) -> bool:
    """The queue grew through the run (:data:`GROWTH_WARN`)."""
    g = queue_growth(run)
    return g is not None and g >= GROWTH_WARN


@dataclass(frozen=True)
class Blocks:
    """The blocks two runs are cut into (see the module docstring)."""

    windows: int
    """Windows per block."""
    span: int
    """Windows up to the later run's last arrival."""
    decode_s: float
    """The longer of the two runs' median decode (first to last token), seconds."""
    persistent: bool
    """Both runs were past capacity: no lifetime floor."""

    @property
    def arrival_blocks(self) -> int:
        """Blocks over the stretch where requests arrived."""
        return math.ceil(self.span / self.windows)


def pair_blocks(
    a: WindowedRun,
    b: WindowedRun,
    figs: list[FigureDef],
    est_a: dict[str, float],
    est_b: dict[str, float],
) -> Blocks:
    """The block length for setting A's and B's windows against each other (the rule of the
    module docstring); ``est_a`` and ``est_b`` are the runs' figures (for the percentiles'
    influence series)."""
    n = a.n
    span = max(arrival_windows(a), arrival_windows(b)) or n
    block = min(pair_block_length(a, b, figs, est_a, est_b), max(1, span // MIN_BLOCKS))
    persistent = past_capacity(a) and past_capacity(b)
    decode_s = max(a.decode_s, b.decode_s)
    if not persistent and a.width_s > 0:
        block = max(block, math.ceil(LIFETIMES * decode_s / a.width_s - 1e-9))
    return Blocks(max(1, min(block, n)), span, decode_s, persistent)
