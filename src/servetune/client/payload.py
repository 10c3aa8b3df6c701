"""Request bodies for the OpenAI completions and chat endpoints, encoded once per prompt."""

from __future__ import annotations

from typing import Any

import orjson

from servetune.results.schema import Endpoint
from servetune.workload.spec import RequestSpec


def endpoint_path(endpoint: Endpoint) -> str:
    return "/chat/completions" if endpoint == "chat" else "/completions"


def build_body(
    spec: RequestSpec,
    model: str,
    endpoint: Endpoint,
    ignore_eos: bool = False,
    temperature: float = 0.0,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """The JSON body of one streaming request, asking for usage in the stream."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": spec.output_len,
        "temperature": temperature,
    }
    if ignore_eos:
        body["ignore_eos"] = True
    if endpoint == "chat":
        body["messages"] = spec.messages or [{"role": "user", "content": spec.prompt or ""}]
    else:
        body["prompt"] = spec.prompt if spec.prompt is not None else spec.text()
    if extra:
        body.update(extra)
    return orjson.dumps(body)
