"""watch, export, cost and plan against a real engine: llama.cpp's llama-server (names
discovered from its own /metrics; what it does not export shows as missing, never guessed)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from watch_fixtures import load

from servetune.cli import main
from servetune.engines import (
    EngineKnobs,
    EngineOptions,
    build_command,
    free_port,
    provisioned,
    running,
)
from servetune.watch.promql import exposed_names, metric_names

pytestmark = pytest.mark.real_engine


def test_llama_server_watched_priced_and_planned_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from needs import need

    exe, model = provisioned.llama_server_binary(), provisioned.tiny_model()
    need(
        "llama-server and the test models",
        exe and model,
        "run `bash scripts/provision_engines.sh` (`make test` runs it)",
    )
    assert exe is not None and model is not None
    spec = build_command(
        "llama.cpp",
        model.small_gguf,
        EngineKnobs(max_num_seqs=4, max_model_len=1024),
        EngineOptions(executable=str(exe)),
        port=free_port(),
        served_model_name="tiny",
    )
    run_dir = tmp_path / "run"
    with running(spec, tmp_path / "llama.log", 60.0) as eng:
        url = eng.spec.origin
        args = ["--request-rate", "6", "--random-input-len", "128", "--random-output-len", "32"]
        # 40 s of load (was 25): the watch (12 s) starts only once tokens flow, after the
        # bench's start-up, which a loaded box stretches; its last window must see traffic
        with load(f"{url}/v1", args, 40, run_dir) as proc:
            _wait_for_tokens(url)  # the bench process needs a few seconds to start sending
            args = ["watch", url, "--window", "8", "--interval", "2", "--duration", "12", "--json"]
            code = main(args)
            doc = json.loads(capsys.readouterr().out)
            proc.wait(90)
        assert code == 0
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
            page = r.read().decode()
        out = tmp_path / "dash.json"
        assert main(["export", "grafana", "--metrics-url", url, "-o", str(out)]) == 0
    w = doc["window"]
    assert doc["engine"].startswith("llama.cpp")
    assert w["generation_tokens_per_s"] > 0 and w["running_mean"] is not None
    assert w["kv_cache_usage"] is None  # build 11434 has no KV gauge: missing, not zero
    dash = json.loads(out.read_text())
    used = set().union(*(metric_names(t["expr"]) for p in dash["panels"] for t in p["targets"]))
    assert used and used <= exposed_names(page)
    # the load test's cost, on a GPU it did not run on (a real run records none: --gpu)
    capsys.readouterr()
    assert main(["cost", str(run_dir), "--gpu", "L4", "--json", "--no-write"]) == 0
    cost = json.loads(capsys.readouterr().out)
    lv = cost["levels"][0]
    assert lv["output_tok_s"] > 0 and lv["output_usd_per_mtok"] > 0
    # a capacity plan for the traffic it measured (its lengths and rate)
    assert (
        main(
            [
                "plan",
                "--from-run",
                str(run_dir),
                "--slo",
                "ttft:1000",
                "tpot:80",
                "--gpus",
                "L4",
                "--tp",
                "1",
                "--quantizations",
                "auto",
                "--knob-set",
                "default",
                "--requests-per-point",
                "200",
                "-o",
                str(tmp_path / "p.json"),
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["mean_input_tokens"] == pytest.approx(128, rel=0.3)
    assert plan["peak_rate"] == 6.0 and plan["winner"] is not None


def _wait_for_tokens(url: str, timeout_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:  # a busy llama-server answers /metrics between its batches
            time.sleep(0.5)
            continue
        if text:
            for line in text.splitlines():
                if (
                    line.startswith("llamacpp:tokens_predicted_total")
                    and float(line.split()[-1]) > 0
                ):
                    return
        time.sleep(0.5)
    raise AssertionError(f"the bench sent nothing to {url} within {timeout_s:g} s")
