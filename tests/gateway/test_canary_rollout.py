"""Canary rollouts on live traffic through the gateway: a slower candidate (the simulated
engine with a badly set knob: one sequence at a time) is rolled back by itself; an equal one
is promoted."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from harness import MODEL, client, gateway_config, running, sim, url

from servetune.gateway.audit import read_audit
from servetune.gateway.keys import hash_key, new_key
from servetune.gateway.rollout import RolloutState

PROMPT = " ".join(["the"] * 300)  # a long prompt: prefill matters


async def drive(gw_url: str, stop: asyncio.Event, concurrency: int = 8) -> int:
    sent = 0
    async with client() as s:

        async def worker() -> None:
            nonlocal sent
            body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 12, "stream": True}
            while not stop.is_set():
                async with s.post(gw_url, json=body) as r:
                    await r.read()
                sent += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sent


def rollout(tmp: Path, candidate_knobs: dict[str, object]) -> tuple[RolloutState, list[dict]]:
    base, cand = sim(), sim(**candidate_knobs)
    admin = new_key()
    try:

        async def main() -> RolloutState:
            cfg = gateway_config(
                tmp,
                admin_keys=[hash_key(admin)],
                auth="off",  # an open data path on purpose: the test drives the admin API
                groups=[{"name": "baseline", "urls": [base.base_url]},
                        {"name": "candidate", "urls": [cand.base_url], "weight": 0}],
                canary={"min_requests": 40, "min_batches": 8, "batch_size": 3,
                        "tolerance": 0.2, "max_step_s": 90},
            )  # fmt: skip
            async with running(cfg) as gw:
                stop = asyncio.Event()
                load = asyncio.create_task(drive(url(gw), stop))
                try:
                    async with client() as s:
                        r = await s.post(
                            url(gw, "/admin/rollout"),
                            json={"candidate": "candidate", "steps": [25, 50, 100]},
                            headers={"Authorization": f"Bearer {admin}"},
                        )
                        assert r.status == 202, await r.text()
                        for _ in range(480):
                            await asyncio.sleep(0.5)
                            r = await s.get(
                                url(gw, "/admin/rollout"),
                                headers={"Authorization": f"Bearer {admin}"},
                            )
                            st = RolloutState.model_validate_json(await r.read())
                            if st.done:
                                return st
                        raise AssertionError("the rollout did not decide within 240 s")
                finally:
                    stop.set()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(load, 30)

        st = asyncio.run(main())
        return st, read_audit(tmp / "audit.jsonl")
    finally:
        base.stop()
        cand.stop()


def test_slower_candidate_is_rolled_back_automatically(tmp_path: Path) -> None:
    # one request at a time (--max-num-seqs 1): the seed's "batch too small" config
    st, audit = rollout(tmp_path, {"max_num_seqs": 1})
    assert st.status == "rolled_back", st.reason
    assert st.weights["candidate"] == 0 and st.weights["baseline"] == 100
    assert "worse than tolerated" in st.reason and "ttft" in st.reason
    actions = [a["action"] for a in audit]
    assert actions[0] == "rollout_start" and actions[-1] == "rollback"
    last = audit[-1]
    assert last["old_weights"]["candidate"] > 0 and last["new_weights"]["candidate"] == 0
    assert (
        last["evidence"]["candidate"]["ttft_p50_ms"] > last["evidence"]["baseline"]["ttft_p50_ms"]
    )


def test_equal_candidate_is_promoted(tmp_path: Path) -> None:
    st, audit = rollout(tmp_path, {})
    assert st.status == "promoted", st.reason
    assert st.weights == {"baseline": 0.0, "candidate": 100.0}
    actions = [a["action"] for a in audit]
    assert actions.count("step_passed") == 2 and actions[-1] == "promote"


@pytest.mark.parametrize(
    ("breaker_failures", "why"),
    [(1, "below the minimum sample"), (5, "candidate failing")],
)
def test_a_candidate_that_never_answers_is_not_promoted_on_timeout(
    tmp_path: Path, breaker_failures: int, why: str
) -> None:
    """The candidate refuses connections: its requests fail before any answer, its circuit
    opens and routing goes around it. Those failures are the canary's errors (they were not
    observed at all: 0 candidate requests), and on_timeout=promote does not promote a
    candidate short of its minimum sample (it was promoted to 100 % while down). With its
    circuit open after one failure it fails too few times to tell (rolled back at the step's
    timeout); after five it is plainly failing (rolled back at once)."""
    base = sim()
    admin = new_key()
    try:

        async def main() -> RolloutState:
            cfg = gateway_config(
                tmp_path,
                admin_keys=[hash_key(admin)],
                auth="off",  # an open data path on purpose: the test drives the admin API
                retries=0,
                breaker={"failures": breaker_failures, "cooldown_s": 30},
                groups=[{"name": "baseline", "urls": [base.base_url]},
                        {"name": "candidate", "urls": ["http://127.0.0.1:9/v1"], "weight": 0}],
                canary={"min_requests": 20, "min_batches": 4, "batch_size": 3,
                        "max_step_s": 10, "on_timeout": "promote"},
            )  # fmt: skip
            async with running(cfg) as gw:
                stop = asyncio.Event()
                load = asyncio.create_task(drive(url(gw), stop, concurrency=4))
                headers = {"Authorization": f"Bearer {admin}"}
                try:
                    async with client() as s:
                        r = await s.post(
                            url(gw, "/admin/rollout"),
                            json={"candidate": "candidate", "steps": [50, 100]},
                            headers=headers,
                        )
                        assert r.status == 202, await r.text()
                        for _ in range(240):
                            await asyncio.sleep(0.5)
                            r = await s.get(url(gw, "/admin/rollout"), headers=headers)
                            st = RolloutState.model_validate_json(await r.read())
                            if st.done:
                                return st
                        raise AssertionError("the rollout did not end within 120 s")
                finally:
                    stop.set()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(load, 30)

        st = asyncio.run(main())
    finally:
        base.stop()
    assert st.status == "rolled_back", st.reason
    assert st.weights == {"baseline": 100.0, "candidate": 0.0}
    assert why in st.reason, st.reason
    assert st.evidence is not None
    cand = st.evidence["candidate"]
    assert cand["requests"] >= 1 and cand["errors"] == cand["requests"], cand
