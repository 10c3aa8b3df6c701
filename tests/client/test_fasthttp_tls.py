"""The fast client's TLS read path (asyncio's SSL transport, reads stamped in user space),
against servetune's own HTTP server over TLS on loopback with a throw-away certificate."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from servetune.client.fasthttp import HTTPError, Pool, build_request
from servetune.http import Exchange, HTTPServer, Router

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(crt),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return crt, key


EVENTS = [b'data: {"choices":[{"text":"t%d"}]}\n\n' % i for i in range(40)]


def router() -> Router:
    r = Router()

    async def stream(ex: Exchange) -> None:
        ex.start(200)
        for ev in EVENTS:
            ex.send(ev)
            await asyncio.sleep(0.001)
        ex.end(b"data: [DONE]\n\n")

    async def cut(ex: Exchange) -> None:
        ex.start(200)
        ex.send(EVENTS[0])
        await asyncio.sleep(0.02)
        ex.abort()

    def refuse(ex: Exchange) -> None:
        ex.error(400, "too long")

    r.post("/v1/completions", stream)
    r.post("/v1/cut", cut)
    r.post("/v1/refuse", refuse)
    return r


def test_tls_stream_error_body_and_reset(cert: tuple[Path, Path]) -> None:
    crt, key = cert
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(crt, key)
    client_ctx = ssl.create_default_context(cafile=str(crt))

    async def main() -> dict[str, Any]:
        server = HTTPServer(router())
        port = await server.start("127.0.0.1", 0, ssl_context=server_ctx)
        pool = Pool(f"https://127.0.0.1:{port}/v1", ssl_context=client_ctx)
        out: dict[str, Any] = {"kernel_stamps": pool.kernel_stamps}
        try:
            got: list[tuple[bytes, int]] = []
            for _ in range(2):  # the second request reuses the kept-alive TLS connection
                raw = build_request(pool, "/completions", b"{}", "key")
                resp = await pool.request(raw, lambda b, t: got.append((b, t)))
                out.setdefault("status", []).append(resp.status)
            out["body"] = b"".join(b for b, _ in got)
            out["stamps_ordered"] = all(a[1] <= b[1] for a, b in itertools.pairwise(got))
            out["idle"] = len(pool._idle)
            resp = await pool.request(
                build_request(pool, "/refuse", b"{}", None), lambda b, t: None
            )
            out["refused"] = (resp.status, bytes(resp.body))
            try:
                await pool.request(build_request(pool, "/cut", b"{}", None), lambda b, t: None)
            except HTTPError as exc:
                out["cut"] = str(exc)
            out["reads"] = (pool.kernel_reads, pool.user_reads)
        finally:
            pool.close()
            await server.drain(1.0)
        return out

    out = asyncio.run(main())
    assert out["kernel_stamps"] is False  # TLS: stamped when the loop reads
    assert out["status"] == [200, 200]
    assert out["body"] == (b"".join(EVENTS) + b"data: [DONE]\n\n") * 2
    assert out["stamps_ordered"] and out["idle"] == 1
    assert out["refused"][0] == 400 and b"too long" in out["refused"][1]
    assert out["cut"] == "connection reset mid-stream"
    kernel, user = out["reads"]
    assert kernel == 0 and user >= 4
