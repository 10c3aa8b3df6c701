"""Where and when a run ran: the :class:`~servetune.results.schema.Environment` of this
machine, built in one place for every kind of run (real-time, offline simulation, synthetic)."""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from servetune import __version__
from servetune.results.schema import Environment


def this_machine(command: Sequence[str] | None = None) -> Environment:
    """This machine now; ``command`` defaults to this process's command line."""
    return Environment(
        servetune_version=__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count() or 1,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=list(sys.argv if command is None else command),
    )
