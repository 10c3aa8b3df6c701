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
        # a NaN threshold is never exceeded: every candidate would have passed
        (["--max-ppl-increase", "nan"], "thresholds must be numbers ≥ 0"),
        (["--max-kl", "nan"], "thresholds must be numbers ≥ 0"),
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


def test_urls_and_answers_that_are_no_openai_server(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Port 99999 was aiohttp's InvalidUrlClientError, said as "the baseline serves 0
    models ()"; so were an HTML page and JSON that is no model list; a JSON list was an
    AttributeError traceback."""
    import http.server
    import threading

    bad = "http://127.0.0.1:99999/v1"
    assert main(["quality", "--baseline", bad, "--candidate", bad, "--out", str(tmp_path)]) == 2
    assert "not a valid URL" in capsys.readouterr().err
    for body, said in [
        (b"[1, 2]", "did not return an OpenAI model list"),
        (b"<html>hello</html>", "did not return JSON"),
    ]:

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))  # noqa: B023
                self.end_headers()
                self.wfile.write(body)  # noqa: B023

            def log_message(self, *_a: object) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            def handle_error(self, *_a: object) -> None:
                # the stub's own BrokenPipeError when the client hung up first (baseline and
                # candidate are probed at once; one's failure ends the command) printed
                # socketserver's traceback into the captured stderr under load
                pass

        srv = Quiet(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        try:
            code = main(["quality", "--baseline", url, "--candidate", url, "--out", str(tmp_path)])
        finally:
            srv.shutdown()
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        assert "is not an OpenAI-compatible server" in err and said in err and "hint:" in err
