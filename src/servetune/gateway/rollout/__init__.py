"""Rollouts: the controller that steps a canary's weight and decides (:mod:`.controller`), and
the gateway's side of it — starting it, its shared state across replicas (:mod:`.control`)."""

from servetune.gateway.rollout.control import RolloutControl
from servetune.gateway.rollout.controller import (
    Hooks,
    RolloutController,
    RolloutState,
    parse_steps,
    rollback_weights,
    step_weights,
)

__all__ = [
    "Hooks",
    "RolloutControl",
    "RolloutController",
    "RolloutState",
    "parse_steps",
    "rollback_weights",
    "step_weights",
]
