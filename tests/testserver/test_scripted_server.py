"""The scripted test server in-process: what each script option does on the wire."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from servetune.testserver.script import Script
from servetune.testserver.server import ScriptedServer


def run(script: dict[str, Any], go: Any) -> Any:
    async def main() -> Any:
        srv = ScriptedServer(Script.model_validate(script))
        port = await srv.start()
        try:
            return await asyncio.wait_for(go(f"http://127.0.0.1:{port}", srv), 30)
        finally:
            await srv.close()

    return asyncio.run(main())


BODY = {"model": "scripted-model", "prompt": "a b c", "max_tokens": 4, "stream": True}


async def sse(url: str, body: dict[str, Any]) -> list[Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
        text = await r.read()
    out: list[Any] = []
    for block in text.replace(b"\r\n", b"\n").split(b"\n\n"):
        if block.startswith(b"data: "):
            data = block[6:]
            out.append("DONE" if data == b"[DONE]" else orjson.loads(data))
    return out


def test_one_write_is_the_same_stream_in_one_piece() -> None:
    async def go(base: str, srv: ScriptedServer) -> tuple[list[Any], list[Any]]:
        url = base + "/v1/completions"
        return await sse(url, BODY), await sse(url, BODY)

    paced = run({"tpot_ms": 1}, go)[0]
    whole, again = run({"one_write": True}, go)
    assert whole == paced == again  # the pre-rendered response is reused
    assert [e["choices"][0]["text"] for e in whole[:4]] == [" w0", " w1", " w2", " w3"]
    assert whole[4]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert whole[5] == "DONE"


def test_chat_role_chunk_and_errors() -> None:
    async def go(base: str, srv: ScriptedServer) -> dict[str, Any]:
        chat = {"model": "scripted-model", "messages": [{"content": "hi"}], "max_tokens": 2}
        out: dict[str, Any] = {"chat": await sse(base + "/v1/chat/completions", chat)}
        async with aiohttp.ClientSession() as s:
            async with s.post(base + "/v1/completions", json={**BODY, "model": "x"}) as r:
                out["wrong_model"] = (r.status, await r.json())
            async with s.post(base + "/v1/completions", data=b"{not json") as r:
                out["bad_json"] = r.status
            async with s.get(base + "/metrics") as r:
                out["metrics"] = await r.text()
            async with s.post(base + "/tokenize", json={"prompt": "a b c d"}) as r:
                out["tokenize"] = await r.json()
        return out

    out = run({"tokens_per_word": 2}, go)
    assert out["chat"][0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert out["wrong_model"][0] == 404
    assert "does not exist" in out["wrong_model"][1]["error"]["message"]
    assert out["bad_json"] == 400
    assert "scripted:requests_total 3" in out["metrics"]
    assert out["tokenize"]["count"] == 8


def test_reused_connections_are_dropped_unanswered() -> None:
    async def go(base: str, srv: ScriptedServer) -> list[bytes]:
        port = base.rsplit(":", 1)[1]
        r, w = await asyncio.open_connection("127.0.0.1", int(port))
        body = orjson.dumps(BODY)
        req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )
        w.write(req)
        first = b""
        while not first.endswith(b"0\r\n\r\n"):
            first += await r.read(65536)
        w.write(req)
        second = await r.read()  # the server closes without an answer
        w.close()
        return [first, second]

    first, second = run({"drop_reused_connections": True}, go)
    assert first.startswith(b"HTTP/1.1 200 OK") and second == b""
