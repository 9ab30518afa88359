"""`kit doctor` says whether dataset downloads are reachable, probed with a short timeout, or "not checked"; it never
says "ready for every dataset" on a host whose download hosts do not answer (issue 39, item 8)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.doctor import downloads as doctor
from kit.doctor.findings import verdict


def test_the_probe_is_a_real_tcp_connection() -> None:
    """A listening socket answers; the same port once closed does not."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        assert doctor.reach_host("127.0.0.1", port, 3.0) is True
    finally:
        server.close()
    assert doctor.reach_host("127.0.0.1", port, 3.0) is False
    assert doctor.reach_host("no-such-host.invalid", 443, 3.0) is False


def test_a_probe_that_hangs_counts_as_unreachable_and_does_not_hold_the_check() -> None:
    """Name resolution ignores socket timeouts: a probe stuck past the deadline is left in its daemon thread."""
    release = threading.Event()

    def probe(host: str, port: int, timeout_s: float) -> bool:
        if host == "stuck.example":
            release.wait(60)  # far past the deadline: only the deadline ends the wait
        return True

    try:
        got = doctor.probe_hosts([("stuck.example", 443), ("fine.example", 443)], probe, timeout_s=0.1)
    finally:
        release.set()
    assert got == {"stuck.example": False, "fine.example": True}


def test_the_hosts_are_the_registry_s() -> None:
    hosts = dict(doctor.download_hosts())
    assert "ossci-datasets.s3.amazonaws.com" in hosts and all(port in (80, 443) for port in hosts.values())


def _verdict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, answers: bool | None) -> dict[str, object]:
    """The findings of the dataset part with an empty cache (KIT_CACHE_DIR), hosts answering or not, or unchecked."""
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KIT_DATA_DIR", raising=False)
    reached = None if answers is None else doctor.probe_hosts(doctor.download_hosts(), lambda h, p, t: answers)
    findings = doctor.check_downloads(reached) + doctor.check_datasets(None, True, reached)
    return verdict(findings)


def test_no_internet_is_never_ready_for_every_dataset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    offline = _verdict(monkeypatch, tmp_path, False)
    assert "every dataset" not in " ".join(offline["ready"])  # type: ignore[arg-type]
    assert "download hosts did not answer" in str(offline["line"])
    unchecked = _verdict(monkeypatch, tmp_path, None)
    assert "every dataset" not in " ".join(unchecked["ready"])  # type: ignore[arg-type]
    assert "not checked: downloads of" in str(unchecked["line"])
    online = _verdict(monkeypatch, tmp_path, True)
    assert any(r.startswith("every dataset (some downloaded on first use") for r in online["ready"])  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_cli_says_reachable_or_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int, float]] = []

    def probe(host: str, port: int, timeout_s: float) -> bool:
        calls.append((host, port, timeout_s))
        return False

    monkeypatch.setattr(doctor, "reach_host", probe)
    res = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "dataset hosts: not reachable" in res.output.splitlines()[1]
    assert calls and all(t == doctor.DOWNLOAD_PROBE_TIMEOUT_S == 3.0 for _, _, t in calls)
    calls.clear()
    res = CliRunner().invoke(app, ["doctor", "--no-check-downloads"], env={"COLUMNS": "250"})
    assert "dataset hosts: not checked" in res.output and calls == []
