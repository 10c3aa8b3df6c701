"""The ``trace`` dataset: requests at the times and of the lengths a trace file recorded.

Formats (``--trace-format``, told apart by the file when ``auto``):

- **Mooncake** JSONL (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``):
  each hash id stands for one block of :data:`MOONCAKE_BLOCK_TOKENS` prompt tokens, and equal
  ids become equal text, so a prefix cache meets the trace's own reuse. Tokens beyond the
  listed blocks are the request's own.
- **Azure LLM inference trace** CSV (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``;
  other columns ignored): random prompts of the given lengths (the trace holds no text).
- **servetune**'s own ``requests.jsonl`` (or the run directory holding it): every recorded
  request at its planned time with its planned lengths, random prompts (records keep no text).

Every line is checked: a malformed one is a :class:`DatasetError` naming the file, the line
and what was wrong, never skipped. Times are returned in seconds from the trace's first
request; the plan (:mod:`servetune.workload.plan`) applies the window and the time scale.
"""

from __future__ import annotations

import csv
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from servetune.errors import DatasetError
from servetune.results.conversation import MOONCAKE_BLOCK_TOKENS, TraceFormat
from servetune.results.schema import BenchConfig
from servetune.workload.random_prompts import exact_prompt
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import ApproxTokenizer, TokenCounter

_MOONCAKE = (
    'Mooncake JSONL: {"timestamp": MS, "input_length": N, "output_length": N, '
    '"hash_ids": [ids]} a line'
)
_AZURE = "Azure trace CSV: a header with TIMESTAMP,ContextTokens,GeneratedTokens, a row a request"
_SERVETUNE = "servetune requests.jsonl: the records of a run (or the run directory)"


def trace_path(cfg: BenchConfig) -> Path:
    if cfg.dataset_path is None:
        raise DatasetError.over_fields(
            "a trace dataset needs {dataset_path}=FILE",
            hint=f"a {_MOONCAKE}; an {_AZURE}; or a {_SERVETUNE}",
        )
    p = Path(cfg.dataset_path).expanduser()
    if p.is_dir():
        inner = p / "requests.jsonl"
        if inner.is_file():
            return inner
        raise DatasetError(f"{p} is a directory without requests.jsonl", hint=_SERVETUNE)
    if not p.is_file():
        raise DatasetError(f"trace file not found: {p}", hint=f"{_MOONCAKE}; {_AZURE}")
    return p


def detect_format(path: Path) -> TraceFormat:
    """The trace's format from its first non-empty line."""
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                break
        else:
            raise DatasetError(f"{path}: the trace file is empty", hint=f"{_MOONCAKE}; {_AZURE}")
    head = line.strip()
    if head.startswith(b"{"):
        try:
            obj = orjson.loads(head)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{path}:1: not valid JSON ({exc.msg})", hint=_MOONCAKE) from exc
        if isinstance(obj, dict) and "scheduled_ns" in obj:
            return "servetune"
        return "mooncake"
    if b"TIMESTAMP" in head.upper() or path.suffix.lower() == ".csv":
        return "azure"
    raise DatasetError.over_fields(
        f"{path}: cannot tell the trace's format from its first line {head[:80]!r}",
        hint=f"give {{trace_format}} mooncake, azure or servetune ({_MOONCAKE}; {_AZURE})",
    )


def trace_requests(cfg: BenchConfig, tok: TokenCounter) -> tuple[list[RequestSpec], np.ndarray]:
    """Every request of the trace and its time (s from the first request), in time order."""
    path = trace_path(cfg)
    fmt = cfg.trace.format if cfg.trace.format != "auto" else detect_format(path)
    if fmt == "mooncake":
        rows = _mooncake(path, cfg, tok)
    elif fmt == "azure":
        rows = _azure(path, cfg, tok)
    else:
        rows = _servetune(path, cfg, tok)
    if not rows:
        raise DatasetError(f"{path}: the trace holds no request", hint=f"{_MOONCAKE}; {_AZURE}")
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # stable: ties keep file order
    t = np.array([rows[i][0] for i in order], dtype=np.float64)
    return [rows[i][1] for i in order], t - t[0]


