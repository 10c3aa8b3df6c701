"""Headless Chromium driven over the DevTools protocol (aiohttp websocket): load a page,
collect console errors, exceptions and network requests, take a full-page screenshot."""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageLoad:
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""


class _Cdp:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = msg.json()
            fut = self.waiting.pop(data.get("id", -1), None)
            if fut is not None:
                fut.set_result(data)
            else:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = fut
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def wait_event(self, method: str, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            if any(e.get("method") == method for e in self.events):
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no {method} within {timeout} s")


_FACTS_JS = """
(() => {
  const svgs = [...document.querySelectorAll('svg.plot')];
  return {
    title: document.title,
    height: document.documentElement.scrollHeight,
    width: document.documentElement.scrollWidth,
    svgs: svgs.length,
    svg_sizes: svgs.map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; }),
    verdict: (document.querySelector('.verdict') || {}).textContent || null,
    scripts: document.scripts.length,
    tables: document.querySelectorAll('table').length,
  };
})()
"""


async def _load(binary: str, url: str, width: int, profile: str) -> PageLoad:
    proc = subprocess.Popen(
        [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},900", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        ws_url = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while ws_url is None:
            if loop.time() > deadline:
                raise TimeoutError("chromium printed no DevTools URL within 60 s")
            line = await loop.run_in_executor(None, proc.stderr.readline)
            if not line and proc.poll() is not None:
                raise RuntimeError(f"chromium exited with status {proc.returncode}")
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                ws_url = m.group(1)
        # The rest of stderr must keep draining, or chromium blocks on a full pipe.
        drain = loop.run_in_executor(None, proc.stderr.read)
        port = re.search(r":(\d+)/", ws_url)
        assert port is not None
        async with aiohttp.ClientSession() as http:
            async with http.put(f"http://127.0.0.1:{port.group(1)}/json/new?about:blank") as r:
                target = await r.json(content_type=None)
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                cdp = _Cdp(ws)
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await cdp.call(f"{domain}.enable")
                await cdp.call(
                    "Emulation.setDeviceMetricsOverride",
                    width=width,
                    height=900,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                await cdp.call("Page.navigate", url=url)
                await cdp.wait_event("Page.loadEventFired")
                await asyncio.sleep(0.3)  # late console messages
                facts = await cdp.call("Runtime.evaluate", expression=_FACTS_JS, returnByValue=True)
                out = PageLoad(facts=facts["result"]["value"])
                height = min(int(out.facts["height"]), 16000)
                shot = await cdp.call(
                    "Page.captureScreenshot",
                    format="png",
                    captureBeyondViewport=True,
                    clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
                )
                out.screenshot = base64.b64decode(shot["data"])
                for e in cdp.events:
                    method, params = e.get("method"), e.get("params", {})
                    if method == "Runtime.consoleAPICalled" and params.get("type") in (
                        "error",
                        "warning",
                        "assert",
                    ):
                        out.console_errors.append(str(params.get("args")))
                    elif method == "Runtime.exceptionThrown":
                        out.exceptions.append(str(params.get("exceptionDetails")))
                    elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in (
                        "error",
                        "warning",
                    ):
                        out.log_errors.append(str(params["entry"].get("text")))
                    elif method == "Network.requestWillBeSent":
                        out.requests.append(str(params.get("request", {}).get("url")))
                cdp.reader.cancel()
                # No reply comes back from a browser that closes: send and go.
                await ws.send_json({"id": 0, "method": "Browser.close", "params": {}})
        try:
            await asyncio.wait_for(drain, 10)
        except TimeoutError:
            pass
        return out
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def load_page(binary: str, path: Path, width: int = 1280) -> PageLoad:
    """Load a local HTML file in headless Chromium and report what happened."""
    with tempfile.TemporaryDirectory(prefix="servetune-chromium-") as profile:
        return asyncio.run(_load(binary, path.resolve().as_uri(), width, profile))


def pixels_near(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 14) -> int:
    """How many pixels of a screenshot are within TOL of the colour RGB."""
    target = np.array(rgb, dtype=float)
    return int(np.sum(np.all(np.abs(img[:, :, :3] - target) <= tol, axis=2)))
