"""Dataset registry: verified lookup, refusal of tampered files, downloads with resume."""

from __future__ import annotations

import functools
import hashlib
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.datasets import MNIST, DatasetFile, fetch, resolve
from kit.errors import ChecksumError, DatasetError


def test_bundled_test_set_resolves_and_verifies() -> None:
    r = resolve("mnist", "t10k_split", download=False)
    assert r.origin == "bundled"
    assert r.files["t10k-images-idx3-ubyte.gz"] == MNIST.file("t10k-images-idx3-ubyte.gz").sha256


def test_data_dir_option_wins(mnist_dir: Path) -> None:
    r = resolve("mnist", "t10k_split", data_dir=mnist_dir, download=False)
    assert r.directory == mnist_dir and r.origin == "--data-dir"


def test_relative_data_dir_is_made_absolute(mnist_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(mnist_dir.parent)  # trials run in their own work directory: a relative path would break there
    r = resolve("mnist", "t10k_split", data_dir=Path(mnist_dir.name), download=False)
    assert r.directory.is_absolute() and r.directory == mnist_dir.resolve()


def test_tampered_file_is_refused(mnist_dir: Path) -> None:
    f = mnist_dir / "t10k-labels-idx1-ubyte.gz"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as exc:
        resolve("mnist", "t10k_split", data_dir=mnist_dir, download=False)
    msg = exc.value.one_line()
    assert str(f) in msg and "SHA-256 mismatch" in msg and "Fix:" in msg


def test_full_split_missing_offline_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found and downloads are off"):
        resolve("mnist", "full", data_dir=tmp_path, download=False)


def test_partial_directory_is_an_error(mnist_dir: Path) -> None:
    (mnist_dir / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetError, match="missing beside"):
        resolve("mnist", "t10k_split", data_dir=mnist_dir, download=False)


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real HTTP server (with Range support, as SimpleHTTPRequestHandler lacks it)."""
    root = tmp_path / "www"
    root.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            path = root / self.path.lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            rng = self.headers.get("Range")
            if rng:
                start = int(rng.split("=")[1].split("-")[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                data = data[start:]
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler))
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", root
    srv.shutdown()


def test_download_resumes_and_verifies(http_dir: tuple[str, Path], tmp_path: Path) -> None:
    url, root = http_dir
    payload = bytes(range(256)) * 4000
    (root / "blob.bin").write_bytes(payload)
    f = DatasetFile("blob.bin", hashlib.sha256(payload).hexdigest(), (f"{url}/missing", f"{url}/blob.bin"), len(payload))
    target = tmp_path / "cache"
    target.mkdir()
    (target / "blob.bin.part").write_bytes(payload[:100_000])  # an interrupted earlier download
    seen: list[int] = []
    digest = fetch(f, target, progress=lambda name, done, total: seen.append(done))
    assert digest == f.sha256 and (target / "blob.bin").read_bytes() == payload
    assert seen and seen[0] > 100_000 - 1  # resumed, did not start at 0
    assert not (target / "blob.bin.part").exists()


def test_download_with_wrong_checksum_is_not_kept(http_dir: tuple[str, Path], tmp_path: Path) -> None:
    url, root = http_dir
    (root / "evil.bin").write_bytes(b"not what was pinned")
    f = DatasetFile("evil.bin", "0" * 64, (f"{url}/evil.bin",), None)
    target = tmp_path / "cache"
    with pytest.raises(DatasetError, match="checksum mismatch"):
        fetch(f, target)
    assert not any(target.iterdir())


def test_cli_corrupt_dataset_one_line_nonzero(tmp_path: Path, mnist_dir: Path, spec_path: Path) -> None:
    f = mnist_dir / "t10k-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:-10])
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "kit", "run", str(spec_path), "-p", "smoke", "--runs-dir", str(runs),
                           "--data-dir", str(mnist_dir), "--no-download"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "SHA-256 mismatch" in lines[0] and "Fix:" in lines[0], proc.stderr
    assert not runs.exists()
