"""The gateway's side of a rollout: start the
:class:`~servetune.gateway.rollout.controller.RolloutController`
and drive it — feed it what the gateway measured, apply (and share) the weights it sets, publish
its state — and, on a replica that does not decide, follow the state and the weights another
replica shares. Operator weight changes go through here too, so that every change of the
traffic split is applied and audited in one place.

Observations: each request that started under a running step ends as one
:class:`~servetune.gateway.canary.Observation`. Without Redis they wait in a list that the
controller takes at each tick. With Redis each replica buffers them as JSON lines, pushes them
at every sync (and before a take), and the replica holding the rollout lease reads everyone's
from the rollout's shared list.

The two calls made per request (:meth:`RolloutControl.step_now`, :meth:`RolloutControl.observe`)
are bound once by the gateway: a state read, and a list append.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection

import orjson

from servetune.aio import stop_task
from servetune.errors import ConfigError, ServetuneError
from servetune.gateway.audit import AuditLog
from servetune.gateway.canary import Observation
from servetune.gateway.config import CanaryPolicy
from servetune.gateway.pool import Router
from servetune.gateway.redis_state import RedisState
from servetune.gateway.rollout.controller import Hooks, RolloutController, RolloutState

log = logging.getLogger(__name__)

LOCK = "rollout-lock"
LEASE_MS = 10_000


class RolloutControl:
    """The rollout of one gateway (replica): at most one running at a time."""

    def __init__(
        self,
        router: Router,
        audit: AuditLog,
        replica: str,
        redis: RedisState | None,
        config_id: Callable[[], str],
    ) -> None:
        self.router = router
        self.audit = audit
        self.replica = replica
        self.redis = redis
        self.config_id = config_id
        self.state: RolloutState | None = None
        """The latest state: this replica's rollout, or (Redis) the one another replica runs."""
        self.controller: RolloutController | None = None
        """Set while this replica runs (decides) a rollout."""
        self.task: asyncio.Task[RolloutState] | None = None
        self._obs: list[Observation] = []
        self._obs_pushed: list[bytes] = []
        self._obs_read = 0

    @property
    def running(self) -> bool:
        return self.controller is not None

    # -- per request ---------------------------------------------------------------------------
    def step_now(self) -> int | None:
        """The index of the step a request starting now belongs to; None outside a step."""
        st = self.state
        if st is None or st.status != "running":
            return None
        return st.step_index

    def observe(self, o: Observation) -> None:
        if self.redis is None:
            self._obs.append(o)
        else:
            self._obs_pushed.append(orjson.dumps([o.group, o.step, o.ttft, o.tpot, o.e2e, o.error]))

    # -- observations and shared state ---------------------------------------------------------
    async def flush(self) -> None:
        """Redis: push this replica's buffered observations to the rollout's shared list."""
        st = self.state
        if self.redis is None or not self._obs_pushed or st is None:
            return
        lines, self._obs_pushed = self._obs_pushed, []
        try:
            await self.redis.push_observations(st.id, lines)
        except BaseException:
            self._obs_pushed[:0] = lines  # kept for the next push
            raise

    async def take(self) -> list[Observation]:
        """The observations not yet taken (all replicas' with Redis)."""
        if self.redis is None:
            out, self._obs = self._obs, []
            return out
        st = self.state
        assert st is not None
        await self.flush()
        raw = await self.redis.read_observations(st.id, self._obs_read)
        self._obs_read += len(raw)
        out = []
        for line in raw:
            g, s, ttft, tpot, e2e, err = orjson.loads(line)
            out.append(Observation(g, s, ttft, tpot, e2e, bool(err)))
        return out

    async def sync(self) -> None:
        """Redis: push observations, follow the shared weights and (when another replica
        decides) the shared rollout state."""
        assert self.redis is not None
        await self.flush()
        weights = await self.redis.get_weights()
        if weights and weights != self.router.weights:
            self.router.set({g: weights.get(g, 0.0) for g in self.router.weights})
        if self.controller is None:  # another replica decides: follow its state
            raw = await self.redis.get_json("rollout")
            if raw:
                self.state = RolloutState.model_validate_json(raw)

    async def set_weights(self, weights: dict[str, float]) -> None:
        self.router.set({g: weights.get(g, 0.0) for g in self.router.weights})
        if self.redis is not None:
            await self.redis.set_weights(dict(self.router.weights))

    async def get_weights(self) -> dict[str, float]:
        return dict(self.router.weights)

    async def publish(self, st: RolloutState) -> None:
        self.state = st
        if self.redis is not None:
            await self.redis.set_json("rollout", st.model_dump_json().encode())

    async def operator_weights(self, new: dict[str, float]) -> None:
        """Weights set by the operator (admin API): applied, shared and audited."""
        old = dict(self.router.weights)
        await self.set_weights(new)
        await asyncio.to_thread(
            self.audit.write,
            "weights",
            reason="set by the operator",
            old_weights=old,
            new_weights=new,
            config=self.config_id(),
        )

    # -- running a rollout ---------------------------------------------------------------------
    def start(
        self, candidate: str, steps: list[float], groups: Collection[str], policy: CanaryPolicy
    ) -> RolloutState:
        """Start a rollout of ``candidate`` (one of ``groups``) in the background."""
        if self.task is not None and not self.task.done():
            raise ConfigError(f"a rollout is already running ({self.state and self.state.id})")
        if candidate not in groups:
            raise ConfigError(
                f"no upstream group named {candidate!r}", hint=f"groups: {sorted(groups)}"
            )
        state = RolloutController.new(candidate, steps)
        hold = None
        if self.redis is not None:
            redis = self.redis
            owner = self.replica

            async def hold_lease() -> bool:
                return await redis.hold_lock(LOCK, owner, LEASE_MS)

            hold = hold_lease
        hooks = Hooks(
            self.get_weights,
            self.set_weights,
            self.take,
            self.publish,
            self.config_id,
            hold,
        )
        self._obs = []
        self._obs_read = 0
        self.controller = RolloutController(state, policy, hooks, self.audit)
        self.state = state
        self.task = asyncio.create_task(self._run(self.controller))
        return state

    async def _run(self, ctl: RolloutController) -> RolloutState:
        try:
            if self.redis is not None:
                try:
                    held = await self.redis.hold_lock(LOCK, self.replica, LEASE_MS)
                except Exception as exc:
                    ctl.state.status = "aborted"
                    ctl.state.reason = f"the rollout lease could not be taken in Redis: {exc}"
                    return ctl.state
                if not held:
                    ctl.state.status = "aborted"
                    ctl.state.reason = "another replica is running a rollout"
                    return ctl.state
            return await ctl.run()
        except ServetuneError as exc:
            ctl.state.status = "aborted"
            ctl.state.reason = exc.message
            return ctl.state
        finally:
            self.controller = None
            if self.redis is not None:  # the next rollout need not wait for the lease to lapse
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.redis.release_lock(LOCK, self.replica), 5.0)

    def abort(self) -> None:
        if self.controller is not None:
            self.controller.abort()

    async def wait(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the rollout task to end."""
        if self.task is not None:
            await asyncio.wait([self.task], timeout=timeout_s)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Abort a running rollout and wait (bounded) for it to write its end down; past
        ``timeout_s`` it is cancelled (and waited for, bounded too)."""
        self.abort()
        if self.task is None or self.task.done():
            return
        await asyncio.wait([self.task], timeout=timeout_s)
        if not await stop_task(self.task):
            log.warning("rollout: the rollout task did not stop within %g s", timeout_s + 5)
