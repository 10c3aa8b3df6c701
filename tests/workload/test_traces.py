"""The ``trace`` dataset: Mooncake JSONL, Azure CSV, servetune's requests.jsonl; window, scale,
rate; a malformed line is an error naming the file and the line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from servetune.errors import ConfigError, DatasetError
from servetune.results.conversation import TraceConfig
from servetune.results.schema import BenchConfig
from servetune.workload.plan import make_plan
from servetune.workload.prefix_share import implied_hit_rate
from servetune.workload.tokens import ApproxTokenizer, HFTokenizer

DATA = Path(__file__).parents[1] / "data" / "workloads"
MOONCAKE = DATA / "mooncake_tiny.jsonl"
AZURE = DATA / "azure_excerpt.csv"


def _plan(path: Path, given: bool = False, **kw: object):  # type: ignore[no-untyped-def]
    cfg = BenchConfig(dataset_name="trace", dataset_path=str(path), **kw)
    return make_plan(cfg, ApproxTokenizer(), num_prompts_given=given)


def _mooncake_rows() -> list[dict[str, object]]:
    return [orjson.loads(line) for line in MOONCAKE.read_bytes().splitlines() if line.strip()]


def test_mooncake_lengths_times_and_equal_blocks() -> None:
    plan = _plan(MOONCAKE)
    rows = _mooncake_rows()
    assert [s.input_len for s in plan.requests] == [r["input_length"] for r in rows]
    assert [s.output_len for s in plan.requests] == [r["output_length"] for r in rows]
    assert plan.offsets_ns == [int(r["timestamp"]) * 1_000_000 for r in rows]  # type: ignore[call-overload]
    words = [s.text().split() for s in plan.requests]
    for a, ra in zip(words, rows, strict=True):
        for b, rb in zip(words, rows, strict=True):
            ha, hb = ra["hash_ids"], rb["hash_ids"]
            assert isinstance(ha, list) and isinstance(hb, list)
            same = 0
            while same < min(len(ha), len(hb)) and ha[same] == hb[same]:
                same += 1
            # equal ids: equal text, block for block (a partial block is a prefix of the full)
            n = min(same * 512, len(a), len(b))
            assert a[:n] == b[:n]
            if same < min(len(ha), len(hb)):  # the first differing block differs
                assert a[same * 512 : same * 512 + 16] != b[same * 512 : same * 512 + 16]


def test_mooncake_reuse_is_reproduced() -> None:
    """The share of prompt tokens an unbounded cache serves, computed from the trace's hash
    ids (in tokens), is what the generated prompts imply (in 16-token blocks)."""
    rows = _mooncake_rows()
    seen: dict[tuple[int, ...], int] = {}  # a block's key -> most of its tokens sent so far
    hit = total = 0
    for r in rows:
        ids, n = r["hash_ids"], r["input_length"]
        assert isinstance(ids, list) and isinstance(n, int)
        total += n
        for b in range(len(ids)):
            have = seen.get(tuple(ids[: b + 1]), 0)
            hit += min(have, n - b * 512)
            if have < 512:
                break
        for b in range(len(ids)):
            key = tuple(ids[: b + 1])
            seen[key] = max(seen.get(key, 0), min(512, n - b * 512))
    from_ids = hit / total
    assert from_ids > 0.4  # the fixture does reuse
    got = implied_hit_rate(_plan(MOONCAKE).requests)
    assert got == pytest.approx(from_ids, abs=0.02)


def test_mooncake_reuse_under_a_real_tokenizer(tiny_tokenizer: Path) -> None:
    cfg = BenchConfig(dataset_name="trace", dataset_path=str(MOONCAKE))
    plan = make_plan(cfg, HFTokenizer(tiny_tokenizer), num_prompts_given=False)
    a, d = plan.requests[0].text(), plan.requests[3].text()  # the same three blocks
    assert d.startswith(a[: len(a) - 40])
    assert implied_hit_rate(plan.requests) > 0.3


def test_a_different_seed_draws_other_text_for_the_same_ids() -> None:
    one = _plan(MOONCAKE, seed=1).requests[0].text()
    two = _plan(MOONCAKE, seed=2).requests[0].text()
    assert one != two


def test_azure_timestamps_are_honoured() -> None:
    plan = _plan(AZURE)
    got = np.array(plan.offsets_ns) / 1e9
    # 18:15:46.6805900, :50.9951690, :51.2250000, :53.0000000, 18:16:01.5000000
    want = [0.0, 4.314579, 4.54441, 6.31941, 14.81941]
    assert got == pytest.approx(want, abs=1e-5)
    assert [s.input_len for s in plan.requests] == [374, 396, 879, 91, 1201]
    assert [s.output_len for s in plan.requests] == [44, 109, 20, 7, 3]
    assert implied_hit_rate(plan.requests) == 0.0


def test_time_scale_window_and_rate() -> None:
    half = _plan(AZURE, trace=TraceConfig(time_scale=0.5))
    assert np.array(half.offsets_ns) / 1e9 == pytest.approx(
        [0.0, 2.1572895, 2.272205, 3.159705, 7.409705], abs=1e-5
    )
    win = _plan(AZURE, trace=TraceConfig(window_start_s=4.0, window_end_s=7.0))
    assert [s.input_len for s in win.requests] == [396, 879, 91]
    assert np.array(win.offsets_ns) / 1e9 == pytest.approx([0.0, 0.229831, 2.004831], abs=1e-5)
    # a finite rate keeps the trace's shape at that mean rate
    fast = _plan(AZURE, request_rate=2.0)
    got = np.array(fast.offsets_ns) / 1e9
    assert got[-1] == pytest.approx(4 / 2.0)
    assert got / got[-1] == pytest.approx(
        np.array([0, 4.314579, 4.54441, 6.31941, 14.81941]) / 14.81941, abs=1e-5
    )
    assert fast.planned_rate == pytest.approx(2.0)
    first = _plan(AZURE, given=True, num_prompts=2)
    assert len(first.requests) == 2
    with pytest.raises(ConfigError, match="holds no request"):
        _plan(AZURE, trace=TraceConfig(window_start_s=100.0, window_end_s=200.0))
    with pytest.raises(ValidationError, match="both set the trace's pace"):  # the model's rule
        _plan(AZURE, request_rate=2.0, trace=TraceConfig(time_scale=0.5))


def test_servetune_requests_jsonl_is_replayed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        {
            "id": 0,
            "status": "ok",
            "scheduled_ns": 0,
            "eligible_ns": 0,
            "send_ns": 5,
            "end_ns": 9,
            "planned_input_len": 64,
            "planned_output_len": 8,
        },
        {
            "id": 1,
            "status": "failed",
            "scheduled_ns": 1_500_000_000,
            "eligible_ns": 0,
            "send_ns": 0,
            "end_ns": 0,
            "planned_input_len": 32,
            "planned_output_len": None,
            "output_tokens": 5,
        },
    ]
    (run / "requests.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    plan = _plan(run)  # the run directory, or its file
    assert [s.input_len for s in plan.requests] == [64, 32]
    assert [s.output_len for s in plan.requests] == [8, 5]
    assert plan.offsets_ns == [0, 1_500_000_000]
    assert _plan(run / "requests.jsonl").offsets_ns == plan.offsets_ns


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5, '
            '"input_length": 10}\n',
            r"t\.jsonl:2: no 'output_length'",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 10, "output_length": 2}\n\n{bad json\n',
            r"t\.jsonl:3: not valid JSON",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}\n',
            r"t\.jsonl:1: 3 hash_ids for input_length 600",
        ),
        (
            "t.jsonl",
            '{"timestamp": -4, "input_length": 6, "output_length": 2}\n',
            r"t\.jsonl:1: 'timestamp' must be a number ≥ 0",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": "ten", "output_length": 2}\n',
            r"t\.jsonl:1: 'input_length' must be an integer",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": "x"}\n',
            r"t\.jsonl:1: 'hash_ids' must be a list of integers",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,2\n"
            "2023-11-16 18:15:47.2,ten,2\n",
            r"t\.csv:3: ContextTokens 'ten' is not an integer",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,2\n",
            r"t\.csv:2: TIMESTAMP 'yesterday' is neither",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.1,10\n",
            r"t\.csv:1: the header lacks GeneratedTokens",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10\n",
            r"t\.csv:2: 2 columns, the header has 3",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,0\n",
            r"t\.csv:2: GeneratedTokens must be ≥ 1, got 0",
        ),
    ],
)
def test_a_malformed_line_is_an_error_naming_it(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DatasetError, match=message) as err:
        _plan(path)
    assert err.value.hint


def test_missing_and_unknown_trace_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="trace file not found"):
        _plan(tmp_path / "nope.jsonl")
    with pytest.raises(DatasetError, match=r"without requests\.jsonl"):
        _plan(tmp_path)
    odd = tmp_path / "odd.txt"
    odd.write_text("hello\n")
    with pytest.raises(DatasetError, match="cannot tell the trace's format") as err:
        _plan(odd)
    assert "give trace_format mooncake" in (err.value.hint or "")  # the field; the CLI its flag
    shown = err.value.shown(lambda f: "--" + f.replace("_", "-"))[1]
    assert "--trace-format mooncake" in (shown or "")
    with pytest.raises(DatasetError, match="needs dataset_path=FILE"):
        make_plan(BenchConfig(dataset_name="trace"), ApproxTokenizer())
