"""Diagnose: name the bottleneck from the evidence, and say which knob to turn.

The rules of the seed are data (:mod:`servetune.diagnose.rules`, the config doctor's in
:mod:`servetune.diagnose.doctor.check`), evaluated over figures computed once per run
(:mod:`servetune.diagnose.figures.client`); actions come from
:mod:`servetune.diagnose.actions.table` in the seed's cost order. Entry points::

    diagnose_path(RUN_OR_SWEEP_DIR) -> Diagnosis        # .headline: one line for a person
    diagnose_config("vllm serve MODEL …", gpu="A100-80GB", input_len=…, output_len=…)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from servetune.diagnose.doctor.check import diagnose_config
from servetune.diagnose.model import Action, Diagnosis, Finding, LevelDiagnosis

if TYPE_CHECKING:
    from servetune.diagnose.knobs import KnownConfig

SAME_TOPIC = {
    "prefill_stall_ahead": "prefill_blocked",
    "prompts_exceed_batch": "prefill_blocked",
    "pool_below_batch": "kv_pool_full",
}
"""A doctor's prediction that the run's own verdict already shows is not said twice."""

__all__ = [
    "Action",
    "Diagnosis",
    "Finding",
    "LevelDiagnosis",
    "diagnose_config",
    "diagnose_path",
]


def _known_from_options(
    command: str | None, gpu: str | None, model: str | None
) -> KnownConfig | None:
    """A KnownConfig from --server-cmd / --gpu / --model, or None to use the run's own record.
    A --gpu or --model the catalog does not know is an error here, where the user typed it (the
    figures that need it would otherwise go missing without a word)."""
    from servetune.arch.gpus import find_gpu
    from servetune.arch.models import find_model
    from servetune.diagnose.knobs import KnownConfig, from_command

    if gpu:
        find_gpu(gpu)
    if model:
        find_model(model)
    if command:
        return from_command(command, gpu, model, source="--server-cmd")
    if gpu or model:
        return KnownConfig(source="--gpu/--model", gpu=gpu, model=model)
    return None


known_from_options = _known_from_options
"""Public name: the KnownConfig of --server-cmd / --gpu / --model (watch takes the same flags)."""


def recorded_server_cmd(path: Path) -> tuple[str, Path] | None:
    """The server command line a sweep recorded (``sweep --server-cmd``) for PATH — a sweep
    directory or one of its levels — and the file it came from, or None."""
    from servetune.results.io import SWEEP_FILE
    from servetune.results.sweep_schema import read_sweep_result

    for sweep_dir in (path, path.parent.parent if path.parent.name == "levels" else None):
        if sweep_dir is not None and (sweep_dir / SWEEP_FILE).is_file():
            cmd = read_sweep_result(sweep_dir).config.server_cmd
            return (cmd, sweep_dir / SWEEP_FILE) if cmd else None
    return None


def diagnose_path(
    path: str | Path,
    *,
    server_cmd: str | None = None,
    gpu: str | None = None,
    model: str | None = None,
) -> Diagnosis:
    """Diagnose a RUN_DIR or a SWEEP_DIR (which one is told by its files).

    ``server_cmd``: the command line the server was started with (``vllm serve MODEL …``), so
    that actions quote the current knob values and the config doctor checks it against the
    run's own lengths; by default the one the sweep recorded (``sweep --server-cmd``), when it
    reads as an engine's. ``gpu``/``model``: for the compute-load estimate of a real server.
    """
    from servetune.diagnose.evaluate import rank
    from servetune.diagnose.run import diagnose_run
    from servetune.diagnose.sweep.diagnose import diagnose_sweep
    from servetune.errors import ServetuneError
    from servetune.results.io import detect_dir

    p = Path(path).expanduser()
    from servetune.results.io import RUN_FILE
    from servetune.results.watch_file import WATCH_FILE

    if (p / WATCH_FILE).is_file() and not (p / RUN_FILE).is_file():
        from servetune.diagnose.window import diagnose_recording

        # a `servetune watch --record` directory
        return diagnose_recording(p, _known_from_options(server_cmd, gpu, model))
    kind = detect_dir(p)
    notes: list[str] = []
    known = None
    recorded = recorded_server_cmd(p) if server_cmd is None else None
    if recorded is not None:
        try:
            known = _known_from_options(recorded[0], gpu, model)
            server_cmd = recorded[0]
            if known is not None:
                known.source = f"the server command line recorded in {recorded[1]}"
            notes.append(f"server command line as recorded in {recorded[1]}: {recorded[0]}")
        except ServetuneError as exc:
            notes.append(
                f"the server command line recorded in {recorded[1]} ({recorded[0]}) is not one "
                f"the knobs can be read from ({exc.message}); pass --server-cmd to give them"
            )
    if known is None:
        known = _known_from_options(server_cmd, gpu, model)
    if kind == "sweep":
        diag = diagnose_sweep(p, known)
        diag.notes += notes
        return diag
    diag = diagnose_run(p, known)
    if server_cmd and gpu:
        extra = diagnose_config(server_cmd, gpu, model, run_dir=p)
        seen = {f.rule for f in diag.findings if f.kind in ("bottleneck", "warning")}
        more = [
            f
            for f in extra.findings
            if f.kind not in ("healthy", "cannot_tell") and SAME_TOPIC.get(f.rule) not in seen
        ]
        diag.findings = rank([*diag.findings, *more])
        diag.notes += [n for n in extra.notes if n.startswith("vLLM would print")]
    diag.notes += notes
    return diag
