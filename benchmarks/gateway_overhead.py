"""What does the gateway cost? servetune gateway vs LiteLLM's proxy vs going direct, one run.

The same zero-delay streaming upstream (servetune's scripted test server, pre-rendered SSE in
one write) and the same client (``servetune bench``, kernel-stamped arrivals) for all three:

1. **added latency at 500 req/s** (streaming, 16 output tokens): p50 and p99 TTFT and E2E
   through each proxy minus direct. Targets for servetune: p50 < 0.5 ms, p99 < 2 ms.
2. **highest sustained rate**: unbounded rate at concurrency 64, completed requests per
   second through each proxy; target: servetune ≥ 3× LiteLLM.
3. **memory per 1,000 open streams**: the proxy's RSS with 1,000 slow streams open minus idle.
4. **overload**: an upstream admitting 4 at a time (~40 req/s); tenant ``flood`` sends 10× that
   with a quota, tenant ``light`` a few req/s: light's P99 TTFT must stay within 2× its unloaded
   value while ``flood`` gets 429s (servetune only: the fair queue and per-key caps).

servetune's gateway runs with keys, a tpm quota and a concurrency cap on; LiteLLM's proxy with
the equivalent it offers without a database: a master key, the model's ``tpm``/``rpm`` and
``max_parallel_requests``. LiteLLM (``litellm[proxy]`` from PyPI) is installed into its own venv
under ``~/.cache/servetune/bench-venvs/litellm`` on first use — never a servetune dependency.

    flock /work/helpers/bench.lock .venv/bin/python benchmarks/gateway_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VENVS = (
    Path(os.environ.get("SERVETUNE_CACHE", Path.home() / ".cache" / "servetune")) / "bench-venvs"
)
MODEL = "scripted-model"
KEY = "st-bench-" + "k" * 40


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def rss_mib(pid: int) -> float:
    total = 0.0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (a proxy's workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def children(pid: int) -> list[int]:
    out = []
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for k in kids:
        out.append(int(k))
        out.extend(children(int(k)))
    return out


class Proc:
    def __init__(
        self, cmd: list[str], ready: str, timeout_s: float = 120, env: dict[str, str] | None = None
    ) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        pat = re.compile(ready)
        self.match: re.Match[str] | None = None
        found = threading.Event()
        lines: list[str] = []

        def drain() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.append(line)
                self.log.write(line)
                if self.match is None:
                    self.match = pat.search(line)
                    if self.match is not None:
                        found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        found.wait(timeout_s)
        if self.match is None:
            self.stop()
            raise RuntimeError(f"{cmd[:4]} did not start: {''.join(lines)[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)


def upstream(script: dict[str, Any]) -> tuple[Proc, int]:
    p = Proc(
        [
            sys.executable,
            "-m",
            "servetune.testserver",
            "--port",
            "0",
            "--script",
            json.dumps({"model": MODEL, **script}),
        ],
        r"READY (\d+)",
    )
    assert p.match is not None
    return p, int(p.match.group(1))


def servetune_gateway(config: Path) -> tuple[Proc, int]:
    p = Proc(
        [
            sys.executable,
            "-m",
            "servetune.cli",
            "gateway",
            "--config",
            str(config),
            "--log-level",
            "warning",
        ],
        r"listening on http://127\.0\.0\.1:(\d+)",
    )
    assert p.match is not None
    return p, int(p.match.group(1))


def litellm_python() -> Path | None:
    py = VENVS / "litellm" / "bin" / "python"
    if (
        py.exists()
        and subprocess.run(
            [str(py), "-c", "import litellm.proxy.proxy_server"], capture_output=True
        ).returncode
        == 0
    ):
        return py
    print("installing litellm[proxy] into", VENVS / "litellm", "(once)", flush=True)
    VENVS.mkdir(parents=True, exist_ok=True)
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / "litellm")], check=True)
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "litellm[proxy]"], capture_output=True, text=True
    )
    if r.returncode != 0:
        print("  litellm could not be installed:", r.stderr[-500:])
        return None
    return py


def litellm_proxy(py: Path, up_port: int, tmp: Path) -> tuple[Proc, int]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp / "litellm.yaml"
    cfg.write_text(
        f"""model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: http://127.0.0.1:{up_port}/v1
      api_key: none
      tpm: 1000000000
      rpm: 100000000
      max_parallel_requests: 100000
