"""The real-time server's request checks (sim/intake.py) and response bytes (sim/streams.py)."""

from __future__ import annotations

import orjson
import pytest

from servetune.sim.engine import SimRequest
from servetune.sim.intake import Ask, Refusal, block_hashes, prompt_pieces, read_request
from servetune.sim.streams import DONE, WORDS, Stream
from servetune.workload.tokens import ApproxTokenizer

NAMES = {"served", "org/model", "model"}


def test_prompts_are_counted_like_the_approximate_tokenizer() -> None:
    text = "The quick, brown fox — extraordinarily quick."
    n, pieces = prompt_pieces({"prompt": text}, chat=False)
    assert n == ApproxTokenizer().count(text) and "extraordinarily" in pieces
    assert prompt_pieces({"prompt": [1, 2, 3]}, chat=False) == (3, ["1", "2", "3"])
    assert prompt_pieces({"prompt": [[4, 5]]}, chat=False)[0] == 2
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a b"}]}]}
    assert prompt_pieces(chat, chat=True)[0] == 2


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "other", "prompt": "x"}, 404, "does not exist"),
        ({"prompt": "x", "max_tokens": "many"}, 400, "must be an integer"),
        ({"prompt": "x", "max_tokens": 0}, 400, "at least 1"),
        ({"prompt": "w " * 90, "max_tokens": 20}, 400, "maximum context length is 100 tokens"),
    ],
)
def test_refusals_as_vllm_words_them(body: dict, status: int, words: str) -> None:  # type: ignore[type-arg]
    got = read_request(body, False, NAMES, 100)
    assert isinstance(got, Refusal) and got.status == status and words in got.message


def test_an_accepted_request() -> None:
    got = read_request(
        {"model": "model", "messages": [{"content": "hi there"}], "max_completion_tokens": 5,
         "stream": True, "stream_options": {"include_usage": True}},
        True, NAMES, 100,
    )  # fmt: skip
    assert got == Ask(True, 2, ["hi", "there"], 5, True, True)
    unbounded = read_request({"prompt": "a b c", "stream_options": "bad"}, False, NAMES, 100)
    assert isinstance(unbounded, Ask) and unbounded.max_tokens == 97
    assert not unbounded.include_usage


def test_block_hashes_chain_full_blocks() -> None:
    a = block_hashes(list("abcdefghij"), 4)
    b = block_hashes(list("abcdXXXXij"), 4)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1]


def _events(data: bytes) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for block in data.split(b"\n\n"):
        if block.startswith(b"data: {"):
            out.append(orjson.loads(block[6:]))
    return out


def test_a_chat_stream_opens_with_the_role_and_closes_with_usage() -> None:
    req = SimRequest(3, 7, 2, 0.0, ())
    s = Stream(None, req, "chatcmpl-3", "m", chat=True, stream=True, include_usage=True)
    first, last = s.token_bytes(False), s.token_bytes(True)
    evs = _events(first) + _events(last) + _events(s.closing_bytes())
    assert evs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    texts = [e["choices"][0]["delta"]["content"] for e in evs[1:3]]
    assert [t.encode() for t in texts] == [WORDS[21 % len(WORDS)], WORDS[22 % len(WORDS)]]
    assert evs[2]["choices"][0]["finish_reason"] == "length"
    assert evs[3]["choices"] == [] and evs[3]["usage"]["completion_tokens"] == 2
    assert s.closing_bytes().endswith(DONE)


def test_a_completion_without_usage_and_a_whole_body() -> None:
    req = SimRequest(0, 4, 3, 0.0, ())
    s = Stream(None, req, "cmpl-0", "m", chat=False, stream=True, include_usage=False)
    assert s.closing_bytes() == DONE
    ev = _events(s.token_bytes(False))[0]
    assert ev["object"] == "text_completion" and ev["choices"][0]["stop_reason"] is None
    req.out = 3
    whole = orjson.loads(Stream(None, req, "cmpl-0", "m", False, False, False).full_body("m"))
    assert whole["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 7,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 0},  # what its prefix cache served
    }
    assert ApproxTokenizer().count(whole["choices"][0]["text"]) == 3
