"""The incremental seal check (issue 44, item 3): a version-3 seal records each input file's size, mtime and
sha256, so a check re-hashes only files whose size or mtime moved; ``verify_all`` (``--verify-all``) and
``kit verify`` re-hash everything. Counted through :func:`kit.freshness.file_sha256`, the one place a seal
check reads raw bytes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from kit import freshness
from kit.freshness import SEAL_KEY, scan_inputs, seal, seal_holds

OLD_NS = 1_700_000_000 * 10**9  # long before any check: not "racy"
GOLDEN = Path(__file__).parent / "data" / "golden" / "run"


def _run(root: Path) -> Path:
    """A small run directory with every kind of input a seal covers, its files dated well in the past."""
    for rel, data in {"trials/t1.json": b'{"a": 1}', "trials/t2.json": b'{"a": 2}',
                      "samples/t1.parquet": b"PAR1" + bytes(range(200)), "attempts/t1-0.json": b"{}",
                      "manifest.json": b'{"experiment": "x"}', "nodes/n0.json": b"{}",
                      "study/experiment.toml": b"name = 'x'\n", "study/sub/mod.py": b"X = 1\n"}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, ns=(OLD_NS, OLD_NS))
    return root


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = freshness.file_sha256

    def counting(fd: int) -> str:
        calls[0] += 1
        return real(fd)

    monkeypatch.setattr(freshness, "file_sha256", counting)
    return calls


def _sealed(run: Path) -> dict[str, Any]:
    content: dict[str, Any] = {"values": [1.0, 2.0]}
    s = seal(content, scan_inputs(run), "hooks-state")
    assert s is not None
    return {**content, SEAL_KEY: s}


def test_untouched_run_reads_no_file(tmp_path: Path, counted: list[int]) -> None:
    run = _run(tmp_path / "r")
    content = _sealed(run)
    assert len(content[SEAL_KEY][freshness.FILES_KEY]) == 8
    counted[0] = 0
    assert seal_holds(content, run, None)
    assert counted[0] == 0
    assert seal_holds(content, run, "hooks-state") and not seal_holds(content, run, "other-study-code")
    assert seal_holds(content, run, None, verify_all=True) and counted[0] == 8  # the full check reads all


def test_edit_that_changes_the_size_breaks_the_seal(tmp_path: Path, counted: list[int]) -> None:
    run = _run(tmp_path / "r")
    content = _sealed(run)
    (run / "samples" / "t1.parquet").write_bytes(b"PAR1" + bytes(range(201)))
    counted[0] = 0
    assert not seal_holds(content, run, None)
    assert counted[0] == 1  # only the file that moved was read


@pytest.mark.parametrize("change", ["added", "removed", "link", "manifest"])
def test_added_removed_or_replaced_files_break_the_seal(tmp_path: Path, change: str) -> None:
    run = _run(tmp_path / "r")
    content = _sealed(run)
    if change == "added":
        (run / "trials" / "t3.json").write_bytes(b"{}")
    elif change == "removed":
        (run / "attempts" / "t1-0.json").unlink()
    elif change == "link":
        target = run / "trials" / "t1.json"
        keep = target.read_bytes()
        target.unlink()
        (tmp_path / "elsewhere.json").write_bytes(keep)
        target.symlink_to(tmp_path / "elsewhere.json")
    else:
        (run / "manifest.json").write_bytes(b'{"experiment": "y"}')
    assert not seal_holds(content, run, None)


def test_edit_keeping_size_and_mtime_is_caught_by_verify_all_and_by_verify(tmp_path: Path) -> None:
    """The shortcut's documented limit: an edit that keeps the size and sets the mtime back passes the quick
    check (as a crafted run always could); --verify-all and a bundle's integrity check catch it."""
    from kit.errors import KitError
    from kit.verify import check_integrity

    run = _run(tmp_path / "r")
    content = _sealed(run)
    trial = run / "trials" / "t1.json"
    trial.write_bytes(b'{"a": 9}')  # same size
    os.utime(trial, ns=(OLD_NS, OLD_NS))
    assert seal_holds(content, run, None)  # size and mtime as recorded: not re-hashed
    assert not seal_holds(content, run, None, verify_all=True)

    bundle = _run(tmp_path / "bundle")  # kit verify: every file against SHA256SUMS, always
    files = sorted(p for p in bundle.rglob("*") if p.is_file())
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(bundle).as_posix()}\n"
                   for p in files)
    (bundle / "SHA256SUMS").write_text(sums)
    assert check_integrity(bundle) == len(files)
    edited = bundle / "trials" / "t1.json"
    edited.write_bytes(b'{"a": 9}')
    os.utime(edited, ns=(OLD_NS, OLD_NS))
    with pytest.raises(KitError, match=r"changed trials/t1\.json"):
        check_integrity(bundle)


