"""One trial's telemetry samples as numpy arrays: read once with pyarrow, the names coded as integers.

A trial's samples/<id>.parquet holds up to millions of rows in the long format
(``kit.collectors.base.SAMPLE_COLUMNS``). The per-phase summaries and energies
(kit.analysis.phase_stats) need only the times, the values and which series each
row belongs to: as a pandas frame with string columns every comparison and
group-by walks Python strings row by row (seconds at 10^6 rows), as arrays of
integer codes it is one vectorised pass. :func:`read_sample_arrays` reads the
file as :meth:`kit.store.RunDir.read_samples` does (no link, capped size, the
same schema check) but decodes the four name columns as dictionaries, so no
per-row string is ever made; :meth:`SampleArrays.frame` gives the pandas frame
``read_samples`` would have given, for the readers that still want one (the
report's telemetry figure, the threat facts), built only when asked.

A row without a source, device, metric or unit (a null: the kit never writes one)
is refused: the pandas readers dropped such rows silently from one statistic and
kept them in another.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kit.collectors.base import SAMPLE_COLUMNS
from kit.errors import AnalysisError, StoreError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from kit.store import RunDir

KEY_COLUMNS = ("source", "device", "metric", "unit")
FIX = "delete the trial and its samples and run `kit run --resume`"


@dataclass(frozen=True, eq=False)
class SampleArrays:
    """The rows of one samples file: ``t`` and ``value`` as float64, each name column as int codes into its names.

    ``codes[i]`` / ``names[i]`` belong to ``KEY_COLUMNS[i]``; codes are injective (one code per distinct name).
    ``origin``: the Arrow table or pandas frame the arrays were made from, ``rows`` the positions in it of these
    rows (None: all, in order), so :meth:`frame` rebuilds exactly the frame the pandas readers saw.
    """

    t: np.ndarray
    value: np.ndarray
    codes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    names: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]
    origin: pa.Table | pd.DataFrame | None = None
    rows: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.t.size)

    @property
    def source(self) -> np.ndarray:
        return self.codes[0]

    @property
    def device(self) -> np.ndarray:
        return self.codes[1]

    @property
    def metric(self) -> np.ndarray:
        return self.codes[2]

    @property
    def unit(self) -> np.ndarray:
        return self.codes[3]

    def code(self, column: str, name: str) -> int:
        """The code of ``name`` in a name column; -1 (matches no row) when no row has it."""
        names = self.names[KEY_COLUMNS.index(column)]
        return names.index(name) if name in names else -1

    def where(self, column: str, name: str) -> np.ndarray:
        """Row mask: the name column holds ``name``."""
        return self.codes[KEY_COLUMNS.index(column)] == self.code(column, name)

    def having(self, pairs: Iterable[tuple[str, str]]) -> np.ndarray:
        """Row mask: (source, metric) is one of ``pairs``."""
        mask = np.zeros(len(self), dtype=bool)
        for source, metric in pairs:
            mask |= self.where("source", source) & self.where("metric", metric)
        return mask

    def take(self, mask: np.ndarray) -> SampleArrays:
        """The rows where ``mask`` holds, in order (the names stay shared)."""
        idx = np.flatnonzero(mask)
        rows = idx if self.rows is None else self.rows[idx]
        return SampleArrays(self.t[idx], self.value[idx], (self.codes[0][idx], self.codes[1][idx],
                            self.codes[2][idx], self.codes[3][idx]), self.names, self.origin, rows)

    def series(self) -> tuple[np.ndarray, int]:
        """(per row, the code of its (source, device, metric, unit) series; how many codes there can be)."""
        key = self.codes[0].astype(np.int64)
        size = max(len(self.names[0]), 1)
        for codes, names in zip(self.codes[1:], self.names[1:], strict=True):
            key, size = _dense(key * max(len(names), 1) + codes, size * max(len(names), 1))
        return key, size

    def frame(self) -> pd.DataFrame:
        """These rows as the typed long-format frame of ``RunDir.read_samples`` (index: the rows' positions in the
        file), built now: for the readers that want pandas."""
        import pandas as pd

        from kit.store import rows_to_frame

        if isinstance(self.origin, pd.DataFrame):
            return self.origin if self.rows is None else self.origin.iloc[self.rows]
        if self.origin is None or (self.rows is not None and not self.rows.size):
            return _empty_frame().copy()
        if self.rows is None:
            return rows_to_frame(_plain(self.origin).to_pandas())
        part = rows_to_frame(_plain(self.origin.take(self.rows)).to_pandas())  # only these rows made Python objects
        return part.set_axis(pd.Index(self.rows), axis=0)


@functools.cache
def _empty_frame() -> pd.DataFrame:
    """``rows_to_frame(None)``, made once (4 ms each time): callers get a copy."""
    from kit.store import rows_to_frame

    return rows_to_frame(None)


def _dense(key: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Renumber codes < size to 0..k-1 (equal stays equal), so combined codes never outgrow int64."""
    if not key.size:
        return key, 1
    if size <= max(4 * key.size, 1 << 16):
        seen = np.zeros(size, dtype=bool)
        seen[key] = True
        remap = np.cumsum(seen) - 1
        return remap[key], int(seen.sum())
    uniq, inverse = np.unique(key, return_inverse=True)
    return inverse.astype(np.int64), int(uniq.size)


