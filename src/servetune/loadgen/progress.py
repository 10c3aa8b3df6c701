"""The live progress line: sent, done, failed, in flight, target vs achieved rate, p99 send
lag and elapsed time — and a loud warning when the client falls behind its plan."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.live import Live
from rich.text import Text

from servetune.loadgen.live import Snapshot
from servetune.metrics.client_health import behind_reason

_PLAIN_EVERY_S = 5.0


class ProgressLine:
    """Renders snapshots from all workers as one line (rich Live on a TTY, plain lines else)."""

    def __init__(
        self,
        total: int | None,
        planned_rate: float | None,
        enabled: bool = True,
        on_update: Callable[[Sequence[Snapshot]], None] | None = None,
    ):
        self.on_update = on_update
        """Also told every update (the running run.json), shown or not."""
        self.total = total
        self.planned_rate = planned_rate
        self.enabled = enabled
        self.console = Console(stderr=True)
        self.tty = self.console.is_terminal
        self._live: Live | None = None
        self._last_plain = 0.0
        self.start = time.monotonic()
        self.worst_reason: str | None = None

    def __enter__(self) -> ProgressLine:
        self.start = time.monotonic()
        if self.enabled and self.tty:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def update(self, snaps: Sequence[Snapshot], final: bool = False) -> None:
        if self.on_update is not None:
            self.on_update(snaps)
        elapsed = time.monotonic() - self.start
        sent = sum(s.sent for s in snaps)
        done = sum(s.done for s in snaps)
        failed = sum(s.failed for s in snaps)
        inflight = sum(s.inflight for s in snaps)
        lag = max((s.lag_p99_ms for s in snaps), default=0.0)
        achieved = sent / elapsed if elapsed > 1.0 and self.planned_rate else None
        reason = behind_reason(lag, achieved, self.planned_rate) if elapsed > 2.0 else None
        if reason:
            self.worst_reason = reason
        total = f"/{self.total}" if self.total else ""
        rate = (
            f"rate {achieved or 0:.1f}/{self.planned_rate:.1f} req/s"
            if self.planned_rate
            else f"rate {sent / elapsed if elapsed else 0:.1f} req/s (unbounded)"
        )
        line = Text(
            f"sent {sent}{total}  done {done}  failed {failed}  in flight {inflight}  "
            f"{rate}  p99 send lag {lag:.2f} ms  {elapsed:6.1f} s"
        )
        if failed:
            line.stylize("yellow")
        if reason:
            line.append(f"  ⚠ {reason}", style="bold red")
        if not self.enabled:
            return
        if self._live is not None:
            self._live.update(line, refresh=True)
        elif final or elapsed - self._last_plain >= _PLAIN_EVERY_S:
            self._last_plain = elapsed
            print(line.plain, file=sys.stderr, flush=True)
