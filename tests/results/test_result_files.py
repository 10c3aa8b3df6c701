"""run.json and sweep.json on disk: written whole, read back, and refused clearly when they
are not ours, not JSON, or written by a newer servetune."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from servetune.errors import ResultError
from servetune.results.environment import this_machine
from servetune.results.io import (
    REQUESTS_FILE,
    RUN_FILE,
    SERVER_METRICS_FILE,
    read_records,
    read_run_result,
    read_server_series,
    write_run_result,
)
from servetune.results.jsonfile import read_json_file, write_json_atomic
from servetune.results.schema import (
    SCHEMA_VERSION,
    BenchConfig,
    ClientHealth,
    RunResult,
    Summary,
    TargetInfo,
)
from servetune.results.sweep_schema import (
    SWEEP_SCHEMA_VERSION,
    SweepConfig,
    SweepResult,
    read_sweep_result,
    write_sweep_result,
)


def a_run() -> RunResult:
    return RunResult(
        config=BenchConfig(request_rate=4),
        environment=this_machine(["servetune", "bench"]),
        target=TargetInfo(base_url="http://127.0.0.1:1/v1", model="m"),
        client_health=ClientHealth(),
        summary=Summary(completed=3),
    )


def a_sweep() -> SweepResult:
    return SweepResult(
        created_at="2026-01-01T00:00:00+00:00",
        updated_at="2026-01-01T00:00:00+00:00",
        config=SweepConfig(bench=BenchConfig()),
    )


def test_run_round_trip_keeps_vllm_keys(tmp_path: Path) -> None:
    write_run_result(tmp_path, a_run())
    raw = orjson.loads((tmp_path / RUN_FILE).read_bytes())
    assert raw["completed"] == 3 and raw["request_rate"] == 4  # vLLM's flat keys
    back = read_run_result(tmp_path)
    assert back.summary.completed == 3 and back.environment.command == ["servetune", "bench"]
    assert not list(tmp_path.glob("*.tmp"))


def test_sweep_round_trip(tmp_path: Path) -> None:
    write_sweep_result(tmp_path, a_sweep())
    assert read_sweep_result(tmp_path).status == "running"
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("kind", ["run", "sweep"])
def test_a_newer_schema_version_is_refused_with_a_hint(tmp_path: Path, kind: str) -> None:
    if kind == "run":
        write_run_result(tmp_path, a_run())
        path, newer, read = tmp_path / RUN_FILE, SCHEMA_VERSION + 1, read_run_result
    else:
        write_sweep_result(tmp_path, a_sweep())
        path, newer, read = tmp_path / "sweep.json", SWEEP_SCHEMA_VERSION + 1, read_sweep_result
    data = orjson.loads(path.read_bytes())
    data["schema_version"] = newer
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(ResultError) as err:
        read(tmp_path)  # type: ignore[operator]
    assert f"{kind} schema version {newer}" in err.value.message
    assert err.value.hint is not None and "upgrade servetune" in err.value.hint


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (None, "not found"),
        (b'{"kind": "run", "schema', "is not valid JSON"),
        (b'{"kind": "sweep", "schema_version": 1}', "is not a servetune run file"),
        (b"[1, 2]", "is not a servetune run file"),
        (b'{"kind": "run"}', "run schema version None"),
        (b'{"kind": "run", "schema_version": 1, "config": 3}', "does not match the RunResult"),
    ],
)
def test_unreadable_run_files_say_why(tmp_path: Path, body: bytes | None, expected: str) -> None:
    if body is not None:
        (tmp_path / RUN_FILE).write_bytes(body)
    with pytest.raises(ResultError, match=expected):
        read_run_result(tmp_path)


def test_an_atomic_write_never_leaves_half_a_file(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"a": 1})

    class Unserializable:
        pass

    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": Unserializable()})
    assert orjson.loads(path.read_bytes()) == {"a": 1}


def test_a_directory_in_place_of_run_json_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "r.json").mkdir()
    with pytest.raises(ResultError, match=r"cannot read .*r\.json"):
        read_json_file(tmp_path / "r.json", "run", SCHEMA_VERSION)


def test_a_schema_mismatch_is_said_on_one_line(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_bytes(b'{"kind": "run", "schema_version": 1, "config": 3}')
    with pytest.raises(ResultError) as err:
        read_run_result(tmp_path)
    assert "\n" not in err.value.message and "config: " in err.value.message


@pytest.mark.parametrize(
    ("name", "line", "expected"),
    [
        (SERVER_METRICS_FILE, b'{"t": "x", "values": 3}', "not a server metrics sample: t: "),
        (SERVER_METRICS_FILE, b"3", "not a server metrics sample"),
        (REQUESTS_FILE, b'{"foo": 1}', "not a request record: "),
    ],
)
def test_jsonl_lines_of_the_wrong_shape_are_result_errors(
    tmp_path: Path, name: str, line: bytes, expected: str
) -> None:
    """Valid JSON that is not a record or a sample: a ResultError naming file and line (it
    was a pydantic traceback for server_metrics.jsonl)."""
    (tmp_path / name).write_bytes(line + b"\n" + line + b"\n")
    read = read_server_series if name == SERVER_METRICS_FILE else read_records
    with pytest.raises(ResultError) as err:
        read(tmp_path)
    assert f"{name}:1: {expected}" in err.value.message and "\n" not in err.value.message


def test_a_directory_in_place_of_requests_jsonl_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / REQUESTS_FILE).mkdir()
    with pytest.raises(ResultError, match=r"cannot read .*requests\.jsonl"):
        read_records(tmp_path)


def test_writing_through_a_link_keeps_the_link(tmp_path: Path) -> None:
    """`-o LINK` (and a device such as /dev/stdout, or /dev/full as root) was written by a
    rename over it: the link, or the device node, was replaced by a plain file."""
    target = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and orjson.loads(target.read_bytes()) == {"a": 1}
    assert not list(tmp_path.glob("*.tmp"))
