"""The CPU as a device of the hardware catalog: an engine's CPU build (vLLM's, llama.cpp)
runs its forward pass on this machine's cores, so its peaks are measured here, not looked up.

Measured in a child Python with the BLAS and OpenMP thread counts pinned to the engine's
(``threads``): the peak matrix-multiplication rate (float32 GEMM of 1024² tiles, best of
several) and the memory bandwidth (a 256 MiB copy, read + write bytes, best of several). The
result is a :class:`~servetune.arch.gpus.GpuSpec` of generation ``cpu`` — what the step model
divides by — and the calibration profile keeps it (:class:`DeviceSpec`), so a profile made on
one machine does not re-measure on another.

Names: ``cpu`` (this machine, the engine on one thread), ``cpu:N`` (on ``N`` threads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache

from servetune.arch.gpus import GpuSpec
from servetune.errors import SimError
from servetune.results.calibration_file import DeviceSpec

CPU_NAMES = ("cpu",)

_PROBE = r"""
import json, time
import numpy as np
n = 1024
a = np.random.default_rng(0).random((n, n), dtype=np.float32)
b = np.random.default_rng(1).random((n, n), dtype=np.float32)
a @ b
best = float("inf")
for _ in range(5):
    t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
flops = 2.0 * n ** 3 / best
src = np.ones(64 * 1024 * 1024, dtype=np.float32)
dst = np.empty_like(src)
np.copyto(dst, src)
best = float("inf")
for _ in range(5):
    t = time.perf_counter(); np.copyto(dst, src); best = min(best, time.perf_counter() - t)
bw = 2.0 * src.nbytes / best
print(json.dumps({"flops": flops, "bytes_per_s": bw}))
"""


def is_cpu(name: str) -> bool:
    return name.strip().lower().split(":", 1)[0] in CPU_NAMES


def _threads_of(name: str) -> int:
    _, _, n = name.strip().lower().partition(":")
    if not n:
        return 1
    if not n.isdigit() or int(n) < 1:
        raise SimError(
            f"{name!r} is not a CPU device name",
            hint="name this machine's CPU `cpu` (one engine thread) or `cpu:N` (N threads)",
            code="sim.config",
        )
    return int(n)


def _mem_total_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2**30


@lru_cache(maxsize=8)
def measure_cpu(threads: int = 1) -> DeviceSpec:
    """This machine's CPU as the engine sees it on ``threads`` threads (measured once per
    process: ~2 s)."""
    env = {
        **os.environ,
        **{k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
    }
    try:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        got = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise SimError(
            f"could not measure this machine's CPU ({exc})",
            hint="the measurement runs numpy in a child Python; check that it imports",
            code="sim.config",
        ) from exc
    return DeviceSpec(
        name="cpu" if threads == 1 else f"cpu:{threads}",
        kind="cpu",
        peak_tflops=float(got["flops"]) / 1e12,
        memory_gb_s=float(got["bytes_per_s"]) / 1e9,
        memory_gib=_mem_total_gib(),
        cores=os.cpu_count() or 1,
        threads=threads,
        source=(
            f"measured on this machine ({os.cpu_count()} cores) on {threads} thread(s): "
            "float32 GEMM 1024² best of 5, 256 MiB copy best of 5"
        ),
    )


def cpu_device(name: str) -> DeviceSpec:
    """The CPU device ``name`` names (``cpu``, ``cpu:N``), measured on this machine."""
    return measure_cpu(_threads_of(name))


def as_gpu_spec(device: DeviceSpec) -> GpuSpec:
    """A device as the step model and the memory planner read it."""
    return GpuSpec(
        name=device.name,
        vendor="cpu" if device.kind == "cpu" else "nvidia",
        generation="cpu" if device.kind == "cpu" else "",
        memory_gb=device.memory_gib * 2**30 / 1e9,
        usable_gib=device.memory_gib,
        mem_type="DRAM" if device.kind == "cpu" else "",
        bf16_tflops=device.peak_tflops,
        hbm_gb_s=device.memory_gb_s,
        interconnect="none",
        interconnect_gb_s=max(device.memory_gb_s, 1.0),
        source=device.source,
    )


def device_of(spec: GpuSpec, threads: int | None = None) -> DeviceSpec:
    """A catalog GPU as a calibration profile records it."""
    cpu = spec.generation == "cpu"
    return DeviceSpec(
        name=spec.name,
        kind="cpu" if cpu else "gpu",
        peak_tflops=spec.bf16_tflops,
        memory_gb_s=spec.hbm_gb_s,
        memory_gib=spec.usable_gib,
        cores=(os.cpu_count() or 1) if cpu else None,
        threads=threads,
        source=spec.source,
    )


def find_device(name: str, recorded: DeviceSpec | None = None) -> GpuSpec:
    """The device ``--gpu NAME`` names: the one a calibration profile recorded when it is
    that one (measured where the engine ran), this machine's CPU for ``cpu``/``cpu:N``, else
    the GPU catalog's entry."""
    if recorded is not None and recorded.name.lower() == name.strip().lower():
        return as_gpu_spec(recorded)
    if is_cpu(name):
        return as_gpu_spec(cpu_device(name))
    from servetune.arch.gpus import find_gpu

    return find_gpu(name)
