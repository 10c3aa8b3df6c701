"""How a deployment spreads a model over its GPUs, in terms both engines map onto.

``world`` GPUs serve one engine. Attention (and the dense MLPs, embeddings and lm_head) is
split ``attn_tp`` ways and replicated ``attn_dp`` times (data-parallel attention: each
replica serves its own requests and keeps its own KV cache); the routed experts are split
``moe_tp`` ways within an expert and ``moe_ep`` ways by expert (expert parallelism), with
``attn_tp × attn_dp = moe_tp × moe_ep = world``.

* vLLM: ``--tensor-parallel-size T --data-parallel-size D`` is ``world = T·D``, attention
  ``T × D``; with ``--enable-expert-parallel`` the experts are spread over all ``T·D`` ranks
  (``moe_ep = T·D``), without it each expert is split over them (``moe_tp = T·D``, vLLM's
  FusedMoE flattens TP across DP).
* SGLang: ``--tp T`` is the world; ``--enable-dp-attention --dp D`` makes attention ``T/D ×
  D``; ``--ep-size E`` spreads the experts over ``E`` ranks (``moe_tp = T/E``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Parallelism(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    attn_tp: int = Field(default=1, ge=1)
    attn_dp: int = Field(default=1, ge=1)
    moe_tp: int = Field(default=1, ge=1)
    moe_ep: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _same_world(self) -> Parallelism:
        if self.attn_tp * self.attn_dp != self.moe_tp * self.moe_ep:
            raise ValueError(
                f"attention over {self.attn_tp}x{self.attn_dp} GPUs but experts over "
                f"{self.moe_tp}x{self.moe_ep}"
            )
        return self

    @property
    def world(self) -> int:
        return self.attn_tp * self.attn_dp

    @classmethod
    def vllm(cls, tp: int, dp: int = 1, expert_parallel: bool = False) -> Parallelism:
        w = tp * dp
        return cls(
            attn_tp=tp,
            attn_dp=dp,
            moe_tp=1 if expert_parallel else w,
            moe_ep=w if expert_parallel else 1,
        )

    @classmethod
    def sglang(cls, tp: int, dp: int = 1, dp_attention: bool = False, ep: int = 1) -> Parallelism:
        d = dp if dp_attention else 1
        return cls(attn_tp=tp // d, attn_dp=d, moe_tp=tp // ep, moe_ep=ep)
