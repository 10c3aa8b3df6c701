"""Engines started by `servetune engine start` and stopped later by another command.

A state file per engine name records the process group we created and the leader's start
time, so `stop` signals that group only if its leader is still the very process we started
(a PID reused by another program is left alone).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from servetune.engines.process import (
    DEFAULT_STOP_GRACE_S,
    EngineProcess,
    group_members,
    process_start_ticks,
    terminate_group,
)
from servetune.engines.provisioned import cache_root
from servetune.errors import EngineError


class EngineState(BaseModel):
    schema_version: int = 1
    name: str
    engine: str
    pid: int
    pgid: int
    start_ticks: int | None
    base_url: str
    served_model_name: str
    log_path: str
    command: str
    started_at: float


def default_state_dir() -> Path:
    """``$SERVETUNE_STATE_DIR``, else ``run/`` in servetune's cache."""
    given = os.environ.get("SERVETUNE_STATE_DIR")
    return Path(given).expanduser() if given else cache_root() / "run"


def state_path(name: str, state_dir: Path | None = None) -> Path:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return (state_dir or default_state_dir()) / f"{safe}.json"


def is_running(state: EngineState) -> bool:
    """Our process group still has live members, and its ID was not reused."""
    if not group_members(state.pgid):
        return False
    ticks = process_start_ticks(state.pid)
    if ticks is None:
        return True  # the leader is gone, the rest of our group lives on
    # A live process with the leader's PID started at another time is somebody else's.
    return state.start_ticks is None or ticks == state.start_ticks


def load(name: str, state_dir: Path | None = None) -> EngineState | None:
    path = state_path(name, state_dir)
    if not path.exists():
        return None
    return EngineState.model_validate_json(path.read_text())


def record(name: str, eng: EngineProcess, state_dir: Path | None = None) -> EngineState:
    state = EngineState(
        name=name,
        engine=eng.spec.engine,
        pid=eng.pid,
        pgid=eng.pgid,
        start_ticks=process_start_ticks(eng.pid),
        base_url=eng.base_url,
        served_model_name=eng.spec.served_model_name,
        log_path=str(eng.log_path),
        command=eng.spec.shell(),
        started_at=time.time(),
    )
    path = state_path(name, state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(state.model_dump_json(indent=2))
    return state


def stop(name: str, state_dir: Path | None = None, grace_s: float = DEFAULT_STOP_GRACE_S) -> bool:
    """Stop the engine recorded under NAME. Returns False when it was no longer running."""
    state = load(name, state_dir)
    if state is None:
        raise EngineError(
            f"no engine named {name!r} was started here",
            hint=f"state files live in {state_dir or default_state_dir()}",
        )
    was_running = is_running(state)
    if was_running and not terminate_group(state.pgid, grace_s):
        raise EngineError(
            f"engine {name!r} (process group {state.pgid}) did not stop",
            hint=f"its log: {state.log_path}",
        )
    state_path(name, state_dir).unlink(missing_ok=True)
    return was_running
