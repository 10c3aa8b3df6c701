"""The ``multiturn`` dataset from real conversations (``--dataset-path FILE``).

Two formats, told apart by the file's first character:

- ShareGPT (a JSON array): each entry's ``conversations`` list; a ``system`` turn is the system
  prompt, each human turn followed by an assistant turn is a turn of the session, the
  assistant's length its ``max_tokens`` (unless ``--sharegpt-output-len`` fixes it). The
  dataset's own answers are not sent: each later prompt holds the answers the server returned.
- JSONL, one session a line: ``{"session_id": "...", "system": "...", "turns": [{"user":
  "...", "output_len": N, "think_s": S}]}`` (``session_id``, ``system``, ``output_len`` and
  ``think_s`` optional), or ``{"messages": [{"role": "system"|"user"|"assistant", "content":
  "..."}]}`` where each assistant message's length is the answer's ``max_tokens``.

A think time not given by the file is drawn as for synthetic sessions
(``--multiturn-think-time``). A malformed entry is an error naming the file and the line or
entry; a conversation with no user turn is skipped (like ``vllm bench serve``'s ShareGPT).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from servetune.errors import DatasetError
from servetune.results.schema import BenchConfig
from servetune.workload.datasets.multiturn import session_id, think_times
from servetune.workload.sessions import Session, Turn
from servetune.workload.tokens import TokenCounter

_HUMAN = {"human", "user"}
_BOT = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
_JSONL_SHAPE = (
    'one session a line: {"turns": [{"user": "...", "output_len": 128}]} (optional '
    '"session_id", "system", "think_s"), or {"messages": [{"role": "user", "content": "..."}, '
    '{"role": "assistant", "content": "..."}]}'
)
_SHAREGPT_SHAPE = (
    'a JSON array of {"conversations": [{"from": "human", "value": "..."}, '
    '{"from": "gpt", "value": "..."}]}'
)

RawTurn = tuple[str, int | None, float | None, str | None]
"""(user text, answer max_tokens or None, think s or None, the reference answer or None)."""
Raw = tuple[str | None, str, list[RawTurn]]
"""(id, system prompt, turns)."""


def _text(v: Any, where: str, what: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # OpenAI content parts
        return "".join(str(x.get("text", "")) for x in v if isinstance(x, dict))
    raise DatasetError(f"{where}: {what} is not a string (got {type(v).__name__})")


def _sharegpt(data: Any, path: Path) -> list[Raw]:
    if not isinstance(data, list):
        raise DatasetError(
            f"{path}: expected a JSON array of conversations, found {type(data).__name__}",
            hint=_SHAREGPT_SHAPE,
        )
    out: list[Raw] = []
    for i, entry in enumerate(data):
        where = f"{path}: entry {i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
            raise DatasetError(f"{where} has no 'conversations' list", hint=_SHAREGPT_SHAPE)
        system = ""
        turns: list[RawTurn] = []
        msgs = entry["conversations"]
        for j, m in enumerate(msgs):
            if not isinstance(m, dict):
                raise DatasetError(f"{where}, turn {j}: not an object", hint=_SHAREGPT_SHAPE)
            role = str(m.get("from", "")).lower()
            value = _text(m.get("value"), f"{where}, turn {j}", "'value'")
            if role == "system" and not turns:
                system = value
            elif role in _HUMAN:
                nxt = msgs[j + 1] if j + 1 < len(msgs) else None
                reply = nxt if isinstance(nxt, dict) else {}
                if str(reply.get("from", "")).lower() in _BOT:
                    answer = _text(reply.get("value"), f"{where}, turn {j + 1}", "'value'")
                    turns.append((value, None, None, answer))
        if turns:
            sid = entry.get("id")
            out.append((str(sid) if sid is not None else None, system, turns))
    return out


def _jsonl_line(obj: Any, where: str) -> Raw | None:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: not a JSON object", hint=_JSONL_SHAPE)
    sid = obj.get("session_id", obj.get("id"))
    sid_s = None if sid is None else str(sid)
    if "turns" in obj:
        if not isinstance(obj["turns"], list) or not obj["turns"]:
            raise DatasetError(f"{where}: 'turns' must be a non-empty list", hint=_JSONL_SHAPE)
        system = _text(obj.get("system", ""), where, "'system'")
        turns: list[RawTurn] = []
        for j, t in enumerate(obj["turns"]):
            w = f"{where}, turn {j}"
            if not isinstance(t, dict) or "user" not in t:
                raise DatasetError(f"{w}: expected an object with 'user'", hint=_JSONL_SHAPE)
            out_len = t.get("output_len", t.get("max_tokens"))
            if out_len is not None and (
                not isinstance(out_len, int) or isinstance(out_len, bool) or out_len < 1
            ):
                raise DatasetError(f"{w}: output_len must be a positive integer, got {out_len!r}")
            think = t.get("think_s")
            if think is not None and (
                isinstance(think, bool) or not isinstance(think, int | float) or not think >= 0
            ):
                raise DatasetError(f"{w}: think_s must be a number ≥ 0, got {think!r}")
            turns.append((_text(t["user"], w, "'user'"), out_len, think, None))
        return sid_s, system, turns
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise DatasetError(f"{where}: neither 'turns' nor 'messages'", hint=_JSONL_SHAPE)
    system = ""
    turns = []
    for j, m in enumerate(msgs):
        w = f"{where}, message {j}"
        if not isinstance(m, dict) or "role" not in m:
            raise DatasetError(f"{w}: expected an object with 'role' and 'content'")
        role, content = str(m["role"]).lower(), _text(m.get("content", ""), w, "'content'")
        if role == "system" and not turns:
            system = content
        elif role == "user":
            nxt = msgs[j + 1] if j + 1 < len(msgs) else None
            if isinstance(nxt, dict) and str(nxt.get("role", "")).lower() == "assistant":
                answer = _text(nxt.get("content", ""), f"{where}, message {j + 1}", "'content'")
                turns.append((content, None, None, answer))
            else:
                turns.append((content, None, None, None))
    return (sid_s, system, turns) if turns else None


def _read(path: Path) -> list[Raw]:
    if path.is_dir():
        raise DatasetError(f"{path} is a directory, not a conversations file", hint=_JSONL_SHAPE)
    if not path.is_file():
        raise DatasetError.over_fields(
            f"conversations file not found: {path}",
            hint="{dataset_path} of multiturn sessions is a ShareGPT JSON array or a "
            "JSONL of sessions; leave {dataset_path} out for synthetic sessions",
        )
    raw = path.read_bytes()
    if raw.lstrip()[:1] == b"[":
        try:
            return _sharegpt(orjson.loads(raw), path)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(
                f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})",
                hint=_SHAREGPT_SHAPE,
            ) from exc
    out: list[Raw] = []
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc.msg})", hint=_JSONL_SHAPE) from exc
        got = _jsonl_line(obj, where)
        if got is not None:
            out.append(got)
    return out


def file_sessions(cfg: BenchConfig, tok: TokenCounter, n: int) -> list[Session]:
    """``n`` sessions from the file, in an order drawn from ``cfg.seed`` (cycled, each under
    an id of its own, when the file holds fewer)."""
    assert cfg.dataset_path is not None
    path = Path(cfg.dataset_path).expanduser()
    raws = _read(path)
    if not raws:
        raise DatasetError(
            f"{path}: no conversation with a user turn",
            hint=_SHAREGPT_SHAPE + "; or " + _JSONL_SHAPE,
        )
    rng = np.random.default_rng([cfg.seed, 0xC0DE])
    order = rng.permutation(len(raws))
    systems: dict[str, int] = {}
    made: dict[int, Session] = {}
    sessions: list[Session] = []
    for i in range(n):
        k = int(order[i % len(raws)])
        base = made.get(k)
        if base is None:
            base = made[k] = _session(raws[k], cfg, tok, rng, systems)
        own = "".join(c for c in base.sid if c.isascii() and (c.isalnum() or c in "._-"))[:64]
        sid = session_id(cfg.seed, i) + (f"-{own}" if own else "")
        sessions.append(base.model_copy(update={"sid": sid}))
    return sessions


def _session(
    raw: Raw,
    cfg: BenchConfig,
    tok: TokenCounter,
    rng: np.random.Generator,
    systems: dict[str, int],
) -> Session:
    sid, system, turns = raw
    thinks = think_times(cfg, len(turns), rng)
    out: list[Turn] = []
    for j, (user, out_len, think, answer) in enumerate(turns):
        if cfg.sharegpt_output_len:
            n_out = cfg.sharegpt_output_len
        elif out_len is not None:
            n_out = out_len
        elif answer is not None:  # the reference answer's length (its text is not sent)
            n_out = max(1, tok.count(answer))
        else:
            n_out = cfg.random_output_len
        t = 0.0 if j == 0 else float(think if think is not None else thinks[j])
        out.append(Turn(user=user, user_tokens=tok.count(user), output_len=n_out, think_s=t))
    sys_id = systems.setdefault(system, len(systems)) if system else None
    return Session(
        sid=sid or "",
        system=system,
        system_tokens=tok.count(system) if system else 0,
        system_id=sys_id,
        turns=out,
    )
