"""A recorded server command line read back into knob values.

Reads ``vllm serve MODEL …``, ``python -m vllm.entrypoints.openai.api_server --model …``,
``python -m sglang.launch_server …``, ``text-generation-launcher …``, ``llama-server …``,
``servetune sim serve …``, ``trtllm-serve …`` — whatever an engine's profile recognises — or
just the flags (with the engine given). Every spelling the engine has had is read
(``--enable-chunked-prefill false`` and ``--no-enable-chunked-prefill`` alike; ``--flag=value``;
``_`` for ``-`` where the engine's parser reads both); leading ``VAR=value`` assignments are
read as the environment, and a YAML side file the line names, when it exists here. Flags
that are not knobs (ports, API keys, logging) are listed as ignored, never an error: a real
command line carries many.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import PurePath

import yaml

from servetune.errors import ConfigError
from servetune.knobs.model import KnobValue, Spelling
from servetune.knobs.registry import check_engine, check_value, knob
from servetune.knobs.table import KNOBS
from servetune.profiles import PROFILES, entry_examples, profile, recognise

_MODEL_FLAGS = {"--model", *(f for p in PROFILES if (f := p.entry.model_flag))}
_NAME_FLAGS = {"--alias", *(f for p in PROFILES if (f := p.launch.name_flag))}


@dataclass
class ParsedCommand:
    """What a command line sets: the engine, the model and the knobs (engine-neutral)."""

    engine: str
    values: dict[str, KnobValue] = field(default_factory=dict)
    model: str | None = None
    served_model_name: str | None = None
    entry: str = ""
    ignored: list[str] = field(default_factory=list)
    """Tokens that set no knob (ports, keys, logging …), as given."""
    notes: list[str] = field(default_factory=list)
    """How a value was read where it is not one flag for one knob."""


def _detect(tokens: list[str]) -> tuple[str | None, str, list[str], str | None]:
    """(engine or None, the entry in words, the remaining tokens, a positional model)."""
    if not tokens:
        return None, "", [], None
    found = recognise(tokens)
    if found is not None:
        prof, words, rest, model = found
        return prof.id, words, rest, model
    if tokens[0].startswith("-"):
        return None, "flags", tokens, None
    examples = ", ".join(f'"{e}"' for e in entry_examples())
    raise ConfigError(
        f"not an engine's command line: {' '.join(tokens[:3])} …",
        hint=f"give {examples}, or just the flags with the engine",
        code="knob.command",
    )


def _compatible(given: str, detected: str) -> bool:
    return given == detected or detected in profile(given).reads_as


def _table(engine: str) -> dict[str, tuple[str, Spelling]]:
    """Every flag (and alias) the engine has had → (knob, spelling); env vars keyed as such."""
    out: dict[str, tuple[str, Spelling]] = {}
    for k in KNOBS:
        # newest first: where a flag changed its form, the current form reads it
        for s in reversed(k.spellings.get(engine, ())):
            if not isinstance(s, Spelling):
                continue
            if s.env:
                out.setdefault("env:" + s.env, (k.name, s))
                continue
            if s.yaml:
                out.setdefault("yaml:" + s.yaml, (k.name, s))
                continue
            for f in (s.flag, *s.aliases, *s.also):
                out.setdefault(f, (k.name, s))
    return out


def _shared(engine: str) -> dict[str, list[tuple[str, Spelling]]]:
    """Flags that set a second knob too (SGLang's --chunked-prefill-size N: chunked prefill
    on, and its chunk N), the later knobs of the table by flag."""
    first: dict[str, str] = {}
    out: dict[str, list[tuple[str, Spelling]]] = {}
    for k in KNOBS:
        for s in k.spellings.get(engine, ()):
            if not isinstance(s, Spelling) or s.env:
                continue
            owner = first.setdefault(s.flag, k.name)
            if owner != k.name:
                out.setdefault(s.flag, []).append((k.name, s))
    return out


def _norm(engine: str, tok: str) -> tuple[str, str | None]:
    name, eq, value = tok.partition("=")
    if profile(engine).entry.flag_form == "dash" and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, (value if eq else None)


def _reverse(s: Spelling, word: str, choices: tuple[str, ...]) -> str:
    """The engine-neutral value of an engine's WORD (the word itself when it is one)."""
    if word in choices:
        return word
    for neutral, engine_word in s.values.items():
        if engine_word == word:
            return neutral
    return word


