"""The real-time face of the simulated engine: an OpenAI-compatible server on loopback.

HTTP is :mod:`servetune.http` (llhttp, keep-alive, chunked streams) on uvloop; the engine on
the wall clock is :mod:`servetune.sim.realtime`, the bytes of a response
:mod:`servetune.sim.streams`, the checks on a request :mod:`servetune.sim.intake`, how a
step's tokens are written :mod:`servetune.sim.step_writer` (``plain`` by default, ``fanout``
opt-in). Generation requests are read by the engine loop between steps; read-outs (``GET``)
are answered at once.

The offline face (``sim run``) also models vLLM's API server in front of the engine (serial
intake per request, a fixed token latency: :mod:`servetune.sim.frontend`); the real-time face
does not add it: its own HTTP front end is real.

Endpoints, shaped as vLLM's: ``/v1/completions`` and ``/v1/chat/completions`` (streaming SSE
or one JSON body), ``/v1/models`` (with ``max_model_len``), ``/health``, ``/ping``,
``/tokenize`` (``{"model","prompt"}`` → ``{"count","max_model_len","tokens"}``), ``/version``,
``/metrics`` (Prometheus text, vLLM 0.8–0.9 and V1 names), ``/sim/stats`` (emission lag and
where it comes from, JSON: :mod:`servetune.sim.loop_stats`) and ``/sim/config``. Errors have
vLLM's body (``{"object": "error", ...}``). A client that disconnects aborts its request in the
engine (``finished_reason="abort"``).

Run it as a process: ``python -m servetune.sim.server --config-json '{...}' --port 0
[--writer plain|fanout]`` prints ``READY <port>`` once it listens (``servetune sim serve``
and :mod:`servetune.sim.embedded` use this).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import signal
import sys
import threading
import time

from servetune.arch.memory import MemoryPlan
from servetune.errors import ConfigError, ServetuneError, SimError
from servetune.http import Exchange, HTTPServer, Limits, Router, ServerConnection
from servetune.http.wire import vllm_error
from servetune.sim.config import EngineConfig
from servetune.sim.intake import Refusal, json_object, prompt_pieces
from servetune.sim.memory import plan_memory
from servetune.sim.policies import metrics_page
from servetune.sim.realtime import RealtimeEngine
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.step_writer import WRITER_MODES, WriterMode, writer_mode
from servetune.workload.tokens import ApproxTokenizer

_PROM = b"text/plain; version=0.0.4; charset=utf-8"


class SimServer:
    """The engine on the wall clock plus its HTTP front end."""

    def __init__(self, cfg: EngineConfig, writer: WriterMode = "plain") -> None:
        self.cfg = cfg
        self.r: ResolvedConfig = cfg.resolve()
        if self.r.speculation is not None:
            raise SimError.over_fields(
                "the simulated server does not stream speculative decoding's several tokens "
                "per step yet",
                hint="simulate it offline (sim run, plan, tune's simulated engine), or serve "
                "without {speculative_method}",
                code="sim.config",
            )
        self.mem: MemoryPlan = plan_memory(self.r)
        self.model = self.r.served_model_name
        self.writer_mode = writer_mode(writer)
        self.rt: RealtimeEngine | None = None
        self.tok = ApproxTokenizer()
        self.started = int(time.time())
        self.http = HTTPServer(
            self._router(),
            limits=Limits(keepalive_timeout_s=None),  # vLLM's uvicorn keeps them 5 s; clients pool
            error_body=vllm_error,
            on_connect=self._connected,
            on_disconnect=self._disconnected,
        )
        self.port = 0

    # --- life ----------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.rt = RealtimeEngine(self.r, self.mem, self.writer_mode)
        self.rt.start()
        self.port = await self.http.start(host, port)
        return self.port

    async def close(self) -> None:
        await self.http.drain(1.0)
        if self.rt is not None:
            await self.rt.close()

    def _connected(self, conn: ServerConnection) -> None:
        assert self.rt is not None
        conn.tag = self.rt.writer.dup(conn.sock)  # the fanout writer's socket duplicate

    def _disconnected(self, conn: ServerConnection) -> None:
        if self.rt is not None and isinstance(conn.tag, int):
            self.rt.writer.retire(conn.tag)
        conn.tag = -1

    # --- routes --------------------------------------------------------------------------
    def _router(self) -> Router:
        r = Router()
        for path in ("/health", "/ping"):
            r.get(path, lambda ex: ex.respond(200, b"", None))
        r.get("/v1/models", self._models)
        r.get("/version", lambda ex: ex.respond_json(200, {"version": "servetune-sim"}))
        r.get("/metrics", self._metrics)
        r.get("/sim/stats", self._stats)
        r.get("/sim/config", self._config)
        r.post("/tokenize", self._tokenize)
        r.post("/v1/completions", self._generate)
        r.post("/v1/chat/completions", self._generate)
        return r

    def _generate(self, ex: Exchange) -> None:
        assert self.rt is not None
        self.rt.queue(ex, ex.path.rstrip("/").endswith("chat/completions"))

    def _models(self, ex: Exchange) -> None:
        card = {
            "id": self.model,
            "object": "model",
            "created": self.started,
            "owned_by": "vllm",
            "root": self.r.model.name,
            "parent": None,
            "max_model_len": self.r.max_model_len,
            "permission": [],
            # What the engine is, for whoever measures it: a run records it as
            # target.simulated, so diagnose, cost, compare and the report know its knobs.
            "servetune_sim": self._info(),
        }
        ex.respond_json(200, {"object": "list", "data": [card]})

    def _metrics(self, ex: Exchange) -> None:
        assert self.rt is not None
        ex.respond(
            200, metrics_page(self.r)(self.rt.eng, self.r, self.mem, self.rt.stats.lag), _PROM
        )

    def _stats(self, ex: Exchange) -> None:
        assert self.rt is not None
        ex.respond_json(200, self.rt.report())

    def _info(self) -> dict[str, object]:
        """The resolved configuration and its memory plan (``target.simulated``'s shape)."""
        return {**self.r.summary(), "memory": self.mem.model_dump()}

    def _config(self, ex: Exchange) -> None:
        ex.respond_json(200, self._info())

    def _tokenize(self, ex: Exchange) -> None:
        payload = json_object(ex.body)
        if isinstance(payload, Refusal):
            ex.error(payload.status, payload.message, payload.type)
            return
        n, pieces = prompt_pieces(payload, "messages" in payload)
        ids = self.tok.encode(" ".join(pieces)) if pieces else []
        ex.respond_json(200, {"count": n, "max_model_len": self.r.max_model_len, "tokens": ids})


async def serve(
    cfg: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    announce: bool = False,
    ready_line: bool = False,
    writer: WriterMode = "plain",
) -> None:
    srv = SimServer(cfg, writer)
    try:
        real_port = await srv.start(host, port)
    except OSError as exc:  # in use, an address not ours, a name that does not resolve
        raise ConfigError.over_fields(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="choose another {port} (0 = any free port), or a {host} of this machine",
        ) from None
    # Everything built so far lives as long as the server: keep it out of every collection,
    # so that a collection never scans it in the middle of a step's writes.
    gc.collect()
    gc.freeze()
    if announce:
        print(
            f"servetune sim: {srv.model} on {srv.r.gpu.name} (TP={srv.r.tensor_parallel_size})"
            f" at http://{host}:{real_port}/v1 (step writer: {srv.writer_mode})",
            file=sys.stderr,
        )
        for line in srv.mem.log_lines():
            print("  " + line, file=sys.stderr)
    if ready_line:
        print(f"READY {real_port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await srv.close()


def _install_loop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass


def serve_forever(
    cfg: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: bool = True,
    ready_line: bool = False,
    writer: str = "plain",
) -> None:
    """Run the server until interrupted (``servetune sim serve``)."""
    mode = writer_mode(writer)
    if not 0 <= port <= 65535:  # 99999 wrapped round to 34463 and was announced as such
        raise ConfigError.over_fields(
            f"{{port}} {port} is not a port (0-65535)",
            hint="e.g. {port}=8000, or 0 for any free one",
        )
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"servetune sim: warning: listening on {host}, not loopback", file=sys.stderr)
    plan_memory(cfg)  # refuse to start before binding, like vLLM
    _install_loop()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(cfg, host, port, announce, ready_line, mode))


def _exit_with_parent(pid: int, every_s: float = 0.5) -> None:
    """A daemon thread that ends this process (SIGTERM to itself) once ``pid`` is no longer
    its parent: a parent killed with SIGKILL cannot stop its children, and an orphaned
    server would hold its port and a core forever."""

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(every_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m servetune.sim.server")
    ap.add_argument("--config-json", required=True, help="an EngineConfig as JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--writer", default="plain", choices=WRITER_MODES)
    ap.add_argument(
        "--exit-with-parent",
        type=int,
        default=None,
        metavar="PID",
        help="stop when process PID is gone (the embedded engine ends with the bench that "
        "started it, even when that bench is killed with SIGKILL)",
    )
    args = ap.parse_args(argv)
    if args.exit_with_parent is not None:
        _exit_with_parent(args.exit_with_parent)
    try:
        cfg = EngineConfig.model_validate(json.loads(args.config_json))
        serve_forever(
            cfg, args.host, args.port, announce=False, ready_line=True, writer=args.writer
        )
    except ServetuneError as exc:
        print(f"ERROR {exc.message}" + (f" | hint: {exc.hint}" if exc.hint else ""), flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
