"""A group's ``routing:`` (gateway.yaml) and ``--router`` (``sim run``, ``plan``): the model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PolicyName = Literal["least-loaded", "round-robin", "session", "prefix", "score"]
POLICIES: tuple[str, ...] = ("least-loaded", "round-robin", "session", "prefix", "score")
DEFAULT_KV_TOKENS = 262_144
"""An upstream's KV pool in tokens when neither the configuration nor the engine says."""


class ScoreWeights(BaseModel):
    """Weights of the ``score`` policy's terms (llm-d's default scorer weights, 3:2:2)."""

    model_config = ConfigDict(extra="forbid")

    prefix: float = Field(default=3.0, ge=0, le=100)
    """The share of the prompt's blocks the upstream's prefix index holds (0–1)."""
    queue: float = Field(default=2.0, ge=0, le=100)
    """1 − queue depth ÷ (max(the deepest candidate's, queue_scale) + 1): the requests waiting
    in the engine's queue (its /metrics, or this gateway's in flight there beyond those the
    engine was running at the last read), not those running in its batch."""
    kv: float = Field(default=2.0, ge=0, le=100)
    """1 − the engine's KV-cache use (its /metrics; 0 when it does not say)."""

    @model_validator(mode="after")
    def _some(self) -> ScoreWeights:
        if self.prefix + self.queue + self.kv <= 0:
            raise ValueError("routing.weights: at least one weight must be above 0")
        return self


class RoutingConfig(BaseModel):
    """How a group's upstreams are chosen (see :mod:`servetune.routing.policies`)."""

    model_config = ConfigDict(extra="forbid")

    policy: PolicyName = "least-loaded"
    session_header: str = Field(default="x-session-id", min_length=1, max_length=64)
    """The request header carrying the session id (else the body's OpenAI ``user`` field)."""
    chunk_bytes: int = Field(default=64, ge=8, le=65536)
    """Prompt bytes per prefix-index block (64 ≈ 16 tokens of English, vLLM's block)."""
    kv_capacity_tokens: int | None = Field(default=None, ge=1)
    """An upstream's KV pool in tokens, which bounds its prefix index (default 262,144; the
    simulator takes its engines' own)."""
    bytes_per_token: float = Field(default=4.0, gt=0, le=64)
    """Prompt bytes per token, to turn the KV pool's tokens into index blocks."""
    weights: ScoreWeights = Field(default_factory=ScoreWeights)
    load_bound: float = Field(default=2.0, ge=1.0, le=100.0)
    """``prefix``/``score``: an upstream takes a request only while its in-flight count after
    it stays within max(load_bound × mean, mean + load_slack) of the healthy upstreams'
    (bounded-load hashing): a hot prefix cannot pile onto one replica."""
    load_slack: int = Field(default=6, ge=0, le=100_000)
    queue_scale: int = Field(default=6, ge=0, le=100_000)
    """``score``: the queue term is ``1 − depth ÷ (max(the deepest, queue_scale) + 1)`` —
    between short queues a request or two of difference weighs little (0: scaled to the
    deepest alone, where one waiting against none is half the weight)."""

    def index_blocks(self, kv_tokens: int | None) -> int:
        tokens = self.kv_capacity_tokens or kv_tokens or DEFAULT_KV_TOKENS
        return max(1, int(tokens * self.bytes_per_token / self.chunk_bytes))