def empty() -> SampleArrays:
    none = np.zeros(0, dtype=np.int64)
    return SampleArrays(np.zeros(0), np.zeros(0), (none, none, none, none), ((), (), (), ()), None, None)


def read_sample_arrays(rd: RunDir, name: str) -> SampleArrays:
    """samples/<name>.parquet as arrays (empty when the trial has none); refused like ``RunDir.read_samples``
    (a link, an oversized file, a corrupt file, other columns or types: StoreError naming it), and also for a row
    without a name (see the module docstring)."""
    import io

    import pyarrow.parquet as pq

    from kit.safeio import read_capped
    from kit.store import MAX_SAMPLES_BYTES, check_sample_schema

    path = rd.samples_path(name)
    data = read_capped(path, MAX_SAMPLES_BYTES, "telemetry samples file", missing_ok=True, fix=FIX)
    if data is None:
        return empty()
    try:  # the names straight into dictionaries: no Python string per row
        table = pq.read_table(io.BytesIO(data), read_dictionary=list(KEY_COLUMNS))
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise StoreError(f"cannot read samples ({type(exc).__name__}: {str(exc)[:200]})", where=str(path),
                         fix=FIX) from None
    check_sample_schema(table.schema, str(path), FIX)
    return from_table(table, str(path))


def from_table(table: pa.Table, where: str) -> SampleArrays:
    """Arrays of a table that passed :func:`kit.store.check_sample_schema`."""
    codes = []
    names = []
    for col in KEY_COLUMNS:
        c, n = _coded(table[col], col, where)
        codes.append(c)
        names.append(n)
    return SampleArrays(_numbers(table["t"]), _numbers(table["value"]), (codes[0], codes[1], codes[2], codes[3]),
                        (names[0], names[1], names[2], names[3]), table, None)


def _numbers(col: pa.ChunkedArray) -> np.ndarray:
    """float64 as pandas converts the column (a null: NaN; an integer: rounded to the nearest float)."""
    import pyarrow as pa

    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return np.asarray(col.to_numpy(), dtype=np.float64)


def _coded(col: pa.ChunkedArray, name: str, where: str) -> tuple[np.ndarray, tuple[str, ...]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    def refuse(n: int) -> StoreError:
        return StoreError(f"samples hold {n} row(s) without a {name}", where=where,
                          fix=f"{FIX}; the kit writes a {name} in every row")

    if col.null_count:
        raise refuse(col.null_count)
    if not len(col):
        return np.zeros(0, dtype=np.int64), ()
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    arr = col.unify_dictionaries().combine_chunks()
    codes = np.asarray(arr.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    words = arr.dictionary.to_pylist()
    if None in words:  # a row coded to a null word of its dictionary
        missing = int(np.isin(codes, [i for i, w in enumerate(words) if w is None]).sum())
        if missing:
            raise refuse(missing)
    return _canonical(codes, [str(w) for w in words])


def _canonical(codes: np.ndarray, words: list[str]) -> tuple[np.ndarray, tuple[str, ...]]:
    """One code per distinct name (a dictionary may repeat a word)."""
    first: dict[str, int] = {}
    remap = np.array([first.setdefault(w, len(first)) for w in words] or [0], dtype=np.int64)
    return (remap[codes] if codes.size else codes), tuple(first)


def from_frame(df: pd.DataFrame) -> SampleArrays:
    """Arrays of a long-format frame (the pandas readers' input); AnalysisError for missing columns or names."""
    import pandas as pd

    if not len(df):
        return empty()
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise AnalysisError(f"telemetry samples lack column(s) {', '.join(missing)}",
                            where="samples", fix=f"expected the long format {', '.join(SAMPLE_COLUMNS)}")
    codes = []
    names = []
    for col in KEY_COLUMNS:
        c, uniques = pd.factorize(df[col], use_na_sentinel=True)
        if (c < 0).any():
            raise AnalysisError(f"telemetry samples hold {int((c < 0).sum())} row(s) without a {col}",
                                where="samples", fix=f"every row of the long format names its {col}")
        cc, nn = _canonical(np.asarray(c, dtype=np.int64), [str(u) for u in uniques])
        codes.append(cc)
        names.append(nn)
    t = np.asarray(df["t"].astype(float).to_numpy(), dtype=np.float64)
    value = np.asarray(pd.to_numeric(df["value"], errors="coerce").to_numpy(dtype=float, na_value=np.nan),
                       dtype=np.float64)
    return SampleArrays(t, value, (codes[0], codes[1], codes[2], codes[3]), (names[0], names[1], names[2], names[3]),
                        df, None)


def _plain(table: pa.Table) -> pa.Table:
    """The table with its dictionary columns decoded (what a plain read gives, for ``to_pandas``)."""
    import pyarrow as pa

    cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.Table.from_arrays(cols, schema=pa.schema(
        [pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in table.schema],
        metadata=table.schema.metadata))
