"""One word, one meaning across commands: --model is the model (as vLLM means it), the served
name is --served-model-name; `sim run` offers only flags that act on a virtual-clock run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.commands.sim import OFFLINE_NO_EFFECT
from servetune.results.io import read_run_result


def test_bench_sends_the_served_name_when_it_differs_from_the_model(
    scripted: Callable[..., object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = scripted({"ttft_ms": 1, "tpot_ms": 1})
    base = ["bench", "--base-url", srv.base_url, "--num-prompts", "3"]  # type: ignore[attr-defined]
    common = ["--random-input-len", "16", "--random-output-len", "4", "--no-progress"]
    # the model under its hub name, served under another (vllm serve --served-model-name)
    assert (
        main(
            [
                *base,
                *common,
                "--model",
                "org/real-model",
                "--served-model-name",
                "scripted-model",
                "--result-dir",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    run = read_run_result(tmp_path / "a")
    assert run.target.model == "scripted-model" and run.config.model == "scripted-model"
    capsys.readouterr()
    # the model alone, not served under that name: the error says which flag fixes it
    assert (
        main([*base, *common, "--model", "org/real-model", "--result-dir", str(tmp_path / "b")])
        == 2
    )
    err = capsys.readouterr().err
    assert "'org/real-model' is not served" in err and "--served-model-name" in err


def test_sim_run_lists_no_client_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sim", "run", "--help"])
    out = capsys.readouterr().out
    for flag in [*OFFLINE_NO_EFFECT.values(), "--endpoint", "--base-url", "--api-key"]:
        assert flag not in out
    assert "--request-rate" in out and "--max-num-seqs" in out and "--model" in out


@pytest.mark.parametrize(
    "flags",
    [["--workers", "2"], ["--http-client", "aiohttp", "--temperature", "0.7"], ["--ignore-eos"]],
)
def test_sim_run_refuses_client_flags_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    code = main(["sim", "run", "--num-prompts", "5", "--result-dir", str(tmp_path), *flags])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("servetune sim run: error: ")
    assert all(f in err[0] for f in flags if f.startswith("--"))
    assert err[1].startswith("  hint: ")
    assert not (tmp_path / "run.json").exists()


def test_sim_run_has_no_endpoint_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["sim", "run", "--endpoint", "chat"])
    assert done.value.code == 2
    assert "servetune sim run: error: unrecognized arguments: --endpoint chat" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("gpu", "said"),
    [
        ("a100", "note: --gpu a100 is taken as A100-80GB (the catalog also has A100-40GB"),
        ("A100-80GB", None),
        ("a100_80gb", None),
    ],
)
def test_a_gpu_alias_is_said_not_silently_resolved(
    capsys: pytest.CaptureFixture[str], gpu: str, said: str | None
) -> None:
    assert main(["sim", "plan", "--gpu", gpu, "--json"]) == 0
    err = capsys.readouterr().err
    if said is None:
        assert "note:" not in err
    else:
        assert err.startswith(f"servetune sim plan: {said}")