def parse_command(line: str | list[str], engine: str | None = None) -> ParsedCommand:
    """The knob values of a server command line (see the module docstring). ENGINE: the
    engine when the line is only flags, or to tell vLLM's CPU build from vLLM."""
    try:
        tokens = shlex.split(line.replace("\\\n", " ")) if isinstance(line, str) else list(line)
    except ValueError as exc:  # an unclosed quote or a trailing backslash
        raise ConfigError(
            f"the command line {line!r} cannot be split into words: {exc}",
            hint="close the quote (the whole command line goes in one pair of quotes, e.g. "
            "'vllm serve MODEL --max-num-seqs 256')",
            code="knob.command",
        ) from None
    env: dict[str, str] = {}
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        key, _, val = tokens.pop(0).partition("=")
        env[key] = val
    if tokens and PurePath(tokens[0]).name == "env":
        tokens.pop(0)
        while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
            key, _, val = tokens.pop(0).partition("=")
            env[key] = val
    detected, entry, rest, model = _detect(tokens)
    if engine is not None:
        engine = check_engine(engine)
        if detected is not None and not _compatible(engine, detected):
            raise ConfigError(
                f"the command line is {detected}'s ({entry}), not {engine}'s",
                hint=f"drop the engine, or give {engine}'s command line",
                code="knob.command",
            )
    name = engine or detected or "vllm"
    out = ParsedCommand(engine=name, entry=entry or "flags", model=model)
    table = _table(name)
    side_flag = profile(name).launch.side_file_flag
    shared = _shared(name)
    for var, raw in env.items():
        hit = table.get("env:" + var)
        value = None if hit is None else _read(hit[0], hit[1], raw, out)
        if hit is not None and value is not None:  # None: "auto", the engine's default
            out.values[hit[0]] = value
    i = 0
    while i < len(rest):
        tok = rest[i]
        nxt = rest[i + 1] if i + 1 < len(rest) else None
        if not tok.startswith("-") or _is_number(tok):
            out.ignored.append(tok)
            i += 1
            continue
        flag, inline = _norm(name, tok)
        if flag == side_flag:
            given = inline if inline is not None else nxt
            if given is None:
                raise ConfigError(f"{flag} needs a file", code="knob.command")
            _read_side_file(given, table, out)
            i += 1 if inline is not None else 2
            continue
        if flag in _MODEL_FLAGS | _NAME_FLAGS:
            given = inline if inline is not None else nxt
            if given is None:
                raise ConfigError(f"{flag} needs a value", code="knob.command")
            if flag in _MODEL_FLAGS:
                out.model = given
            else:
                out.served_model_name = given
            i += 1 if inline is not None else 2
            continue
        negated = flag.startswith("--no-") and ("--" + flag[5:]) in table
        hit = table.get("--" + flag[5:] if negated else flag)
        if hit is None:
            out.ignored.append(tok)
            if inline is None and nxt is not None and (not nxt.startswith("-") or _is_number(nxt)):
                out.ignored[-1] += f" {nxt}"
                i += 1
            i += 1
            continue
        kname, s = hit
        used = 1
        if s.style == "json_key":
            arg = inline if inline is not None else nxt
            if arg is None:
                raise ConfigError(f"{flag} needs a JSON object", code="knob.command")
            _read_json(name, s.flag, arg, out)
            i += 1 if inline is not None else 2
            continue
        if negated:
            value = False if s.style != "switch" else not s.on
        elif s.style in ("bool_optional", "bool_value", "switch"):
            word = inline
            if word is None and nxt is not None and _is_bool_word(s, nxt):
                word, used = nxt, 2
            if word is None:
                value = s.on if s.style == "switch" else True
            else:
                value = _bool(s, word, flag)
                if value is not None and s.style == "switch" and not s.on:
                    value = not value
        elif s.style == "list":
            items: list[str] = [inline] if inline is not None else []
            j = i + 1
            while inline is None and j < len(rest) and not rest[j].startswith("-"):
                items.append(rest[j])
                j += 1
            if not items:
                raise ConfigError(f"{flag} needs values", code="knob.command")
            used = 1 if inline is not None else j - i
            value = _read(kname, s, ",".join(items), out)
        else:
            arg = inline if inline is not None else nxt
            if arg is None:
                raise ConfigError(
                    f"{flag} needs a value", hint=f"e.g. {flag} 256", code="knob.command"
                )
            used = 1 if inline is not None else 2
            value = _read(kname, s, arg, out)
        if value is not None:
            out.values[kname] = value
        if s.style == "off_value" and value:
            given = inline if inline is not None else nxt
            for k2, s2 in shared.get(flag, ()):
                if given is not None:
                    v2 = _read(k2, s2, given, out)
                    if v2 is not None:
                        out.values[k2] = v2
        i += used
    _finish(out, table)
    return out


