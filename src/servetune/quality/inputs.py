"""What a quality check reads: texts for perplexity and KL (``--texts``; default the built-in
English paragraphs, ``data/texts.jsonl``) and the user's business samples (``--samples``).

Texts: a ``.jsonl`` file of ``{"text": …}`` objects, or plain text with paragraphs separated by
blank lines. Samples: ``.jsonl``, one object a line::

    {"prompt": "…", "expected": "…", "check": "exact" | "contains" | "regex" | "json",
     "max_tokens": 64, "name": "…"}

``exact`` compares the whitespace-stripped output; ``contains`` looks for ``expected`` in it;
``regex`` searches it with ``expected`` (Python syntax); ``json`` needs the output (stripped) to
parse as JSON (``expected`` unused). A malformed line is an error naming the line.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from servetune.errors import DatasetError

Check = Literal["exact", "contains", "regex", "json"]


class Sample(BaseModel):
    name: str
    prompt: str
    expected: str = ""
    check: Check = "contains"
    max_tokens: int = 64

    def passes(self, output: str) -> bool:
        out = output.strip()
        if self.check == "exact":
            return out == self.expected.strip()
        if self.check == "contains":
            return self.expected in output
        if self.check == "regex":
            return re.search(self.expected, output) is not None
        try:
            json.loads(out)
        except ValueError:
            return False
        return True


def builtin_texts() -> list[str]:
    text = resources.files("servetune.quality.data").joinpath("texts.jsonl").read_text("utf-8")
    return [json.loads(line)["text"] for line in text.splitlines() if line.strip()]


def load_texts(path: str | Path | None, n: int) -> tuple[list[str], str]:
    """Up to ``n`` texts and where they came from."""
    if n < 2:
        raise DatasetError.over_fields(
            f"{{prompts}} must be ≥ 2 (got {n}: the noise floor needs texts to vary over)"
        )
    if path is None:
        built = builtin_texts()
        return built[:n], f"servetune's built-in English paragraphs ({min(n, len(built))})"
    p = Path(path).expanduser()
    raw = _read_text(p, "texts")
    texts: list[str] = []
    if p.suffix == ".jsonl":
        for i, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                texts.append(str(obj["text"]))
            except (ValueError, KeyError, TypeError):
                raise DatasetError(
                    f'{p}:{i}: not a JSON object with a "text"',
                    hint='one {"text": "…"} a line, or a plain text file with blank lines '
                    "between paragraphs",
                ) from None
    else:
        texts = [t.strip() for t in re.split(r"\n\s*\n", raw) if t.strip()]
    texts = [t for t in texts if len(t.split()) >= 4]
    if len(texts) < 2:
        raise DatasetError(f"{p} holds fewer than two texts of four words or more")
    return texts[:n], f"{p} ({min(n, len(texts))} texts)"


def _read_text(p: Path, field: str) -> str:
    """The UTF-8 text of the file FIELD names; a missing, unreadable or binary file is a
    DatasetError over that field."""
    name = "{" + field + "}"
    try:
        return p.read_text("utf-8")
    except OSError as exc:
        raise DatasetError.over_fields(
            f"cannot read {name} {p}: {exc.strerror or exc}",
            hint=f"give {name} a readable text file",
        ) from None
    except UnicodeDecodeError as exc:
        raise DatasetError.over_fields(
            f"{name} {p} is not UTF-8 text (byte {exc.start}: {exc.reason})",
            hint=f"give {name} a text file (.jsonl or plain text), not a binary one",
        ) from None


def load_samples(path: str | Path) -> list[Sample]:
    p = Path(path).expanduser()
    lines = _read_text(p, "samples").splitlines()
    out: list[Sample] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
            obj.setdefault("name", f"line {i}")
            s = Sample.model_validate(obj)
            if s.check == "regex":
                re.compile(s.expected)
        except (ValueError, ValidationError, re.error) as exc:
            first = str(exc).splitlines()[0]
            raise DatasetError(
                f"{p}:{i}: not a business sample ({first})",
                hint='{"prompt": "…", "expected": "…", "check": "exact|contains|regex|json"}',
            ) from None
        out.append(s)
    if not out:
        raise DatasetError(f"{p} holds no sample")
    return out
