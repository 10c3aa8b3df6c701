"""What a session costs the client: sessions against plain requests, side by side in one run.

Against the scripted server (a real process; ``ttft_ms`` 20, ``tpot_ms`` 1, 32 tokens an
answer), the same request rate is offered two ways, alternating rounds:

  plain     random prompts (system + one message long), open loop at R req/s
  sessions  ``--dataset-name multiturn``: R / T sessions/s of T turns, no think time — each
            turn's body is built when the answer before it ends (the conversation so far, the
            answer as returned, the session header), its prompt growing turn by turn

For each it prints the client's CPU per request (every process), p99 send lag (for a later
turn: send − the previous answer's end) and the achieved request rate; then the ratio of CPU
per request. A session's later turn costs more to build than a pre-built body (its prompt is
the whole conversation): this measures by how much at these lengths.

    .venv/bin/python benchmarks/session_client.py [--rate 200] [--turns 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from servetune.loadgen.bench import bench
from servetune.results.conversation import MultiturnConfig
from servetune.results.schema import BenchConfig


def _server() -> tuple[subprocess.Popen[str], int]:
    script = {"ttft_ms": 20, "tpot_ms": 1}
    proc = subprocess.Popen(
        [sys.executable, "-m", "servetune.testserver", "--port", "0", "--script",
         json.dumps(script)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"scripted server did not start: {line}")
    return proc, int(line.split()[1])


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def one(url: str, kind: str, rate: float, turns: int, seconds: float) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        base_url=url, random_output_len=32, ignore_eos=True, seed=7, request_timeout_s=60.0
    )
    if kind == "plain":
        n = int(rate * seconds)
        cfg = BenchConfig(**base, random_input_len=400, num_prompts=n, request_rate=rate, workers=1)
    else:
        n = int(rate / turns * seconds)
        cfg = BenchConfig(
            **base,
            dataset_name="multiturn",
            multiturn=MultiturnConfig(turns_min=turns, turns_max=turns, system_prompt_len=300),
            random_input_len=100,
            num_prompts=n,
            request_rate=rate / turns,
            workers=1,
        )
    with tempfile.TemporaryDirectory() as d:
        run = bench(cfg, Path(d) / "run", progress=False, scrape_metrics=False)
    h = run.client_health
    return {
        "cpu_ms": h.cpu_per_request_ms or float("nan"),
        "lag_p99": h.send_lag.p99 or 0.0,
        "achieved": h.achieved_rate or 0.0,
        "completed": run.summary.completed,
        "mean_in": run.summary.input_tokens_per_request.mean or 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200.0, help="requests/s offered")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    proc, port = _server()
    url = f"http://127.0.0.1:{port}/v1"
    print(f"session client cost, {args.rate:g} req/s offered, {args.turns} turns; {_load()}")
    got: dict[str, list[dict[str, Any]]] = {"plain": [], "sessions": []}
    try:
        for i in range(args.rounds):
            for kind in ("plain", "sessions") if i % 2 == 0 else ("sessions", "plain"):
                r = one(url, kind, args.rate, args.turns, args.seconds)
                got[kind].append(r)
                print(
                    f"  round {i + 1} {kind:9s} cpu/req {r['cpu_ms']:.3f} ms  send lag p99 "
                    f"{r['lag_p99']:.2f} ms  achieved {r['achieved']:.1f} req/s  "
                    f"{r['completed']} requests, mean prompt {r['mean_in']:.0f} tokens  [{_load()}]"
                )
    finally:
        proc.terminate()
        proc.wait(10)
    med = {k: statistics.median(x["cpu_ms"] for x in v) for k, v in got.items()}
    lag = {k: statistics.median(x["lag_p99"] for x in v) for k, v in got.items()}
    print(
        f"median CPU per request: plain {med['plain']:.3f} ms, sessions {med['sessions']:.3f} "
        f"ms: ratio sessions/plain {med['sessions'] / med['plain']:.2f}x; median p99 send lag "
        f"{lag['plain']:.2f} vs {lag['sessions']:.2f} ms; {_load()}"
    )


if __name__ == "__main__":
    main()
