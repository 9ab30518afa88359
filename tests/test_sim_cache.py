"""The simulated power figures' cache (kit.analysis.power_cache, issue 44 item 3): draws are kept per (kind,
arguments) and the simulation's version, in the process and on disk under the user's cache directory; what is
on disk is data: a truncated, forged, non-finite or pickle-bearing entry is ignored and simulated again, never
unpickled, and the figures are the same numbers either way."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from kit.analysis import power_cache as pc
from kit.private_files import sealed_blob
from kit.trust import seal_key

KIND, ARGS, SHAPE = "paired", (9, 3, 5), (4, 2)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "power"
    monkeypatch.setenv(pc.ENV_CACHE, str(d))
    return d


def _counting(calls: list[int], value: float = 0.25) -> pc.Simulate:
    def simulate() -> np.ndarray:
        calls[0] += 1
        return np.full(SHAPE, value)

    return simulate


def _entry(cache: Path) -> Path:
    path = pc.entry_path(KIND, ARGS)
    assert path is not None and path.parent == cache
    return path


def test_draws_are_simulated_once_then_read_by_kind_and_arguments(cache: Path) -> None:
    calls = [0]
    first = pc.on_disk(KIND, ARGS, SHAPE, _counting(calls))
    again = pc.on_disk(KIND, ARGS, SHAPE, _counting(calls))
    assert calls[0] == 1 and np.array_equal(first, again)
    pc.on_disk("unpaired", ARGS, SHAPE, _counting(calls))  # another kind: its own entry
    pc.on_disk(KIND, (10, 3, 5), SHAPE, _counting(calls))  # another n
    assert calls[0] == 3
    assert np.array_equal(pc.cached_entry(KIND, ARGS, SHAPE), first)


def _plant(cache: Path, payload: bytes) -> None:
    key = seal_key()
    assert key is not None
    version = pc._sim_version()
    assert version is not None
    _entry(cache).write_bytes(sealed_blob(key, "power-cache", pc._context(KIND, ARGS, SHAPE, version), payload))


def _npy(arr: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


class _Boom:
    """Unpickling this writes a marker file: proof that a reader unpickled it."""

    marker: Path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (Path.write_text, (str(self.marker), "unpickled"))  # type: ignore[return-value]


@pytest.mark.parametrize("case", ["truncated", "not-macd", "nan", "wrong-shape", "pickle", "other-name"])
def test_a_bad_entry_is_ignored_and_simulated_again(cache: Path, tmp_path: Path, case: str) -> None:
    calls = [0]
    good = pc.on_disk(KIND, ARGS, SHAPE, _counting(calls))
    path = _entry(cache)
    marker = tmp_path / "marker"
    if case == "truncated":
        path.write_bytes(path.read_bytes()[:-7])
    elif case == "not-macd":
        path.write_bytes(path.read_bytes().replace(b"KITMAC1 ", b"KITMAC1 0", 1)[:-1])
    elif case == "nan":
        _plant(cache, _npy(np.full(SHAPE, np.nan)))
    elif case == "wrong-shape":
        _plant(cache, _npy(np.zeros((2, 2))))
    elif case == "pickle":
        boom = _Boom()
        boom.marker = marker
        obj = np.empty(SHAPE, dtype=object)
        obj[0, 0] = boom
        _plant(cache, _npy(obj, allow_pickle=True))
        assert b"write_text" in path.read_bytes()  # the payload really carries a pickle of it
    else:  # a valid entry of other arguments copied under this name
        other = [0]
        pc.on_disk(KIND, (11, 3, 5), SHAPE, _counting(other, 9.0))
        other_path = pc.entry_path(KIND, (11, 3, 5))
        assert other_path is not None
        path.write_bytes(other_path.read_bytes())
    assert pc.cached_entry(KIND, ARGS, SHAPE) is None
    got = pc.on_disk(KIND, ARGS, SHAPE, _counting(calls))
    assert calls[0] == 2 and np.array_equal(got, good)  # simulated again: the same numbers
    assert not marker.exists()
    assert np.array_equal(pc.cached_entry(KIND, ARGS, SHAPE), good)  # and rewritten


def test_figures_are_identical_from_a_cold_and_a_warm_cache(cache: Path) -> None:
    cold = (pc.mde_paired_sd(8, 0.05), pc.mde_unpaired_sd(6, 7, 0.025), pc.power_paired(1.0, 8, 0.05))
    warm = (pc.mde_paired_sd(8, 0.05), pc.mde_unpaired_sd(6, 7, 0.025), pc.power_paired(1.0, 8, 0.05))
    assert cold == warm
    assert any(cache.iterdir())


def test_the_cache_lives_under_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pc.ENV_CACHE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = pc.entry_path(KIND, ARGS)
    assert path is not None and path.parent == tmp_path / "xdg" / "kit" / "power"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # not absolute: ignored, as the XDG spec says
    path = pc.entry_path(KIND, ARGS)
    assert path is not None and path.parent == Path.home() / ".cache" / "kit" / "power"
    monkeypatch.setenv(pc.ENV_CACHE, "off")
    assert pc.entry_path(KIND, ARGS) is None
