"""The analysis reads each trial's telemetry as arrays (kit.analysis.sample_arrays, kit.analysis.phase_stats):
the same numbers, bit for bit, as the pandas frame functions of kit.analysis.telemetry, on messy samples
(shuffled rows, repeated and NaN times, NaN and infinite values, a series in two units, a counter reset, phases
named "idle" or "trial", a killed phase), and samples files refused as strictly as ``RunDir.read_samples``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kit.analysis.metrics import DEFAULT_METRICS, METRICS, NVML_METRICS, TEST_PHASES, trial_metric_rows
from kit.analysis.phase_stats import energies, summaries
from kit.analysis.sample_arrays import SampleArrays, _canonical, from_frame, read_sample_arrays
from kit.analysis.telemetry import TrialTelemetry as Tel
from kit.analysis.telemetry import (
    _attribution_time,
    _phase_labels,
    phase_energy,
    phase_intervals,
    phase_summaries,
    trial_samples,
)
from kit.collectors.base import SAMPLE_COLUMNS
from kit.errors import AnalysisError, StoreError
from kit.store import RunDir

T0 = 1_700_000_000.0


def _hex(x: Any) -> Any:
    return float(x).hex() if isinstance(x, float | np.floating) else x


def messy(seed: int, n_gpus: int = 3, per: int = 120) -> tuple[dict[str, Any], pd.DataFrame]:
    """A trial record and its samples with every oddity the readers must treat as the frame functions do."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[Any, ...]] = []

    def add(source: str, device: str, metric: str, unit: str, ts: Any, vs: Any) -> None:
        rows.extend((float(t), source, device, metric, float(v), unit) for t, v in zip(ts, vs, strict=True))

    def times(n: int, period: float = 0.1) -> np.ndarray:
        ts = T0 - 3 + np.cumsum(rng.uniform(0.02, 2 * period, n))
        if rng.random() < 0.4:
            ts[rng.integers(0, n, 3)] = ts[rng.integers(0, n, 3)]  # repeated times
        return ts

    for g in range(n_gpus):
        for metric, unit, top in (("gpu_util_pct", "%", 100), ("temp_c", "C", 80), ("power_w", "W", 300),
                                  ("power_instant_w", "W", 300), ("mem_used_bytes", "B", 1e10),
                                  ("sm_clock_mhz", "MHz", 1500), ("foreign_procs", "1", 2)):
            n = int(rng.integers(1, per))
            add("nvml", str(g), metric, unit, times(n), rng.uniform(0, top, n).round(int(rng.integers(0, 4))))
        if rng.random() < 0.8:
            n = int(rng.integers(1, per))
            sign = 1 if rng.random() < 0.85 else -1  # a counter that runs backwards: NaN energy with a note
            add("nvml", str(g), "energy_j", "J", times(n), sign * np.cumsum(rng.uniform(0, 30, n)))
        n = int(rng.integers(1, per))
        add("nvml", str(g), "throttle_reasons", "bitmask", times(n), rng.choice([0, 1, 4, 32, 0x84, 2], n))
    for dev in ("package-0", "dram"):
        n = int(rng.integers(1, per))
        add("rapl", dev, "energy_j", "J", times(n), np.cumsum(rng.uniform(0, 20, n)))
    for dev in ("total", "cpu0", "cpu1"):
        n = int(rng.integers(1, per))
        add("cpu", dev, "util_pct", "%", times(n, 0.5), rng.uniform(0, 100, n))
    for dev, metric in (("host", "used_bytes"), ("trial", "rss_bytes")):
        n = int(rng.integers(1, per))
        add("memory", dev, metric, "B", times(n), rng.uniform(1e8, 1e10, n))
    n = int(rng.integers(1, per))
    add("hwmon", "cpu", "cpu_temp_c", "C", times(n), rng.uniform(30, 90, n))
    add("cpu", "total", "util_pct", "pct", times(20, 0.5), rng.uniform(0, 100, 20))  # the same series, other unit
    add("memory", "trial", "rss_bytes", "B", times(5), [np.nan, np.inf, -np.inf, 1.0, 2.0])
    add("nvml", "0", "temp_c", "C", [np.nan, T0 + 1.0, T0 + 1.0], [50.0, np.nan, 60.0])
    add("cpu", "cpu0", "util_pct", "%", [np.nan, T0 + 2.0], [5.0, np.nan])
    df = pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))
    df = df.iloc[rng.permutation(len(df))].reset_index(drop=True)
    w0 = T0 + rng.uniform(-1, 1)
    w1 = w0 + rng.uniform(0.5, 5)
    tr0 = w1 + float(rng.choice([0.0, 1.3]))
    tr1 = tr0 + rng.uniform(0.01, 20)
    i0, i1 = tr1, tr1 + float(rng.choice([0.003, 0.05, 2.0, 10.0]))
    first = ("warmup", "idle", "trial")[seed % 3]  # a marker may name its phase anything
    markers = [{"event": "phase_start", "phase": first, "t": w0}, {"event": "phase_end", "phase": first, "t": w1},
               {"event": "phase_start", "phase": "train", "t": tr0, "cpu_s": 2.0},
               {"event": "phase_end", "phase": "train", "t": tr1, "cpu_s": 9.5},
               {"event": "phase_start", "phase": "infer", "t": i0, "cpu_s": 9.5}]
    if seed % 4:
        markers.append({"event": "phase_end", "phase": "infer", "t": i1, "cpu_s": 9.7})  # else: killed
    record: dict[str, Any] = {"trial_id": f"r{seed:03d}-c00-pytorch", "arm": "pytorch", "framework": "pytorch",
                              "config_id": "c00", "block": 0, "repetition": 0, "position": 0, "warmup": False,
                              "status": "ok", "markers": markers, "results": {"train_time_s": tr1 - tr0}}
    if seed % 5:
        record["gpus"] = [{"index": int(i)} for i in rng.choice(n_gpus, int(rng.integers(1, n_gpus + 1)),
                                                                replace=False)]
    return record, df


