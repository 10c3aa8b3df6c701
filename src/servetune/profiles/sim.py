"""servetune's simulated engine (``servetune sim serve``): a model of vLLM V1, so its knobs
are vLLM's and so are its metric names; it can also run on a virtual clock, in-process."""

from __future__ import annotations

from servetune.profiles.model import EngineProfile, Entry, Launch, Metrics
from servetune.profiles.vllm import VLLM_MAPS

PROFILE = EngineProfile(
    id="sim",
    display_name="simulated engine",
    summary="servetune's simulated engine (`servetune sim serve --gpu GPU --model MODEL`)",
    entry=Entry(
        command=("servetune", "sim", "serve"),
        model_flag="--model",
        programs=("servetune",),
        subcommands=(("sim", "serve"),),
        modules=("servetune.cli", "servetune"),
        module_subcommands=("sim", "serve"),
    ),
    launch=Launch(
        executable=("{python}", "-m", "servetune.cli"),
        served_name="given",
        option_flags=(("gpu", "--gpu"),),
        required_options=(("gpu", "the GPU to simulate", "pass --gpu A100-80GB"),),
    ),
    metrics=Metrics(maps=VLLM_MAPS),
    reads_as=("vllm",),
    knobs_as="vllm",
    sim_semantics="vllm-v1",
    knob_rules=("vllm_batch", "sglang_chunk"),
    sim_screens=frozenset({"memory", "vllm_defaults"}),
    memory_model=True,
    simulated=True,
)
