"""What keeps `kit history`'s first call and its cached call fast over 1,000 runs (issue 44), and what proves the
shortcuts give the same answers and believe nothing more:

- a text-sealed analysis.json is read through kit.history_read (the seal checked on the bytes, then only the
  members history needs), giving the records the full read gives, and None (the full read) for anything else;
- a cached call reads no run and imports neither numpy nor kit.store nor kit.freshness;
- a cache hit still proves the run's files are untouched: an edit keeping the size, with the mtime set back,
  is a miss, and ``--verify-all`` (the seal's full check) catches what the incremental check cannot.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kit import freshness, history_cache, history_read
from kit.freshness import scan_inputs, sealed_text, stored_analysis
from kit.history_read import sealed_series, select_rows, split_members

GOLDEN = Path(__file__).parent / "data" / "golden" / "run"
OLD_NS = 1_700_000_000 * 10**9  # long before any check: not "racy"
ODD = 'q"uote\\ ,\n "values": [\n  {\n   "metric": "time_s"\n  },\n  {\n\u00e9\u2028'  # text that mimics the layout


def _row(trial: str, arm: str, metric: str, phase: str, value: float, **more: Any) -> dict[str, Any]:
    return {"trial_id": trial, "arm": arm, "framework": arm, "config_id": "c00", "block": 0, "repetition": 0,
            "position": 0, "warmup": False, "status": "ok", "phase": phase, "metric": metric, "value": value,
            "unit": "s", "n_samples": 1, "bound": None, **more}


def _content(n_trials: int = 6) -> dict[str, Any]:
    """An analysis.json content with the members a real one has, several series, and strings that mimic the
    layout the fast reader relies on (in values, keys and nested tables)."""
    rows = []
    for i in range(n_trials):
        for arm in ("tensorflow", "pytorch"):
            for metric in ("time_s", "accuracy", ODD):
                for phase in ("train", "infer"):
                    rows.append(_row(f"r{i:03d}-{arm}", arm, metric, phase, 1.0 + i / 10 + (arm == "pytorch"),
                                     **({"note": {"metric": "time_s", "phase": "train"}} if i == 2 else {})))
    rows.append(_row("r999", "pytorch", "time_s", "train", 9.0, status=ODD))  # does not count (status)
    return {"schema_version": 1, "kit_version": "0", "experiment": "golden", "title": ODD, "profile": "quick",
            "profile_description": None, "alpha": 0.05, "arms": ["tensorflow", "pytorch"], "configs": {"c00": {}},
            "run": {"planned": 12, "finished": 12, "started": 1.0, "ended": 2.0, "by_status": {"ok": 12}},
            "descriptives": [{"metric": "time_s", "phase": "train", "x": ODD}], "hypotheses": [],
            "trial_env": [{"arm": "pytorch", "framework_version": "2.3"}, {"arm": "tensorflow"}],
            "devices": {}, "disturbance": {"phases": []}, "values": rows,
            "extras": {ODD: [{"metric": "time_s"}], "values": []}, "study_code": {}, "validity": [],
            "raw_digest": "0" * 64}


def _run(root: Path, content: dict[str, Any] | None = None) -> Path:
    """A run directory (the golden run's manifest and trials) with ``content`` sealed in text form as the kit
    writes it, its files dated well in the past."""
    shutil.copytree(GOLDEN, root, ignore=shutil.ignore_patterns("samples"))
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(OLD_NS, OLD_NS))
    text, s = sealed_text(content or _content(), scan_inputs(root), "hooks")
    assert s is not None
    (root / "analysis.json").write_bytes(text)
    return root


def _facts(a: Any) -> tuple[Any, ...]:
    return (a.schema_version, a.experiment, a.alpha, a.arms, a.configs, a.run, a.trial_env, a.values)


@pytest.mark.parametrize(("metric", "phase"), [("time_s", "train"), ("time_s", "infer"), ("accuracy", "infer"),
                                               (ODD, "train"), ("gpu_power_w", "train")])
def test_the_fast_read_gives_the_records_of_the_full_read(tmp_path: Path, metric: str, phase: str) -> None:
    run = _run(tmp_path / "r")
    fast = sealed_series(run, metric, phase)
    full = stored_analysis(run, need_study=False, series=(metric, phase))
    assert fast is not None and full is not None
    assert _facts(fast) == _facts(full)
    assert fast.values_of(metric, phase, "pytorch") == full.values_of(metric, phase, "pytorch")
    if metric == "time_s" and phase == "train":
        assert len(fast.values) == 13 and fast.values_of(metric, phase, "pytorch")[0] == 2.0


def test_the_layout_helpers_agree_with_json_on_crafted_documents() -> None:
    """split_members is json.loads restricted to some members; select_rows keeps every row of the metric
    (and phase)."""
    rng = random.Random(44)
    alphabet = ['"', "\\", "\n", ",", " ", "{", "}", "[", "]", ":", "a", "é", "\u2028", "metric", "values"]
    for _ in range(300):
        def word() -> str:
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        metric, phase = rng.choice(["time_s", word()]), rng.choice(["train", word()])
        rows = [{"metric": rng.choice([metric, word()]), "phase": rng.choice([phase, word()]),
                 "x": {"metric": metric, "phase": phase}, word(): word()} for _ in range(rng.randint(0, 5))]
        doc = {word(): word(), "values": rows, "arms": [word()], "extras": {"values": word(), word(): [rows[:1]]}}
        body = (json.dumps(doc, indent=1) + "\n").encode()
        members = split_members(body, ("values", "arms", "extras"))
        assert members is not None
        assert {k: json.loads(v) for k, v in members.items()} == {k: doc[k] for k in ("values", "arms", "extras")}
        picked = select_rows(members["values"], metric)
        assert picked is not None
        assert [r for r in picked if r["metric"] == metric] == [r for r in rows if r["metric"] == metric]
        picked = select_rows(members["values"], metric, phase)
        assert picked is not None
        assert [r for r in picked if (r["metric"], r["phase"]) == (metric, phase)] == \
            [r for r in rows if (r["metric"], r["phase"]) == (metric, phase)]
    assert split_members(b'{"a": 1}\n', ("a",)) is None  # not the kit's layout: read in full
    assert select_rows(b'[1, 2]', "time_s") is None


def _fifo_or_skip(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(path)


@pytest.mark.parametrize("how", ["canonical", "junk after the seal", "edited body", "edited seal", "link", "fifo",
                                 "not json", "absent"])
def test_anything_but_an_intact_text_seal_is_left_to_the_full_read(tmp_path: Path, how: str) -> None:
    run = _run(tmp_path / "r")
    path = run / "analysis.json"
    text = path.read_bytes()
    full_reads = how == "canonical"  # the full read still accepts a canonical seal; the rest it refuses too
    if how == "canonical":
        content = _content()
        s = freshness.seal(content, scan_inputs(run), "hooks")
        path.write_bytes(freshness.analysis_bytes({**content, freshness.SEAL_KEY: s}))
    elif how == "junk after the seal":
        path.write_bytes(text + b' "values": []}\n')
    elif how == "edited body":
        path.write_bytes(text.replace(b'"value": 2.0', b'"value": 3.0', 1))
    elif how == "edited seal":
        path.write_bytes(text.replace(b'"form":"text"', b'"form":"text" ', 1))
    elif how == "link":
        (tmp_path / "elsewhere.json").write_bytes(text)
        path.unlink()
        path.symlink_to(tmp_path / "elsewhere.json")
    elif how == "fifo":  # refused without blocking on it
        path.unlink()
        _fifo_or_skip(path)
    elif how == "not json":
        path.write_bytes(text[:100] + b"\x00" + text[101:])
    else:
        path.unlink()
    assert sealed_series(run, "time_s", "train") is None
    full = stored_analysis(run, need_study=False, series=("time_s", "train"))
    assert (full is not None) == full_reads


def test_an_edit_keeping_size_and_mtime_misses_the_cache_and_verify_all_catches_it(tmp_path: Path) -> None:
    """ctime, which no user can set back, is in the cache's fingerprint: the run is read again. The seal's
    incremental check trusts size and mtime (the module docstring of kit.freshness says why), so only the full
    check, `--verify-all`, sees this edit; both the fast and the full read then refuse the stored analysis."""
    run = _run(tmp_path / "r")
    trial = next((run / "trials").glob("*.json"))
    before = history_cache.fingerprint(run)[0]
    st = trial.stat()
    data = trial.read_bytes()
    at = data.index(b'"status"')
    trial.write_bytes(data[:at] + b'"STATUS"' + data[at + 8:])  # same size
    os.utime(trial, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert trial.stat().st_size == st.st_size and trial.stat().st_mtime_ns == st.st_mtime_ns
    assert history_cache.fingerprint(run)[0] != before  # a cache miss: the run is read again
    assert sealed_series(run, "time_s", "train") is not None  # the incremental check cannot see it
    assert sealed_series(run, "time_s", "train", verify_all=True) is None
    assert stored_analysis(run, need_study=False, verify_all=True, series=("time_s", "train")) is None


def test_history_reads_sealed_runs_through_the_fast_path_and_serves_them_from_its_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kit.history as hist

    monkeypatch.setenv(history_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(history_cache, "RACY_S", 0.0)
    runs = tmp_path / "runs"
    for i in range(3):
        _run(runs / f"r{i}")
    full_reads: list[str] = []
    real = freshness.stored_analysis
    monkeypatch.setattr(freshness, "stored_analysis", lambda p, *a, **k: full_reads.append(p.name) or real(p, *a, **k))
    first = hist.collect(runs, "time_s", "train", "pytorch", None)
    assert full_reads == [] and [len(r.values) for r in first] == [6, 6, 6]
    assert [r.label for r in first] == ["pytorch 2.3"] * 3  # no label in the manifest: the arm's own version
    read: list[str] = []
    real_extract = hist._extract
    monkeypatch.setattr(hist, "_extract", lambda path, *a: read.append(path.name) or real_extract(path, *a))
    assert hist.collect(runs, "time_s", "train", "pytorch", None) == first and read == []
    assert hist.collect(runs, "time_s", "train", "pytorch", None, verify_all=True) == first and len(read) == 3


PROBE = """\
import json, os, sys
out, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["kit", *argv]
import kit.build_id  # the build the cache was filled under, whatever another checkout's edit did meanwhile
kit.build_id.kit_build = lambda: os.environ["KIT_TEST_BUILD"]
import kit.cli
code = 0
try:
    kit.cli.main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
with open(out, "w", encoding="utf-8") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def test_a_cached_call_imports_no_numpy_no_store_and_no_seal_code(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.history import history

    monkeypatch.setenv(history_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(history_cache, "RACY_S", 0.0)
    runs = tmp_path / "runs"
    for i in range(4):
        _run(runs / f"r{i}")
    from kit.build_id import kit_build

    history(runs, "time_s", "train")  # fills the cache (runs and steps)
    out = tmp_path / "modules.json"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           history_cache.ENV: str(tmp_path / "cache"), "KIT_TEST_BUILD": kit_build()}
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), "history", str(runs)], env=env,
                          capture_output=True, text=True, timeout=120)
    got = json.loads(out.read_text())
    assert got["code"] == 0, done.stderr[-2000:]
    unwanted = {"numpy", "scipy", "pandas", "kit.store", "kit.freshness", "kit.history_read", "kit.manifest"}
    assert not set(got["modules"]) & unwanted, sorted(set(got["modules"]) & unwanted)


