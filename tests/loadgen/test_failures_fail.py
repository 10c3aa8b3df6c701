"""Failures fail: a stub server that answers 500s and 429s, resets connections, and streams
malformed or truncated SSE. Every case runs over both HTTP clients, which must agree."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import run_cli

from servetune.loadgen.bench import bench
from servetune.results.io import read_records, read_run_result
from servetune.results.schema import BenchConfig

Factory = Callable[..., Any]
CLIENTS = ["fast", "aiohttp"]


def cfg(url: str, transport: str, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = dict(
        base_url=url,
        random_input_len=16,
        random_output_len=12,
        num_prompts=20,
        request_rate=100.0,
        seed=3,
        http_client=transport,
    )
    base.update(kw)
    return BenchConfig(**base)


def run(srv: Any, tmp_path: Path, transport: str, **kw: Any) -> Any:
    return bench(cfg(srv.base_url, transport, **kw), tmp_path, progress=False, scrape_metrics=False)


@pytest.mark.parametrize("transport", CLIENTS)
@pytest.mark.parametrize(
    ("script", "cls"),
    [
        ({"fail_every": 1, "fail_status": 500}, "server_error"),
        ({"fail_every": 1, "fail_status": 503}, "server_error"),
        ({"fail_every": 1, "fail_status": 429}, "rate_limited"),
        ({"fail_every": 1, "fail_status": 400}, "client_error"),
        ({"disconnect_every": 1}, "connection_reset"),
        ({"error_midstream_every": 1}, "server_error"),
        ({"error_midstream_every": 1, "error_midstream_code": 429}, "rate_limited"),
        ({"truncate_every": 1}, "truncated"),
        ({"truncate_every": 1, "close_framing": True}, "truncated"),
        ({"truncate_every": 1, "truncate_at": 0}, "truncated"),
        ({"malformed_every": 1, "malformed_kind": "garbage_line"}, "malformed_event"),
        ({"malformed_every": 1, "malformed_kind": "invalid_json"}, "malformed_event"),
        ({"malformed_every": 1, "malformed_kind": "truncated_json"}, "malformed_event"),
        ({"malformed_every": 1, "malformed_kind": "non_object"}, "malformed_event"),
        ({"malformed_every": 1, "malformed_kind": "bad_choices"}, "malformed_event"),
        ({"malformed_every": 1, "malformed_kind": "not_sse"}, "malformed_event"),
        ({"redirect_to": "/v1/completions?moved=1"}, "protocol_error"),
        ({"abort_every": 1}, "server_error"),
        ({"abort_every": 1, "abort_reason": "error"}, "server_error"),
    ],
)
def test_every_request_failing_is_a_failed_run(
    scripted: Factory, tmp_path: Path, transport: str, script: dict[str, Any], cls: str
) -> None:
    srv = scripted({"tpot_ms": 1, **script})
    r = run(srv, tmp_path, transport)
    assert r.status == "failed", (r.status, r.summary.errors)
    assert r.failures is not None and r.failures.over
    assert r.failures.classes == {cls: 20}, r.failures
    assert r.summary.completed == 0 and r.summary.failed == 20
    assert r.summary.error_classes == {cls: 20}
    # nothing of a failed request enters the success statistics
    assert r.summary.ttft.count == 0 and r.summary.total_output_tokens == 0
    on_disk = read_run_result(tmp_path)
    assert on_disk.status == "failed" and on_disk.failures == r.failures
    recs = read_records(tmp_path)
    assert {x.error_class for x in recs} == {cls}
    partial = script.get("truncate_at") != 0 and script.get("malformed_kind") != "not_sse"
    if cls in ("truncated", "malformed_event") and partial:
        # the partial timings are kept in the record
        assert all(x.chunk_ns and x.first_ns is not None for x in recs)


@pytest.mark.parametrize("transport", CLIENTS)
def test_a_server_that_never_answers_times_out(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    srv = scripted({"ttft_ms": 5000})
    r = run(srv, tmp_path, transport, num_prompts=6, request_timeout_s=0.3)
    assert r.status == "failed" and r.failures is not None
    assert r.failures.classes == {"timeout": 6}
    assert r.failures.examples["timeout"] == "timeout after 0.3 s"


@pytest.mark.parametrize("transport", CLIENTS)
def test_failures_within_the_threshold_complete_and_above_degrade(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    srv = scripted({"tpot_ms": 1, "truncate_every": 25})
    r = run(srv, tmp_path / "a", transport, num_prompts=50)
    assert r.failures is not None and r.failures.failed == 2
    assert r.status == "complete"  # 4% <= 5%
    assert r.summary.completed == 48
    r = run(srv, tmp_path / "b", transport, num_prompts=50, max_failure_rate=0.01)
    assert r.status == "degraded", r.failures
    assert "above the 1% allowed" in r.failures.verdict


@pytest.mark.parametrize("transport", CLIENTS)
def test_outputs_shorter_than_asked_are_counted(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    srv = scripted({"tpot_ms": 1, "short_output_every": 2})
    r = run(srv, tmp_path, transport)
    assert r.status == "complete" and r.summary.completed == 20
    assert r.summary.short_outputs == 10
    assert r.summary.short_output_tokens == 10 * 6  # each stopped at 6 of 12
    assert not r.config.ignore_eos  # vLLM's default
    assert not any("shorter than asked" in w for w in r.warnings)
    r = run(srv, tmp_path / "eos", transport, ignore_eos=True)
    assert any("shorter than asked although ignore_eos" in w for w in r.warnings)


def test_cli_exits_non_zero_and_names_the_failures(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"fail_every": 1, "fail_status": 429})
    p = run_cli(
        "bench",
        "--base-url",
        srv.base_url,
        "--num-prompts",
        "10",
        "--request-rate",
        "50",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--no-progress",
        "--no-metrics",
        "--result-dir",
        str(tmp_path),
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "rate_limited" in p.stdout and "failed" in p.stdout
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "failed"
    assert data["failures"]["classes"] == {"rate_limited": 10}


def test_cli_degraded_run_exits_1_and_a_lenient_threshold_exits_0(
    scripted: Factory, tmp_path: Path
) -> None:
    srv = scripted({"fail_every": 4})
    common = [
        "bench",
        "--base-url",
        srv.base_url,
        "--num-prompts",
        "20",
        "--request-rate",
        "100",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--no-progress",
        "--no-metrics",
    ]
    p = run_cli(*common, "--result-dir", str(tmp_path / "a"))
    assert p.returncode == 1, p.stderr
    assert json.loads((tmp_path / "a" / "run.json").read_text())["status"] == "degraded"
    p = run_cli(*common, "--max-failure-rate", "30%", "--result-dir", str(tmp_path / "b"))
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "b" / "run.json").read_text())["status"] == "complete"


@pytest.mark.parametrize("transport", CLIENTS)
def test_a_server_that_compresses_when_allowed_is_asked_for_plain_bytes(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    """A compressing proxy gzips whatever the request's Accept-Encoding allows (none at all
    allows anything). Neither client decodes a compressed stream (decoding would hold tokens
    back and blur their arrival stamps), so both must ask for ``identity``: aiohttp's own
    default (``gzip, deflate``) turned every request of such a server into a malformed one."""
    srv = scripted({"tpot_ms": 1, "gzip": True})
    r = run(srv, tmp_path, transport)
    assert r.status == "complete", r.failures
    assert r.summary.completed == 20 and r.summary.total_output_tokens == 20 * 12


def _word_tokenizer(d: Path, filler: int = 0) -> Path:
    """One token per whitespace-separated word, as the scripted server counts them;
    ``filler`` more words make the vocabulary (and its loading time) as large as a real one."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = [f"w{i}" for i in range(64)] + [f"x{i}" for i in range(64 + filler)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    return d


