"""Which calibration profile a result was computed with (``--calibration PROFILE``): recorded
in plan.json, tune.json and cost.json so that a figure can be traced to the constants behind
it. The profile itself is :mod:`servetune.results.calibration_file`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class CalibrationRef(BaseModel):
    """The profile used: its id, the file read, and the deployment it was measured on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    file: str
    device: str
    model: str
    engine: str
    constants: dict[str, float | bool] = {}
    """The constants it replaced the catalog's with (as applied)."""

    def describe(self) -> str:
        """One line for a command's output."""
        return (
            f"simulated with calibration {self.id} ({self.file}: {self.engine} {self.model} on "
            f"{self.device})"
        )
