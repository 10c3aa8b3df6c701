"""The rollout controller with the gateway replaced by fakes: quality gate, peak hours, abort,
timeouts — and what it writes to the audit log."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from servetune.gateway.audit import AuditLog, read_audit
from servetune.gateway.canary import Observation
from servetune.gateway.config import CanaryPolicy
from servetune.gateway.rollout import Hooks, RolloutController, RolloutState
from servetune.gateway.rollout import controller as rollout


class FakeGateway:
    """Weights, and traffic whose candidate latency is ``ratio`` times the baseline's."""

    def __init__(self, ratio: float = 1.0) -> None:
        self.weights = {"base": 100.0, "cand": 0.0}
        self.ratio = ratio
        self.rng = random.Random(1)
        self.state: RolloutState | None = None

    async def get(self) -> dict[str, float]:
        return dict(self.weights)

    async def set(self, w: dict[str, float]) -> None:
        self.weights = dict(w)

    async def obs(self) -> list[Observation]:
        st = self.state
        if st is None or st.status != "running":
            return []
        out = []
        share = self.weights["cand"] / 100
        for _ in range(300):
            cand = self.rng.random() < share
            x = 0.05 * self.rng.lognormvariate(0, 0.3) * (self.ratio if cand else 1.0)
            out.append(
                Observation("cand" if cand else "base", st.step_index, x, x / 10, x * 5, False)
            )
        return out

    async def publish(self, st: RolloutState) -> None:
        self.state = st


def run(tmp: Path, ratio: float = 1.0, **policy: object) -> tuple[RolloutState, list[dict]]:
    fake = FakeGateway(ratio)
    settings: dict[str, object] = {
        "min_requests": 30,
        "min_batches": 5,
        "max_step_s": 20,
        "tolerance": 0.5,
    }
    pol = CanaryPolicy.model_validate({**settings, **policy})
    hooks = Hooks(fake.get, fake.set, fake.obs, fake.publish, lambda: "sha256:test")
    state = RolloutController.new("cand", [10, 50, 100])
    ctl = RolloutController(state, pol, hooks, AuditLog(tmp / "audit.jsonl"))
    fake.state = state
    st = asyncio.run(asyncio.wait_for(ctl.run(), 60))
    return st, read_audit(tmp / "audit.jsonl")


def test_promotes_through_the_steps(tmp_path: Path) -> None:
    st, audit = run(tmp_path)
    assert st.status == "promoted" and st.weights == {"base": 0.0, "cand": 100.0}
    assert [a["action"] for a in audit] == [
        "rollout_start", "step", "step_passed", "step", "step_passed", "promote"
    ]  # fmt: skip
    assert audit[1]["new_weights"] == {"base": 90.0, "cand": 10.0}
    assert all(a["config"] == "sha256:test" for a in audit)


def test_failing_quality_verdict_rolls_back(tmp_path: Path) -> None:
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"verdict": "fail", "reason": "perplexity +12 %"}))
    st, audit = run(tmp_path, quality_verdict_file=str(verdict))
    assert st.status == "rolled_back" and "quality gate failed" in st.reason
    assert "perplexity" in st.reason and st.weights["cand"] == 0
    assert audit[-1]["action"] == "rollback"


def test_inconclusive_quality_holds_the_last_step(tmp_path: Path) -> None:
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"verdict": "inconclusive"}))
    st, _ = run(tmp_path, quality_verdict_file=str(verdict), max_step_s=3)
    assert st.status == "rolled_back" and "no passing quality verdict" in st.reason


def test_passing_quality_lets_it_through(tmp_path: Path) -> None:
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"verdict": "pass"}))
    st, audit = run(tmp_path, quality_verdict_file=str(verdict))
    assert st.status == "promoted" and audit[-1].get("quality") == "pass"


def test_slow_candidate_rolled_back_and_undecided_times_out(tmp_path: Path) -> None:
    st, _ = run(tmp_path / "a", ratio=2.0)
    assert st.status == "rolled_back" and "ttft" in st.reason
    st, _ = run(tmp_path / "b", ratio=1.1, tolerance=0.1, max_step_s=2)
    assert st.status == "rolled_back" and "undecided after" in st.reason


