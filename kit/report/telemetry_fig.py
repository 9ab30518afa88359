"""The telemetry time series of the trials as one figure: a panel per available series, a line per trial.

The series are computed in the analysis step from the samples it reads anyway
(:mod:`kit.analysis.telemetry_series`, carried in memory on the Analysis); the report only draws them. With
many trials an even selection per framework is drawn (the caption says which).
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.analysis.telemetry_series import PANELS
from kit.analysis_record import TelemetrySeries
from kit.report import figures
from kit.report.sections import DrawnFigure


def telemetry_figure(tel: TelemetrySeries, arms: Sequence[str]) -> DrawnFigure | None:
    """One figure (a panel per available series, a line per trial) or None without telemetry."""
    series = tel.series
    if not series:
        return None
    present = {s.metric for s in tel.series}
    panels = [(key, label) for _s, _d, _m, key, label, _x in PANELS if key in present]
    n_trials = len({s.trial_id for s in tel.series})
    title = "telemetry per trial (train and infer phases)"
    return {"id": "telemetry-series", "title": f"{title}: {n_trials} of {tel.total} measured trials, one line each",
            "kind": "telemetry", "svg": figures.telemetry_series(series, list(arms), panels, title)}
