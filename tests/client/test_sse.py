from servetune.client.sse import SSEParser


def feed_all(chunks: list[bytes]) -> list[tuple[bytes, bytes]]:
    p = SSEParser()
    out = []
    for c in chunks:
        out.extend(p.feed(c))
    out.extend(p.flush())
    return out


def test_single_line_events_with_and_without_space() -> None:
    assert feed_all([b'data: {"a":1}\n\ndata:{"b":2}\n\n']) == [
        (b"message", b'{"a":1}'),
        (b"message", b'{"b":2}'),
    ]


def test_events_split_at_every_byte() -> None:
    raw = b"data: one\n\n: ping\n\nevent: error\ndata: two\n\ndata: [DONE]\n\n"
    assert feed_all([raw[i : i + 1] for i in range(len(raw))]) == [
        (b"message", b"one"),
        (b"error", b"two"),
        (b"message", b"[DONE]"),
    ]


def test_crlf_split_between_cr_and_lf() -> None:
    raw = b"data: a\r\n\r\ndata: b\r\n\r\n"
    for cut in range(1, len(raw)):
        assert feed_all([raw[:cut], raw[cut:]]) == [(b"message", b"a"), (b"message", b"b")], cut


def test_multiline_data_is_joined_and_fields_ignored() -> None:
    raw = b"id: 7\nretry: 100\ndata: first\ndata: second\n\n"
    assert feed_all([raw]) == [(b"message", b"first\nsecond")]


def test_comments_and_empty_events_give_nothing() -> None:
    assert feed_all([b": keep-alive\n\n\n\n: another\n\n"]) == []


def test_last_event_without_blank_line_is_flushed() -> None:
    assert feed_all([b"data: tail"]) == [(b"message", b"tail")]