def _frame_tel(record: dict[str, Any], df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, tuple[float, float]]]:
    """The attribution as the frame functions made it: own rows, ``t_attr`` and ``phase`` columns."""
    own = trial_samples(record, df)
    intervals = phase_intervals(record["markers"])
    t_attr = _attribution_time(own)
    return own.assign(t_attr=t_attr, phase=_phase_labels(t_attr, intervals)), intervals


SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_summaries_and_energies_equal_the_frame_functions_bit_for_bit(seed: int) -> None:
    record, df = messy(seed, n_gpus=1 + seed % 4)
    own, intervals = _frame_tel(record, df)
    tel = Tel.of(record, df)
    pdt.assert_frame_equal(tel.samples, own)  # the same rows, times and labels
    want = [tuple(_hex(x) for x in r) for r in phase_summaries(own, intervals).itertuples(index=False)]
    got = [(r.phase, r.source, r.device, r.metric, r.unit, r.n, *map(_hex, (r.mean, r.max, r.min)))
           for r in summaries(tel)]
    assert got == want
    want_e = [tuple(_hex(x) for x in r) for r in phase_energy(own, intervals).itertuples(index=False)]
    got_e = [(r.phase, r.domain, _hex(r.energy_j), _hex(r.bound_j), r.method, r.n, r.note) for r in energies(tel)]
    assert got_e == want_e
    assert len(want) > 10 and (len(want_e) > 3 or not intervals)


def _reference_value(name: str, phase: str, s: pd.DataFrame, e: pd.DataFrame) -> Any:
    """A metric's value read from the frames the way the frame-based metric table did (pandas reductions)."""
    m = METRICS[name]
    if m.kind == "telemetry":
        sel = s[(s["phase"] == phase) & (s["source"] == m.source) & (s["metric"] == m.metric)]
        if m.device is not None:
            sel = sel[sel["device"] == m.device]
        sel = sel[sel["n"] > 0]
        if sel.empty:
            return None
        col = sel["max"] if m.agg == "max" else sel["mean"]
        return float(col.max() if m.agg == "max" else col.sum() if m.agg == "sum" else col.mean())
    if m.kind == "energy" and not m.net_of_idle and len(e):
        sel = e[(e["phase"] == phase) & e["domain"].astype(str).str.startswith(m.domain_prefix)]
        sel = sel[sel["energy_j"].notna()]
        return None if sel.empty else float(sel["energy_j"].sum())
    return "skip"