def _read_json(engine: str, flag: str, raw: str, out: ParsedCommand) -> None:
    """The knobs spelled as keys of the JSON flag FLAG, read from its object RAW; keys that
    are no knob of the registry are listed as ignored."""
    try:
        obj = json.loads(raw)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise ConfigError(
            f"{flag} {raw!r} is not a JSON object",
            hint=f"""e.g. {flag} '{{"method": "mtp", "num_speculative_tokens": 1}}'""",
            code="knob.value",
        )
    keys: dict[str, tuple[str, Spelling]] = {}
    for k in KNOBS:
        for s in k.spellings.get(engine, ()):
            if isinstance(s, Spelling) and s.style == "json_key" and s.flag == flag:
                keys.setdefault(s.key, (k.name, s))
    for key, value in obj.items():
        hit = keys.get(key)
        if hit is None:
            out.ignored.append(f"{flag} {key}={value!r}")
            continue
        kname, s = hit
        got = _read(kname, s, value, out) if isinstance(value, str) else check_value(kname, value)
        if got is not None:
            out.values[kname] = got


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _is_bool_word(s: Spelling, tok: str) -> bool:
    words = {w.lower() for w in s.words} | {"true", "false", "1", "0", "yes", "no", "on", "off"}
    if s.style == "bool_value":
        words.add("auto")
    return tok.lower() in words


def _bool(s: Spelling, raw: str, flag: str) -> bool | None:
    """On, off, or None for "auto" (the engine decides: its default)."""
    low = raw.lower()
    if low in (s.words[0].lower(), "true", "1", "yes", "on"):
        return True
    if low in (s.words[1].lower(), "false", "0", "no", "off"):
        return False
    if low == "auto":
        return None
    raise ConfigError(f"{flag} {raw!r}: expected on or off", code="knob.value")


def _read(kname: str, s: Spelling, raw: str, out: ParsedCommand) -> KnobValue | None:
    k = knob(kname)
    if s.style == "off_value":
        return raw.strip() != s.off
    if s.style == "slots_total":
        out.notes.append(f"{s.flag} {raw} is the context of all slots; divided by -np")
        return check_value("max_model_len", raw)
    if s.style in ("bool_value",) or k.type == "bool":
        return _bool(s, raw, s.flag)
    if k.type in ("choice",):
        return check_value(kname, _reverse(s, raw.strip(), k.choices))
    try:
        return check_value(kname, raw)
    except ConfigError as exc:
        raise ConfigError(
            f"{s.flag} {raw!r}: {exc.message.split(': ', 1)[-1]}",
            hint=f"fix {s.flag} in the command line",
            code="knob.value",
        ) from None


def _read_side_file(path: str, table: dict[str, tuple[str, Spelling]], out: ParsedCommand) -> None:
    """The knobs a YAML side file sets (when it exists here; else a note says so)."""
    try:
        data = yaml.safe_load(open(path, encoding="utf-8").read())  # noqa: SIM115
    except OSError:
        out.notes.append(f"{path}: not readable here; the options in it were not read")
        return
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{path} is not valid YAML: {exc}", hint="fix the side file", code="knob.command"
        ) from None
    flat: dict[str, object] = {}

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                walk(child, f"{prefix}{key}.")
        else:
            flat[prefix.rstrip(".")] = node

    walk(data, "")
    for dotted, raw in flat.items():
        hit = table.get("yaml:" + dotted)
        if hit is None:
            out.ignored.append(f"{dotted}: {raw}")
            continue
        kname, s = hit
        value = check_value(
            kname, _reverse(s, raw, knob(kname).choices) if isinstance(raw, str) else raw
        )
        if value is not None:
            out.values[kname] = value


def _finish(out: ParsedCommand, table: dict[str, tuple[str, Spelling]]) -> None:
    """Values that need the whole line: a context given for all slots (llama.cpp's -c)."""
    if "max_model_len" not in out.values:
        return
    if not any(k == "max_model_len" and s.style == "slots_total" for k, s in table.values()):
        return
    total = out.values["max_model_len"]
    slots = out.values.get("max_num_seqs")
    if slots:
        assert isinstance(total, int) and isinstance(slots, int)  # int knobs, checked as read
        out.values["max_model_len"] = max(1, total // slots)
    else:
        out.notes.append("-np not given: the whole -c counted as one request's limit")
