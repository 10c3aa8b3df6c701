"""The ``sharegpt`` dataset: a ShareGPT-format JSON file of conversations.

Each entry's first human turn is the prompt; the token count of the reply that follows it is
the reference output length (unless ``--sharegpt-output-len`` fixes it). Pairs whose prompt or
reply is under 4 tokens are skipped, as ``vllm bench serve`` does.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from servetune.errors import DatasetError
from servetune.results.schema import BenchConfig
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import TokenCounter

_HUMAN = {"human", "user"}
_BOT = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}


def _load(path: Path) -> list[Any]:
    if not path.is_file():
        raise DatasetError.over_fields(
            f"ShareGPT file not found: {path}",
            hint="give {dataset_path} a JSON file holding a list of {'conversations': [...]}",
        )
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise DatasetError.over_fields(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})",
            hint="a ShareGPT file is one JSON array; "
            "for one object per line use {dataset_name}=jsonl",
        ) from exc
    if not isinstance(data, list):
        raise DatasetError(
            f"{path}: expected a JSON array of conversations, found {type(data).__name__}"
        )
    return data


def _pair(entry: Any, index: int, path: Path) -> tuple[str, str] | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise DatasetError(
            f"{path}: entry {index} has no 'conversations' list",
            hint='each entry must look like {"conversations": [{"from": "human", "value": "..."}, '
            '{"from": "gpt", "value": "..."}]}',
        )
    turns = entry["conversations"]
    for a, b in itertools.pairwise(turns):
        if not (isinstance(a, dict) and isinstance(b, dict)):
            raise DatasetError(f"{path}: entry {index}: a turn is not an object")
        role_a, role_b = str(a.get("from", "")).lower(), str(b.get("from", "")).lower()
        if role_a in _HUMAN and role_b in _BOT:
            va, vb = a.get("value"), b.get("value")
            if not isinstance(va, str) or not isinstance(vb, str):
                raise DatasetError(f"{path}: entry {index}: a turn's 'value' is not a string")
            return va, vb
    return None


def sharegpt_requests(cfg: BenchConfig, tok: TokenCounter, n: int) -> list[RequestSpec]:
    assert cfg.dataset_path is not None
    path = Path(cfg.dataset_path).expanduser()
    data = _load(path)
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(data))
    specs: list[RequestSpec] = []
    for idx in order:
        pair = _pair(data[int(idx)], int(idx), path)
        if pair is None:
            continue
        prompt, reply = pair
        p_len = tok.count(prompt)
        o_len = cfg.sharegpt_output_len or tok.count(reply)
        if p_len < 4 or o_len < 4:
            continue
        specs.append(RequestSpec(prompt=prompt, input_len=p_len, output_len=o_len))
        if len(specs) >= n:
            break
    if not specs:
        raise DatasetError(
            f"{path}: no usable human→assistant pair (each side needs at least 4 tokens)"
        )
    while len(specs) < n:  # fewer pairs than prompts asked: reuse them in the same order
        specs.append(specs[len(specs) % max(1, len(specs))])
    return specs[:n]
