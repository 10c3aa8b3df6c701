"""The client side of servetune.http: responses parsed from bytes split anywhere."""

from __future__ import annotations

import pytest

from servetune.http import ProtocolError, ResponseReader


class Reader(ResponseReader):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, object]] = []
        self.body = b""

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.events.append(("head", (status, dict(headers))))

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_end(self, keep_alive: bool) -> None:
        self.events.append(("end", keep_alive))


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
BODY = b"data: one\n\n" * 3 + b"data: [DONE]\n\n"


def chunked(body: bytes, size: int) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += b"%x;ext=1\r\n%s\r\n" % (len(part), part)
    return out + b"0\r\n\r\n"


def feed(raw: bytes, split: int = 1 << 30) -> Reader:
    r = Reader()
    for i in range(0, len(raw), split):
        r.feed(memoryview(raw)[i : i + split] if i % 2 else raw[i : i + split])
    return r


@pytest.mark.parametrize("split", [1, 2, 3, 7, 1000])
def test_chunked_body_split_anywhere_two_responses(split: int) -> None:
    raw = HEAD + chunked(BODY, 5)
    r = feed(raw + raw, split)
    assert r.body == BODY + BODY
    heads = [e for e in r.events if e[0] == "head"]
    assert len(heads) == 2 and heads[0][1][0] == 200  # type: ignore[index]
    assert heads[0][1][1][b"content-type"] == b"text/event-stream"  # type: ignore[index]
    assert [e for e in r.events if e[0] == "end"] == [("end", True), ("end", True)]
    assert r.at_close() == "idle"


def test_content_length_and_connection_close() -> None:
    body = b'{"error": "nope"}'
    r = feed(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (len(body), body)
    )
    assert r.body == body and r.events[-1] == ("end", False)


def test_body_framed_by_close_is_complete_at_close() -> None:
    r = feed(b"HTTP/1.1 200 OK\r\n\r\n" + BODY)
    assert r.body == BODY and r.at_close() == "complete"


def test_cut_mid_body_and_before_head() -> None:
    r = feed(HEAD + chunked(BODY, 5)[:-30])
    assert r.at_close() == "mid_body" and r.in_response
    r = feed(b"HTTP/1.1 2")
    assert r.at_close() == "before_head"
    r = feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    assert r.at_close() == "mid_body"


def test_interim_100_continue_is_skipped() -> None:
    r = feed(b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + chunked(BODY, 100))
    assert [e[0] for e in r.events] == ["head", "end"] and r.body == BODY


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (HEAD + b"zz\r\nxx\r\n", "malformed chunked encoding"),
        (b"HTTP/1.1 abc OK\r\n\r\n", "malformed HTTP status line"),
        (b"NOT HTTP AT ALL\r\n\r\n", "malformed HTTP"),
    ],
)
def test_malformed_responses(raw: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        feed(raw)


def test_a_failing_callback_raises_its_own_error() -> None:
    class Failing(Reader):
        def on_body(self, data: bytes) -> None:
            raise KeyError("sink broke")

    with pytest.raises(KeyError, match="sink broke"):
        Failing().feed(HEAD + chunked(BODY, 5))
