"""The rollout controller: move traffic to a candidate group in steps, judge each step on what
the gateway measured, promote or roll back by itself, and write every decision down.

For each step ``p`` of ``steps`` (percent of traffic, e.g. 5, 25, 50, 100):

1. wait while a declared peak window is active (a step never starts at peak; a rollback does
   not wait);
2. set the weights: the candidate gets ``p`` %, the baseline groups share the rest in their
   original proportions;
3. collect the requests that *started* under this step and run the sequential test of
   :mod:`servetune.gateway.canary` (and the quality gate, if one is given) until it decides:
   *promote* → next step; *rollback* → the candidate's weight goes to 0 and the baseline gets
   its original weights back; undecided after ``max_step_s`` → ``on_timeout``.

The last step (100 %) is not judged — nothing is left to compare with — so the candidate takes
all traffic once the step before it passed (and the quality gate said pass). With Redis the
weights and the rollout's state are shared, every replica pushes its observations, and the
replica holding the rollout lease decides.

The shared state failing (Redis away or stalled past its socket timeout) never ends a rollout
silently with the traffic left split: a tick that cannot renew the lease or read the
observations is skipped (the step's clock runs on, so ``max_step_s`` still bounds it); the
weights of a decision are retried for :data:`SHARE_RETRY_S`; any other error ends the rollout
as ``aborted`` with the error as its reason, in the audit log. A replica that finds another one
holding the lease (it stalled for longer than the lease) stops its rollout as ``aborted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from servetune.errors import ConfigError
from servetune.gateway.audit import AuditLog
from servetune.gateway.canary import Observation, StepAnalysis
from servetune.gateway.config import CanaryPolicy
from servetune.gateway.peak import PeakHours
from servetune.gateway.quality_gate import QualityGate

log = logging.getLogger(__name__)

RolloutStatus = Literal["waiting_peak", "running", "promoted", "rolled_back", "aborted"]
TICK_S = 0.5
SHARE_RETRY_S = 30.0
"""How long the weights of a decision are retried while the shared state fails."""


class RolloutState(BaseModel):
    """What a rollout is doing, as the admin API returns it (and Redis shares it)."""

    id: str
    candidate: str
    steps: list[float]
    step_index: int = -1
    status: RolloutStatus = "running"
    started_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    original_weights: dict[str, float] = Field(default_factory=dict)
    weights: dict[str, float] = Field(default_factory=dict)
    reason: str = ""
    evidence: dict[str, Any] | None = None
    history: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status in ("promoted", "rolled_back", "aborted")

    @property
    def step(self) -> float | None:
        return self.steps[self.step_index] if 0 <= self.step_index < len(self.steps) else None


STEPS_HINT = "give rising percentages of traffic for the candidate, e.g. {steps} 5,25,50,100"


def parse_steps(text: str | list[float]) -> list[float]:
    """``"5,25,50,100"`` → [5, 25, 50, 100]: rising percentages ending at 100."""
    if isinstance(text, str):
        try:
            steps = [float(x) for x in text.replace(" ", "").split(",") if x]
        except ValueError:
            raise ConfigError.over_fields(
                f"{{steps}} {text!r}: not a list of numbers",
                hint=STEPS_HINT,
            ) from None
    else:
        steps = [float(x) for x in text]
    if not steps:
        raise ConfigError.over_fields(
            "{steps}: no step given",
            hint=STEPS_HINT,
        )
    if any(not 0 < s <= 100 for s in steps):
        raise ConfigError.over_fields(
            f"{{steps}} {steps}: each step is a percentage in (0, 100]",
            hint=STEPS_HINT,
        )
    if any(b <= a for a, b in itertools.pairwise(steps)):
        raise ConfigError.over_fields(
            f"{{steps}} {steps}: steps must rise",
            hint=STEPS_HINT,
        )
    if steps[-1] != 100:
        steps.append(100.0)
    return steps


def step_weights(original: dict[str, float], candidate: str, pct: float) -> dict[str, float]:
    """Weights giving the candidate ``pct`` % and the other groups the rest, in proportion."""
    base = {g: w for g, w in original.items() if g != candidate and w > 0}
    total = sum(base.values())
    if total <= 0 and pct < 100:
        raise ConfigError(
            f"no baseline group has traffic to compare {candidate!r} with",
            hint="give the baseline group a weight > 0",
        )
    out = {g: 0.0 for g in original}
    for g, w in base.items():
        out[g] = w / total * (100.0 - pct)
    out[candidate] = pct
    return out


def rollback_weights(original: dict[str, float], candidate: str) -> dict[str, float]:
    out = dict(original)
    out[candidate] = 0.0
    if not any(w > 0 for w in out.values()):
        raise ConfigError("rolling back would leave no group with traffic")
    return out


class Hooks:
    """What the controller needs from the gateway (local, or shared through Redis)."""

    def __init__(
        self,
        get_weights: Callable[[], Awaitable[dict[str, float]]],
        set_weights: Callable[[dict[str, float]], Awaitable[None]],
        observations: Callable[[], Awaitable[list[Observation]]],
        publish: Callable[[RolloutState], Awaitable[None]],
        config_hash: Callable[[], str],
        hold: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.get_weights = get_weights
        self.set_weights = set_weights
        self.observations = observations
        self.publish = publish
        self.config_hash = config_hash
        self.hold = hold
        """Renew the rollout lease (Redis); False: another replica decides now."""


class RolloutController:
    def __init__(
        self,
        state: RolloutState,
        policy: CanaryPolicy,
        hooks: Hooks,
        audit: AuditLog,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.policy = policy
        self.hooks = hooks
        self.audit = audit
        self.peak = PeakHours(policy.peak_hours, policy.timezone)
        self.gate = QualityGate(policy.quality_verdict_file, policy.quality_command)
        self._clock = clock
        self.analysis: StepAnalysis | None = None
        self._stop = asyncio.Event()
        self._lease_lost = False
        self._troubles = 0

    @staticmethod
    def new(candidate: str, steps: list[float]) -> RolloutState:
        return RolloutState(id=uuid.uuid4().hex[:12], candidate=candidate, steps=steps)

    def abort(self) -> None:
        self._stop.set()

    async def _audit(self, action: str, **kw: Any) -> None:
        kw.setdefault("config", self.hooks.config_hash())
        entry = await asyncio.to_thread(
            self.audit.write, action, rollout=self.state.id, candidate=self.state.candidate, **kw
        )
        self.state.history.append(
            {k: entry[k] for k in ("time", "action", "reason") if k in entry}
            | ({"new_weights": entry["new_weights"]} if "new_weights" in entry else {})
        )

    async def _publish(self) -> None:
        """Share the state (best effort: followers catch up at the next publish)."""
        self.state.updated_at = time.time()
        try:
            await self.hooks.publish(self.state)
        except Exception as exc:
            self._trouble("publishing the state", exc)

    def _trouble(self, what: str, exc: BaseException) -> None:
        """A failure of the shared state: logged (the first and every 20th)."""
        self._troubles += 1
        if self._troubles == 1 or self._troubles % 20 == 0:
            log.warning(
                "rollout %s: %s failed (%d time(s) so far): %s",
                self.state.id,
                what,
                self._troubles,
                exc or type(exc).__name__,
            )

    async def _set(self, action: str, weights: dict[str, float], reason: str, **kw: Any) -> None:
        old = await self.hooks.get_weights()
        t0 = self._clock()
        pause = 0.25
        while True:
            try:
                await self.hooks.set_weights(weights)
                break
            except Exception as exc:
                self._trouble(f"setting the weights ({action})", exc)
                if self._clock() - t0 + pause > SHARE_RETRY_S:
                    raise
            await asyncio.sleep(pause)
            pause = min(2.0, pause * 2)
        self.state.weights = weights
        await self._audit(action, reason=reason, old_weights=old, new_weights=weights, **kw)

    async def run(self) -> RolloutState:
        st = self.state
        try:
            if not st.original_weights:
                st.original_weights = await self.hooks.get_weights()
                if st.candidate not in st.original_weights:
                    raise ConfigError(f"no upstream group named {st.candidate!r}")
                await self._audit(
                    "rollout_start",
                    reason=f"steps {st.steps}",
                    old_weights=st.original_weights,
                    policy=self.policy.model_dump(),
                )
            start = max(0, st.step_index)
            for idx in range(start, len(st.steps)):
                if not await self._run_step(idx):
                    break
        except asyncio.CancelledError:
            if not st.done:
                st.status = "aborted"
                st.reason = "the gateway stopped during the rollout"
                with contextlib.suppress(Exception):
                    await self._audit("abort", reason=st.reason)
            raise
        except Exception as exc:
            why = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            if st.done:  # the decision stands; its weights did not reach the shared state
                st.reason += f" (the new weights could not be shared: {why})"
            else:
                st.status = "aborted"
                st.reason = f"the rollout stopped on an error: {why}"
            log.error("rollout %s: %s", st.id, st.reason)
            with contextlib.suppress(Exception):
                await self._audit("abort", reason=st.reason)
        finally:
            if not self._lease_lost:  # the shared state is another replica's rollout now
                await self._publish()
        return st

    async def _wait_peak(self) -> bool:
        st = self.state
        window = self.peak.active()
        if window is None:
            return True
        st.status = "waiting_peak"
        st.reason = f"peak hours ({window.text}): the next step waits"
        await self._audit("paused_peak", reason=st.reason)
        await self._publish()
        while self.peak.active() is not None:
            if self._stop.is_set():
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stop.wait(), min(30.0, self.peak.seconds_until_clear() + 1)
                )
        st.status = "running"
        return True

    async def _run_step(self, idx: int) -> bool:
        """True: go on to the next step; False: the rollout has ended."""
        st = self.state
        pct = st.steps[idx]
        if not await self._wait_peak():
            return await self._aborted()
        if pct >= 100:
            gate = await self.gate.check()
            if gate is not None and gate.verdict != "pass":
                if gate.verdict == "fail":
                    return await self._rollback(
                        f"quality gate failed ({gate.source}): {gate.detail}"
                    )
                # inconclusive: hold the previous step until it passes or the step times out
                if not await self._await_gate(idx):
                    return False
            st.step_index = idx
            st.status = "promoted"
            st.reason = f"candidate {st.candidate!r} takes all traffic"
            await self._set(
                "promote",
                step_weights(st.original_weights, st.candidate, 100.0),
                st.reason,
                quality=None if gate is None else gate.verdict,
            )
            return False
        st.step_index = idx
        st.status = "running"
        st.reason = f"step {idx + 1}/{len(st.steps)}: {pct:g} % to {st.candidate!r}"
        await self._set("step", step_weights(st.original_weights, st.candidate, pct), st.reason)
        await self._publish()
        self.analysis = analysis = StepAnalysis(self.policy, st.candidate, idx)
        t0 = self._clock()
        while True:
            if self._stop.is_set():
                return await self._aborted()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), TICK_S)
            try:
                if self.hooks.hold is not None and not await self.hooks.hold():
                    return await self._lost_lease()
                for o in await self.hooks.observations():
                    analysis.add(o)
            except Exception as exc:  # the shared state failed: skip this tick
                self._trouble("reading the observations", exc)
            decision, reason, evidence = analysis.decide()
            st.evidence = evidence
            gate = await self.gate.check() if self.gate.configured else None
            if gate is not None and gate.verdict == "fail":
                return await self._rollback(
                    f"quality gate failed ({gate.source}): {gate.detail}", evidence
                )
            if decision == "rollback":
                return await self._rollback(reason, evidence)
            if decision == "promote":
                await self._audit("step_passed", reason=reason, evidence=evidence)
                return True
            await self._publish()
            if self._clock() - t0 > self.policy.max_step_s:
                why = f"step undecided after {self.policy.max_step_s:g} s ({reason})"
                if self.policy.on_timeout == "promote" and not analysis.enough():
                    # on_timeout=promote is for a test that could not tell the groups apart,
                    # not for a candidate that never served its minimum sample (its
                    # upstreams refused, or their circuits opened and routing went around it)
                    why += "; on_timeout=promote does not apply below the minimum sample"
                elif self.policy.on_timeout == "promote":
                    await self._audit(
                        "step_passed", reason=why + "; on_timeout=promote", evidence=evidence
                    )
                    return True
                return await self._rollback(why, evidence)

    async def _await_gate(self, idx: int) -> bool:
        t0 = self._clock()
        while self._clock() - t0 < self.policy.max_step_s:
            if self._stop.is_set():
                return await self._aborted()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), TICK_S * 4)
            gate = await self.gate.check()
            if gate is None or gate.verdict == "pass":
                return True
            if gate.verdict == "fail":
                return await self._rollback(f"quality gate failed ({gate.source}): {gate.detail}")
        return await self._rollback(
            f"no passing quality verdict within {self.policy.max_step_s:g} s"
        )

    async def _rollback(self, reason: str, evidence: dict[str, Any] | None = None) -> bool:
        st = self.state
        st.status = "rolled_back"
        st.reason = reason
        st.evidence = evidence
        await self._set(
            "rollback",
            rollback_weights(st.original_weights, st.candidate),
            reason,
            evidence=evidence,
        )
        log.warning("rollout %s rolled back: %s", st.id, reason)
        return False

    async def _lost_lease(self) -> bool:
        st = self.state
        st.status = "aborted"
        st.reason = (
            "another replica holds the rollout lease (this one stalled for longer than the "
            "lease): this rollout stops here, the shared weights and state are that replica's"
        )
        self._lease_lost = True
        log.warning("rollout %s: %s", st.id, st.reason)
        await self._audit("abort", reason=st.reason)
        return False

    async def _aborted(self) -> bool:
        st = self.state
        st.status = "aborted"
        st.reason = "aborted by the operator: weights restored"
        await self._set("abort", rollback_weights(st.original_weights, st.candidate), st.reason)
        return False
