"""`servetune quality` against an endpoint that gives no logprobs (the simulated engine): the
checks that need them say they cannot run and why; the verdict is inconclusive; errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.engines.process import free_port
from servetune.sim.config import EngineConfig
from servetune.sim.embedded import start_embedded


def test_no_logprobs_means_inconclusive_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = start_embedded(EngineConfig())
    try:
        code = main(
            [
                "quality",
                "--baseline",
                srv.base_url,
                "--candidate",
                srv.base_url,
                "--prompts",
                "3",
                "--greedy-tokens",
                "4",
                "--out",
                str(tmp_path),
                "--json",
            ]
        )
    finally:
        srv.stop()
    assert code == 1  # not a pass
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "inconclusive"
    assert "perplexity" in doc["not_run"] and "kl" in doc["not_run"]
    why = doc["not_run"]["perplexity"]
    assert "no prompt logprobs" in why or "logprobs" in why
    assert doc["baseline"]["why_no_logprobs"]
    assert json.loads((tmp_path / "quality.json").read_text())["verdict"] == "inconclusive"
    # the gateway's canary gate reads the same file
    from servetune.gateway.quality_gate import read_file

    gate = read_file(str(tmp_path / "quality.json"))
    assert gate.verdict == "inconclusive" and "neither perplexity nor KL" in gate.detail


def test_unreachable_endpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    assert main(["quality", "--baseline", url, "--candidate", url, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the baseline" in err and "hint:" in err


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--prompts", "1"], "--prompts must be ≥ 2"),
        (["--top-k", "0"], "--top-k must be ≥ 1"),
        (["--min-top1", "1.5"], "shares between 0 and 1"),
        (["--texts", "/nonexistent/t.jsonl"], "cannot read --texts"),
    ],
)
def test_bad_flags(extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "quality",
        "--baseline",
        "http://127.0.0.1:9/v1",
        "--candidate",
        "http://127.0.0.1:9/v1",
        *extra,
    ]
    assert main(args) == 2
    assert needle in capsys.readouterr().err
