"""``servetune sim calibrate``: the simulator fitted to one deployment's own runs.

:func:`calibrate` reads run and sweep directories (:mod:`.evidence`), identifies the
deployment (:mod:`.identify`), holds part of the evidence out (:mod:`.holdout`), fits the
step-time and host constants by replaying the fit runs (:mod:`.replay`, :mod:`.fit`) and
measures the error on the runs it did not fit next to the error on those it did. The result
is a :class:`~servetune.results.calibration_file.CalibrationProfile`; its ``calibration``
goes into an :class:`~servetune.sim.config.EngineConfig` (``--calibration PROFILE``), where
:func:`use_warnings` says when a question lies outside what was measured.
"""

from __future__ import annotations

from servetune.calibrate.run import calibrate
from servetune.sim.calibration_use import load_calibration, use_warnings

__all__ = ["calibrate", "load_calibration", "use_warnings"]
