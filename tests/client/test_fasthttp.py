"""The lean HTTP/1.1 parser: framing, chunk boundaries anywhere, failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from servetune.client.fasthttp import HTTPError, Pool, Response, _Conn


class FakeTransport:
    def __init__(self) -> None:
        self.closed = False
        self.aborted = False

    def get_extra_info(self, name: str) -> Any:
        return None

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True


def run_feed(pieces: list[bytes], lose: bool = False) -> tuple[Response | Exception, bytes, Pool]:
    async def go() -> tuple[Response | Exception, bytes, Pool]:
        pool = Pool("http://127.0.0.1:1/v1")
        conn = _Conn(pool)
        conn.connection_made(FakeTransport())  # type: ignore[arg-type]
        got = bytearray()
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        conn.waiter = fut
        conn.sink = lambda b, t: got.extend(b)
        for p in pieces:
            conn.data_received(p)
        if lose:
            conn.connection_lost(None)
        try:
            return await asyncio.wait_for(fut, 1), bytes(got), pool
        except (HTTPError, TimeoutError) as exc:
            return exc, bytes(got), pool

    return asyncio.run(go())


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
BODY = b"data: one\n\n" * 3 + b"data: [DONE]\n\n"


def chunked(body: bytes, size: int) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += b"%x;ext=1\r\n%s\r\n" % (len(part), part)
    return out + b"0\r\n\r\n"


@pytest.mark.parametrize("split", [1, 2, 3, 7, 1000])
def test_chunked_body_split_anywhere(split: int) -> None:
    raw = HEAD + chunked(BODY, 5)
    resp, got, pool = run_feed([raw[i : i + split] for i in range(0, len(raw), split)])
    assert isinstance(resp, Response) and resp.status == 200
    assert got == BODY
    assert len(pool._idle) == 1  # kept alive for the next request


def test_content_length_body_and_error_status_body() -> None:
    body = b'{"error": {"message": "nope"}}'
    raw = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    resp, got, _ = run_feed([raw])
    assert isinstance(resp, Response) and resp.status == 400 and bytes(resp.body) == body
    assert got == b""  # error bodies are not streamed to the sink


def test_body_until_close_and_connection_close_header() -> None:
    raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY
    resp, got, pool = run_feed([raw], lose=True)
    assert isinstance(resp, Response) and got == BODY and not pool._idle


def test_interim_100_continue_is_skipped() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + chunked(BODY, 100)
    resp, got, _ = run_feed([raw])
    assert isinstance(resp, Response) and resp.status == 200 and got == BODY


def test_reset_mid_stream_and_before_headers() -> None:
    raw = HEAD + chunked(BODY, 5)
    resp, _, _ = run_feed([raw[:-30]], lose=True)
    assert isinstance(resp, HTTPError) and "reset mid-stream" in str(resp)
    resp, _, _ = run_feed([b"HTTP/1.1 2"], lose=True)
    assert isinstance(resp, HTTPError) and "disconnected" in str(resp)


def test_malformed_chunk_size() -> None:
    resp, _, _ = run_feed([HEAD + b"zz\r\nxx\r\n"])
    assert isinstance(resp, HTTPError) and "chunked" in str(resp)
