"""compare's "requests of another size" refusal: beyond tokenizer rounding *and* beyond the
chance of drawing variable lengths — two seeds of one workload are comparable."""

from __future__ import annotations

from pathlib import Path

from tests.compare.sim_runs import sim_run

from servetune.compare.comparable import lengths_differ, run_differences
from servetune.compare.inputs import load_run


def test_two_seeds_of_variable_lengths_are_comparable(tmp_path: Path) -> None:
    # lengths uniform in [0.1 L, 1.9 L]: two 1,000-request draws' means differ by 2.4% ± 2.4%,
    # so a fixed 2% tolerance refused 28 of 40 such pairs of one configuration
    refused = []
    for i, seed in enumerate((90000, 90002, 90006, 90008, 90010, 90012)):
        a = load_run(sim_run(tmp_path / f"a{i}", 8.0, seed, random_range_ratio=0.9))
        b = load_run(sim_run(tmp_path / f"b{i}", 8.0, seed + 1, random_range_ratio=0.9))
        diffs = [d for d in run_differences(a.result, b.result) if d.severity == "refuse"]
        if diffs:
            refused.append((seed, [d.text() for d in diffs]))
    assert not refused


def test_requests_of_another_size_are_still_refused() -> None:
    # a server stopping at EOS: 128 planned tokens, 100 came back on average
    assert lengths_differ(128.0, 100.0, 0.0, 0.0)
    assert lengths_differ(128.0, 100.0, 1.2, 1.1)
    # 2.4% apart with a standard error of 1.6% each: a draw of the same lengths
    assert not lengths_differ(1024.0, 1049.0, 16.8, 16.8)
    # 1% apart: tokenizer rounding, however precise
    assert not lengths_differ(1000.0, 1010.0, 0.0, 0.0)