@pytest.mark.parametrize("seed", SEEDS)
def test_metric_rows_equal_the_frame_reductions(seed: int) -> None:
    record, df = messy(seed, n_gpus=1 + seed % 8 if seed % 3 == 0 else 8)  # up to 8 GPUs: numpy's 8-way sums
    own, intervals = _frame_tel(record, df)
    s = phase_summaries(own, intervals)
    e = phase_energy(own, intervals)
    rows = trial_metric_rows(record, df, (*DEFAULT_METRICS, *NVML_METRICS))
    checked = 0
    for row in rows:
        want = _reference_value(row["metric"], row["phase"], s, e)
        if want != "skip":
            assert _hex(row["value"]) == _hex(want), (row["metric"], row["phase"])
            checked += 1
    assert checked >= 2 * 10
    assert {r["phase"] for r in rows} == set(TEST_PHASES)


def _write(path: Path, table: pa.Table, **kw: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **kw)


def _run(tmp_path: Path) -> RunDir:
    (tmp_path / "samples").mkdir(parents=True, exist_ok=True)
    return RunDir(tmp_path)


def _assert_same_read(rd: RunDir, name: str) -> SampleArrays:
    arrays = read_sample_arrays(rd, name)
    frame = rd.read_samples(name)
    pdt.assert_frame_equal(arrays.frame(), frame)  # the figure's frame, exactly as read_samples gives it
    ref = from_frame(frame)
    assert np.array_equal(arrays.t, ref.t, equal_nan=True) and np.array_equal(arrays.value, ref.value, equal_nan=True)
    for i in range(4):
        assert [arrays.names[i][c] for c in arrays.codes[i]] == [ref.names[i][c] for c in ref.codes[i]]
    return arrays


def test_reader_gives_what_read_samples_gives_for_every_accepted_encoding(tmp_path: Path) -> None:
    _, df = messy(3)
    rd = _run(tmp_path)
    rd.write_samples("plain", df)  # as the kit writes it
    _assert_same_read(rd, "plain")
    table = pa.Table.from_pandas(df, preserve_index=False)
    strings = pa.table({c: (pa.array(df[c].astype(str).tolist(), pa.string()) if c in ("source", "device", "metric",
                        "unit") else table[c]) for c in SAMPLE_COLUMNS})
    _write(tmp_path / "samples" / "small-strings.parquet", strings, row_group_size=97)  # several row groups
    _assert_same_read(rd, "small-strings")
    _write(tmp_path / "samples" / "no-dict.parquet", strings, use_dictionary=False, row_group_size=50)
    _assert_same_read(rd, "no-dict")
    ints = strings.set_column(0, "t", pa.array(np.floor(df["t"].fillna(T0)).astype("int64")))
    ints = ints.set_column(4, "value", pa.array(np.arange(len(df), dtype="int32")))
    _write(tmp_path / "samples" / "ints.parquet", ints)
    _assert_same_read(rd, "ints")
    nulls = strings.set_column(4, "value", pa.array([None if i % 7 == 0 else float(i) for i in range(len(df))]))
    _write(tmp_path / "samples" / "null-values.parquet", nulls)
    arrays = _assert_same_read(rd, "null-values")
    assert np.isnan(arrays.value[::7]).all()
    empty = pa.Table.from_pandas(df.iloc[:0], preserve_index=False)
    _write(tmp_path / "samples" / "empty.parquet", empty)
    assert len(_assert_same_read(rd, "empty")) == 0
    assert len(read_sample_arrays(rd, "missing")) == 0  # a trial without samples: no telemetry, no error


def test_load_values_reads_the_same_numbers_from_arrays_as_from_frames(tmp_path: Path) -> None:
    record, df = messy(5)
    rd = _run(tmp_path)
    rd.write_samples("t1", df)
    metrics = (*DEFAULT_METRICS, *NVML_METRICS)
    from_arrays = trial_metric_rows(record, read_sample_arrays(rd, "t1"), metrics)
    from_frames = trial_metric_rows(record, rd.read_samples("t1"), metrics)
    assert json.dumps(from_arrays, default=repr) == json.dumps(from_frames, default=repr)
    tel = Tel.of(record, read_sample_arrays(rd, "t1"))
    nvml = tel.rows_of("nvml")
    assert set(nvml["source"]) == {"nvml"} and len(nvml) == int(tel.own.where("source", "nvml").sum())
    pdt.assert_frame_equal(nvml, tel.samples[tel.samples["source"] == "nvml"])


