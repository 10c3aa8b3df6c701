from pathlib import Path

import orjson
import pytest

from servetune.errors import ConfigError, DatasetError
from servetune.results.schema import BenchConfig
from servetune.workload.datasets import build_dataset
from servetune.workload.plan import make_plan
from servetune.workload.tokens import ApproxTokenizer, HFTokenizer, load_tokenizer


def test_random_prompts_have_exact_length_under_approx_counter() -> None:
    tok = ApproxTokenizer()
    cfg = BenchConfig(random_input_len=300, random_output_len=20, random_range_ratio=0.5)
    specs = build_dataset(cfg, tok, 50)
    for s in specs:
        assert tok.count(s.prompt or "") == s.input_len
        assert 150 <= s.input_len <= 450 and 10 <= s.output_len <= 30
    assert len({s.prompt for s in specs}) == 50  # no accidental shared prompts


def test_random_prompts_exact_under_a_real_tokenizer(tiny_tokenizer: Path) -> None:
    tok = HFTokenizer(tiny_tokenizer)
    specs = build_dataset(BenchConfig(random_input_len=128, random_output_len=8), tok, 40)
    exact = sum(1 for s in specs if tok.count(s.prompt or "") == 128)
    assert exact >= 38, f"only {exact}/40 prompts re-tokenize to exactly 128 tokens"


def test_tokenizer_path_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no tokenizer at"):
        load_tokenizer(str(tmp_path))


def test_same_seed_same_workload_different_seed_different() -> None:
    tok = ApproxTokenizer()
    a = make_plan(BenchConfig(request_rate=10, num_prompts=20, seed=3), tok)
    b = make_plan(BenchConfig(request_rate=10, num_prompts=20, seed=3), tok)
    c = make_plan(BenchConfig(request_rate=10, num_prompts=20, seed=4), tok)
    assert a.requests == b.requests and a.offsets_ns == b.offsets_ns
    assert a.requests != c.requests


def test_prefix_groups_share_their_prefix() -> None:
    tok = ApproxTokenizer()
    cfg = BenchConfig(
        dataset_name="prefix", prefix_len=64, prefix_num_groups=3, random_input_len=16
    )
    specs = build_dataset(cfg, tok, 30)
    assert {s.group for s in specs} == {0, 1, 2}
    for g in range(3):
        heads = {" ".join((s.prompt or "").split()[:64]) for s in specs if s.group == g}
        assert len(heads) == 1
    assert all(s.input_len == 80 for s in specs)


def _write(path: Path, obj: object) -> Path:
    path.write_bytes(orjson.dumps(obj))
    return path


def test_sharegpt_pairs_and_output_lengths(tmp_path: Path) -> None:
    conv = [
        {
            "conversations": [
                {"from": "human", "value": "tell me about the sea and the road"},
                {"from": "gpt", "value": "the sea is large and the road is long"},
            ]
        },
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
        {"conversations": [{"from": "system", "value": "x"}]},
    ]
    f = _write(tmp_path / "sg.json", conv)
    specs = build_dataset(
        BenchConfig(dataset_name="sharegpt", dataset_path=str(f)), ApproxTokenizer(), 3
    )
    assert len(specs) == 3  # one usable pair, reused
    assert specs[0].input_len == 8 and specs[0].output_len == 9


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'[{"conversations": [}', r"sg.json:1:\d+: not valid JSON"),
        (b'{"a": 1}', "expected a JSON array"),
        (b'[{"nope": 1}]', "entry 0 has no 'conversations' list"),
        (b"[]", "no usable human"),
    ],
)
def test_sharegpt_malformed(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "sg.json"
    f.write_bytes(content)
    with pytest.raises(DatasetError, match=message):
        build_dataset(
            BenchConfig(dataset_name="sharegpt", dataset_path=str(f)), ApproxTokenizer(), 5
        )


def test_jsonl_prompt_messages_and_output_len(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"prompt": "one two three", "output_len": 7}\n\n'
        '{"messages": [{"role": "user", "content": "four five"}]}\n'
    )
    specs = build_dataset(
        BenchConfig(dataset_name="jsonl", dataset_path=str(f), random_output_len=11),
        ApproxTokenizer(),
        4,
    )
    got = sorted((s.input_len, s.output_len, s.messages is not None) for s in specs[:2])
    assert got == [(2, 11, True), (3, 7, False)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "a"}\n{"prompt": 3}\n', r"d.jsonl:2: expected"),
        ('{"prompt": "a"}\n{broken\n', r"d.jsonl:2: not valid JSON"),
        ('{"prompt": "a", "output_len": 0}\n', r"d.jsonl:1: output_len must be a positive"),
        ("\n\n", "holds no requests"),
    ],
)
def test_jsonl_malformed_names_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(content)
    with pytest.raises(DatasetError, match=message):
        build_dataset(BenchConfig(dataset_name="jsonl", dataset_path=str(f)), ApproxTokenizer(), 2)


def test_missing_dataset_file(tmp_path: Path) -> None:
    for name in ("sharegpt", "jsonl"):
        with pytest.raises(DatasetError, match="not found"):
            build_dataset(
                BenchConfig(dataset_name=name, dataset_path=str(tmp_path / "x")),
                ApproxTokenizer(),
                1,
            )


def test_a_directory_as_jsonl_is_said_to_be_one(tmp_path: Path) -> None:
    """It was "JSONL file not found: DIR" — the path exists, it is a directory."""
    with pytest.raises(DatasetError, match="is a directory, not a JSONL file"):
        build_dataset(
            BenchConfig(dataset_name="jsonl", dataset_path=str(tmp_path)), ApproxTokenizer(), 1
        )
