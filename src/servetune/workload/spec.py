"""RequestSpec: one request of a workload, before it is sent."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class RequestSpec(BaseModel):
    """A prompt (text or chat messages) with its planned input and output lengths."""

    model_config = ConfigDict(frozen=True)

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    input_len: int
    """Prompt tokens as counted by the workload's token counter."""
    output_len: int
    """max_tokens asked of the server."""
    group: int | None = None
    """Prefix group (the ``prefix`` dataset)."""

    def text(self) -> str:
        """The prompt as plain text (chat messages joined), for counting and the sim engine."""
        if self.prompt is not None:
            return self.prompt
        parts = []
        for m in self.messages or []:
            c = m.get("content")
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts.extend(str(x.get("text", "")) for x in c if isinstance(x, dict))
        return "\n".join(parts)
