"""`servetune export`: the rules pass the real promtool, and every query names only metrics
the engine exports (captured /metrics pages of each engine, and the simulated engine live)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.diagnose.knobs import KnownConfig
from servetune.profiles import metric_map_names
from servetune.watch.alerts import alert_rules
from servetune.watch.grafana import dashboard
from servetune.watch.promql import Promql, exposed_names, find_map, metric_names

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"
CAPTURES = {
    "vllm": "vllm_cpu_0.32_capture.txt",
    "vllm-0.8-v0": "vllm_0.8_v0.txt",
    "sglang": "sglang_recent.txt",
    "sglang-2024": "sglang_2024.txt",
    "tgi": "tgi.txt",
    "llama.cpp": "llamacpp_b11434.txt",
    "llama.cpp-old": "llamacpp_old.txt",
    "trtllm": "trtllm_collector.txt",
}
KNOWN = KnownConfig(
    source="test",
    gpu="A100-80GB",
    model="Qwen/Qwen2.5-7B-Instruct",
    values={"max_num_seqs": 256, "enable_chunked_prefill": True},
)


def _all_exprs(q: Promql) -> list[str]:
    exprs = [t["expr"] for p in dashboard(q)["panels"] for t in p["targets"]]
    for g in alert_rules(q).groups:
        exprs += [r["expr"] for r in g["rules"]]
    return exprs


@pytest.mark.parametrize("engine", sorted(CAPTURES))
def test_queries_name_only_exported_metrics(engine: str) -> None:
    exported = exposed_names((DATA / CAPTURES[engine]).read_text())
    emap, absent = find_map(engine)
    q = Promql(emap, window_s=60, step_s=5, known=KNOWN, absent=absent)
    used = set().union(*(metric_names(e) for e in _all_exprs(q))) - {"up"}
    assert used, engine
    missing = used - exported
    assert not missing, f"{engine}: queries name {sorted(missing)}, not on its /metrics page"


def test_kv_full_rule_and_its_thresholds_come_from_diagnose() -> None:
    from servetune.diagnose.rules import FREQUENT_PREEMPTIONS, FULL_P95, FULL_SHARE, MIN_PREEMPTIONS

    emap, _ = find_map("vllm")
    rules = alert_rules(Promql(emap, window_s=120, step_s=15)).groups[0]["rules"]
    kv = next(r for r in rules if r["labels"]["servetune_rule"] == "kv_pool_full")
    e = kv["expr"]
    assert "vllm:kv_cache_usage_perc" in e and "vllm:num_preemptions_total" in e
    for v in (FULL_SHARE, FULL_P95, FREQUENT_PREEMPTIONS, MIN_PREEMPTIONS):
        assert f" {v:g}" in e
    assert "[2m:15s]" in e and kv["for"] == "1m"
    assert kv["labels"]["severity"] == "critical"
    assert "--kv-cache-dtype fp8" in kv["annotations"]["actions"]


@pytest.mark.parametrize("engine", sorted(metric_map_names()))
def test_promtool_accepts_the_rules(engine: str, tmp_path: Path, needs_prometheus: None) -> None:
    out = tmp_path / "rules.yml"
    args = ["export", "prometheus-rules", "--engine", engine, "-o", str(out),
            "--server-cmd", "vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 256",
            "--gpu", "A100-80GB"]  # fmt: skip
    assert main(args) == 0
    done = subprocess.run(
        [shutil.which("promtool") or "promtool", "check", "rules", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_rules_left_out_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "prometheus-rules", "--engine", "vllm"]) == 0
    out = capsys.readouterr().out
    # without --server-cmd and --gpu/--model: the batch-cap and idle-GPU rows cannot be alerts
    assert "# not an alert here: batch_capped" in out
    assert "# not an alert here: under_loaded" in out
    assert "ServetuneKvPoolFull" in out and "ServetuneOverloaded" in out


def test_grafana_dashboard_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "grafana", "--engine", "vllm"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schemaVersion"] >= 38
    titles = [p["title"] for p in d["panels"]]
    for want in ("Requests finished", "Tokens", "KV-cache use", "Requests running / waiting",
                 "Preemptions", "Prefix-cache hit rate"):  # fmt: skip
        assert want in titles
    assert any(t.startswith("TTFT") for t in titles) and any(t.startswith("TPOT") for t in titles)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        assert p["datasource"]["uid"] == "${datasource}"
        for t in p["targets"]:
            assert 'instance=~"$instance"' in t["expr"]
    names = {v["name"] for v in d["templating"]["list"]}
    assert names == {"datasource", "instance"}


def test_llamacpp_dashboard_leaves_out_what_it_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "grafana", "--engine", "llama.cpp"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "KV-cache use" in d["description"] and "Preemptions" in d["description"]
    assert "KV-cache use" not in [p["title"] for p in d["panels"]]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["export", "grafana", "--engine", "vllm9"], "unknown engine"),
        (["export", "grafana", "--metrics-url", "http://127.0.0.1:9/metrics"], "cannot read"),
        (["export", "prometheus-rules", "--window", "10s", "--resolution", "8s"], "two"),
        (["export", "grafana", "--metrics-url", "ftp://x"], "not an http"),
        # --for nan dropped every rule's `for:` (alerts at once); negative lengths went into
        # the compute estimate
        (["export", "prometheus-rules", "--for", "nan"], "--for ≥ 0"),
        (["export", "prometheus-rules", "--input-len", "-5"], "--input-len must be ≥ 1"),
        (["export", "prometheus-rules", "--output-len", "nan"], "--output-len must be ≥ 1"),
    ],
)
def test_bad_input(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert needle in capsys.readouterr().err


def test_names_from_a_live_simulated_engine(tmp_path: Path) -> None:
    from watch_fixtures import HEALTHY, sim_server

    with sim_server(HEALTHY) as srv:
        out = tmp_path / "d.json"
        url = f"http://127.0.0.1:{srv.port}"
        assert main(["export", "grafana", "--metrics-url", url, "-o", str(out)]) == 0
        text = urllib_get(url + "/metrics")
    exported = exposed_names(text)
    d = json.loads(out.read_text())
    used = set().union(*(metric_names(t["expr"]) for p in d["panels"] for t in p["targets"]))
    assert used and used <= exported


def urllib_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())
