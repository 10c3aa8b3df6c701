from __future__ import annotations

from pathlib import Path

import pytest

from servetune.errors import DatasetError
from servetune.quality.inputs import Sample, builtin_texts, load_samples, load_texts


def test_builtin_texts() -> None:
    texts = builtin_texts()
    assert len(texts) >= 32 and all(len(t.split()) > 20 for t in texts)
    got, source = load_texts(None, 8)
    assert len(got) == 8 and "built-in" in source


def test_texts_files(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_text("one two three four five.\n\nsix seven eight nine ten.\n\nshort\n")
    texts, _ = load_texts(p, 10)
    assert len(texts) == 2
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"text": "a b c d e"}\n{"oops": 1}\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl:2"):
        load_texts(bad, 10)


@pytest.mark.parametrize(
    "check,expected,output,ok",
    [
        ("exact", "Paris", "  Paris\n", True),
        ("exact", "Paris", "Paris.", False),
        ("contains", "42", "the answer is 42.", True),
        ("regex", r"^\s*\d{4}-\d{2}-\d{2}", " 2026-12-03", True),
        ("json", "", ' {"a": 1} ', True),
        ("json", "", "{a: 1}", False),
    ],
)
def test_sample_checks(check: str, expected: str, output: str, ok: bool) -> None:
    s = Sample(name="s", prompt="p", expected=expected, check=check)  # type: ignore[arg-type]
    assert s.passes(output) is ok


def test_bad_samples_name_the_line(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text(
        '{"prompt": "a", "expected": "b"}\n{"prompt": "x", "check": "regex", "expected": "("}\n'
    )
    with pytest.raises(DatasetError, match=r"s\.jsonl:2"):
        load_samples(p)
    p.write_text('{"prompt": "a", "check": "fuzzy"}\n')
    with pytest.raises(DatasetError, match=r"s\.jsonl:1"):
        load_samples(p)
