"""A stand-in engine for the launcher's tests: a real process with a real HTTP port.

    python fake_engine.py MODE PORT [NAME]

MODE:
  serve       answers /health and /v1/models (lists NAME) after a short start-up, and starts
              one child process in its own process group (as vLLM's engine core is)
  oom         prints a CUDA-style out-of-memory line and exits 1
  badflag     prints an argparse "unrecognized arguments" line and exits 2
  silent      exits 3 without a word
  hang        never listens, never exits (readiness must time out)
  failing     prints a KV-cache failure line and keeps running without serving
  stubborn    like serve, but ignores SIGTERM (stop must fall back to SIGKILL)
  unhealthy   /health answers 503 forever
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(port: int, name: str, health: int = 200) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(health, b"{}")
            elif self.path == "/v1/models":
                body = {"object": "list", "data": [{"id": name, "object": "model"}]}
                self._send(200, json.dumps(body).encode())
            else:
                self._send(404, b"{}")

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> int:
    mode, port = sys.argv[1], int(sys.argv[2])
    name = sys.argv[3] if len(sys.argv) > 3 else "fake"
    if mode == "silent":
        return 3
    print(f"fake engine: mode={mode} port={port} pid={os.getpid()}", flush=True)
    if mode == "oom":
        print("INFO loading weights", flush=True)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        return 1
    if mode == "badflag":
        print("api_server.py: error: unrecognized arguments: --no-such-flag", flush=True)
        return 2
    if mode == "hang":
        while True:
            time.sleep(3600)
    if mode == "failing":
        print(
            "ValueError: ... KV cache is needed, which is larger than the available "
            "KV cache memory (0.0 GiB)",
            flush=True,
        )
        while True:
            time.sleep(3600)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A child in the same process group, as an engine's worker would be.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    time.sleep(0.3)  # a start-up the launcher has to wait through
    serve(port, name, health=503 if mode == "unhealthy" else 200)
    return 0


if __name__ == "__main__":
    sys.exit(main())
