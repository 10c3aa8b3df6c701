"""The audit log: every traffic decision, one JSON object a line, flushed and fsynced.

Each entry has the time (UTC ISO and epoch), the replica, the action (``rollout_start``,
``step``, ``promote``, ``rollback``, ``paused_peak``, ``reload``, ``weights``), the old and the
new group weights, a hash of the configuration in force, the evidence the decision rests on
and a one-line reason. It is append-only and survives a kill (each line is written whole).
"""

from __future__ import annotations

import hashlib
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from servetune.errors import ConfigError


def config_hash(cfg_json: bytes) -> str:
    return "sha256:" + hashlib.sha256(cfg_json).hexdigest()[:16]


class AuditLog:
    def __init__(self, path: str | Path, replica: str = "") -> None:
        self.path = Path(path)
        self.replica = replica
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        except OSError as exc:
            raise ConfigError(
                f"audit log {self.path} cannot be opened for appending: {exc.strerror}",
                hint="set audit_log in the configuration to a writable path",
            ) from None
        os.close(fd)

    def write(
        self,
        action: str,
        *,
        reason: str = "",
        old_weights: dict[str, float] | None = None,
        new_weights: dict[str, float] | None = None,
        config: str | None = None,
        evidence: Any = None,
        **extra: Any,
    ) -> dict[str, Any]:
        now = time.time()
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds"),
            "epoch": now,
            "replica": self.replica,
            "action": action,
            "reason": reason,
        }
        if old_weights is not None:
            entry["old_weights"] = old_weights
        if new_weights is not None:
            entry["new_weights"] = new_weights
        if config is not None:
            entry["config"] = config
        if evidence is not None:
            entry["evidence"] = evidence
        entry.update(extra)
        line = orjson.dumps(entry, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return entry


def read_audit(path: str | Path) -> list[dict[str, Any]]:
    out = []
    for line in Path(path).read_bytes().splitlines():
        if line.strip():
            out.append(orjson.loads(line))
    return out
