"""What an OpenAI-compatible endpoint tells about its next-token distributions.

Two ways to get the log-probability of every token of a text, tried in this order:

``echo``      one request: ``POST /v1/completions`` with ``echo: true, logprobs: k,
              max_tokens: 1`` — the prompt's own tokens come back with their logprobs and the
              top-k at each position (vLLM, and the OpenAI legacy API);
``stepwise``  the text's token ids from the server's ``/tokenize`` (llama.cpp: ``{"content"}``;
              vLLM: ``{"prompt"}``), then for each position a completion of the prefix (token
              ids as the prompt) with ``max_tokens: 1, logprobs: k`` — the top-k of the next
              token's distribution; when the text's actual next token is not among them, once
              more with ``logprobs: max_k``. llama.cpp's server ignores ``echo`` (build 11434:
              no prompt logprobs), so it is scored this way, its prompt cache making each step
              one token of work.

A token is keyed by its id when the server gives ids (llama.cpp), else by its text (vLLM's
legacy format). Greedy outputs: ``temperature: 0`` completions, with ``logprobs: 1`` for the
tokens.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp

from servetune.errors import TargetError

Flavor = Literal["echo", "stepwise"]
Key = int | str
TIMEOUT_S = 120.0


@dataclass
class Position:
    """One position of a text: the actual token, its logprob (None: beyond every top-k asked),
    the top-k of the distribution there."""

    token: Key
    logprob: float | None
    top: dict[Key, float]


@dataclass
class Scored:
    tokens: list[Key]
    positions: list[Position]
    """Positions 1 … n−1 (the first token has no context)."""


@dataclass
class Generated:
    text: str
    tokens: list[Key] = field(default_factory=list)


def api_root(url: str) -> str:
    u = url.strip().rstrip("/")
    if not u.startswith(("http://", "https://")):
        from servetune.errors import ConfigError

        raise ConfigError(f"not an http(s) URL: {url!r}", hint="e.g. http://127.0.0.1:8000/v1")
    try:
        port = urlsplit(u).port
    except ValueError:  # out of 0-65535 or not a number: aiohttp's InvalidUrlClientError later
        port = -1
    if port == -1 or not urlsplit(u).hostname:
        from servetune.errors import ConfigError

        raise ConfigError(f"not a valid URL: {url!r}", hint="e.g. http://127.0.0.1:8000/v1")
    return u[: -len("/v1")] if u.endswith("/v1") else u


def _parse_logprobs(lp: dict[str, Any]) -> list[Position]:
    """Both formats: legacy (tokens/token_logprobs/top_logprobs) and content entries."""
    out: list[Position] = []
    if isinstance(lp.get("content"), list):
        for e in lp["content"]:
            top = {
                t.get("id", t.get("token")): float(t["logprob"])
                for t in e.get("top_logprobs") or []
            }
            key = e.get("id", e.get("token"))
            out.append(Position(key, _num(e.get("logprob")), top))
        return out
    tokens = lp.get("tokens") or []
    lps = lp.get("token_logprobs") or [None] * len(tokens)
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    for tok, v, top in zip(tokens, lps, tops, strict=False):
        out.append(Position(tok, _num(v), {k: float(x) for k, x in (top or {}).items()}))
    return out


def _num(v: Any) -> float | None:
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return None


class Endpoint:
    """One server; use inside ``async with``."""

    def __init__(
        self,
        url: str,
        model: str | None = None,
        api_key: str | None = None,
        k: int = 20,
        max_k: int = 1000,
        concurrency: int = 4,
        name: str = "endpoint",
    ) -> None:
        self.root = api_root(url)
        self.url = url
        self.model = model
        self.k = k
        self.max_k = max_k
        self.name = name
        self.flavor: Flavor | None = None
        self.why_no_logprobs: str | None = None
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._sem = asyncio.Semaphore(concurrency)
        self._session: aiohttp.ClientSession | None = None
        self._tokenize_body: str | None = None

    async def __aenter__(self) -> Endpoint:
        self._session = aiohttp.ClientSession(
            headers=self._headers, timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    # -- HTTP ----------------------------------------------------------------------------

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        assert self._session is not None
        async with self._sem:
            try:
                async with self._session.post(self.root + path, json=body) as resp:
                    try:
                        data = await resp.json(content_type=None)
                    except ValueError:
                        data = {"error": (await resp.text())[:300]}
                    return resp.status, data
            except aiohttp.ClientConnectorError as exc:
                raise TargetError(
                    f"cannot reach the {self.name} at {self.root}: {exc.os_error or exc}",
                    hint="is the server up? give its base URL, e.g. http://127.0.0.1:8000/v1",
                ) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise TargetError(
                    f"{self.name} {self.root}{path}: {exc.__class__.__name__} {exc}"
                ) from None

    async def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        body = {"model": self.model, "temperature": 0.0, **body}
        status, data = await self._post("/v1/completions", body)
        if status != 200 or not isinstance(data, dict) or not data.get("choices"):
            err = data.get("error") if isinstance(data, dict) else data
            raise TargetError(
                f"the {self.name} answered HTTP {status} to /v1/completions: {str(err)[:300]}"
            )
        choice: dict[str, Any] = data["choices"][0]
        return choice

    async def open(self) -> None:
        """The served model (the only one listed, unless --model), then the logprob flavor."""
        assert self._session is not None
        why: str | None = None  # why /v1/models told nothing (said when it was needed)
        data: Any = {}
        try:
            async with self._session.get(self.root + "/v1/models") as resp:
                if resp.status == 200:
                    data = await resp.json(content_type=None)
                else:
                    why = f"GET /v1/models answered HTTP {resp.status}"
        except aiohttp.ClientConnectorError as exc:
            raise TargetError(
                f"cannot reach the {self.name} at {self.root}: {exc.os_error or exc}",
                hint="is the server up? give its base URL, e.g. http://127.0.0.1:8000/v1",
            ) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            said = str(getattr(exc, "message", "") or exc) or exc.__class__.__name__
            why = f"GET /v1/models failed: {said.splitlines()[0].rstrip(':')}"
        except ValueError:
            why = "GET /v1/models did not return JSON"
        listed = data.get("data") if isinstance(data, dict) else None
        if why is None and not isinstance(listed, list):
            why = "GET /v1/models did not return an OpenAI model list"
        ids = [m.get("id") for m in (listed or []) if isinstance(m, dict)]
        if self.model is None:
            if why is not None:
                raise TargetError.over_fields(
                    f"the {self.name} at {self.root} is not an OpenAI-compatible server: {why}",
                    hint="give its base URL, e.g. http://127.0.0.1:8000/v1 (or name the model "
                    "with {model})",
                )
            if len(ids) != 1:
                raise TargetError.over_fields(
                    f"the {self.name} serves {len(ids)} models ({', '.join(map(str, ids))})",
                    hint="name the one to check with {model}",
                )
            self.model = str(ids[0])
        await self._detect()

    async def _detect(self) -> None:
        probe = "The quick brown fox jumps over the lazy dog."
        try:
            choice = await self._completion(
                {"prompt": probe, "max_tokens": 1, "echo": True, "logprobs": self.k}
            )
            pos = _parse_logprobs(choice.get("logprobs") or {})
            if len(pos) >= 3 and any(p.top for p in pos[1:]):
                self.flavor = "echo"
                return
        except TargetError as exc:
            echo_error = exc.message
        else:
            echo_error = "echo ignored: only the generated token came back with logprobs"
        ids = await self._tokenize(probe)
        if ids is None:
            self.why_no_logprobs = (
                f"no prompt logprobs: /v1/completions with echo+logprobs gave none ({echo_error}) "
                "and the server has no /tokenize to score a text token by token"
            )
            return
        try:
            choice = await self._completion(
                {"prompt": ids[:3], "max_tokens": 1, "logprobs": self.k}
            )
        except TargetError as exc:
            self.why_no_logprobs = f"no logprobs for a token-id prompt: {exc.message}"
            return
        pos = _parse_logprobs(choice.get("logprobs") or {})
        if not pos or not pos[0].top:
            self.why_no_logprobs = (
                '/v1/completions returns no top logprobs (the server ignores "logprobs")'
            )
            return
        self.flavor = "stepwise"

    async def _tokenize(self, text: str) -> list[int] | None:
        for key in [self._tokenize_body] if self._tokenize_body else ["content", "prompt"]:
            body: dict[str, Any] = {key: text}
            if key == "prompt":
                body["model"] = self.model
            status, data = await self._post("/tokenize", body)
            toks = data.get("tokens") if isinstance(data, dict) else None
            if status == 200 and isinstance(toks, list) and all(isinstance(t, int) for t in toks):
                self._tokenize_body = key
                return [int(t) for t in toks]
        return None

    # -- scoring -------------------------------------------------------------------------

    async def score(self, text: str) -> Scored:
        if self.flavor == "echo":
            choice = await self._completion(
                {"prompt": text, "max_tokens": 1, "echo": True, "logprobs": self.k}
            )
            pos = _parse_logprobs(choice.get("logprobs") or {})[:-1]  # the last: generated
            return Scored([p.token for p in pos], pos[1:])
        if self.flavor != "stepwise":
            raise TargetError(f"the {self.name} gives no logprobs: {self.why_no_logprobs}")
        ids = await self._tokenize(text)
        if ids is None or len(ids) < 2:
            raise TargetError(f"the {self.name} could not tokenize a text")
        positions: list[Position] = []
        for i in range(1, len(ids)):
            positions.append(await self._step(ids[:i], ids[i]))
        return Scored(list(ids), positions)

    async def _step(self, prefix: list[int], target: int) -> Position:
        top: dict[Key, float] = {}
        for k in (self.k, self.max_k):
            choice = await self._completion({"prompt": prefix, "max_tokens": 1, "logprobs": k})
            pos = _parse_logprobs(choice.get("logprobs") or {})
            top = pos[0].top if pos else {}
            if target in top or k >= self.max_k:
                break
        small = dict(sorted(top.items(), key=lambda kv: -kv[1])[: self.k])
        return Position(target, top.get(target), small)

    async def generate(self, prompt: str, max_tokens: int) -> Generated:
        choice = await self._completion(
            {"prompt": prompt, "max_tokens": max_tokens, "logprobs": 1, "seed": 0}
        )
        pos = _parse_logprobs(choice.get("logprobs") or {})
        return Generated(str(choice.get("text") or ""), [p.token for p in pos])