@pytest.mark.parametrize("column", ["source", "device", "metric", "unit"])
def test_a_row_without_a_name_is_refused(tmp_path: Path, column: str) -> None:
    _, df = messy(1)
    rd = _run(tmp_path)
    table = pa.Table.from_pandas(df, preserve_index=False)
    values = table[column].to_pylist()
    values[3] = None
    i = table.schema.get_field_index(column)
    _write(tmp_path / "samples" / "t.parquet", table.set_column(i, column, pa.array(values, pa.large_string())))
    with pytest.raises(StoreError, match=rf"t\.parquet: samples hold 1 row\(s\) without a {column}"):
        read_sample_arrays(rd, "t")
    bad = df.astype({column: object})
    bad.loc[3, column] = None
    with pytest.raises(AnalysisError, match=f"without a {column}"):
        from_frame(bad)


def test_files_the_store_refuses_are_refused_the_same(tmp_path: Path) -> None:
    _, df = messy(2)
    rd = _run(tmp_path)
    cases = {
        "columns": pa.table({"a": [1.0], "b": ["x"]}),
        "wrong-type": pa.table({"t": [1.0], "source": [1], "device": ["0"], "metric": ["m"], "value": [1.0],
                                "unit": ["u"]}),
        "string-value": pa.table({"t": [1.0], "source": ["cpu"], "device": ["0"], "metric": ["m"], "value": ["1"],
                                  "unit": ["u"]}),
        "extra": pa.Table.from_pandas(df.assign(extra=1.0), preserve_index=False),
    }
    for name, table in cases.items():
        _write(tmp_path / "samples" / f"{name}.parquet", table)
        with pytest.raises(StoreError) as old:
            rd.read_samples(name)
        with pytest.raises(StoreError) as new:
            read_sample_arrays(rd, name)
        assert str(new.value) == str(old.value)
    (tmp_path / "samples" / "corrupt.parquet").write_bytes(b"PAR1" + os.urandom(200) + b"PAR1")
    with pytest.raises(StoreError, match="cannot read samples"):
        read_sample_arrays(rd, "corrupt")
    os.symlink(tmp_path / "samples" / "extra.parquet", tmp_path / "samples" / "link.parquet")
    with pytest.raises(StoreError, match="link"):
        read_sample_arrays(rd, "link")


def test_a_dictionary_that_repeats_a_word_still_gives_one_series() -> None:
    codes, names = _canonical(np.array([0, 1, 2, 1, 0]), ["nvml", "cpu", "nvml"])
    assert names == ("nvml", "cpu") and codes.tolist() == [0, 1, 0, 1, 0]


def test_frames_with_missing_columns_are_refused_as_before() -> None:
    with pytest.raises(AnalysisError, match="value"):
        from_frame(pd.DataFrame({"t": [1.0], "source": ["cpu"]}))
    assert len(from_frame(pd.DataFrame(columns=list(SAMPLE_COLUMNS)))) == 0


def test_a_row_coded_to_a_null_word_is_refused() -> None:
    from kit.analysis.sample_arrays import _coded

    coded = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1, 0], pa.int32()), pa.array(["nvml", None]))
    with pytest.raises(StoreError, match=r"x\.parquet: samples hold 2 row\(s\) without a device"):
        _coded(pa.chunked_array([coded]), "device", "x.parquet")
    unused = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["nvml", None]))
    codes, names = _coded(pa.chunked_array([unused]), "device", "x.parquet")
    assert codes.tolist() == [0, 0] and names[0] == "nvml"


@pytest.mark.parametrize("seed", [0, 1, 4, 5])
def test_the_figure_draws_the_same_lines_from_the_panel_rows_alone(tmp_path: Path, seed: int) -> None:
    """load_values keeps, for the report's telemetry figure, only the rows of its panels' series."""
    from kit.analysis.telemetry_series import PANELS, trial_series
    from tests._runs import records_of

    record, df = messy(seed)
    rec = records_of([{k: v for k, v in record.items() if k not in ("results",)}])[0]
    rd = _run(tmp_path)
    rd.write_samples(rec.trial_id, df)
    arrays = read_sample_arrays(rd, rec.trial_id)
    panel_rows = arrays.take(arrays.having((p[0], p[2]) for p in PANELS)).frame()
    whole = trial_series(rec, rd.read_samples(rec.trial_id))
    assert whole and trial_series(rec, panel_rows) == whole