def test_peak_hours_hold_the_first_step(tmp_path: Path) -> None:
    async def main() -> tuple[RolloutState, list[dict]]:
        fake = FakeGateway()
        pol = CanaryPolicy(peak_hours=["00:00-24:00"])  # always peak
        hooks = Hooks(fake.get, fake.set, fake.obs, fake.publish, lambda: "h")
        state = RolloutController.new("cand", [10, 100])
        ctl = RolloutController(state, pol, hooks, AuditLog(tmp_path / "audit.jsonl"))
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(0.5)
        assert state.status == "waiting_peak" and fake.weights["cand"] == 0
        ctl.abort()
        return await asyncio.wait_for(task, 10), read_audit(tmp_path / "audit.jsonl")

    st, audit = asyncio.run(main())
    assert st.status == "aborted" and st.weights["cand"] == 0
    assert [a["action"] for a in audit] == ["rollout_start", "paused_peak", "abort"]


class FlakyGateway(FakeGateway):
    """The shared state (Redis) fails: observations on the first ``obs_failures`` ticks,
    weights on the first ``set_failures`` writes (all of them with -1), publishing always."""

    def __init__(self, obs_failures: int = 0, set_failures: int = 0) -> None:
        super().__init__()
        self.obs_failures = obs_failures
        self.set_failures = set_failures

    async def obs(self) -> list[Observation]:
        if self.obs_failures:
            self.obs_failures -= 1
            raise ConnectionError("Redis: connection refused")
        return await super().obs()

    async def set(self, w: dict[str, float]) -> None:
        if self.set_failures:
            self.set_failures -= 1
            raise TimeoutError("Timeout reading from 127.0.0.1:6379")
        await super().set(w)

    async def publish(self, st: RolloutState) -> None:
        self.state = st
        raise ConnectionError("Redis: connection reset")


def run_flaky(tmp: Path, fake: FlakyGateway) -> tuple[RolloutState, list[dict]]:
    pol = CanaryPolicy(min_requests=30, min_batches=5, max_step_s=20, tolerance=0.5)
    hooks = Hooks(fake.get, fake.set, fake.obs, fake.publish, lambda: "h")
    state = RolloutController.new("cand", [10, 100])
    fake.state = state
    ctl = RolloutController(state, pol, hooks, AuditLog(tmp / "audit.jsonl"))
    st = asyncio.run(asyncio.wait_for(ctl.run(), 60))
    return st, read_audit(tmp / "audit.jsonl")


def test_shared_state_failures_do_not_end_the_rollout(tmp_path: Path) -> None:
    # observations unreadable for 4 ticks, two weight writes time out, publishing always
    # fails: the rollout goes on (it used to die with its status left at 'running')
    st, audit = run_flaky(tmp_path, FlakyGateway(obs_failures=4, set_failures=2))
    assert st.status == "promoted" and st.weights == {"base": 0.0, "cand": 100.0}
    assert [a["action"] for a in audit] == ["rollout_start", "step", "step_passed", "promote"]


def test_weights_that_cannot_be_shared_end_the_rollout_visibly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollout, "SHARE_RETRY_S", 1.0)
    st, audit = run_flaky(tmp_path, FlakyGateway(set_failures=-1))
    assert st.status == "aborted" and "stopped on an error" in st.reason
    assert "Timeout reading" in st.reason
    assert [a["action"] for a in audit] == ["rollout_start", "abort"]


def test_a_lost_lease_stops_the_rollout_without_touching_the_shared_state(
    tmp_path: Path,
) -> None:
    fake = FakeGateway()
    published: list[str] = []
    holds = iter([True, True, False])

    async def hold() -> bool:
        return next(holds, False)

    async def publish(st: RolloutState) -> None:
        published.append(st.status)
        fake.state = st

    pol = CanaryPolicy(min_requests=1000, max_step_s=60)
    hooks = Hooks(fake.get, fake.set, fake.obs, publish, lambda: "h", hold)
    state = RolloutController.new("cand", [10, 100])
    fake.state = state
    ctl = RolloutController(state, pol, hooks, AuditLog(tmp_path / "audit.jsonl"))
    st = asyncio.run(asyncio.wait_for(ctl.run(), 30))
    assert st.status == "aborted" and "another replica holds the rollout lease" in st.reason
    assert "aborted" not in published  # the shared state is the other replica's
    assert [a["action"] for a in read_audit(tmp_path / "audit.jsonl")][-1] == "abort"
