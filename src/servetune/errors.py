"""The exception tree of servetune.

Every error a user can cause is a ``ServetuneError``; the CLI prints its message and
hint and exits with status 2, never a traceback::

    ServetuneError                 what was wrong + what to do (``hint``)
    ├── ConfigError                a flag or a combination of flags is invalid
    ├── DatasetError               a dataset file is missing or malformed (file, line)
    ├── TargetError                the server cannot be reached or refuses what we ask
    │   └── ModelNotServedError    the model is not among those /v1/models lists
    ├── ResultError                a result directory cannot be written or read
    ├── EngineError                an engine launch failed (the log line that says why)
    └── SimError                   the simulated engine refuses the configuration
"""

from __future__ import annotations


class ServetuneError(Exception):
    """An error caused by input; carries a one-line hint on what to do about it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(ServetuneError):
    """An invalid flag value or combination."""


class DatasetError(ServetuneError):
    """A dataset file that is missing or malformed."""


class TargetError(ServetuneError):
    """The target server cannot be reached or refuses the request."""


class ModelNotServedError(TargetError):
    """The requested model is not listed by the server."""


class ResultError(ServetuneError):
    """A result directory that cannot be written or read."""


class EngineError(ServetuneError):
    """An engine that failed to start or stop."""


class SimError(ServetuneError):
    """A configuration the simulated engine refuses, as vLLM would."""
