"""Memory collector: host RAM, the trial's process tree (real processes) and cgroups (fake files)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.collectors import memory
from kit.collectors.base import TrialTarget
from kit.collectors.memory import MemoryCollector, TreeCache, tree_pids, tree_rss_bytes

MIB = 2**20
# A parent holding 64 MiB that starts a child holding 96 MiB; both then sleep.
TREE = (
    "import subprocess, sys, time\n"
    "a = bytearray(64 * 2**20)\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; b = bytearray(96 * 2**20); time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


def metrics(rows: list) -> dict[tuple[str, str], float]:
    assert all(r.source == "memory" and r.unit == "B" for r in rows)
    return {(r.device, r.metric): r.value for r in rows}


def test_host_rows_only_before_the_trial_starts() -> None:
    c = MemoryCollector()
    assert c.available().ok
    got = metrics(c.read())
    assert set(got) == {("host", "used_bytes"), ("host", "available_bytes")}
    assert got[("host", "used_bytes")] > 0 and got[("host", "available_bytes")] > 0


@pytest.fixture
def tree() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", TREE])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (tree_rss_bytes(proc.pid) or 0) < 160 * MIB:
        time.sleep(0.05)
    yield proc
    for pid in tree_pids(proc.pid) - {proc.pid}:
        subprocess.run(["kill", "-9", str(pid)], check=False)
    proc.kill()
    proc.wait()


def test_trial_rss_sums_the_process_tree(tree: subprocess.Popen[bytes]) -> None:
    target = TrialTarget()
    c = MemoryCollector(target=target)
    assert ("trial", "rss_bytes") not in metrics(c.read())
    target.pid = tree.pid  # filled by the backend after the collectors started
    assert len(tree_pids(tree.pid)) == 2
    rss = metrics(c.read())[("trial", "rss_bytes")]
    assert 160 * MIB <= rss < 400 * MIB  # parent's 64 + child's 96 MiB, plus two interpreters


def test_trial_that_ended_gives_no_row_and_no_error() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    c = MemoryCollector(target=TrialTarget(pid=proc.pid))
    assert ("trial", "rss_bytes") not in metrics(c.read())
    assert c.errors == []


@pytest.mark.parametrize(
    ("files", "want"),
    [
        ({"memory.current": "123456789\n", "memory.peak": "223456789\n"}, (123456789, 223456789)),
        ({"memory.usage_in_bytes": "1000\n", "memory.max_usage_in_bytes": "5000\n"}, (1000, 5000)),
        ({"memory.current": "42\n"}, (42, None)),  # kernels before 5.19 have no memory.peak
    ],
)
def test_cgroup_v2_and_v1(tmp_path: Path, files: dict[str, str], want: tuple[int, int | None]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    got = metrics(MemoryCollector(target=TrialTarget(pid=1, cgroup=tmp_path)).read())
    assert got[("trial", "cgroup_bytes")] == want[0]
    assert got.get(("trial", "cgroup_peak_bytes")) == want[1]
    assert ("trial", "rss_bytes") not in got  # the cgroup wins over the pid


def test_unreadable_cgroup_is_reported_once(tmp_path: Path) -> None:
    c = MemoryCollector(target=TrialTarget(cgroup=tmp_path))  # exists, but holds no memory files
    for _ in range(3):
        assert ("trial", "cgroup_bytes") not in metrics(c.read())
    assert len(c.errors) == 1 and str(tmp_path) in c.errors[0]


def test_vanished_cgroup_is_the_end_of_the_trial_not_an_error(tmp_path: Path) -> None:
    c = MemoryCollector(target=TrialTarget(cgroup=tmp_path / "gone"))  # removed with its container
    assert ("trial", "cgroup_bytes") not in metrics(c.read())
    assert c.errors == []


def test_background_sampling() -> None:
    with MemoryCollector(period_s=0.02) as c:
        time.sleep(0.15)
    rows = c.take_rows()
    assert len(rows) >= 6 and c.errors == []


def test_tree_cache_relists_only_when_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    cache = TreeCache(refresh_s=1.0, clock=lambda: now[0])
    parent = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    try:
        assert cache.pids(parent.pid) == {parent.pid}
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # not the parent's child
        try:
            assert cache.pids(child.pid) == {child.pid}  # another root: re-listed at once
            assert cache.pids(None) == set()
        finally:
            child.kill()
            child.wait()
        calls: list[int] = []
        real = memory.process_tree
        monkeypatch.setattr(memory, "process_tree", lambda pid: calls.append(pid) or real(pid))
        cache.pids(parent.pid)
        now[0] += 0.5
        cache.pids(parent.pid)  # fresh: from the cache
        now[0] += 0.6
        cache.pids(parent.pid)  # stale: re-listed
        assert calls == [parent.pid, parent.pid]
    finally:
        parent.kill()
        parent.wait()
