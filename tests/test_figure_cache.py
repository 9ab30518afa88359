"""The report figures' cache (kit.report.figure_cache): a hit is the drawn bytes and imports no matplotlib, other
data misses, and an entry someone else could have written or damaged is drawn again, never embedded."""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.analysis_record import TrialSeries
from kit.analysis_rows import ValueRow
from kit.private_files import open_dir, sealed_blob
from kit.report import figure_cache as fc
from kit.report import figures

REPO = Path(__file__).resolve().parents[1]

# the rows both this process and a fresh one draw (exec'd in each)
ROWS_SRC = """
from kit.analysis_rows import ValueRow
ROWS = [ValueRow(trial_id=f"t{i}", arm=arm, framework=arm, config_id="c0", block=0, repetition=i, position=2 * i + k,
                 warmup=i == 0, status="ok", phase="train", metric="time_s", value=1.0 + 0.1 * i + 0.37 * k,
                 unit="s", n_samples=1, bound=None)
        for i in range(6) for k, arm in enumerate(("pytorch", "tensorflow"))]
"""
SPACE: dict[str, object] = {}
exec(ROWS_SRC, SPACE)  # the test's own constant
ROWS: list[ValueRow] = SPACE["ROWS"]  # type: ignore[assignment]
ARMS = ["pytorch", "tensorflow"]
SVG = "<svg viewBox='0 0 1 1'>drawn</svg>\n"


