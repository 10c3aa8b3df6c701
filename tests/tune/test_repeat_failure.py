"""A configuration is not recommended when its engine fails in a repeat (the search fails a
trial for an engine that dies under load; the repeats hold it to the same rule), nor, under
any objective, when more than 1% of its requests fail.

The search runs for real on the simulated engine; a dying engine is the engine error a real
engine's session raises when it exits under load, raised in the winner's repeat sessions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from servetune.cli import main
from servetune.errors import EngineError
from servetune.results.tune_file import read_tune_result
from servetune.tune.backends import Measure, SimBackend
from servetune.tune.finish import finish
from servetune.tune.run import make_backend


class DiesInRepeats(SimBackend):
    """The simulated engine, except that one configuration's engine exits under load in
    every repeat (a session drawn with another seed)."""

    def __init__(self, base: SimBackend, dies: Mapping[str, Any]) -> None:
        super().__init__(base.gpu, base.model, base.workload, base.slos)
        self.dies = dict(dies)

    @contextlib.contextmanager
    def session(
        self,
        config: Mapping[str, Any],
        trial_dir: Path,
        seed: int | None = None,
        server_metrics: bool = False,
        length: int = 1,
    ) -> Iterator[Measure]:
        if seed is not None and dict(config) == self.dies:
            raise EngineError("vllm exited with status 1 under load: CUDA out of memory")
        with super().session(config, trial_dir, seed, server_metrics, length) as measure:
            yield measure


def test_a_config_that_dies_in_a_repeat_is_not_the_best(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t"
    args = ["tune", "--engine", "sim", "--gpu", "H100-80GB", "--num-prompts", "200"]
    args += ["--slo", "ttft:p99<=300", "--slo", "tpot:p99<=30", "--seed", "1"]
    args += ["--knob", "quantization", "--knob", "max_num_seqs=64,256,1024", "--trials", "6"]
    args += ["--repeats", "1", "--no-ofat", "--result-dir", str(out)]
    assert main(args) == 0, capsys.readouterr().out
    result = read_tune_result(out / "tune.json")
    assert result.best is not None
    winner = dict(result.best.config)
    result.spec.repeats, result.spec.top_k = 2, 3
    base = make_backend(result.spec)
    assert isinstance(base, SimBackend)
    done = finish(result, DiesInRepeats(base, winner), tmp_path / "f", echo=lambda _: None)
    assert done.best is not None and dict(done.best.config) != winner
    died = [r for r in done.repeats if r.config == winner]
    assert died and died[0].failed and "out of memory" in died[0].note
    assert "FAILED" not in done.verdict


def test_a_config_whose_requests_fail_scores_nothing_under_the_throughput_objective(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # prompts of 512–1536 tokens: a 1,200-token context refuses the longer ones (engine alive)
    out = tmp_path / "t"
    args = ["tune", "--engine", "sim", "--gpu", "A100-80GB", "--model", "Qwen/Qwen2.5-7B-Instruct"]
    args += ["--random-input-len", "1024", "--random-range-ratio", "0.5", "--num-prompts", "300"]
    args += ["--objective", "throughput", "--request-rate", "inf", "--max-concurrency", "32"]
    args += ["--knob", "max_model_len=1200,4096", "--trials", "3", "--seed", "2"]
    args += ["--result-dir", str(out)]
    assert main(args) == 0, capsys.readouterr().out
    result = read_tune_result(out / "tune.json")
    short = [t for t in result.trials if t.config.get("max_model_len") == 1200]
    assert short, [t.config for t in result.trials]
    for t in short:
        assert t.status == "no-rate" and not t.value, t
        assert t.reason is not None and "requests failed" in t.reason
    assert result.best is not None and result.best.config.get("max_model_len") != 1200
