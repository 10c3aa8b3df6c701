"""One JSON result file on disk: written atomically, read back with clear errors.

``run.json`` and ``sweep.json`` are both written here: the body goes to ``<name>.tmp`` and is
renamed over the file, so a kill at any moment leaves either the old file or the new one,
never half of one. Reading refuses a file that is missing, not JSON, of another kind
(``"kind"``) or written by a newer servetune (``"schema_version"`` above what we read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from servetune.errors import ResultError

M = TypeVar("M", bound=BaseModel)


def write_json_atomic(path: Path, obj: object, hint: str | None = None) -> Path:
    """Write ``obj`` as indented JSON to ``path`` through a rename (numpy values allowed).

    A file system that refuses is a :class:`ResultError` (with ``hint``: where else to write).
    """
    body = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        # A link, a device (-o /dev/stdout) or a FIFO: write through it. The rename would
        # replace it with a plain file (as root, `cost -o /dev/full` replaced the device).
        try:
            with path.open("wb") as fh:
                fh.write(body)
        except OSError as exc:
            raise ResultError(f"cannot write {path}: {exc.strerror or exc}", hint=hint) from exc
        return path
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_bytes(body)
        os.replace(tmp, path)
    except OSError as exc:
        raise ResultError(f"cannot write {path}: {exc.strerror or exc}", hint=hint) from exc
    return path


def write_model_file(path: Path, model: BaseModel, hint: str) -> Path:
    """``model`` as JSON at ``path`` (its folder made first), atomically; ``hint``: where else
    to write when the file system refuses."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultError(f"cannot create {path.parent}: {exc.strerror or exc}", hint=hint) from exc
    return write_json_atomic(path, model.model_dump(mode="json"), hint=hint)


def schema_problem(exc: ValidationError) -> str:
    """A pydantic error on one line: where the first problem is and what it is (pydantic's own
    text runs over several lines with a link per problem)."""
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "the top level"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"


def read_json_file(path: Path, kind: str, max_version: int) -> dict[str, Any]:
    """The JSON object in ``path``, checked to be a servetune ``kind`` file we can read."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise ResultError(
            f"{path} not found", hint="point at a directory servetune wrote (its result directory)"
        ) from exc
    except OSError as exc:  # a directory in its place, no permission, an I/O error
        raise ResultError(
            f"cannot read {path}: {exc.strerror or exc}",
            hint="point at a directory servetune wrote (its result directory)",
        ) from exc
    except orjson.JSONDecodeError as exc:
        raise ResultError(
            f"{path} is not valid JSON ({exc.msg}, line {exc.lineno})",
            hint="the file was cut short or edited: re-run the command that wrote it",
        ) from exc
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise ResultError(
            f'{path} is not a servetune {kind} file (no "kind": "{kind}")',
            hint=f"point at the directory servetune wrote the {kind} to (its result directory)",
        )
    version = data.get("schema_version")
    if not isinstance(version, int) or version > max_version:
        raise ResultError(
            f"{path} has {kind} schema version {version}; this servetune reads {kind} files "
            f"up to version {max_version}",
            hint="upgrade servetune to read results written by a newer version",
        )
    return data


def read_model_file(
    path: str | Path, model: type[M], kind: str, max_version: int, file_name: str
) -> M:
    """The ``kind`` file at ``path`` — or, when ``path`` is a directory, its ``file_name`` —
    read as ``model``; a file that does not fit the schema is a :class:`ResultError`."""
    p = Path(path)
    if p.is_dir():
        p = p / file_name
    data = read_json_file(p, kind, max_version)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ResultError(
            f"{p} does not match the {model.__name__} schema: {schema_problem(exc)}",
            hint="the file was changed or damaged; re-create it with the command that wrote it",
        ) from exc
