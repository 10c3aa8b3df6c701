"""What the target serves: its models (``/v1/models``), context length and tokenizer."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from servetune.client.http import classify_exception, normalize_base_url
from servetune.errors import ModelNotServedError, TargetError
from servetune.results.schema import TargetInfo

PROBE_TIMEOUT_S = 15.0


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` → ``http://h:p`` (where /tokenize, /metrics and /health live)."""
    url = normalize_base_url(base_url)
    return url[: -len("/v1")]


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    try:
        async with session.get(url, timeout=timeout) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise TargetError.over_fields(
                    f"GET {url} answered HTTP {resp.status}",
                    hint="is {base_url} an OpenAI-compatible server (it should serve /v1/models)?",
                )
    except aiohttp.ClientError as exc:
        cls, why = classify_exception(exc, PROBE_TIMEOUT_S)
        if cls == "protocol_error":  # something answers, but not in HTTP (aiohttp's text
            # runs over several lines: the first says it)
            raise TargetError.over_fields(
                f"{url} did not answer in HTTP: {why.splitlines()[0].rstrip(':')}",
                hint="is {base_url} the port of an OpenAI-compatible HTTP server (not https, "
                "not another service)?",
            ) from exc
        raise TargetError.over_fields(
            f"cannot reach {url}: {why}",
            hint="is the server running? check {base_url} (e.g. http://127.0.0.1:8000/v1)",
        ) from exc
    except TimeoutError as exc:
        raise TargetError(f"no answer from {url} within {PROBE_TIMEOUT_S:g} s") from exc
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise TargetError(f"GET {url} did not return JSON") from exc


async def probe_target(
    session: aiohttp.ClientSession, base_url: str, model: str | None
) -> TargetInfo:
    """Ask /v1/models what is served; pick ``model`` or the only one listed. The simulated
    engine's model card also carries its configuration (``servetune_sim``), recorded as
    ``target.simulated``."""
    url = normalize_base_url(base_url)
    data = await _get_json(session, url + "/models")
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise TargetError(f"{url}/models did not return an OpenAI model list")
    served = [str(e.get("id")) for e in entries if isinstance(e, dict) and e.get("id")]
    if model is None:
        if len(served) != 1:
            listed = ", ".join(served) or "none"
            raise ModelNotServedError.over_fields(
                f"the server lists {len(served)} models ({listed}); which one?",
                hint="pass {model}=NAME",
            )
        model = served[0]
    elif model not in served:
        raise ModelNotServedError.over_fields(
            f"model {model!r} is not served by {url}; it serves: {', '.join(served) or 'none'}",
            hint="pass the name it serves as {served_model_name} (the model stays {model}), "
            "or as {model}",
        )
    entry = next(e for e in entries if isinstance(e, dict) and e.get("id") == model)
    max_len = entry.get("max_model_len")
    sim = entry.get("servetune_sim")  # servetune's simulated engine says what it is
    return TargetInfo(
        base_url=url,
        model=model,
        served_models=served,
        max_model_len=int(max_len) if isinstance(max_len, int) else None,
        simulated=sim if isinstance(sim, dict) else None,
    )


class ServerTokenizer:
    """Counts tokens with the server's own ``/tokenize`` (vLLM and llama.cpp shapes)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str) -> None:
        self.session = session
        self.url = server_root(base_url) + "/tokenize"
        self.model = model

    async def count(self, text: str) -> int | None:
        body = {
            "model": self.model,
            "prompt": text,
            "content": text,
            "add_special_tokens": False,
            "add_special": False,
        }
        try:
            async with self.session.post(
                self.url, data=orjson.dumps(body), timeout=aiohttp.ClientTimeout(total=30)
            ) as resp:
                if resp.status != 200:
                    return None
                data = orjson.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
            return None
        if isinstance(data, dict):
            if isinstance(data.get("count"), int):
                return int(data["count"])
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
        return None
