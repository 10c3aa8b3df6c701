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

Each error also carries a reason ``code``: a stable, dotted name for *why* it was raised, so
that code deciding on an error (the config doctor choosing fixes, a tuner skipping a
configuration that will not start) reads the code, never the wording of the message. A class
has a default code (its own name, e.g. ``config``); a raise site that callers decide on passes
a specific one. The codes decided on today:

    dataset, target, result, engine   (defaults of their classes)
    target.model_not_served        (default of ModelNotServedError)
    config                         (default of ConfigError)
    knob.unknown                   a knob name the registry does not have
    knob.absent                    the engine has no such knob (the message names the engine)
    knob.value                     a value of the wrong type, out of range or not a choice
    knob.conflict                  knobs that contradict each other (e.g. batch < seqs)
    knob.version                   an engine version that cannot be read
    knob.command                   a command line that is not the engine's
    sim                            (default of SimError)
    sim.config                     a knob value the simulated engine refuses outright
    sim.model_len_above_model      max_model_len beyond the model's max_position_embeddings
    sim.batch_below_model_len      chunked prefill off and the step budget < max_model_len
    sim.batch_below_seqs           max_num_batched_tokens < max_num_seqs
    sim.heads_not_divisible        tensor parallel size does not divide the heads
    sim.catalog                    an unknown GPU or model, or a config.json it cannot read
    sim.unmodelled_family          a model family the simulator does not model (what it lacks)
    sim.weights_do_not_fit         the weights exceed the device memory (load-time OOM)
    sim.free_memory_short          less free memory than gpu_memory_utilization asks for
    sim.no_kv_memory               nothing left for the KV pool after weights + activations
    sim.model_len_above_pool       one max_model_len request does not fit the KV pool
    sim.graph_capture_oom          no room left outside the budget for CUDA graph capture
    sim.replicas_sessions          multi-turn sessions on simulated replicas (not modelled)
    calibrate.bad_input            a calibrate argument that is no run or sweep, or a bad --hold-out
    calibrate.no_evidence          every run given was refused (the reasons are in the message)
    calibrate.unidentified         the deployment of a run cannot be identified (no command, GPU)
    calibrate.mixed                the runs measured more than one deployment
    workload.bad_turns             a session's turn range whose most is below its least
    workload.bad_header            a session header that is not an HTTP header name
    workload.bad_window            an empty trace window
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar, Self

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill_fields(text: str, name: Callable[[str], str]) -> str:
    """TEXT with each ``{field}`` replaced by NAME(field); other braces are left alone."""
    return _FIELD.sub(lambda m: name(m.group(1)), text)


def _own(field: str) -> str:
    return field


class ServetuneError(Exception):
    """An error caused by input; carries a one-line hint on what to do about it and a
    reason code (see the module docstring).

    A library layer names what it was given by its field or parameter, never by a CLI flag:
    :meth:`over_fields` writes the message over ``{field}`` placeholders, shown by the field's
    own name here and by the flag that set it where the CLI prints it (:meth:`shown`)."""

    default_code: ClassVar[str] = "error"

    def __init__(self, message: str, hint: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code or self.default_code
        self.templates: tuple[str, str | None] | None = None
        """The message and hint over ``{field}`` placeholders (:meth:`over_fields`)."""

    @classmethod
    def over_fields(cls, message: str, hint: str | None = None, code: str | None = None) -> Self:
        """An error whose MESSAGE and HINT name fields as ``{field}``: ``message`` and ``hint``
        show each by its own name, :meth:`shown` by another (the CLI: its flag)."""
        out = cls(fill_fields(message, _own), fill_fields(hint, _own) if hint else None, code)
        out.templates = (message, hint)
        return out

    def shown(self, name: Callable[[str], str]) -> tuple[str, str | None]:
        """(message, hint) with each field named by NAME (as written when not over fields)."""
        if self.templates is None:
            return self.message, self.hint
        message, hint = self.templates
        return fill_fields(message, name), fill_fields(hint, name) if hint else None

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(ServetuneError):
    """An invalid flag value or combination."""

    default_code = "config"


class DatasetError(ServetuneError):
    """A dataset file that is missing or malformed."""

    default_code = "dataset"


class TargetError(ServetuneError):
    """The target server cannot be reached or refuses the request."""

    default_code = "target"


class ModelNotServedError(TargetError):
    """The requested model is not listed by the server."""

    default_code = "target.model_not_served"


class ResultError(ServetuneError):
    """A result directory that cannot be written or read."""

    default_code = "result"


class EngineError(ServetuneError):
    """An engine that failed to start or stop."""

    default_code = "engine"


class SimError(ServetuneError):
    """A configuration the simulated engine refuses, as vLLM would."""

    default_code = "sim"
