import orjson
import pytest

from servetune.client.stream import StreamState


def ev(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def test_chat_role_chunk_counts_as_first_chunk_like_vllm_bench() -> None:
    st = StreamState(chat=True)
    st.feed(ev({"choices": [{"delta": {"role": "assistant"}}]}), 10)
    st.feed(ev({"choices": [{"delta": {"content": "hi"}}]}), 20)
    st.feed(ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}), 30)
    st.feed(b"data: [DONE]\n\n", 40)
    assert st.chunk_ns == [10, 20]
    assert st.completion_tokens == 1 and st.prompt_tokens == 3
    assert st.done and st.error is None


def test_empty_text_chunk_counts_usage_only_chunk_does_not() -> None:
    st = StreamState(chat=False)
    st.feed(ev({"choices": [{"text": ""}]}) + ev({"choices": [{"text": "é"}]}), 5)
    st.feed(ev({"choices": [{"text": "x", "finish_reason": "length"}]}), 9)
    st.feed(ev({"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 2}}), 12)
    assert st.chunk_ns == [5, 5, 9]
    assert st.finish_reason == "length"
    assert st.completion_tokens == 4


def test_error_object_mid_stream_fails_the_request() -> None:
    st = StreamState(chat=False)
    st.feed(ev({"choices": [{"text": "a"}]}), 1)
    st.feed(ev({"error": {"message": "engine died", "code": 500}}), 2)
    assert st.error == "server error mid-stream: engine died"
    st.close(3)
    assert st.verdict() == ("server_error", "server error mid-stream: engine died")


def test_error_object_code_429_is_rate_limiting() -> None:
    st = StreamState(chat=False)
    st.feed(ev({"error": {"message": "slow down", "code": "429"}}) + b"data: [DONE]\n\n", 2)
    st.close(3)
    assert st.verdict()[0] == "rate_limited"


def test_usage_on_every_chunk_gives_tokens_per_chunk() -> None:
    st = StreamState(chat=False)
    st.feed(ev({"choices": [{"text": "ab"}], "usage": {"completion_tokens": 2}}), 1)
    st.feed(ev({"choices": [{"text": "c"}], "usage": {"completion_tokens": 3}}), 2)
    assert st.chunk_tokens == [2, 1] and st.usage_every_chunk


def test_llama_cpp_style_usage_on_last_content_chunk() -> None:
    st = StreamState(chat=True)
    st.feed(ev({"choices": [{"delta": {"content": "a"}}]}), 1)
    last = {
        "choices": [{"delta": {}, "finish_reason": "length"}],
        "usage": {"completion_tokens": 2, "prompt_tokens": 5},
    }
    st.feed(ev(last), 2)
    assert st.chunk_ns == [1, 2] and st.completion_tokens == 2
    assert not st.usage_every_chunk


def test_malformed_event_is_counted_not_raised() -> None:
    st = StreamState(chat=False)
    st.feed(b"data: {not json\n\n" + ev({"choices": [{"text": "a"}]}), 3)
    assert st.malformed == 1 and st.chunk_ns == [3]


def whole(*objs: object) -> bytes:
    """A stream that ends properly: the events, a finish_reason on the last, [DONE]."""
    return b"".join(ev(o) for o in objs) + b"data: [DONE]\n\n"


GOOD = {"choices": [{"text": "a"}]}
LAST = {"choices": [{"text": "b", "finish_reason": "length"}]}


@pytest.mark.parametrize(
    "bad",
    [
        b"garbage that is not SSE\n\n",
        b"data: {not json\n\n",
        b'data: {"choices": [{"text": "cut\n\n',
        b"data: [1, 2]\n\n",
        b"data: 17\n\n",
        b'data: {"choices": "oops"}\n\n',
        b'data: {"choices": [7]}\n\n',
        b'data: {"choices": [{"delta": "x"}]}\n\n',
        b'data: {"choices": [], "usage": {"completion_tokens": "many"}}\n\n',
        b'data: {"choices": [], "usage": [3]}\n\n',
    ],
)
def test_an_event_that_does_not_parse_fails_the_request(bad: bytes) -> None:
    """A whole stream with one broken event in it is a failed request, not a success."""
    chat = b"delta" in bad
    st = StreamState(chat=chat)
    st.feed(ev(GOOD) + bad, 1)  # the malformed event arrives with a good one
    st.feed(whole(LAST), 2)
    st.close(3)
    cls, msg = st.verdict()
    assert cls == "malformed_event", (bad, cls, msg)
    assert msg is not None and "malformed" in msg
    assert st.chunk_ns[0] == 1  # the partial timings are kept


def test_stream_cut_without_finish_reason_or_done_is_truncated() -> None:
    st = StreamState(chat=False)
    for i in range(5):
        st.feed(ev(GOOD), i)
    st.close(9)  # the body ended properly at the HTTP level, but the stream did not
    cls, msg = st.verdict()
    assert cls == "truncated" and "after 5 content chunks" in (msg or "")
    assert len(st.chunk_ns) == 5


def test_stream_cut_inside_an_event_is_truncated() -> None:
    st = StreamState(chat=False)
    st.feed(ev(GOOD) + b'data: {"choices": [{"te', 1)
    st.close(2)
    assert st.verdict()[0] == "truncated"


def test_finish_reason_without_done_is_whole_and_done_alone_too() -> None:
    """llama.cpp ends with a finish_reason and no [DONE]; either marks a whole stream."""
    st = StreamState(chat=False)
    st.feed(ev(GOOD) + ev(LAST), 1)
    st.close(2)
    assert st.verdict() == (None, None)
    st = StreamState(chat=False)
    st.feed(ev(GOOD) + b"data: [DONE]", 1)  # the last event without its blank line
    st.close(2)
    assert st.done and st.verdict() == (None, None)


def test_whole_stream_without_content_is_no_output() -> None:
    st = StreamState(chat=False)
    st.feed(b"data: [DONE]\n\n", 1)
    st.close(2)
    assert st.verdict()[0] == "no_output"


def test_a_json_body_instead_of_a_stream_is_malformed() -> None:
    st = StreamState(chat=False)
    st.feed(b'{"choices": [{"text": "all at once", "finish_reason": "length"}]}', 1)
    st.close(2)
    assert st.verdict()[0] == "malformed_event"


def test_event_kinds_in_compact_and_spaced_json() -> None:
    """Content chunks are told from usage-only, error and finish events in every spelling."""
    shapes = [
        {"choices": [{"index": 0, "text": "a", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "b"}]},
        {"choices": [{"index": 0, "delta": {"content": "c"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "d", "finish_reason": "stop"}]},
        {"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 1}},
        {"choices": [{"text": "e"}], "usage": {"completion_tokens": 5}},
        {"error": {"message": "x"}},
        {"object": "error", "message": "y"},
        {"choices": [{"text": 'the word "error" and "usage" in text'}]},
    ]
    for obj in shapes:
        for spaced in (False, True):
            raw = orjson.dumps(obj)
            if spaced:
                raw = raw.replace(b'":', b'": ').replace(b",", b", ")
            st = StreamState(chat="delta" in str(obj))
            st.feed(b"data: " + raw + b"\n\n", 1)
            has_choices = bool(obj.get("choices"))
            assert (st.chunk_ns == [1]) == has_choices, obj
            if "error" in obj or obj.get("object") == "error":
                assert st.error is not None
            if obj.get("choices") and obj["choices"][0].get("finish_reason"):
                assert st.finish_reason == "stop"


def test_generated_text_in_order() -> None:
    st = StreamState(chat=False)
    st.feed(ev({"choices": [{"text": "a"}]}), 1)
    st.feed(ev({"choices": [{"text": "b"}], "usage": {"completion_tokens": 2}}), 2)
    st.feed(ev({"choices": [{"text": "c", "finish_reason": "length"}]}), 3)
    assert st.generated_text() == "abc"


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_a_stream_the_engine_gave_up_on_is_a_server_error(reason: str) -> None:
    """vLLM ends a request its engine aborted (or failed) with finish_reason ``abort`` /
    ``error``, then usage and [DONE]: well-formed, but not a whole response."""
    st = StreamState(chat=False)
    last = {"choices": [{"index": 0, "text": "x", "finish_reason": reason}]}
    st.feed(ev(GOOD) + ev(last) + b"data: [DONE]\n\n", 1)
    st.close(2)
    cls, msg = st.verdict()
    assert cls == "server_error" and f"finish_reason {reason!r}" in (msg or "")
    assert len(st.chunk_ns) == 2  # the partial timings are kept


@pytest.mark.parametrize(
    ("body", "cls"),
    [
        (b'{"error": {"message": "slow down", "code": 429}}\n', "rate_limited"),
        (b'{"object": "error", "message": "bad model", "type": "x", "code": 400}', "client_error"),
        (b'{"error": "engine dead"}', "server_error"),
    ],
)
def test_a_2xx_body_that_is_one_error_object_is_that_error(body: bytes, cls: str) -> None:
    """Some proxies answer an error with status 200 and a JSON error object: the failure is
    the error (rate limiting, a bad request, ...), not a malformed stream."""
    st = StreamState(chat=True)
    st.feed(body, 1)
    st.close(2)
    got, msg = st.verdict()
    assert got == cls and msg is not None and msg.startswith("error body: "), (got, msg)


def test_an_error_event_with_plain_text_data_is_the_error() -> None:
    """``event: error`` names the event an error whatever its data: plain text is the
    message, not a malformed event."""
    st = StreamState(chat=False)
    st.feed(ev(GOOD) + b"event: error\ndata: upstream timed out\n\n", 1)
    st.close(2)
    assert st.verdict() == ("server_error", "server error mid-stream: upstream timed out")


@pytest.mark.parametrize(("reason", "cls"), [("length", None), ("abort", "server_error")])
def test_a_finish_reason_object_is_read_by_its_type(reason: str, cls: str | None) -> None:
    """SGLang's native finish reason is an object (``{"type": "length", "length": 2}``): it
    is read by its type, a word in the record — never an error of the client's own."""
    st = StreamState(chat=False)
    last = {"choices": [{"index": 0, "text": "b", "finish_reason": {"type": reason}}]}
    st.feed(ev(GOOD) + ev(last) + b"data: [DONE]\n\n", 1)
    st.close(2)
    assert st.verdict()[0] == cls and st.finish_reason == reason
