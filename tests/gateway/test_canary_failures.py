"""The canary sees every failure the candidate caused, and charges each to the upstream that
caused it: a 5xx the gateway retried successfully, a reset before the head, a first-byte
timeout (each retried), an error event, a ``finish_reason: error`` or a truncation inside a
200 stream, a reset mid-stream. Before, the retried ones and those inside a 200 were not
counted at all ("errors +0.000"), and a candidate failing 5 % was promoted.

Two levels: the observations the gateway hands the canary (every failure, exactly, and none
charged to the baseline), and whole rollouts on live traffic (the scripted server failing every
20th request, 5 %, in each way, is rolled back; an equal candidate is promoted, three times)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from harness import client, gateway_config, running, url

from servetune.gateway.app import Gateway
from servetune.gateway.canary import Observation
from servetune.gateway.keys import hash_key, new_key
from servetune.gateway.rollout import RolloutState
from servetune.testserver.script import Script
from servetune.testserver.server import ScriptedServer

MODEL = "scripted-model"
FAULTS: dict[str, dict[str, Any]] = {
    "retried_500": {"fail_every": 20},
    "reset_before_head": {"reset_before_head_every": 20},
    "first_byte_timeout": {"stall_head_every": 20, "stall_head_ms": 1500},
    "error_event": {"error_midstream_every": 20},
    "finish_reason_error": {"abort_every": 20, "abort_reason": "error"},
    "truncated": {"truncate_every": 20},
    "reset_midstream": {"disconnect_every": 20},
}
RETRIED = {"retried_500", "reset_before_head", "first_byte_timeout"}
PACE = {"ttft_ms": 5.0, "tpot_ms": 1.0}


async def _load(gw_url: str, n: int, concurrency: int) -> list[int]:
    statuses: list[int] = []
    body = {"model": MODEL, "prompt": "one two three", "max_tokens": 8, "stream": True}
    left = iter(range(n))
    async with client() as s:

        async def worker() -> None:
            for _ in left:
                async with s.post(gw_url, json=body) as r:
                    await r.read()
                    statuses.append(r.status)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


@pytest.mark.parametrize("kind", list(FAULTS))
def test_every_failure_of_the_candidate_is_its_error(kind: str, tmp_path: Path) -> None:
    async def main() -> tuple[list[Observation], list[int], int, Gateway]:
        base = ScriptedServer(Script(model=MODEL, **PACE))
        cand = ScriptedServer(Script(model=MODEL, **PACE, **FAULTS[kind]))
        bport, cport = await base.start(), await cand.start()
        cfg = gateway_config(
            tmp_path,
            retries=2,
            breaker={"failures": 1000},
            timeouts={"first_byte_s": 0.4},
            groups=[{"name": "baseline", "urls": [f"http://127.0.0.1:{bport}/v1"]},
                    {"name": "candidate", "urls": [f"http://127.0.0.1:{cport}/v1"],
                     "weight": 100}],
        )  # fmt: skip
        seen: list[Observation] = []
        try:
            async with running(cfg) as gw:
                gw.canary_step = lambda: 0  # as a rollout's first step does
                gw.observe = seen.append
                statuses = await _load(url(gw), 200, 4)
            return seen, statuses, cand.counters.requests, gw
        finally:
            await base.close()
            await cand.close()

    seen, statuses, cand_requests, gw = asyncio.run(main())
    injected = cand_requests // 20
    assert injected >= 4, cand_requests
    cand_err = sum(o.error for o in seen if o.group == "candidate")
    base_err = sum(o.error for o in seen if o.group == "baseline")
    assert base_err == 0
    assert cand_err == injected, (kind, cand_err, injected, gw.metrics.failures)
    if kind in RETRIED:
        # the client never saw them (retried on the same candidate upstream, its only one):
        # what the gateway hid from the client it must not hide from the canary
        assert statuses.count(200) == len(statuses)
    # one observation per try: the failed tries and every answer
    assert sum(o.group == "candidate" for o in seen) == cand_requests


def _rollout(tmp: Path, cand_script: dict[str, Any]) -> tuple[RolloutState, float]:
    admin = new_key()

    async def main() -> tuple[RolloutState, float]:
        base = ScriptedServer(Script(model=MODEL, **PACE))
        cand = ScriptedServer(Script(model=MODEL, **PACE, **cand_script))
        bport, cport = await base.start(), await cand.start()
        cfg = gateway_config(
            tmp,
            admin_keys=[hash_key(admin)],
            auth="off",  # an open data path on purpose: the test drives the admin API
            retries=2,
            breaker={"failures": 1000},
            timeouts={"first_byte_s": 0.4},
            groups=[{"name": "baseline", "urls": [f"http://127.0.0.1:{bport}/v1"]},
                    {"name": "candidate", "urls": [f"http://127.0.0.1:{cport}/v1"],
                     "weight": 0}],
            canary={"min_requests": 300, "min_batches": 10, "batch_size": 5,
                    "tolerance": 0.2, "max_step_s": 100, "tail_quantile": None},
        )  # fmt: skip
        headers = {"Authorization": f"Bearer {admin}"}
        try:
            async with running(cfg) as gw:
                stop = asyncio.Event()

                async def drive() -> None:
                    body = {"model": MODEL, "prompt": "one two", "max_tokens": 8, "stream": True}
                    async with client() as s:

                        async def worker() -> None:
                            while not stop.is_set():
                                async with s.post(url(gw), json=body) as r:
                                    await r.read()

                        await asyncio.gather(*(worker() for _ in range(12)))

                load = asyncio.create_task(drive())
                t0 = time.monotonic()
                try:
                    async with client() as s:
                        r = await s.post(
                            url(gw, "/admin/rollout"),
                            json={"candidate": "candidate", "steps": [50, 100]},
                            headers=headers,
                        )
                        assert r.status == 202, await r.text()
                        while time.monotonic() - t0 < 150:
                            await asyncio.sleep(0.25)
                            r = await s.get(url(gw, "/admin/rollout"), headers=headers)
                            st = RolloutState.model_validate_json(await r.read())
                            if st.done:
                                return st, time.monotonic() - t0
                        raise AssertionError("the rollout did not end within 150 s")
                finally:
                    stop.set()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(load, 30)
        finally:
            await base.close()
            await cand.close()

    return asyncio.run(main())


@pytest.mark.parametrize("run", range(2))
@pytest.mark.parametrize("kind", list(FAULTS))
def test_a_candidate_failing_5_percent_is_rolled_back(kind: str, run: int, tmp_path: Path) -> None:
    st, took = _rollout(tmp_path, FAULTS[kind])
    assert st.status == "rolled_back", (kind, st.reason, took)
    assert "errors" in st.reason, st.reason
    assert st.evidence is not None
    cand = st.evidence["candidate"]
    assert 0.02 < cand["errors"] / cand["requests"] < 0.10, cand


@pytest.mark.parametrize("run", range(3))
def test_an_equal_candidate_is_still_promoted(run: int, tmp_path: Path) -> None:
    st, took = _rollout(tmp_path, {})
    assert st.status == "promoted", (st.reason, took)
