"""llama.cpp's server (``llama-server``).

Sources: ``tools/server/README.md`` and ``common/arg.cpp`` of the provisioned build (``-m``,
``--host``, ``--port``, ``-a`` the alias it serves under, ``--metrics``: no ``/metrics``
without it; ``/props``: ``total_slots`` and ``default_generation_settings.n_ctx``); metric
names: the same README and docs/real-engines.md (build 11434 has no KV gauge; older builds had
``llamacpp:kv_cache_usage_ratio`` and ``llamacpp:kv_cache_tokens``).
"""

from __future__ import annotations

from servetune.profiles import concepts as ss
from servetune.profiles.metric_map import EngineMap, Source, names
from servetune.profiles.model import EngineProfile, Entry, Launch, Metrics

_LLAMACPP_VALUES: dict[str, tuple[Source, ...]] = {
    ss.KV_CACHE_USAGE: names("llamacpp:kv_cache_usage_ratio", agg="mean"),
    ss.RUNNING: names("llamacpp:requests_processing"),
    ss.WAITING: names("llamacpp:requests_deferred"),
    ss.PROMPT_TOKENS_TOTAL: names("llamacpp:prompt_tokens_total"),
    ss.GENERATION_TOKENS_TOTAL: names("llamacpp:tokens_predicted_total"),
}

LLAMACPP_OLD = EngineMap(
    engine="llama.cpp",
    name="llama.cpp-old",
    version="older builds (with KV gauge)",
    prefix="llamacpp:",
    markers=("llamacpp:kv_cache_usage_ratio",),
    values=_LLAMACPP_VALUES,
)

# Recent builds still get asked for the KV gauge, so that its absence is reported.
LLAMACPP_NEW = EngineMap(
    engine="llama.cpp",
    name="llama.cpp",
    version="recent builds (no KV gauge)",
    prefix="llamacpp:",
    values=_LLAMACPP_VALUES,
    unexported=LLAMACPP_OLD.markers,
)


PROFILE = EngineProfile(
    id="llama.cpp",
    display_name="llama.cpp",
    summary="llama.cpp's server (`llama-server -m MODEL.gguf`)",
    entry=Entry(
        command=("llama-server",),
        model_flag="-m",
        programs=("llama-server",),
        flag_form="exact",
    ),
    launch=Launch(
        on_path=True,
        provisioned="llama-server",
        name_flag="-a",
        always=("--metrics",),
        # One thread by default: with more, a loaded 2-core box stalls for seconds under load.
        option_defaults=(("threads", 1),),
    ),
    metrics=Metrics(
        maps=(LLAMACPP_OLD, LLAMACPP_NEW),
        config_path="/props",
        # the parallel slots (-np, its cap on requests decoding at once) and each slot's
        # context (-c / -np)
        config_fields=(
            ("total_slots", "max_num_seqs"),
            ("default_generation_settings.n_ctx", "slot_context_tokens"),
        ),
    ),
    aliases=("llamacpp", "llama-cpp"),
    knob_rules=("llama_batch",),
    diagnose_flags=True,
    provisioned_model="gguf",
    host_cpu=True,
    calibrated_as=(
        "vllm",
        "llama.cpp's server is simulated with vLLM V1's continuous batching: its slots (-np) "
        "as max_num_seqs, its logical batch (-b) as the step's token budget with prompts "
        "chunked into it; llama.cpp never preempts a slot (its context is reserved per slot), "
        "which the simulator matches while slots × context fits the pool",
    ),
)
