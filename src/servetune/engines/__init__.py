"""Real engines as child processes: command lines from engine-neutral knobs, launch, readiness,
failure recognition and stop — for vLLM (GPU and the CPU build), llama.cpp, SGLang, TGI and
servetune's own simulated engine.

    spec = build_command("llama.cpp", "tiny.gguf", EngineKnobs(max_num_seqs=2), port=free_port())
    with running(spec, "engine.log") as eng:      # or: async with arunning(...)
        bench against eng.base_url

A knob an engine lacks, or an engine that cannot start, is a ServetuneError that says why;
the knobs' names and spellings are the registry's (:mod:`servetune.knobs`).
"""

from servetune.engines.commands import EngineOptions, LaunchSpec, build_command
from servetune.engines.knobs import EngineKnobs
from servetune.engines.process import (
    EngineProcess,
    arunning,
    free_port,
    launch,
    launch_sync,
    running,
    start,
)

__all__ = [
    "EngineKnobs",
    "EngineOptions",
    "EngineProcess",
    "LaunchSpec",
    "arunning",
    "build_command",
    "free_port",
    "launch",
    "launch_sync",
    "running",
    "start",
]