def test_the_light_copies_of_kit_names_match_the_originals() -> None:
    from kit import stats, store
    from kit.build_id import kit_build
    from kit.history import MIN_N_FOR_TESTS

    assert (history_cache.MANIFEST, history_cache.ANALYSIS, history_cache.TRIALS, history_cache.SAMPLES,
            history_cache.ATTEMPTS) == (store.MANIFEST, store.ANALYSIS, store.TRIALS, store.SAMPLES, store.ATTEMPTS)
    assert MIN_N_FOR_TESTS == stats.MIN_N_FOR_TESTS
    assert freshness.kit_build is kit_build
    assert history_read.ANALYSIS == store.ANALYSIS


@pytest.mark.parametrize("rel", ["study/experiment.toml", "study/pkg/deep/hooks.py", "nodes/n0.json",
                                 "attempts/t1-0.json"])
def test_every_input_the_seal_covers_is_in_the_cache_fingerprint(tmp_path: Path, rel: str) -> None:
    """The study copy and nodes/ are inputs of the seal: edited (same size, mtime set back), a fresh read would
    find the seal broken and recompute, so the cache must not serve the old entry either."""
    run = tmp_path / "r"
    for name in ("study/experiment.toml", "study/pkg/deep/hooks.py", "nodes/n0.json", "attempts/t1-0.json"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"x = 1\n")
    before = history_cache.fingerprint(run)[0]
    assert history_cache.fingerprint(run)[0] == before
    st = (run / rel).stat()
    (run / rel).write_bytes(b"x = 2\n")
    os.utime(run / rel, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert history_cache.fingerprint(run)[0] != before


def test_a_link_planted_in_the_study_copy_is_recorded_not_followed(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "r"
    (run / "study").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    (run / "study" / "pkg").symlink_to(outside, target_is_directory=True)
    listed: list[str] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real(path))
    first = history_cache.fingerprint(run)[0]
    assert listed == [str(run / "study")]  # study/ itself, never the link's target
    (outside / "secret").write_text("y")
    assert history_cache.fingerprint(run)[0] == first  # nothing behind the link counts
