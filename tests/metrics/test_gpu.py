"""GPU figures: DCGM exporter over loopback, NVML with a stand-in module, a real GPU if any."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
import types
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from live_server import serve, text_handler, wait_until
from metrics_fixtures import load

from servetune.metrics.gpu import DcgmError, DcgmSource, NvmlSource, dcgm_values, is_local_url
from servetune.metrics.scraper import MetricsScraper
from servetune.results import server_series as ss
from servetune.results.schema import ServerInfo

MIB = 2**20


def test_dcgm_values_from_fixture() -> None:
    v = dcgm_values(load("dcgm_exporter.txt"))
    assert v[ss.GPU_UTILIZATION] == pytest.approx(0.8)
    assert v[ss.GPU_MEMORY_USED_BYTES] == 152000 * MIB
    assert v[ss.GPU_MEMORY_TOTAL_BYTES] == 162000 * MIB
    assert dcgm_values(load("vllm_v1_0.10.txt")) == {}


def test_dcgm_source_over_loopback() -> None:
    ok, hits = text_handler(lambda n: load("dcgm_exporter.txt"))
    other, _ = text_handler(lambda n: load("llamacpp_old.txt"))

    async def main() -> tuple[dict[str, float], str, str]:
        async with (
            serve({"/metrics": ok, "/other": other}) as (url, _),
            aiohttp.ClientSession() as s,
        ):
            values = await DcgmSource(url + "/metrics", s).read()
            errors = []
            for path in ("/missing", "/other"):
                with pytest.raises(DcgmError) as exc:
                    await DcgmSource(url + path, s).read()
                errors.append(str(exc.value))
            return values, errors[0], errors[1]

    values, e404, e_foreign = asyncio.run(main())
    assert hits[0] == 1
    assert values[ss.GPU_UTILIZATION] == pytest.approx(0.8)
    assert "HTTP 404" in e404
    assert "DCGM_FI_DEV_GPU_UTIL" in e_foreign


def _fake_nvml(devices: int, fail_init: bool = False) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    state: dict[str, Any] = {"shutdown": 0}

    def init() -> None:
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    mod.nvmlInit = init  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: state.__setitem__("shutdown", state["shutdown"] + 1)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: devices  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=[50, 100][h])  # type: ignore[attr-defined]
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
        used=(h + 1) * 10 * 2**30, total=80 * 2**30
    )
    mod.state = state  # type: ignore[attr-defined]
    return mod


def test_nvml_module_absent_means_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert NvmlSource.open() is None


def test_nvml_without_driver_or_devices_means_not_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(2, fail_init=True))
    assert NvmlSource.open() is None
    fake = _fake_nvml(0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert NvmlSource.open() is None
    assert fake.state["shutdown"] == 1  # type: ignore[attr-defined]


def test_nvml_reads_mean_utilisation_and_summed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_nvml(2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = NvmlSource.open()
    assert src is not None
    v = asyncio.run(src.read())
    src.close()
    assert v[ss.GPU_UTILIZATION] == pytest.approx(0.75)
    assert v[ss.GPU_MEMORY_USED_BYTES] == 30 * 2**30
    assert v[ss.GPU_MEMORY_TOTAL_BYTES] == 160 * 2**30
    assert fake.state["shutdown"] == 1  # type: ignore[attr-defined]


def _slow_nvml(monkeypatch: pytest.MonkeyPatch, init_s: float) -> types.ModuleType:
    fake = _fake_nvml(2)

    def init() -> None:
        time.sleep(init_s)

    fake.nvmlInit = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.mark.parametrize("wait_s", [5.0, 0.05])
def test_scraper_opens_nvml_before_the_run_and_never_at_t0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wait_s: float
) -> None:
    """prepare() (before the load) waits a bounded time for nvmlInit; start() (at the run's
    t0) never does. An NVML slower than the wait joins the samples when it is up.

    The init is slow (2 s) so that a start() or a first sample delayed by a loaded box (a few
    hundred ms) is still told apart from one that waited for it."""
    slow_init = 2.0
    fake = _slow_nvml(monkeypatch, slow_init)
    vllm, _ = text_handler(lambda n: load("vllm_v1_0.10.txt"))

    async def main() -> tuple[float, float, MetricsScraper, ServerInfo]:
        async with serve({"/metrics": vllm}) as (url, _):
            s = MetricsScraper(url + "/metrics", tmp_path / "m.jsonl", interval_s=0.05)
            t = time.perf_counter()
            await s.prepare(gpu_wait_s=wait_s)
            prepared = time.perf_counter() - t
            t = time.perf_counter()
            await s.start(time.perf_counter_ns())
            started = time.perf_counter() - t
            await wait_until(lambda: any(ss.GPU_UTILIZATION in x.values for x in s.samples))
            return prepared, started, s, await s.stop()

    prepared, started, scraper, info = asyncio.run(main())
    assert started < slow_init / 2
    if wait_s > slow_init:
        assert prepared >= slow_init * 0.9
        assert ss.GPU_UTILIZATION in scraper.samples[0].values
    else:
        assert prepared < slow_init
        assert ss.GPU_UTILIZATION not in scraper.samples[0].values  # t≈0 did not wait
    assert info.summary["gpu_source"] == "nvml"
    assert info.summary["gpu_utilization_mean"] == pytest.approx(0.75)
    assert info.names_found[ss.GPU_UTILIZATION].startswith("nvml:")
    assert fake.state["shutdown"] == 1  # type: ignore[attr-defined]


def test_nvml_on_a_real_gpu() -> None:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        pytest.skip("nvidia-ml-py is not installed (pip install 'servetune[gpu]')")
    src = NvmlSource.open()
    if src is None:
        pytest.skip("no NVIDIA GPU or driver on this machine")
    try:
        v = asyncio.run(src.read())
    finally:
        src.close()
    assert 0.0 <= v[ss.GPU_UTILIZATION] <= 1.0
    assert 0 < v[ss.GPU_MEMORY_USED_BYTES] <= v[ss.GPU_MEMORY_TOTAL_BYTES]


def test_is_local_url() -> None:
    assert is_local_url("http://127.0.0.1:8000/metrics")
    assert is_local_url("http://localhost:8000/metrics")
    assert is_local_url("http://[::1]:8000/metrics")
    assert is_local_url(f"http://{socket.gethostname()}:8000/metrics")
    assert not is_local_url("http://gpu-node-7.example:8000/metrics")
    assert not is_local_url("not a url")
