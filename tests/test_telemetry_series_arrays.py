"""The report's telemetry lines from arrays (kit.analysis.telemetry_series.trial_series_arrays) are the lines of the
pandas reference (trial_series), float for float: NaN and repeated times, several GPUs with only some the trial's,
a GPU reported from inside that the host did not sample, a second unit of a series, no train phase."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from kit.analysis.sample_arrays import read_sample_arrays
from kit.analysis.telemetry_series import series_of_run, trial_series, trial_series_arrays
from kit.store import RunDir
from tests._runs import records_of
from tests.test_fast_telemetry import _run, messy

GOLDEN_RUN = Path(__file__).resolve().parent / "data" / "golden" / "run"


def _record(record: dict[str, Any], variant: int) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k != "results"}
    if variant == 1 and out.get("gpus"):  # the trial computed on a GPU the host did not sample: no NVML line
        out["gpus"] = [{**g, "uuid": f"GPU-host-{g['index']}"} for g in out["gpus"]]
        out["env"] = {"gpu_uuid": "GPU-elsewhere"}
    if variant == 2:  # no train phase: no line at all
        out["markers"] = [m for m in out["markers"] if m["phase"] != "train"]
    return out


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("variant", [0, 1, 2])
def test_lines_from_arrays_equal_the_pandas_lines(tmp_path: Path, seed: int, variant: int) -> None:
    record, df = messy(seed, n_gpus=1 + seed % 3)
    rec = records_of([_record(record, variant)])[0]
    rd = _run(tmp_path)
    rd.write_samples(rec.trial_id, df)
    want = trial_series(rec, rd.read_samples(rec.trial_id))
    got = trial_series_arrays(rec, read_sample_arrays(rd, rec.trial_id))
    assert got == want
    assert [(a.t_s, a.value) for a in got] == [(b.t_s, b.value) for b in want]  # dataclass eq: NaN-free floats
    if variant == 2:
        assert not got


def test_a_real_runs_figure_lines_are_the_pandas_lines(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run)
    rd = RunDir.open(run)
    arms = list(rd.manifest().arms)
    got = series_of_run(rd, arms)
    assert got.series and got.total > 0
    by_trial = {r.trial_id: r for r in rd.trial_records()}
    want = [line for tid in dict.fromkeys(s.trial_id for s in got.series)
            for line in trial_series(by_trial[tid], rd.read_samples(tid))]
    assert list(got.series) == want
