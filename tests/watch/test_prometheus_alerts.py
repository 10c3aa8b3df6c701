"""A real Prometheus scraping two simulated engines under load — one whose KV pool fills, one
healthy — with the rules of `servetune export prometheus-rules`: the KV-full and the
past-capacity alerts fire for the first (5 req/s offered, ~2.2 completed) and neither ever
for the second. The rules hold for 5 s (`for:` and `keep_firing_for:`, as a watch finding)."""

from __future__ import annotations

import time
from pathlib import Path

from watch_fixtures import (
    HEALTHY,
    HEALTHY_LOAD,
    KV_FULL,
    KV_FULL_LOAD,
    load,
    prometheus,
    sim_server,
)

from servetune.cli import main

WAIT_S = 120.0


WANTED = {"ServetuneKvPoolFull", "ServetuneOverloaded"}


def test_kv_full_and_overload_alerts_fire_only_where_the_pool_is_full(
    tmp_path: Path, needs_prometheus: None
) -> None:
    rules = tmp_path / "rules.yml"
    args = ["export", "prometheus-rules", "--engine", "vllm", "--window", "20s",
            "--resolution", "1s", "--for", "5s", "-o", str(rules)]  # fmt: skip
    assert main(args) == 0
    with sim_server(KV_FULL) as full, sim_server(HEALTHY) as ok:
        targets = [f"127.0.0.1:{full.port}", f"127.0.0.1:{ok.port}"]
        with (
            prometheus(tmp_path, targets, rules) as prom,
            load(full.base_url, KV_FULL_LOAD, WAIT_S, tmp_path / "b1"),
            load(ok.base_url, HEALTHY_LOAD, WAIT_S, tmp_path / "b2"),
        ):
            deadline = time.monotonic() + WAIT_S
            firing: dict[str, set[str]] = {}
            healthy_ever: set[str] = set()
            seen_healthy_sample = False
            while time.monotonic() < deadline:
                time.sleep(2)
                firing = {}
                for a in prom.alerts():
                    if a["state"] == "firing":
                        firing.setdefault(a["labels"]["instance"], set()).add(
                            a["labels"]["alertname"]
                        )
                healthy_ever |= firing.get(targets[1], set())
                up = prom.get("/api/v1/query?query=up")["data"]["result"]
                seen_healthy_sample = any(r["metric"]["instance"] == targets[1] for r in up)
                if firing.get(targets[0], set()) >= WANTED:
                    break
            assert firing.get(targets[0], set()) >= WANTED, (
                f"not both of {WANTED} within {WAIT_S:g} s; firing: {firing}; "
                f"prometheus log: {prom.log.read_text()[-500:]}"
            )
            rules_loaded = prom.get("/api/v1/rules")["data"]["groups"][0]["rules"]
            assert all(r["duration"] == 5 and r["keepFiringFor"] == 5 for r in rules_loaded)
            assert seen_healthy_sample
            assert not healthy_ever & WANTED, healthy_ever
            # the healthy server was really scraped and really served traffic
            q = "sum by (instance) (increase(vllm:request_success_total[30s]))"
            res = prom.get("/api/v1/query?query=" + _quote(q))["data"]["result"]
            served = {r["metric"]["instance"]: float(r["value"][1]) for r in res}
            assert served.get(targets[1], 0) > 0, served


def _quote(q: str) -> str:
    import urllib.parse

    return urllib.parse.quote(q)
