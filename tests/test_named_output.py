"""A path the user names for the kit's output (--json-file, --html) is written into when it is a FIFO or a device,
never replaced: the atomic rename would put a regular file in its place. Run as root with /dev/null, that replaced
the host's /dev/null with a regular file, which broke every later `>/dev/null` (munge, podman) on the machine."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from kit.errors import StoreError
from kit.store import write_named_output


def test_a_fifo_named_for_the_json_is_written_into_and_stays_a_fifo(tmp_path: Path) -> None:
    from kit.cli.output import Output, print_json

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    print_json(Output.for_terminal(), {"rows": []}, "compare", fifo, stdout=False)
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # the FIFO itself, not a regular file in its place
    doc = json.loads(got[0])
    assert doc["schema"]["name"] == "kit.compare" and doc["rows"] == []
    assert [p.name for p in tmp_path.iterdir()] == ["out.fifo"]  # no temporary file left beside it


def test_dev_null_stays_a_device(tmp_path: Path) -> None:
    before = os.stat("/dev/null")
    assert stat.S_ISCHR(before.st_mode)
    try:
        write_named_output(Path("/dev/null"), b"{}\n")
        after = os.stat("/dev/null")
        assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    finally:  # were the defence gone, put the host's /dev/null back (as root) before failing
        if not stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.geteuid() == 0:
            os.unlink("/dev/null")
            os.mknod("/dev/null", 0o666 | stat.S_IFCHR, before.st_rdev)
            os.chmod("/dev/null", 0o666)


def test_a_regular_file_is_written_atomically_and_a_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")
    write_named_output(target, b"new")
    assert target.read_text() == "new"
    with pytest.raises(StoreError, match="not a file the kit can write"):
        write_named_output(tmp_path, b"x")
