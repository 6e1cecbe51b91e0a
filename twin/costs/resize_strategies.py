"""Which phase table of the resize cost model each strategy reads: one line per strategy.

`ResizeCostParams` holds the phase DAGs the twin prices resizes with, one field per table; a
strategy either has a table of its own (fitted by `dynaresize calibrate` from its records) or
reads another's with every phase moved onto the critical path (`host_sync`: the overlapped
strategy's work with nothing overlapped). The plan (`resize.ResizeCostParams.phases`) and the fit
(`calibration/fit_resize.py`, `calibration/resize_readings.py`) read this table instead of
telling strategies apart themselves, so a new strategy is a row here (and a field of
`ResizeCostParams` with its default phases, if it has a table of its own).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynaresize.traces.phases import StrategyName


@dataclass(frozen=True)
class StrategyCosts:
    """Where the twin reads one strategy's phase table among `ResizeCostParams`' fields."""

    table: str
    """The field of `ResizeCostParams` that holds the phases."""
    every_phase_critical: bool = False
    """The table is another strategy's with every phase moved onto the critical path (the same
    work with nothing overlapped); `calibrate` then fits that strategy's records, not these."""

    @property
    def fitted(self) -> bool:
        """Whether `calibrate` fits this strategy's records into its table."""
        return not self.every_phase_critical


STRATEGY_COSTS: dict[StrategyName, StrategyCosts] = {
    StrategyName.STOP_AND_REBUILD: StrategyCosts(table="stop_and_rebuild"),
    StrategyName.OVERLAPPED: StrategyCosts(table="overlapped"),
    StrategyName.HOST_SYNC: StrategyCosts(table="overlapped", every_phase_critical=True),
}
"""Every strategy's phase table, one line each: the only place the twin tells strategies apart."""
