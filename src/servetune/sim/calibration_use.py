"""Using a calibration (``--calibration PROFILE``): reading it, and saying when a question
asked of it lies outside what its runs measured — a model, device or tensor-parallel size it
did not see, batches above the most it saw running, contexts or prompts beyond its runs'."""

from __future__ import annotations

from pathlib import Path

from servetune.results.calibration_file import Calibration, read_calibration
from servetune.sim.resolved import ResolvedConfig, model_ref


def load_calibration(path: str | Path) -> Calibration:
    """The calibration of the profile at ``path`` (a file or a directory holding one)."""
    return read_calibration(path).calibration


def use_warnings(
    r: ResolvedConfig, input_len: float | None = None, output_len: float | None = None
) -> list[str]:
    """What of ``r`` (and a workload's mean lengths) the calibration did not measure."""
    cal = r.calibration
    if cal is None:
        return []
    dep, m = cal.deployment, cal.measured
    out: list[str] = []
    where = f"calibration {cal.id}"
    if dep.model not in (r.model.name, r.model.source, model_ref(r.model)):
        out.append(
            f"{where} was measured on {dep.model}, not {r.model.name}: its constants are "
            "transferred to another model"
        )
    if r.gpu.name.lower() != dep.device.name.lower():
        out.append(
            f"{where} was measured on {dep.device.name}, not {r.gpu.name}: its constants are "
            "transferred to another device"
        )
    if m.tensor_parallel_size and r.tensor_parallel_size not in m.tensor_parallel_size:
        seen = ", ".join(map(str, m.tensor_parallel_size))
        out.append(f"{where} measured tensor-parallel size {seen}, not {r.tensor_parallel_size}")
    most = max(m.max_running, *(m.max_num_seqs or [0]))
    if m.max_running and r.max_num_seqs > most:
        seqs = ", ".join(map(str, m.max_num_seqs))
        out.append(
            f"{where} saw at most {m.max_running} requests running (max_num_seqs {seqs}); "
            f"batches up to {r.max_num_seqs} are extrapolated"
        )
    if (
        m.max_context_tokens
        and input_len is not None
        and output_len is not None
        and input_len + output_len > m.max_context_tokens
    ):
        out.append(
            f"{where} measured contexts up to {m.max_context_tokens} tokens; "
            f"{input_len + output_len:.0f} is extrapolated"
        )
    lo, hi = m.input_tokens
    if input_len is not None and hi and not (0.5 * lo <= input_len <= 2 * hi):
        out.append(
            f"{where} measured mean prompts of {lo:.0f}–{hi:.0f} tokens; {input_len:.0f} is "
            "extrapolated"
        )
    return out


__all__ = ["load_calibration", "use_warnings"]