def _int_field(obj: dict[str, Any], key: str, where: str, least: int, hint: str) -> int:
    if key not in obj:
        raise DatasetError(f"{where}: no {key!r}", hint=hint)
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise DatasetError(f"{where}: {key!r} must be an integer, got {v!r}", hint=hint)
    if v < least:
        raise DatasetError(f"{where}: {key!r} must be ≥ {least}, got {v}", hint=hint)
    return int(v)


def _time_field(obj: dict[str, Any], key: str, where: str, hint: str) -> float:
    if key not in obj:
        raise DatasetError(f"{where}: no {key!r}", hint=hint)
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise DatasetError(f"{where}: {key!r} must be a number ≥ 0, got {v!r}", hint=hint)
    return float(v)


def _lines(path: Path, hint: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise DatasetError(f"{where}: not valid JSON ({exc.msg})", hint=hint) from exc
            if not isinstance(obj, dict):
                raise DatasetError(f"{where}: not a JSON object", hint=hint)
            out.append((where, obj))
    return out


_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over an array of uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


class _Blocks:
    """Text of each hash id's block: tokens drawn by hashing (seed, id, position), the same
    every time the id appears; a partial block is a prefix of its full block. Only the full
    blocks' text is kept (a long trace holds 10⁵ distinct ids)."""

    def __init__(self, tok: TokenCounter, seed: int) -> None:
        self.tok = tok
        self.pool = np.asarray(tok.sample_ids(), dtype=np.int64)
        self.words = (
            np.asarray(tok.words, dtype=object) if isinstance(tok, ApproxTokenizer) else None
        )
        self.base = _splitmix(np.array([seed & 0xFFFFFFFF], dtype=np.uint64))[0]
        self.pos = np.arange(MOONCAKE_BLOCK_TOKENS, dtype=np.uint64)
        self._full: dict[int, str] = {}

    def draws(self, hid: int) -> np.ndarray:
        with np.errstate(over="ignore"):
            key = _splitmix(np.array([hid & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64) ^ self.base)[0]
            h = _splitmix(self.pos + key * np.uint64(MOONCAKE_BLOCK_TOKENS))
        out: np.ndarray = (h % np.uint64(len(self.pool))).astype(np.int64)
        return out

    def _decode(self, draws: np.ndarray) -> str:
        if self.words is not None:  # the approximate counter's words: one token each
            return " ".join(self.words[draws].tolist())
        return self.tok.decode(self.pool[draws].tolist())

    def text(self, hid: int, n: int) -> str:
        if n >= MOONCAKE_BLOCK_TOKENS:
            got = self._full.get(hid)
            if got is None:
                got = self._full[hid] = self._decode(self.draws(hid))
            return got
        return self._decode(self.draws(hid)[:n])


def _mooncake(path: Path, cfg: BenchConfig, tok: TokenCounter) -> list[tuple[float, RequestSpec]]:
    blocks = _Blocks(tok, cfg.seed)
    rng = np.random.default_rng([cfg.seed, 0x3008])
    B = MOONCAKE_BLOCK_TOKENS
    rows = []
    for where, obj in _lines(path, _MOONCAKE):
        ts = _time_field(obj, "timestamp", where, _MOONCAKE) / 1000.0
        n_in = _int_field(obj, "input_length", where, 1, _MOONCAKE)
        n_out = _int_field(obj, "output_length", where, 1, _MOONCAKE)
        hids = obj.get("hash_ids", [])
        if not isinstance(hids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hids
        ):
            raise DatasetError(f"{where}: 'hash_ids' must be a list of integers", hint=_MOONCAKE)
        need = -(-n_in // B)
        if len(hids) > need:
            raise DatasetError(
                f"{where}: {len(hids)} hash_ids for input_length {n_in}: at most "
                f"ceil({n_in}/{B}) = {need} blocks of {B} tokens",
                hint="each hash id is one block of 512 prompt tokens (Mooncake's block size)",
            )
        parts = []
        for b, h in enumerate(hids):
            parts.append(blocks.text(h, min(B, n_in - b * B)))
        rest = n_in - len(hids) * B
        if rest > 0:  # tokens no hash id covers: this request's own
            parts.append(exact_prompt(tok, rest, rng)[0])
        text = " ".join(parts)
        # under the approximate counter each drawn word is one token: the count is n_in
        count = n_in if blocks.words is not None else tok.count(text)
        rows.append((ts, RequestSpec(prompt=text, input_len=count, output_len=n_out)))
    return rows


def _azure_time(v: str, where: str) -> float:
    s = v.strip()
    try:
        return float(s)
    except ValueError:
        pass
    # "2023-11-16 18:15:46.6805900": seven fraction digits, one more than datetime reads
    head, dot, frac = s.partition(".")
    try:
        base = datetime.fromisoformat(head.replace("T", " "))
    except ValueError:
        raise DatasetError(
            f"{where}: TIMESTAMP {v!r} is neither a date-time (2023-11-16 18:15:46.680) nor "
            "a number of seconds",
            hint=_AZURE,
        ) from None
    frac_s = 0.0
    if dot:
        digits = frac.rstrip("Z")
        if not digits.isdigit():
            raise DatasetError(f"{where}: TIMESTAMP {v!r}: bad fraction of a second", hint=_AZURE)
        frac_s = int(digits) / 10 ** len(digits)
    return base.timestamp() + frac_s


def _azure(path: Path, cfg: BenchConfig, tok: TokenCounter) -> list[tuple[float, RequestSpec]]:
    rng = np.random.default_rng([cfg.seed, 0x3009])
    rows = []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise DatasetError(f"{path}: the trace file is empty", hint=_AZURE)
        cols = {c.strip(): i for i, c in enumerate(header)}
        missing = [c for c in ("TIMESTAMP", "ContextTokens", "GeneratedTokens") if c not in cols]
        if missing:
            raise DatasetError(
                f"{path}:1: the header lacks {', '.join(missing)} (got {', '.join(header)})",
                hint=_AZURE,
            )
        ti, ci, gi = cols["TIMESTAMP"], cols["ContextTokens"], cols["GeneratedTokens"]
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < len(header):
                raise DatasetError(
                    f"{where}: {len(row)} columns, the header has {len(header)}", hint=_AZURE
                )
            ts = _azure_time(row[ti], where)
            vals = []
            for name, i, least in (("ContextTokens", ci, 1), ("GeneratedTokens", gi, 1)):
                try:
                    v = int(row[i].strip())
                except ValueError:
                    raise DatasetError(
                        f"{where}: {name} {row[i]!r} is not an integer", hint=_AZURE
                    ) from None
                if v < least:
                    raise DatasetError(f"{where}: {name} must be ≥ {least}, got {v}", hint=_AZURE)
                vals.append(v)
            text, count = exact_prompt(tok, vals[0], rng)
            rows.append((ts, RequestSpec(prompt=text, input_len=count, output_len=vals[1])))
    return rows


def _servetune(path: Path, cfg: BenchConfig, tok: TokenCounter) -> list[tuple[float, RequestSpec]]:
    rng = np.random.default_rng([cfg.seed, 0x300A])
    rows = []
    for where, obj in _lines(path, _SERVETUNE):
        sched = _int_field(obj, "scheduled_ns", where, -(10**12), _SERVETUNE)
        n_in = _int_field(obj, "planned_input_len", where, 1, _SERVETUNE)
        key = "planned_output_len" if obj.get("planned_output_len") is not None else "output_tokens"
        n_out = _int_field(obj, key, where, 1, _SERVETUNE)
        text, count = exact_prompt(tok, n_in, rng)
        rows.append((sched / 1e9, RequestSpec(prompt=text, input_len=count, output_len=n_out)))
    return rows
