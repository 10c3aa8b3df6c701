"""Exposition-text fixtures of tests/data/metrics and helpers to serve them changing."""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"

ENGINE_FIXTURES = {
    # file: (engine, version, concepts the map has but the page lacks)
    "vllm_v1_0.10.txt": ("vllm", "V1 (>=0.10)", ["tpot_seconds"]),
    "vllm_cpu_0.32_dp2.txt": ("vllm", "V1 (>=0.10)", []),
    "vllm_cpu_0.32_capture.txt": ("vllm", "V1 (>=0.10)", []),
    "vllm_0.8_v0.txt": ("vllm", "0.8-0.9 (V0 engine)", []),
    "sglang_recent.txt": ("sglang", "2025+", []),
    "sglang_2024.txt": ("sglang", "2024", []),
    "tgi.txt": ("tgi", "", []),
    "llamacpp_old.txt": ("llama.cpp", "older builds (with KV gauge)", []),
    "llamacpp_b11434.txt": ("llama.cpp", "recent builds (no KV gauge)", ["kv_cache_usage"]),
    "trtllm_collector.txt": ("trtllm", "1.x (PyTorch backend)", []),
}


def load(name: str) -> str:
    return (DATA / name).read_text()


_LE = re.compile(r'le="([^"]+)"')
_SAMPLE = re.compile(r"^(?P<name>[^\s{#]+)(?P<labels>\{[^\n]*\})?\s+(?P<value>\S+)", re.M)


def advanced(text: str, n: int, prefix: str = "vllm:") -> str:
    """The page after ``n`` more "steps": every counter of ``prefix`` grows by 100·n, every
    histogram by 10·n observations of 0.05 s (all its buckets, so it stays cumulative), and the
    waiting gauge reads n. Gauges otherwise unchanged."""

    def bump(m: re.Match[str]) -> str:
        name, labels, value = m.group("name"), m.group("labels") or "", m.group("value")
        if not name.startswith(prefix):
            return m.group(0)
        v = float(value)
        if name.endswith("_bucket"):
            le = _LE.search(labels)
            if le is not None and float(le.group(1)) >= 0.05:  # 0.05 lies in every le >= it
                v += 10 * n
        elif name.endswith("_count"):
            v += 10 * n
        elif name.endswith("_sum"):
            v += 10 * n * 0.05
        elif name.endswith("_total"):
            v += 100 * n
        elif name.endswith("num_requests_waiting"):
            v = float(n)
        else:
            return m.group(0)
        return f"{name}{labels} {v!r}"

    return _SAMPLE.sub(bump, text)
