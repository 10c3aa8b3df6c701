"""GPU utilisation and memory, from NVML on this machine or from a DCGM exporter's URL.

NVML (``nvidia-ml-py``, module ``pynvml``) is imported lazily: no module, no driver or no GPU
means "not available", never an error. It only describes the server when the server runs
here, so the scraper asks for it only when the metrics URL is on this host.

Both sources give the same concepts: ``gpu_utilization`` (0–1, mean over GPUs),
``gpu_memory_used_bytes`` and ``gpu_memory_total_bytes`` (sums over GPUs).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp

from servetune.metrics.engine_maps import DCGM_FB_FREE, DCGM_FB_USED, DCGM_UTIL
from servetune.metrics.prometheus import parse, wanted_sample_names
from servetune.results import server_series as ss

log = logging.getLogger(__name__)

MIB = 1 << 20


class GpuSource(Protocol):
    name: str
    names: dict[str, str]
    """Concept → where its value comes from (for ``ServerInfo.names_found``)."""

    async def read(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class NvmlSource:
    """Local GPUs through NVML. Build with :meth:`open`, which returns None when NVML is not
    usable here (module absent, no driver, no device)."""

    name = "nvml"

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self.names = {
            ss.GPU_UTILIZATION: "nvml:nvmlDeviceGetUtilizationRates.gpu",
            ss.GPU_MEMORY_USED_BYTES: "nvml:nvmlDeviceGetMemoryInfo.used",
            ss.GPU_MEMORY_TOTAL_BYTES: "nvml:nvmlDeviceGetMemoryInfo.total",
        }
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls) -> NvmlSource | None:
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
            n = int(pynvml.nvmlDeviceGetCount())
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        except Exception as exc:  # NVMLError_*: no driver, no permission, …
            log.debug("NVML not usable: %s", exc)
            return None
        if not handles:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass
            return None
        return cls(pynvml, handles)

    def _read_blocking(self) -> dict[str, float]:
        nv = self._nvml
        utils: list[float] = []
        used = total = 0.0
        for h in self._handles:
            utils.append(float(nv.nvmlDeviceGetUtilizationRates(h).gpu) / 100.0)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            used += float(mem.used)
            total += float(mem.total)
        return {
            ss.GPU_UTILIZATION: sum(utils) / len(utils),
            ss.GPU_MEMORY_USED_BYTES: used,
            ss.GPU_MEMORY_TOTAL_BYTES: total,
        }

    async def read(self) -> dict[str, float]:
        # NVML calls block in the driver for up to a few ms: keep them off the event loop.
        return await asyncio.to_thread(self._read_blocking)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


_DCGM_WANTED = wanted_sample_names([DCGM_UTIL, DCGM_FB_USED, DCGM_FB_FREE])


def dcgm_values(text: str) -> dict[str, float]:
    """GPU concepts from a DCGM exporter page (utilisation in %, framebuffer in MiB)."""
    p = parse(text, _DCGM_WANTED)
    out: dict[str, float] = {}
    util = p.value(DCGM_UTIL, agg="mean")
    if util is not None:
        out[ss.GPU_UTILIZATION] = util / 100.0
    used = p.value(DCGM_FB_USED)
    free = p.value(DCGM_FB_FREE)
    if used is not None:
        out[ss.GPU_MEMORY_USED_BYTES] = used * MIB
        if free is not None:
            out[ss.GPU_MEMORY_TOTAL_BYTES] = (used + free) * MIB
    return out


class DcgmSource:
    """GPU figures scraped from a DCGM exporter (``--dcgm-url``)."""

    name = "dcgm"

    def __init__(self, url: str, session: aiohttp.ClientSession, timeout_s: float = 2.0) -> None:
        self.names = {
            ss.GPU_UTILIZATION: DCGM_UTIL,
            ss.GPU_MEMORY_USED_BYTES: DCGM_FB_USED,
            ss.GPU_MEMORY_TOTAL_BYTES: f"{DCGM_FB_USED} + {DCGM_FB_FREE}",
        }
        self.url = url
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def read(self) -> dict[str, float]:
        async with self._session.get(self.url, timeout=self._timeout) as resp:
            if resp.status != 200:
                raise DcgmError(f"GET {self.url} answered HTTP {resp.status}")
            body = await resp.read()
        values = dcgm_values(body.decode("utf-8", "replace"))
        if not values:
            raise DcgmError(f"{self.url} exposes none of {DCGM_UTIL}, {DCGM_FB_USED}")
        return values

    def close(self) -> None:
        pass


class DcgmError(Exception):
    """The DCGM exporter answered, but not with GPU figures."""


def is_local_url(url: str) -> bool:
    """Does ``url`` point at this machine (loopback, or one of our own names)?"""
    host = (urlsplit(url).hostname or "").lower()
    if not host:
        return False
    if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127."):
        return True
    try:
        own = {socket.gethostname().lower(), socket.getfqdn().lower()}
    except OSError:
        own = set()
    return host in own
