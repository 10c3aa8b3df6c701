import orjson

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
    assert st.done
    assert st.error == "server error mid-stream: engine died"


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
