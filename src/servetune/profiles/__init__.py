"""Engine profiles: one per engine, registered in one place (:mod:`.registry`).

A profile says everything servetune knows about an engine that is not a knob: its id (the
one spelling), display name, how it is launched (entry command, model flag, served-name rule,
listen flags, a YAML side file), how its command line is recognised, why a start failed, where
its metrics are and what they are called, and what the simulated engine can tell about it.
Which knobs it has and how each is spelled is the knob registry's (:mod:`servetune.knobs`),
keyed by the profile's id. Every other module asks the profile; none switches on an engine's
name (tests/test_layers.py checks it).

    profile("trtllm").metrics.path        # "/prometheus/metrics"
    ENGINE_IDS                            # ("vllm", "vllm-cpu", "sim", "sglang", …)

Adding an engine: a module here with its ``PROFILE`` (and its metric maps), a line in
``registry.PROFILES``, its spellings in ``knobs/table.py``.
"""

from servetune.profiles.metric_map import Agg, EngineMap, Source, names
from servetune.profiles.model import (
    EngineProfile,
    Entry,
    FailurePattern,
    Launch,
    Metrics,
    SimScreen,
    failure,
)
from servetune.profiles.registry import (
    ENGINE_IDS,
    NEUTRAL,
    PROFILES,
    canonical,
    entry_examples,
    failure_patterns,
    find,
    metric_map,
    metric_map_names,
    metric_maps,
    profile,
    recognise,
    where,
)

__all__ = [
    "ENGINE_IDS",
    "NEUTRAL",
    "PROFILES",
    "Agg",
    "EngineMap",
    "EngineProfile",
    "Entry",
    "FailurePattern",
    "Launch",
    "Metrics",
    "SimScreen",
    "Source",
    "canonical",
    "entry_examples",
    "failure",
    "failure_patterns",
    "find",
    "metric_map",
    "metric_map_names",
    "metric_maps",
    "names",
    "profile",
    "recognise",
    "where",
]
