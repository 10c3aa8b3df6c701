"""The knobs of one engine launch, checked against the knob registry (:mod:`servetune.knobs`):
every name, type, range and engine spelling lives there; this is the pydantic carrier a
:class:`~servetune.engines.commands.LaunchSpec` records.

    EngineKnobs(max_num_seqs=8, enable_chunked_prefill=False).given()
    → {"max_num_seqs": 8, "enable_chunked_prefill": False}

An unknown knob or a bad value is a ConfigError (``knob.unknown`` / ``knob.value``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from servetune.knobs import KnobValue, check_values


class EngineKnobs(BaseModel):
    """Engine-neutral knob → value (vLLM's names); unset = the engine's default."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return check_values(data)
        return data

    def given(self) -> dict[str, KnobValue]:
        """The knobs set, in the registry's order."""
        return check_values(self.model_extra or {})

    def get(self, name: str) -> KnobValue | None:
        return (self.model_extra or {}).get(name)

    def with_values(self, **values: KnobValue | None) -> EngineKnobs:
        """A copy with VALUES set (None unsets)."""
        return EngineKnobs(**{**self.given(), **values})
