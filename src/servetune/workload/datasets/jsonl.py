"""The ``jsonl`` dataset: one JSON object a line with ``prompt`` or ``messages``.

Optional ``output_len`` (or ``max_tokens``) per line; otherwise ``--random-output-len``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from servetune.errors import DatasetError
from servetune.results.schema import BenchConfig
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import TokenCounter

_EXPECTED = (
    'expected {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}, '
    'with an optional "output_len": N'
)


def _parse_line(obj: Any, where: str, default_out: int, tok: TokenCounter) -> RequestSpec:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: not a JSON object; {_EXPECTED}")
    out = obj.get("output_len", obj.get("max_tokens", default_out))
    if not isinstance(out, int) or isinstance(out, bool) or out < 1:
        raise DatasetError(f"{where}: output_len must be a positive integer, got {out!r}")
    if isinstance(obj.get("prompt"), str):
        prompt = obj["prompt"]
        return RequestSpec(prompt=prompt, input_len=tok.count(prompt), output_len=out)
    msgs = obj.get("messages")
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) and "role" in m for m in msgs):
        spec = RequestSpec(messages=msgs, input_len=0, output_len=out)
        return spec.model_copy(update={"input_len": tok.count(spec.text())})
    raise DatasetError(f"{where}: {_EXPECTED}")


def jsonl_requests(cfg: BenchConfig, tok: TokenCounter, n: int) -> list[RequestSpec]:
    assert cfg.dataset_path is not None
    path = Path(cfg.dataset_path).expanduser()
    if path.is_dir():  # was "not found", sending the user looking for a path that exists
        raise DatasetError(f"{path} is a directory, not a JSONL file", hint=_EXPECTED)
    if not path.is_file():
        raise DatasetError(f"JSONL file not found: {path}", hint=_EXPECTED)
    specs: list[RequestSpec] = []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise DatasetError(f"{where}: not valid JSON ({exc.msg})", hint=_EXPECTED) from exc
            specs.append(_parse_line(obj, where, cfg.random_output_len, tok))
    if not specs:
        raise DatasetError(f"{path}: the file holds no requests", hint=_EXPECTED)
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(specs))
    return [specs[int(order[i % len(specs)])] for i in range(n)]