def row(value: float | None, **kw: object) -> ValueRow:
    base: dict[str, object] = {"trial_id": "t1", "arm": "pytorch", "framework": "pytorch", "config_id": "c0",
                               "block": 0, "repetition": 0, "position": 3, "warmup": False, "status": "ok",
                               "phase": "train", "metric": "time_s", "value": value, "unit": "s", "n_samples": 1,
                               "bound": None}
    return ValueRow(**{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "figures"
    monkeypatch.setenv(fc.ENV, str(d))
    return d


class Drawer:
    """A stand-in for a figure function's drawing: counts its calls, returns fixed bytes."""

    def __init__(self, svg: str = SVG, pdf: bytes | None = b"%PDF-1.4 drawn\n%%EOF\n") -> None:
        self.calls, self.svg, self.pdf = 0, svg, pdf

    def __call__(self, pdf: bool) -> fc.Drawn:
        self.calls += 1
        return fc.Drawn(self.svg, self.pdf if pdf else None)


def fetch(drawer: Drawer, inputs: fc.Canon = ("rows", [1.0, 2.0]), pdf: bool = False) -> fc.Drawn:
    return fc.through_cache("test.figure", inputs, pdf, lambda: drawer(pdf))


def entry(cache: Path, inputs: fc.Canon = ("rows", [1.0, 2.0]), fmt: str = "svg") -> Path:
    key = fc.figure_key("test.figure", inputs)
    assert key is not None
    return cache / fc.entry_name(key, fmt)


def _mac_key() -> bytes:
    from kit.trust import seal_key

    key = seal_key()
    assert key is not None
    return key


# -- hits ---------------------------------------------------------------------------------------------------------

def test_a_hit_gives_the_drawn_bytes_without_drawing(cache: Path) -> None:
    drawer = Drawer()
    first, second = fetch(drawer), fetch(drawer)
    assert drawer.calls == 1 and first == second == fc.Drawn(SVG, None)
    assert entry(cache).is_file() and not entry(cache, fmt="pdf").exists()
    assert (os.stat(cache).st_mode & 0o077) == 0 and (os.stat(entry(cache)).st_mode & 0o777) == 0o600


def test_a_latex_report_needs_the_pdf_entry_too(cache: Path) -> None:
    drawer = Drawer()
    fetch(drawer)  # an HTML report: the SVG alone
    got = fetch(drawer, pdf=True)  # no PDF stored: drawn again, both kept
    assert drawer.calls == 2 and got.pdf == drawer.pdf
    assert fetch(drawer, pdf=True) == got and fetch(drawer) == fc.Drawn(SVG, None) and drawer.calls == 2


def test_redraw_draws_afresh_and_stores(cache: Path) -> None:
    fetch(Drawer())
    new = Drawer(svg="<svg>new</svg>")
    with fc.redrawing(True):
        assert fetch(new).svg == "<svg>new</svg>" and new.calls == 1
    assert fetch(Drawer()).svg == "<svg>new</svg>"


def test_real_figures_hit_byte_identical_without_importing_matplotlib(cache: Path) -> None:
    """A figure drawn here, then asked for by a fresh process: the same SVG and PDF bytes, matplotlib never
    imported there."""
    with figures.vector_formats(pdf=True):
        drawn = figures.boxplot(ROWS, "time_s", "train", ARMS, "t", None)
        sched = figures.schedule_plot(ROWS, "time_s", "train", ARMS, "s", {"c0": "one"})
    assert "matplotlib" in sys.modules and drawn.startswith("<svg")
    probe = ROWS_SRC + """
import sys
from pathlib import Path
from kit.report import figures
with figures.vector_formats(pdf=True):
    box = figures.boxplot(ROWS, "time_s", "train", ["pytorch", "tensorflow"], "t", None)
    sched = figures.schedule_plot(ROWS, "time_s", "train", ["pytorch", "tensorflow"], "s", {"c0": "one"})
out = Path(sys.argv[1])
(out / "box.svg").write_text(box, encoding="utf-8")
(out / "box.pdf").write_bytes(box.pdf)
(out / "sched.svg").write_text(sched, encoding="utf-8")
print("matplotlib" in sys.modules, "numpy" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe, str(cache.parent)], env=env, capture_output=True,
                          text=True, timeout=60, cwd=cache.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "False", "a cache hit imported matplotlib"
    assert (cache.parent / "box.svg").read_text(encoding="utf-8") == drawn
    assert (cache.parent / "box.pdf").read_bytes() == drawn.pdf  # type: ignore[attr-defined]
    assert (cache.parent / "sched.svg").read_text(encoding="utf-8") == sched


# -- keys -----------------------------------------------------------------------------------------------------------

def test_canonical_encoding_tells_every_value_apart() -> None:
    values: list[fc.Canon] = [None, True, False, 1, 1.0, -0.0, 0.0, "1", b"1", [1.0], [1], ["a", "b"], ["ab"],
                              [[1.0], [2.0]], [[1.0, 2.0]], 0.1, math.nextafter(0.1, 1.0), float("nan"), [], ()]
    encoded = [fc.canonical(v) for v in values]
    assert len(set(encoded[:-1])) == len(values) - 1  # () and [] are both an empty sequence
    assert fc.canonical(()) == fc.canonical([])
    assert fc.figure_key("k", {"a": 1}) is None  # type: ignore[arg-type]  # no encoding: drawn without the cache
    with pytest.raises(TypeError):
        fc.canonical(object())  # type: ignore[arg-type]


def _box_key(rows: list[ValueRow], arms: list[str] = ARMS, title: str = "t",
             configs: dict[str, str] | None = None) -> str | None:
    return fc.figure_key("box", figures._boxplot_inputs(rows, "time_s", "train", arms, title, configs))


def test_changed_data_misses_and_undrawn_fields_do_not() -> None:
    base = [row(1.0), row(2.0, arm="tensorflow", trial_id="t2")]
    k = _box_key(base)
    assert k is not None and k == _box_key(list(base))
    changed = [
        [row(1.0), row(float.fromhex("0x1.0000000000001p+1"), arm="tensorflow")],  # one ulp
        [row(1.0), row(2, arm="tensorflow")],  # an int where a float was
        [row(2.0, arm="tensorflow"), row(1.0)],  # the order (the jitter follows it)
        [row(1.0), row(2.0, arm="tensorflow", config_id="c1")],
        [row(1.0)],
    ]
    for rows in changed:
        assert _box_key(rows) != k
    assert _box_key(base, arms=ARMS[::-1]) != k and _box_key(base, title="u") != k
    assert _box_key(base, configs={"c0": "a"}) != _box_key(base, configs={"c0": "b"})
    # what the box plot does not draw: another trial id, another metric's or phase's rows, rows without a value
    same = [row(1.0, trial_id="x"), row(2.0, arm="tensorflow", trial_id="y", position=9, warmup=True),
            row(5.0, metric="cpu_util_pct"), row(5.0, phase="infer"), row(None)]
    assert _box_key(same) == k
    # the schedule draws the position and the warm-up flag, and only finished rows
    sk = fc.figure_key("s", figures._schedule_inputs(base, "time_s", "train", ARMS, "t", None))
    for rows in ([row(1.0, position=4), base[1]], [row(1.0, warmup=True), base[1]]):
        assert fc.figure_key("s", figures._schedule_inputs(rows, "time_s", "train", ARMS, "t", None)) != sk
    failed = [*base, row(7.0, status="failed")]
    assert fc.figure_key("s", figures._schedule_inputs(failed, "time_s", "train", ARMS, "t", None)) == sk


def test_telemetry_key_follows_every_point() -> None:
    s = TrialSeries(arm="pytorch", trial_id="t1", metric="cpu", t_s=(0.0, 0.5, 1.0), value=(10.0, 20.0, 30.0))

    def key(*series: TrialSeries, panels: list[tuple[str, str]] | None = None) -> str | None:
        return fc.figure_key("tel", figures._telemetry_inputs(series, ARMS, panels or [("cpu", "CPU %")], "t"))

    k = key(s)
    assert k == key(TrialSeries("pytorch", "other-trial", "cpu", (0.0, 0.5, 1.0), (10.0, 20.0, 30.0)))
    assert key(TrialSeries("pytorch", "t1", "cpu", (0.0, 0.5, 1.0), (10.0, 20.0, 30.000000000000004))) != k
    assert key(TrialSeries("pytorch", "t1", "cpu", (0.0, 0.5), (10.0, 20.0))) != k
    assert key(s, panels=[("cpu", "CPU (%)")]) != k


def test_figure_code_and_matplotlib_are_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    k = fc.figure_key("k", [1.0])
    monkeypatch.setattr(fc, "_code_facts", lambda: ("0.1.0", "a" * 64, "b" * 64, "9.9", "2.0", "cpython", "3.11"))
    assert fc.figure_key("k", [1.0]) not in (None, k)
    monkeypatch.setattr(fc, "_code_facts", lambda: None)  # matplotlib's version unknown: no cache
    assert fc.figure_key("k", [1.0]) is None


def test_a_matplotlibrc_in_the_working_directory_changes_the_key(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    k = fc.figure_key("k", [1.0])
    (tmp_path / "matplotlibrc").write_text("lines.linewidth: 3\n", encoding="utf-8")
    assert fc.figure_key("k", [1.0]) != k
    (tmp_path / "matplotlibrc").unlink()
    os.mkfifo(tmp_path / "matplotlibrc")  # never waited on
    assert fc.figure_key("k", [1.0]) not in (None, k)


def test_changed_rcparams_draw_without_the_cache() -> None:
    import matplotlib

    assert fc.figure_key("k", [1.0]) is not None
    with matplotlib.rc_context({"lines.linewidth": 7.0}):
        assert fc.figure_key("k", [1.0]) is None


# -- hostile entries ------------------------------------------------------------------------------------------------

EVIL = "<svg><script>alert(1)</script></svg>"


def _tamper(how: str, path: Path, tmp_path: Path) -> None:
    blob = path.read_bytes()
    key = path.name.split("-")[0]
    if how == "payload-edited":  # the MAC line kept, the bytes changed
        path.write_bytes(blob.replace(b"drawn", b"EVILS"))
    elif how == "foreign-key":  # a well-formed entry signed with someone else's key
        path.write_bytes(sealed_blob(b"k" * 32, "figure-cache", f"figure\0{key}\0svg", EVIL.encode()))
    elif how == "other-entry":  # this user's valid entry of another figure, copied to this name
        other = fc.figure_key("test.figure", ["another"])
        assert other is not None
        path.write_bytes(sealed_blob(_mac_key(), "figure-cache", f"figure\0{other}\0svg", EVIL.encode()))
    elif how == "not-an-svg":  # signed with the right key and name, but not what to_svg writes
        path.write_bytes(sealed_blob(_mac_key(), "figure-cache", f"figure\0{key}\0svg", b"<html>" + EVIL.encode()))
    elif how == "symlink":  # a link to a valid entry (of evil content) elsewhere: never followed
        target = tmp_path / "elsewhere"
        target.write_bytes(sealed_blob(_mac_key(), "figure-cache", f"figure\0{key}\0svg", EVIL.encode()))
        path.unlink()
        path.symlink_to(target)
    elif how == "oversized":
        path.write_bytes(blob + b" " * (fc.MAX_ENTRY_BYTES + 200))
    elif how == "truncated":
        path.write_bytes(blob[: len(blob) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif how == "group-writable":
        path.chmod(0o666)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["payload-edited", "foreign-key", "other-entry", "not-an-svg", "symlink", "oversized",
                                 "truncated", "empty", "fifo", "group-writable"])
def test_a_tampered_entry_is_drawn_again_never_embedded(cache: Path, tmp_path: Path, how: str) -> None:
    drawer = Drawer()
    fetch(drawer)
    path = entry(cache)
    _tamper(how, path, tmp_path)
    got = fetch(drawer)
    assert drawer.calls == 2 and got == fc.Drawn(SVG, None) and "script" not in got.svg
    assert not path.is_symlink() and path.is_file() and fetch(drawer) == got and drawer.calls == 2  # rewritten
    if how == "symlink":
        assert b"script" in (tmp_path / "elsewhere").read_bytes()  # replaced, never written through


def test_a_directory_at_an_entry_name_is_drawn_around(cache: Path) -> None:
    drawer = Drawer()
    fetch(drawer)
    path = entry(cache)
    path.unlink()
    path.mkdir()
    assert fetch(drawer) == fc.Drawn(SVG, None) and fetch(drawer) == fc.Drawn(SVG, None) and drawer.calls == 3


def test_an_unsafe_cache_directory_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_dir_ = tmp_path / "open"
    open_dir_.mkdir()
    open_dir_.chmod(0o777)
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    for where in (open_dir_, link):
        monkeypatch.setenv(fc.ENV, str(where))
        drawer = Drawer()
        fetch(drawer)
        fetch(drawer)
        assert drawer.calls == 2
    assert list(open_dir_.iterdir()) == [] and list(real.iterdir()) == []


def test_no_key_no_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kit.trust

    monkeypatch.setattr(kit.trust, "seal_key", lambda create=True: None)
    drawer = Drawer()
    fetch(drawer)
    fetch(drawer)
    assert drawer.calls == 2 and not cache.exists()


def test_where_the_cache_lives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fc.ENV, "off")
    assert fc.cache_dir() is None
    drawer = Drawer()
    fetch(drawer)
    fetch(drawer)
    assert drawer.calls == 2
    monkeypatch.delenv(fc.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fc.cache_dir() == tmp_path / "kit" / "figures"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not absolute: the XDG spec says ignore it
    assert fc.cache_dir() == Path.home() / ".cache" / "kit" / "figures"


def test_an_oversized_drawing_is_not_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fc, "MAX_ENTRY_BYTES", 64)
    drawer = Drawer(svg="<svg>" + "x" * 100 + "</svg>")
    fetch(drawer)
    fetch(drawer)
    assert drawer.calls == 2 and not entry(cache).exists()


# -- size and concurrency -------------------------------------------------------------------------------------------

def test_eviction_removes_the_least_recently_used(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(4):
        fetch(Drawer(), inputs=[float(i)])
    size = entry(cache, [0.0]).stat().st_size
    now = time.time()
    for i in range(4):
        os.utime(entry(cache, [float(i)]), (now - 1000 + i, now - 1000 + i))
    fetch(Drawer(), inputs=[0.0])  # a hit: entry 0 is now the most recently used
    (cache / ".tmp-1-dead").write_bytes(b"x")
    os.utime(cache / ".tmp-1-dead", (now - 2 * fc.STALE_TEMP_S, now - 2 * fc.STALE_TEMP_S))
    (cache / "planted.kfig").symlink_to("/etc/passwd")
    with open_dir(cache) as d:  # type: ignore[union-attr]
        gone = fc.evict(d, max_total_bytes=2 * size)
    assert sorted(gone) == sorted([".tmp-1-dead", "planted.kfig", entry(cache, [1.0]).name, entry(cache, [2.0]).name])
    assert entry(cache, [0.0]).is_file() and entry(cache, [3.0]).is_file()


def _writer(cache: str, rounds: int, errors: multiprocessing.Queue) -> None:
    os.environ[fc.ENV] = cache
    big = "<svg>" + "y" * 200_000 + "</svg>"
    try:
        with fc.redrawing(True):
            for _ in range(rounds):
                fc.through_cache("test.figure", ["shared"], True, lambda: fc.Drawn(big, b"%PDF-1 x %%EOF"))
    except Exception as exc:  # reported to the test
        errors.put(repr(exc))


def test_concurrent_writers_never_leave_half_an_entry(cache: Path) -> None:
    """Four processes rewrite the same entries while this one reads them: every read is the whole entry."""
    fetch(Drawer(svg="<svg>" + "y" * 200_000 + "</svg>", pdf=b"%PDF-1 x %%EOF"), inputs=["shared"], pdf=True)
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(cache), 40, errors)) for _ in range(4)]
    for p in procs:
        p.start()
    key = fc.figure_key("test.figure", ["shared"])
    assert key is not None
    reads = 0
    with open_dir(cache) as d:  # type: ignore[union-attr]
        while any(p.is_alive() for p in procs) or reads < 50:
            got = fc.read_entry(d, _mac_key(), key, "svg")
            assert got is not None and len(got) == 200_011
            reads += 1
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert errors.empty()
    assert not [n for n in os.listdir(cache) if n.startswith(".tmp-")]


def test_report_has_a_redraw_option() -> None:
    from typer.testing import CliRunner

    from kit.cli import app

    out = CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0 and "--redraw" in out.output
