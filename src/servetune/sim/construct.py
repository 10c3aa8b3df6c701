"""The simulator's own pydantic objects, built without validation.

A run makes a record per simulated request and a sample (with its histograms) per 0.5 s
scrape; their values are the simulator's, already of the right types, so they are put in
place the way ``model_construct`` would (tests/sim/test_offline_api.py checks each builder
against it: equal, the same key order, the same fields set).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from servetune.results.record import RequestRecord

_DEFAULTS: dict[type, tuple[dict[str, Any], dict[str, Callable[[], Any]]]] = {}
_set = object.__setattr__
_M = TypeVar("_M", bound=BaseModel)


def construct_model(cls: type[_M], values: dict[str, Any]) -> _M:
    """``cls.model_construct(**values)`` without its per-field loop (a record per simulated
    request, a sample per 0.5 s): pydantic's own construct steps on a dict holding every
    field, the ones not given at their defaults. tests/sim/test_offline_api.py checks it
    against ``model_construct``."""
    known = _DEFAULTS.get(cls)
    if known is None:
        plain: dict[str, Any] = {}
        factories: dict[str, Callable[[], Any]] = {}
        for name, field in cls.model_fields.items():
            if field.default_factory is not None:
                factories[name] = field.default_factory  # type: ignore[assignment]
            elif not field.is_required():
                plain[name] = field.get_default()
        known = _DEFAULTS[cls] = (plain, factories)
    plain, factories = known
    d = {**plain, **values}
    for name, factory in factories.items():
        if name not in values:
            d[name] = factory()
    obj = cls.__new__(cls)
    _set(obj, "__dict__", d)
    _set(obj, "__pydantic_fields_set__", set(values))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


def _record(values: dict[str, Any]) -> RequestRecord:
    return construct_model(RequestRecord, values)


HIST_FIELDS = frozenset(("buckets", "sum", "count"))
SAMPLE_FIELDS = frozenset(("t", "values", "histograms"))


def construct_given(cls: type[_M], d: dict[str, Any], fields_set: frozenset[str]) -> _M:
    """``construct_model(cls, values)`` when ``d`` already is the dict it would make (every field,
    in its order) and ``fields_set`` the fields given: a sample and its histograms per scrape.
    tests/sim/test_offline_api.py checks the samples against ``construct_model``'s."""
    obj = cls.__new__(cls)
    _set(obj, "__dict__", d)
    _set(obj, "__pydantic_fields_set__", set(fields_set))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


_OK_FIELDS = frozenset(
    (
        "id",
        "worker",
        "status",
        "error",
        "http_status",
        "scheduled_ns",
        "eligible_ns",
        "send_ns",
        "first_ns",
        "last_ns",
        "end_ns",
        "chunk_ns",
        "chunk_tokens",
        "planned_input_len",
        "planned_output_len",
        "prompt_tokens",
        "output_tokens",
        "tokens_source",
        "finish_reason",
    )
)
"""The fields a successful simulated record is given (the rest keep their defaults)."""


def ok_record(
    idx: int,
    scheduled: int,
    sent: int,
    first: int | None,
    last: int | None,
    end: int,
    chunks: list[int],
    input_len: int,
    output_len: int | None,
    prompt_tokens: int,
    output_tokens: int,
    finish_reason: str | None,
    cached: int | None = None,
    session: tuple[str, int, int, int | None] | None = None,
) -> RequestRecord:
    """A successful simulated request's record: ``_record`` of its values (the same fields,
    in the same order, so the same line), made in one dict (a record per simulated request).
    tests/sim/test_offline_api.py checks it against ``_record`` and ``record_line``.
    ``cached``: the prompt tokens served from the prefix cache; ``session``: (session id,
    turn, planned turns, dropped exchanges) of a session's request."""
    sid, turn, turns, dropped = session if session is not None else (None, None, None, None)
    obj = RequestRecord.__new__(RequestRecord)
    _set(
        obj,
        "__dict__",
        {
            "worker": 0,
            "error": None,
            "error_class": None,
            "http_status": 200,
            "first_ns": first,
            "last_ns": last,
            "chunk_ns": chunks,
            "chunk_tokens": None,
            "planned_output_len": output_len,
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "tokens_source": "sim",
            "finish_reason": finish_reason,
            "cached_tokens": cached,
            "session": sid,
            "turn": turn,
            "session_turns": turns,
            "dropped_turns": dropped,
            "id": idx,
            "status": "ok",
            "scheduled_ns": scheduled,
            "eligible_ns": sent,
            "send_ns": sent,
            "end_ns": end,
            "planned_input_len": input_len,
        },
    )
    given = set(_OK_FIELDS)
    if cached is not None:
        given.add("cached_tokens")
    if session is not None:
        given.update(("session", "turn", "session_turns", "dropped_turns"))
    _set(obj, "__pydantic_fields_set__", given)
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


__all__ = ["HIST_FIELDS", "SAMPLE_FIELDS", "construct_given", "construct_model", "ok_record"]
