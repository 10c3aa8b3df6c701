"""Where a study lives: SQLite in the result directory by default (``tune.db``) or any
SQLAlchemy URL (``--storage postgresql://…``), always with heartbeats: a trial whose worker
stopped beating (killed, its host gone) is failed by the next worker that starts a trial and
re-queued with the same parameters (``RetryFailedTrialCallback``)."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import optuna

from servetune.errors import ConfigError

DB_FILE = "tune.db"
HEARTBEAT_S = 10
MAX_RETRY = 2


def storage_url(result_dir: Path, storage: str | None) -> str:
    if storage:
        if storage.startswith("postgresql://") or storage.startswith("postgres://"):
            # psycopg 3 is the driver servetune installs
            return "postgresql+psycopg://" + storage.split("://", 1)[1]
        return storage
    return f"sqlite:///{(result_dir / DB_FILE).resolve()}"


def grace_for(heartbeat_s: int) -> int:
    """How long a trial may go without a heartbeat before it counts as dead."""
    return max(3 * heartbeat_s, heartbeat_s + 5)


def open_storage(url: str, heartbeat_s: int = HEARTBEAT_S) -> optuna.storages.RDBStorage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
        retry = (cls or optuna.storages.RetryFailedTrialCallback)(max_retry=MAX_RETRY)
    kwargs: dict[str, Any] = {
        "heartbeat_interval": heartbeat_s,
        "grace_period": grace_for(heartbeat_s),
    }
    params = inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    if "heartbeat_stale_trial_callback" in params:
        kwargs["heartbeat_stale_trial_callback"] = retry
    else:  # pragma: no cover - older Optuna
        kwargs["failed_trial_callback"] = retry
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    try:
        with warnings.catch_warnings():
            # heartbeats are "experimental" in Optuna's words; they are what re-queues the
            # trial of a worker that died
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs or None, **kwargs)
    except Exception as exc:  # SQLAlchemy: the database cannot be reached or opened
        # SQLAlchemy's text runs over lines ([SQL: …], a link): the first says what is wrong
        said = (str(exc).splitlines() or [exc.__class__.__name__])[0]
        sqlite = url.startswith("sqlite:")
        raise ConfigError.over_fields(
            f"cannot open the study storage {url.split('@')[-1]}: {said}",
            hint="the study's database file looks damaged: choose another {result_dir}, or "
            "move the file aside to start the study afresh"
            if sqlite
            else "check {storage} (postgresql://USER@HOST:PORT/DB) and that the server runs",
        ) from exc
