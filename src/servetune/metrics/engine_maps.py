"""Which Prometheus name feeds which concept, per engine and version — picked from a page.

The maps are data in each engine's profile (:mod:`servetune.profiles`: their sources are
there). Each :class:`EngineMap` lists, for every concept it knows, candidate sources in order
of preference (newest name first); the first one the server exposes wins. A map is picked by
:func:`detect` from the names a metrics page holds: the family prefix says the engine,
``markers`` / ``absent`` say the version. Concepts a map lists but the server does not expose
are reported as missing, never an error (llama.cpp's recent builds, for one, dropped their
KV-usage gauge).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from servetune.profiles import EngineMap, Source, metric_maps

__all__ = [
    "DCGM_FB_FREE",
    "DCGM_FB_USED",
    "DCGM_UTIL",
    "ENGINE_MAPS",
    "VLLM_CACHE_CONFIG_INFO",
    "EngineMap",
    "Source",
    "all_base_names",
    "detect",
]

# vLLM's CacheConfig as an info gauge (value 1, the configuration in its labels: num_gpu_blocks,
# block_size, gpu_memory_utilization, cache_dtype, …; one series per DP engine), exposed by V0
# and V1 alike. Static for a server's life: read once, into the summary (server_summary.py).
VLLM_CACHE_CONFIG_INFO = "vllm:cache_config_info"

# GPU figures from an NVIDIA DCGM exporter (a separate URL): utilisation in percent,
# framebuffer in MiB, one series per GPU.
DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"

# Order matters: within an engine, the more specific version first (each profile's order).
ENGINE_MAPS: tuple[EngineMap, ...] = metric_maps()


def all_base_names(maps: Iterable[EngineMap] = ENGINE_MAPS) -> set[str]:
    out: set[str] = set()
    for m in maps:
        out |= m.base_names()
    return out


def detect(names: Collection[str], maps: Iterable[EngineMap] = ENGINE_MAPS) -> EngineMap | None:
    """The map of the engine (and version) whose names ``names`` holds; None when none fits.

    When several engines' prefixes appear (a proxy merging pages), the one with the most
    names present wins.
    """
    maps = tuple(maps)
    present = set(names)
    best: EngineMap | None = None
    best_hits = 0
    seen_prefix: set[str] = set()
    for m in maps:
        if m.prefix in seen_prefix:
            continue
        if not all(n in present for n in m.markers) or any(n in present for n in m.absent):
            continue
        hits = sum(1 for n in present if n.startswith(m.prefix))
        if hits == 0:
            continue
        seen_prefix.add(m.prefix)
        if hits > best_hits:
            best, best_hits = m, hits
    return best
