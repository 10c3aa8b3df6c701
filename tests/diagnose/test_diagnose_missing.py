"""Missing metrics give "cannot tell" with the reason, never a wrong verdict; measurement
problems (client behind, failures, out of memory) are named before anything else."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servetune.diagnose import Diagnosis, diagnose_path
from servetune.results.io import REQUESTS_FILE, RUN_FILE, SERVER_METRICS_FILE

ScenarioDir = Callable[[str], Path]


def _copy(scenario_dir: ScenarioDir, name: str, dest: Path) -> Path:
    out = dest / name
    shutil.copytree(scenario_dir(name), out)
    return out


def _edit_series(run_dir: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    path = run_dir / SERVER_METRICS_FILE
    lines = []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        fn(obj)
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n")


def _edit_run(run_dir: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    path = run_dir / RUN_FILE
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _drop(*concepts: str) -> Callable[[dict[str, Any]], None]:
    def fn(obj: dict[str, Any]) -> None:
        for c in concepts:
            obj["values"].pop(c, None)

    return fn


def _real_server(data: dict[str, Any]) -> None:
    """What a bench against a real vLLM records: no simulated engine config."""
    data["target"]["simulated"] = None


def _kinds(diag: Diagnosis) -> dict[str, str]:
    return {f.rule: f.kind for f in diag.findings}


def test_no_server_metrics_means_cannot_tell_not_a_wrong_verdict(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    full = _copy(scenario_dir, "kv_pool_full", tmp_path)
    (full / SERVER_METRICS_FILE).unlink()
    diag = diagnose_path(full)
    f = diag.finding("kv_pool_full")
    assert f is not None and f.kind == "cannot_tell"
    assert any("server metrics were not scraped" in m for m in f.missing)
    assert "cannot tell" in f.title
    assert not f.actions
    assert "KV pool is full" not in diag.headline
    assert diag.missing["kv_mean"].startswith("server metrics were not scraped")
    # what the client alone shows still stands
    over = _copy(scenario_dir, "overloaded", tmp_path)
    (over / SERVER_METRICS_FILE).unlink()
    kinds = _kinds(diagnose_path(over))
    assert kinds["overloaded"] == "bottleneck"
    assert kinds["kv_pool_full"] == "cannot_tell"


def test_kv_usage_not_exposed_is_said_in_those_words(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "kv_pool_full", tmp_path)
    _edit_series(d, _drop("kv_cache_usage", "preemptions_total"))
    diag = diagnose_path(d)
    f = diag.finding("kv_pool_full")
    assert f is not None and f.kind == "cannot_tell"
    assert "KV usage not exposed by this server" in f.missing
    assert any("preemptions not exposed by this server" in m for m in f.missing)


def test_preemptions_alone_still_prove_a_full_pool_with_the_gap_said(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    """vLLM preempts only when no KV block is free: the counter is evidence on its own; the
    finding says it could not see the KV gauge and lowers its confidence."""
    d = _copy(scenario_dir, "kv_pool_full", tmp_path)
    _edit_series(d, _drop("kv_cache_usage"))
    f = diagnose_path(d).finding("kv_pool_full")
    assert f is not None and f.kind == "bottleneck"
    assert f.confidence == "medium"
    assert "KV usage not exposed by this server" in f.missing
    assert any(c.startswith("?") for c in f.conditions)


def test_under_load_without_gpu_utilisation_or_model_is_cannot_tell(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "under_loaded", tmp_path)
    _edit_run(d, _real_server)
    diag = diagnose_path(d)
    f = diag.finding("under_loaded")
    assert f is not None and f.kind == "cannot_tell"
    assert "GPU utilisation not measured (pass --dcgm-url or run on the GPU host)" in f.missing
    assert "memory is not the limit" in f.title
    assert diag.rules_fired() == []
    # the fallback: with the GPU and model named, the compute load is estimated
    named = diagnose_path(d, gpu="A100-80GB", model="Qwen2.5-7B-Instruct")
    g = named.finding("under_loaded")
    assert g is not None and g.kind == "bottleneck" and g.confidence == "medium"
    assert "GPU utilisation not measured" in " ".join(g.missing)


def test_measured_gpu_utilisation_decides_under_load(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    def util(value: float) -> Callable[[dict[str, Any]], None]:
        def fn(obj: dict[str, Any]) -> None:
            obj["values"]["gpu_utilization"] = value

        return fn

    low = _copy(scenario_dir, "under_loaded", tmp_path / "low")
    _edit_run(low, _real_server)
    _edit_series(low, util(0.2))
    f = diagnose_path(low).finding("under_loaded")
    assert f is not None and f.kind == "bottleneck"
    assert any("GPU utilisation 20%" in e for e in f.evidence)

    busy = _copy(scenario_dir, "under_loaded", tmp_path / "busy")
    _edit_run(busy, _real_server)
    _edit_series(busy, util(0.95))
    assert diagnose_path(busy).finding("under_loaded") is None


def test_a_capped_batch_without_compute_figures_is_an_experiment_not_a_verdict(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    """A real server with no GPU utilisation and no GPU/model, started with --max-num-seqs 16
    (given by --server-cmd): the cap's binding is shown, whether raising it would help is not
    claimed; the finding offers the experiment."""
    d = _copy(scenario_dir, "batch_capped", tmp_path)
    _edit_run(d, _real_server)
    diag = diagnose_path(d, server_cmd="vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 16")
    f = diag.finding("batch_capped")
    assert f is not None and f.kind == "cannot_tell"
    assert "sit at their cap (16)" in f.title
    assert "GPU utilisation not measured" in f.title
    assert f.actions[0].id == "try_max_num_seqs" and f.actions[0].to_value == 32
    over = diag.finding("overloaded")
    assert over is not None and over.cause is not None
    assert "--max-num-seqs cap (16)" in over.cause and "cannot be told" in over.cause
    assert "raise_max_num_seqs" not in {a.id for g in diag.findings for a in g.actions}


def test_a_cap_is_never_read_off_a_runs_peak(scenario_dir: ScenarioDir, tmp_path: Path) -> None:
    """Issue 11 item 8: the server's --max-num-seqs was not known and the run's running
    requests peaked at 16 — no advice may treat 16 as the cap ("raise --max-num-seqs → 32")."""
    d = _copy(scenario_dir, "batch_capped", tmp_path)
    _edit_run(d, _real_server)
    diag = diagnose_path(d)
    f = diag.finding("batch_capped")
    assert f is not None and f.kind == "cannot_tell"
    assert "--max-num-seqs is unknown" in f.title and "16" in f.title
    for g in diag.findings:
        for a in g.actions:
            if a.knob == "max_num_seqs":
                assert a.to_value is None and a.from_value is None, a.title
                assert "32" not in a.title
    over = diag.finding("overloaded")
    assert over is not None and over.cause is not None
    assert "peaked at 16" in over.cause and "unknown" in over.cause


def test_no_request_records_means_the_growth_cannot_be_told(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "overloaded", tmp_path)
    (d / REQUESTS_FILE).unlink()
    f = diagnose_path(d).finding("overloaded")
    assert f is not None and f.kind == "cannot_tell"
    assert any("requests.jsonl is missing" in m for m in f.missing)


def test_malformed_request_records_are_said_not_called_missing(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    """A requests.jsonl that is there but damaged is named with the line that is wrong (it
    was reported as "requests.jsonl is missing")."""
    d = _copy(scenario_dir, "overloaded", tmp_path)
    (d / REQUESTS_FILE).write_text('{"foo": 1}\n{"foo": 1}\n')
    diag = diagnose_path(d)
    f = diag.finding("overloaded")
    assert f is not None and f.kind == "cannot_tell"
    assert not any("is missing" in m for m in f.missing)
    assert any("requests.jsonl:1: not a request record" in m for m in f.missing)
    assert any("requests.jsonl could not be read" in n for n in diag.notes)


def test_unreadable_server_metrics_do_not_break_the_diagnosis(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "kv_pool_full", tmp_path)
    (d / SERVER_METRICS_FILE).write_text('{"t": 0, "values": {"kv_cache_usage": "x"}}\n')
    diag = diagnose_path(d)
    f = diag.finding("kv_pool_full")
    assert f is not None and f.kind == "cannot_tell"
    assert any("could not be read" in m for m in f.missing)
    assert any("could not be read" in n for n in diag.notes)


def test_unknown_engine_config_is_noted_not_assumed(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "prefill_blocked", tmp_path)
    _edit_run(d, _real_server)
    f = diagnose_path(d).finding("prefill_blocked")
    assert f is not None and f.kind == "bottleneck" and f.confidence == "medium"
    assert any("engine configuration is unknown" in m for m in f.missing)
    # the knob's current value is not invented
    first = f.actions[0]
    assert first.from_value is None
    # told the command line, it quotes the old value
    told = diagnose_path(
        d,
        server_cmd="vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 16384 "
        "--max-num-batched-tokens 16384 --no-enable-chunked-prefill",
        gpu="A100-80GB",
    ).finding("prefill_blocked")
    assert told is not None and told.confidence == "high"
    assert told.actions[0].from_value is False
    assert "was --no-enable-chunked-prefill" in told.actions[0].flags["vllm"]


# --- measurement problems ------------------------------------------------------------------


def test_a_client_that_fell_behind_is_named_first(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "kv_pool_full", tmp_path)

    def behind(data: dict[str, Any]) -> None:
        data["client_health"]["behind"] = True
        data["client_health"]["send_lag"]["p99"] = 48.0

    _edit_run(d, behind)
    diag = diagnose_path(d)
    assert diag.findings[0].rule == "client_behind"
    assert diag.findings[0].actions[0].id == "fix_client"
    kv = diag.finding("kv_pool_full")
    assert kv is not None and kv.confidence == "low"
    assert diagnose_path(scenario_dir("kv_pool_full")).finding("client_behind") is None


def test_a_client_behind_is_shown_by_what_it_sent_not_by_what_succeeded(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    """The evidence that the client fell behind is its own: the rate it planned and the rate
    it sent. The server's success throughput is lower for other reasons too (failures, the
    window), so "offered 5, served 4.09" read as the client's lateness when a third of the
    requests had failed."""
    d = _copy(scenario_dir, "kv_pool_full", tmp_path)

    def behind(data: dict[str, Any]) -> None:
        data["client_health"]["behind"] = True
        data["client_health"]["send_lag"]["p99"] = 48.0
        data["client_health"]["planned_rate"] = 31.5
        data["client_health"]["achieved_rate"] = 27.25

    _edit_run(d, behind)
    top = diagnose_path(d).findings[0]
    assert top.rule == "client_behind"
    assert any("planned 31.5 req/s, sent 27.2" in e for e in top.evidence), top.evidence
    assert not any("served" in e for e in top.evidence), top.evidence


def _with_errors(errors: dict[str, int], failed: int) -> Callable[[dict[str, Any]], None]:
    def fn(data: dict[str, Any]) -> None:
        data["summary"]["errors"] = errors
        data["summary"]["failed"] = failed

    return fn


def test_out_of_memory_errors_advise_a_smaller_budget(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "healthy", tmp_path)
    _edit_run(
        d,
        _with_errors({"HTTP 500: CUDA out of memory. Tried to allocate 2.00 GiB": 12}, failed=12),
    )
    diag = diagnose_path(d)
    f = diag.findings[0]
    assert f.rule == "oom" and f.kind == "warning"
    first = f.actions[0]
    assert first.knob == "gpu_memory_utilization"
    assert (first.from_value, first.to_value) == (0.9, 0.85)
    assert [a.knob for a in f.actions][:2] == ["gpu_memory_utilization", "max_model_len"]
    assert diag.finding("failures") is None  # the cause is named, not the symptom twice
    assert diagnose_path(scenario_dir("healthy")).finding("oom") is None


def test_a_server_that_stops_answering_is_a_warning(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    d = _copy(scenario_dir, "healthy", tmp_path)
    _edit_run(d, _with_errors({"connection refused": 40}, failed=40))
    diag = diagnose_path(d)
    assert diag.findings[0].rule == "server_gone"
    assert not diag.healthy


def test_many_failures_qualify_the_latencies(scenario_dir: ScenarioDir, tmp_path: Path) -> None:
    d = _copy(scenario_dir, "healthy", tmp_path)
    _edit_run(d, _with_errors({"HTTP 400: prompt too long": 40}, failed=40))
    diag = diagnose_path(d)
    f = diag.finding("failures")
    assert f is not None and f.kind == "warning"
    assert "failed" in f.title
    assert diagnose_path(scenario_dir("healthy")).finding("failures") is None


def test_a_real_servers_pool_size_comes_from_its_own_metrics(
    scenario_dir: ScenarioDir, tmp_path: Path
) -> None:
    """vllm:cache_config_info, recorded by the scraper, gives the KV pool size without
    --server-cmd; a --server-cmd without the GPU (no memory plan) does not hide it."""
    d = _copy(scenario_dir, "kv_pool_full", tmp_path)
    _edit_run(d, _real_server)
    summary = json.loads((d / RUN_FILE).read_text())["server"]["summary"]
    pool = summary["kv_cache_blocks"] * summary["kv_block_size"]
    assert summary["kv_cache_tokens"] == pool
    assert diagnose_path(d).figures["kv_pool_tokens"] == pool
    cmd = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.3"
    with_config = diagnose_path(d, server_cmd=cmd)
    assert with_config.knobs["max_model_len"] == 8192
    assert with_config.figures["kv_pool_tokens"] == pool
    f = with_config.finding("kv_pool_full")
    assert f is not None and any(f"{pool:,} tokens" in e for e in f.evidence), f.evidence

    def unsaid(data: dict[str, Any]) -> None:
        del data["server"]["summary"]["kv_cache_tokens"]

    _edit_run(d, unsaid)
    assert "kv_pool_tokens" in diagnose_path(d, server_cmd=cmd).missing