def test_a_file_hashed_right_after_its_last_write_is_always_rehashed(tmp_path: Path, counted: list[int]) -> None:
    """An edit within the same clock tick as the hashing keeps size and mtime: such a file keeps no mtime."""
    run = _run(tmp_path / "r")
    (run / "trials" / "t2.json").write_bytes(b'{"a": 3}')  # now: racy
    content = _sealed(run)
    rows = {r[0]: r for r in content[SEAL_KEY][freshness.FILES_KEY]}
    assert rows["trials/t2.json"][2] is None and rows["trials/t1.json"][2] == OLD_NS
    counted[0] = 0
    assert seal_holds(content, run, None)
    assert counted[0] == 1


def test_forged_table_fails_the_mac(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    content = _sealed(run)
    forged = json.loads(json.dumps(content))
    forged[SEAL_KEY][freshness.FILES_KEY][0][2] += 1
    assert not seal_holds(forged, run, None)


@pytest.mark.parametrize("bad", [None, "x", [["a", -1, 0, "0" * 64]], [["a", 1, 0]], [[1, 1, 0, "0" * 64]]])
def test_malformed_table_under_a_valid_mac_gets_the_full_check(tmp_path: Path, counted: list[int], bad: Any) -> None:
    run = _run(tmp_path / "r")
    body: dict[str, Any] = {"values": [1.0]}
    scan = scan_inputs(run)
    s = seal(body, scan.digest, "h")
    assert s is not None
    from kit.trust import seal_key

    k = seal_key()
    assert k is not None
    s[freshness.FILES_KEY] = bad
    s["hmac"] = freshness.mac(k, "analysis-seal", *freshness._parts(3, scan.digest, "h",
                                                                   freshness._content_digest(body), bad))
    counted[0] = 0
    assert seal_holds({**body, SEAL_KEY: s}, run, None)
    assert counted[0] == 8


def test_a_version_2_seal_still_reads_with_the_full_check(tmp_path: Path) -> None:
    from kit.trust import seal_key

    run = _run(tmp_path / "r")
    body: dict[str, Any] = {"values": [1.0]}
    k = seal_key()
    assert k is not None
    inputs = freshness._inputs_digest_v2(run)
    s = {"version": 2, "inputs": inputs, "hooks": "h",
         "hmac": freshness.mac(k, "analysis-seal", *freshness._parts(2, inputs, "h", freshness._content_digest(body)))}
    assert seal_holds({**body, SEAL_KEY: s}, run, None)
    (run / "trials" / "t1.json").write_bytes(b'{"a": 7}')
    os.utime(run / "trials" / "t1.json", ns=(OLD_NS, OLD_NS))
    assert not seal_holds({**body, SEAL_KEY: s}, run, None)  # no table: every byte is read


@pytest.mark.slow  # analyses the golden run (~5 s on a loaded 2-core host)
def test_a_stored_analysis_is_reused_without_reading_raw_data(tmp_path: Path, counted: list[int]) -> None:
    """End to end on the golden run: analyse, then current_analysis reuses it reading no raw file; an edit that
    keeps size and mtime is only seen with verify_all, which recomputes."""
    from kit.analysis.analyze import analyze_run, current_analysis

    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run, ignore=shutil.ignore_patterns("analysis.json", "report"))
    for p in run.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(OLD_NS, OLD_NS))
    analyze_run(run)
    counted[0] = 0
    _, recomputed = current_analysis(run, need_study=False)
    assert not recomputed and counted[0] == 0
    trial = sorted((run / "trials").glob("*.json"))[0]
    raw = trial.read_bytes()
    assert raw.endswith(b"}\n")
    trial.write_bytes(raw[:-1] + b" ")  # same size, same JSON: a real edit the quick check cannot see
    os.utime(trial, ns=(OLD_NS, OLD_NS))
    assert not current_analysis(run, need_study=False)[1]
    assert current_analysis(run, need_study=False, verify_all=True)[1]


def test_text_form_seal_signs_the_bytes_and_nothing_may_follow_it(tmp_path: Path, counted: list[int]) -> None:
    """analyze_run's seal signs the file's bytes before it (no re-serialising on read); a member added after the
    seal (a duplicate key that json.loads would believe) or a missing ``text`` fails it."""
    from kit.freshness import analysis_bytes, sealed_text

    run = _run(tmp_path / "r")
    content: dict[str, Any] = {"values": [{"metric": "time_s", "value": 1.5}], "arms": ["a", "b"]}
    text, s = sealed_text(content, scan_inputs(run), "h")
    assert s is not None and s["form"] == "text"
    parsed = json.loads(text)
    assert {k: v for k, v in parsed.items() if k != SEAL_KEY} == content and parsed[SEAL_KEY] == s
    counted[0] = 0
    assert seal_holds(parsed, run, None, text=text) and counted[0] == 0
    assert not seal_holds(parsed, run, None)  # the bytes are what is signed
    assert analysis_bytes(parsed) == text  # copied (kit pack) it is written the same way
    forged = text[:-2] + b', "values": [{"metric": "time_s", "value": 0.5}]}\n'
    assert json.loads(forged)["values"][0]["value"] == 0.5
    assert not seal_holds(json.loads(forged), run, None, text=forged)
    edited = text.replace(b"1.5", b"2.5")
    assert not seal_holds(json.loads(edited), run, None, text=edited)