@pytest.mark.parametrize("transport", CLIENTS)
def test_a_server_without_usage_is_counted_by_the_tokenizer_or_said(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    """A server that sends no usage, 4 tokens a chunk: counting chunks gives a quarter of the
    tokens and 4× the TPOT. With --tokenizer the text is counted (as the docs say, and as
    vLLM's bench does); without one the run says its counts are chunks."""
    srv = scripted({"tpot_ms": 1, "send_usage": False, "tokens_per_chunk": 4})
    r = run(srv, tmp_path / "chunks", transport)
    assert r.status == "complete" and r.summary.tokens_source == {"chunks": 20}
    assert r.summary.total_output_tokens == 20 * 3  # 12 tokens in 3 chunks each
    assert any("carried no usage" in w and "--tokenizer" in w for w in r.warnings), r.warnings
    tok = _word_tokenizer(tmp_path / "tok")
    r = run(srv, tmp_path / "counted", transport, tokenizer=str(tok), workers=2)
    assert r.status == "complete" and r.summary.tokens_source == {"tokenizer": 20}
    assert r.summary.total_output_tokens == 20 * 12
    assert not any("carried no usage" in w for w in r.warnings), r.warnings


@pytest.mark.parametrize("transport", CLIENTS)
def test_a_usage_of_zero_tokens_beside_generated_text_is_not_believed(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    """A proxy that fills usage with zeros: 12 tokens streamed, usage says 0. Believed, the
    run had no output tokens, no TPOT, and (with --ignore-eos) every output "short". Like
    vLLM's bench (``if not output_len:``), the tokens are counted otherwise."""
    srv = scripted({"tpot_ms": 1, "zero_usage": True})
    r = run(srv, tmp_path, transport, ignore_eos=True)
    assert r.status == "complete" and r.summary.tokens_source == {"chunks": 20}
    assert r.summary.total_output_tokens == 20 * 12 and r.summary.tpot.count == 20
    assert r.summary.short_outputs == 0


def test_the_tokenizer_is_loaded_before_the_start_clock(
    scripted: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a tokenizer takes a while (a 150k vocabulary: ~1 s here; this one's 40k a
    fraction of it, beyond the start clock's margin): loaded after the start clock is set, it
    would make the first sends late, as if the client fell behind."""
    import time

    from servetune.loadgen import runner

    loaded: list[int] = []
    real = runner.HFTokenizer

    class Timed(real):  # type: ignore[misc,valid-type]
        def __init__(self, path: str) -> None:
            super().__init__(path)
            loaded.append(time.perf_counter_ns())

    monkeypatch.setattr(runner, "HFTokenizer", Timed)
    srv = scripted({"tpot_ms": 1, "send_usage": False})
    tok = _word_tokenizer(tmp_path / "tok", filler=40_000)
    r = run(srv, tmp_path / "run", "fast", tokenizer=str(tok), workers=1)
    assert r.summary.tokens_source == {"tokenizer": 20}
    assert loaded and r.environment.clock_t0_ns is not None
    assert max(loaded) < r.environment.clock_t0_ns, (loaded, r.environment.clock_t0_ns)