general_settings:
  master_key: sk-{KEY}
litellm_settings:
  drop_params: true
  telemetry: false
"""
    )
    litellm = py.parent / "litellm"
    p = Proc(
        [
            str(litellm),
            "--config",
            str(cfg),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ],
        r"Uvicorn running on|Application startup complete",
        timeout_s=180,
        env={"LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"},
    )
    return p, port


def bench(base_url: str, out: Path, key: str | None, **kw: Any) -> dict[str, Any]:
    args = [
        sys.executable,
        "-m",
        "servetune.cli",
        "bench",
        "--base-url",
        base_url,
        "--model",
        MODEL,
        "--random-input-len",
        "32",
        "--random-output-len",
        str(kw.get("out_len", 16)),
        "--result-dir",
        str(out),
        "--no-progress",
    ]
    if key:
        args += ["--api-key", key]
    for flag in ("request_rate", "num_prompts", "max_concurrency", "duration", "warmup"):
        if flag in kw:
            args += ["--" + flag.replace("_", "-"), str(kw[flag])]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    run = out / "run.json"
    if not run.exists():
        raise RuntimeError(f"bench failed: {r.stdout[-800:]} {r.stderr[-800:]}")
    data: dict[str, Any] = json.loads(run.read_text())
    return data


def pick(run: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(run.get(k) or 0.0)
        for k in (
            "median_ttft_ms",
            "p99_ttft_ms",
            "median_e2el_ms",
            "p99_e2el_ms",
            "request_throughput",
            "completed",
            "failed",
        )
    }


async def open_streams(
    port: int, n: int, key: str | None, path: str = "/v1/completions"
) -> list[asyncio.StreamWriter]:
    body = json.dumps(
        {"model": MODEL, "prompt": "hello " * 16, "max_tokens": 400, "stream": True}
    ).encode()
    auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
    writers = []

    async def one() -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"%sContent-Length: %d\r\n\r\n%s" % (path.encode(), auth, len(body), body)
        )
        await writer.drain()
        await reader.read(4096)  # the head and first bytes: the stream is open
        return writer

    for i in range(0, n, 100):
        writers += await asyncio.gather(*(one() for _ in range(min(100, n - i))))
    return writers


def memory_per_1000(pid: int, port: int, key: str | None) -> float:
    async def main() -> float:
        idle = rss_mib(pid)
        writers = await open_streams(port, 1000, key)
        await asyncio.sleep(1.0)
        peak = rss_mib(pid)
        for w in writers:
            w.transport.abort()
        return peak - idle

    return asyncio.run(main())


def write_gateway_config(path: Path, up_port: int, **extra: Any) -> None:
    import yaml

    from servetune.gateway.keys import hash_key

    cfg = {
        "listen": "127.0.0.1:0",
        "groups": [
            {
                "name": "g",
                "urls": [f"http://127.0.0.1:{up_port}/v1"],
                "adaptive": False,
                "max_concurrency": extra.pop("upstream_concurrency", 4096),
            }
        ],
        "tenants": extra.pop(
            "tenants",
            [{"name": "bench", "keys": [hash_key(KEY)], "tpm": 10**9, "max_concurrency": 10000}],
        ),
        "audit_log": str(path.parent / "audit.jsonl"),
        **extra,
    }
    path.write_text(yaml.safe_dump(cfg))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter levels")
    ap.add_argument("--no-litellm", action="store_true")
    args = ap.parse_args()
    secs = 5 if args.quick else 10
    print(f"load average before: {loadavg()}")
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    procs: list[Proc] = []
    results: dict[str, dict[str, Any]] = {}
    try:
        up, up_port = upstream({"one_write": True})
        procs.append(up)
        write_gateway_config(tmp / "gw.yaml", up_port)
        gw, gw_port = servetune_gateway(tmp / "gw.yaml")
        procs.append(gw)
        targets: dict[str, tuple[str, str | None, int]] = {
            "direct": (f"http://127.0.0.1:{up_port}/v1", None, up.proc.pid),
            "servetune": (f"http://127.0.0.1:{gw_port}/v1", KEY, gw.proc.pid),
        }
        if not args.no_litellm:
            py = litellm_python()
            if py is not None:
                ll, ll_port = litellm_proxy(py, up_port, tmp)
                procs.append(ll)
                targets["litellm"] = (f"http://127.0.0.1:{ll_port}/v1", f"sk-{KEY}", ll.proc.pid)
        # warm each path once
        for name, (base, key, _) in targets.items():
            bench(base, tmp / f"warm-{name}", key, request_rate=50, num_prompts=50)

        print(f"\n1. added latency at 500 req/s, streaming, {secs} s per target (load {loadavg()})")
        for name, (base, key, _) in targets.items():
            run = bench(base, tmp / f"lat-{name}", key, request_rate=500, duration=secs, warmup=1)
            results.setdefault(name, {})["latency"] = pick(run)
        d = results["direct"]["latency"]
        print(
            f"{'target':10} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p50':>9} {'E2E p99':>9}"
            "  added p50/p99 TTFT, E2E (ms)  ok/failed"
        )
        for name in targets:
            r = results[name]["latency"]
            added = (
                r["median_ttft_ms"] - d["median_ttft_ms"],
                r["p99_ttft_ms"] - d["p99_ttft_ms"],
                r["median_e2el_ms"] - d["median_e2el_ms"],
                r["p99_e2el_ms"] - d["p99_e2el_ms"],
            )
            results[name]["added"] = added
            print(
                f"{name:10} {r['median_ttft_ms']:9.3f} {r['p99_ttft_ms']:9.3f} "
                f"{r['median_e2el_ms']:9.3f} {r['p99_e2el_ms']:9.3f}  "
                f"{added[0]:+.3f}/{added[1]:+.3f}, {added[2]:+.3f}/{added[3]:+.3f}"
                f"  {r['completed']:.0f}/{r['failed']:.0f}"
            )
        a = results["servetune"]["added"]
        print(
            f"   servetune target p50 < 0.5 ms: TTFT {a[0]:.3f}, E2E {a[2]:.3f} -> "
            f"{'MET' if max(a[0], a[2]) < 0.5 else 'MISSED'}; "
            f"p99 < 2 ms: TTFT {a[1]:.3f}, E2E {a[3]:.3f} -> "
            f"{'MET' if max(a[1], a[3]) < 2 else 'MISSED'}"
        )

        print(f"\n2. highest sustained rate (unbounded, concurrency 64) (load {loadavg()})")
        n = 3000 if args.quick else 8000
        for name, (base, key, pid) in targets.items():
            c0 = cpu_s(pid)
            run = bench(
                base,
                tmp / f"max-{name}",
                key,
                request_rate="inf",
                max_concurrency=64,
                num_prompts=n if name != "litellm" else max(600, n // 8),
            )
            results[name]["max_rps"] = pick(run)["request_throughput"]
            done = max(1.0, pick(run)["completed"] + pick(run)["failed"])
            cpu_us = (cpu_s(pid) - c0) / done * 1e6
            print(
                f"   {name:10} {results[name]['max_rps']:8.0f} req/s"
                f"  ({pick(run)['failed']:.0f} failed; {cpu_us:.0f} us CPU per request in it)"
            )
        if "litellm" in results:
            ratio = results["servetune"]["max_rps"] / max(1e-9, results["litellm"]["max_rps"])
            print(
                f"   servetune / litellm = {ratio:.1f}x (target >= 3x) -> "
                f"{'MET' if ratio >= 3 else 'MISSED'}"
            )

        print(f"\n3. memory per 1,000 open streams (load {loadavg()})")
        slow, slow_port = upstream({"tpot_ms": 50})
        procs.append(slow)
        write_gateway_config(tmp / "gw-slow.yaml", slow_port)
        gws, gws_port = servetune_gateway(tmp / "gw-slow.yaml")
        procs.append(gws)
        mem = memory_per_1000(gws.proc.pid, gws_port, KEY)
        print(f"   servetune: {mem:.1f} MiB per 1,000 open streams")
        if "litellm" in targets:
            py = litellm_python()
            assert py is not None
            lls, lls_port = litellm_proxy(py, slow_port, tmp)
            procs.append(lls)
            mem_ll = memory_per_1000(lls.proc.pid, lls_port, f"sk-{KEY}")
            print(f"   litellm:   {mem_ll:.1f} MiB per 1,000 open streams")

        print(f"\n4. overload: 10x the upstream's capacity from one tenant (load {loadavg()})")
        overload(tmp, procs, secs)
    finally:
        for p in reversed(procs):
            p.stop()
    print(f"\nload average after: {loadavg()}")
    return 0


def overload(tmp: Path, procs: list[Proc], secs: int) -> None:
    from servetune.gateway.keys import hash_key

    light, flood = "st-light-" + "l" * 40, "st-flood-" + "f" * 40
    up, up_port = upstream({"ttft_ms": 20, "tpot_ms": 4})
    procs.append(up)
    # 4 at a time, ~100 ms each (20 tokens): capacity ~40 req/s
    capacity = 4 / 0.1
    write_gateway_config(
        tmp / "gw-over.yaml",
        up_port,
        upstream_concurrency=4,
        tenants=[
            {"name": "light", "keys": [hash_key(light)], "priority": "interactive"},
            {
                "name": "flood",
                "keys": [hash_key(flood)],
                "max_concurrency": 2,
                "rpm": int(capacity * 60 * 0.5),
                "priority": "standard",
            },
        ],
    )
    gw, port = servetune_gateway(tmp / "gw-over.yaml")
    procs.append(gw)
    base = f"http://127.0.0.1:{port}/v1"
    quiet = pick(bench(base, tmp / "over-quiet", light, request_rate=5, duration=secs, out_len=20))
    flood_proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servetune.cli",
            "bench",
            "--base-url",
            base,
            "--model",
            MODEL,
            "--api-key",
            flood,
            "--random-input-len",
            "32",
            "--random-output-len",
            "20",
            "--request-rate",
            str(int(capacity * 10)),
            "--duration",
            str(secs + 4),
            "--result-dir",
            str(tmp / "over-flood"),
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2)
    loaded = pick(
        bench(base, tmp / "over-loaded", light, request_rate=5, duration=secs, out_len=20)
    )
    flood_proc.wait(120)
    fl = pick(json.loads((tmp / "over-flood" / "run.json").read_text()))
    ratio = loaded["p99_ttft_ms"] / max(1e-9, quiet["p99_ttft_ms"])
    print(
        f"   light p99 TTFT unloaded {quiet['p99_ttft_ms']:.1f} ms, "
        f"under flood {loaded['p99_ttft_ms']:.1f} ms = {ratio:.2f}x (target <= 2x) -> "
        f"{'MET' if ratio <= 2 else 'MISSED'}; light failed {loaded['failed']:.0f}"
    )
    print(
        f"   flood: {fl['completed']:.0f} served, {fl['failed']:.0f} refused (429) "
        f"at {capacity * 10:.0f} req/s offered"
    )


if __name__ == "__main__":
    sys.exit(main())
