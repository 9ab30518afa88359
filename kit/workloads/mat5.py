"""A reader for numeric arrays in MATLAB level-5 MAT-files (the format of SVHN's .mat files).

Runs inside framework images, which carry numpy but not scipy, so
``scipy.io.loadmat`` is not available there; this reads exactly what the
kit needs: real numeric matrices, zlib-compressed (``miCOMPRESSED``) or not,
either byte order. Other variable classes (cells, structs, chars, sparse)
are skipped. Tests check it against ``scipy.io.savemat``/``loadmat`` files.

Format: MathWorks, "MAT-File Format" (R2018a+), chapter 1: a 128-byte
header, then data elements (tag: type and byte count, or the 4-byte "small
element" form), each padded to 8 bytes except compressed ones.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Literal

import numpy as np

from kit.workloads.common import WorkloadError

MI_INT8, MI_UINT8, MI_INT16, MI_UINT16, MI_INT32, MI_UINT32 = 1, 2, 3, 4, 5, 6
MI_SINGLE, MI_DOUBLE, MI_INT64, MI_UINT64, MI_MATRIX, MI_COMPRESSED = 7, 9, 12, 13, 14, 15
_MI_DTYPES = {MI_INT8: "i1", MI_UINT8: "u1", MI_INT16: "i2", MI_UINT16: "u2", MI_INT32: "i4", MI_UINT32: "u4",
              MI_SINGLE: "f4", MI_DOUBLE: "f8", MI_INT64: "i8", MI_UINT64: "u8"}
# mxClass -> numpy dtype of the array (the stored type may be narrower: MATLAB compresses doubles to ints)
_MX_DTYPES = {6: "f8", 7: "f4", 8: "i1", 9: "u1", 10: "i2", 11: "u2", 12: "i4", 13: "u4", 14: "i8", 15: "u8"}


ByteOrder = Literal["<", ">"]  # struct and numpy byte-order prefix of the file


def _fail(path: Path, why: str) -> WorkloadError:
    return WorkloadError(f"{path}: not a readable MATLAB v5 MAT-file ({why})")


def _elements(buf: memoryview, order: ByteOrder, path: Path) -> list[tuple[int, memoryview]]:
    """Split a byte run into (type, payload) data elements, decompressing ``miCOMPRESSED``."""
    out: list[tuple[int, memoryview]] = []
    pos, end = 0, len(buf)
    while pos + 8 <= end:
        first, second = struct.unpack_from(order + "II", buf, pos)
        if first >> 16:  # small data element: type and size in the first word, data in the second
            mtype, nbytes = first & 0xFFFF, first >> 16
            if nbytes > 4:
                raise _fail(path, f"small data element of {nbytes} bytes")
            out.append((mtype, buf[pos + 4 : pos + 4 + nbytes]))
            pos += 8
            continue
        mtype, nbytes = first, second
        start = pos + 8
        if start + nbytes > end:
            raise _fail(path, f"element of {nbytes} bytes runs past the end of the data")
        payload = buf[start : start + nbytes]
        if mtype == MI_COMPRESSED:
            try:
                inner = zlib.decompress(payload)
            except zlib.error as exc:
                raise _fail(path, f"corrupt compressed element: {exc}") from None
            out += _elements(memoryview(inner), order, path)
            pos = start + nbytes
        else:
            out.append((mtype, payload))
            pos = start + nbytes + (-nbytes % 8)
    return out


def _numeric(mtype: int, data: memoryview, order: ByteOrder, path: Path) -> np.ndarray:
    if mtype not in _MI_DTYPES:
        raise _fail(path, f"unsupported data type {mtype}")
    return np.frombuffer(data, dtype=np.dtype(_MI_DTYPES[mtype]).newbyteorder(order))


def _matrix(payload: memoryview, order: ByteOrder, path: Path) -> tuple[str, np.ndarray] | None:
    """Name and array of one miMATRIX element, or None for a class this reader skips."""
    sub = _elements(payload, order, path)
    if len(sub) < 3:
        raise _fail(path, "matrix element without flags, dimensions and name")
    flags = _numeric(sub[0][0], sub[0][1], order, path)
    mx_class, complex_ = int(flags[0]) & 0xFF, bool(int(flags[0]) & 0x800)
    dims = tuple(int(d) for d in _numeric(sub[1][0], sub[1][1], order, path))
    name = bytes(sub[2][1]).decode("ascii", errors="replace")
    if mx_class not in _MX_DTYPES or complex_:
        return None
    if len(sub) < 4:
        raise _fail(path, f"variable {name!r} has no data")
    real = _numeric(sub[3][0], sub[3][1], order, path)
    if real.size != int(np.prod(dims)):
        raise _fail(path, f"variable {name!r}: {real.size} values for dimensions {dims}")
    arr = real.astype(np.dtype(_MX_DTYPES[mx_class]).newbyteorder("="), copy=False)
    return name, arr.reshape(dims, order="F")


def read_mat5(path: Path, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The real numeric variables of a MAT-file (v5/v6/v7, not v7.3), as numpy arrays in MATLAB's shape."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc})") from exc
    if len(raw) < 128:
        raise _fail(path, "shorter than the 128-byte header")
    if raw[:19] == b"MATLAB 7.3 MAT-file" or raw[512:520] == b"\x89HDF\r\n\x1a\n":
        raise _fail(path, "MAT v7.3 (HDF5) is not supported; save with -v7")
    indicator = raw[126:128]
    order: ByteOrder
    if indicator == b"IM":
        order = "<"
    elif indicator == b"MI":
        order = ">"
    else:
        raise _fail(path, "bad endian indicator in the header")
    out: dict[str, np.ndarray] = {}
    for mtype, payload in _elements(memoryview(raw)[128:], order, path):
        if mtype != MI_MATRIX:
            continue
        got = _matrix(payload, order, path)
        if got is not None and (names is None or got[0] in names):
            out[got[0]] = got[1]
    if names is not None:
        missing = [n for n in names if n not in out]
        if missing:
            raise _fail(path, f"variable(s) {', '.join(missing)} missing")
    return out
