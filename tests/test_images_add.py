"""`kit images add`: releases checked on a (fake, local) PEP 691 index, locked, written to the user matrix.

The index is an http.server in a thread of this process serving JSON built from the files each test
declares; pip runs for real against it where the wheels are tiny pure-Python ones made here. Nothing
touches the network or the checkout's images/ folder (KIT_LOCAL_MATRIX points into tmp).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.errors import ImageError
from kit.images import add as add_mod
from kit.images import index as index_mod
from kit.images.add import add_row, ensure_row, is_release_spec, parse_release_spec
from kit.images.commands import list_images
from kit.images.index import list_releases, releases_between
from kit.images.lock import fetch_command, make_lock, parse_lock
from kit.images.matrix import ImageRow, load_matrix

CP311 = "cp311-cp311-manylinux_2_17_x86_64"


@dataclass
class FakeIndex:
    """A PEP 691 index: ``/simple/<project>/`` in JSON from ``files``, ``/files/<name>`` the bytes."""

    url: str = ""
    files: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)  # a project's whole answer, as given (hostile tests)

    def add(self, project: str, filename: str, data: bytes = b"", *, yanked: bool | str = False,
            upload_time: str = "2025-01-01T00:00:00Z", requires_python: str | None = None) -> None:
        self.blobs[filename] = data
        self.files.setdefault(project, []).append({
            "filename": filename, "url": f"{self.url}/files/{filename}", "hashes": {"sha256": hashlib.sha256(data).hexdigest()},
            "requires-python": requires_python, "yanked": yanked, "upload-time": upload_time})

    def add_wheel(self, project: str, version: str, tag: str = "py3-none-any", **kw: object) -> None:
        name = project.replace("-", "_")
        self.add(project, f"{name}-{version}-{tag}.whl", wheel_bytes(name, version), **kw)  # type: ignore[arg-type]


def wheel_bytes(name: str, version: str, requires: Iterable[str] = ()) -> bytes:
    """A minimal valid pure-Python wheel."""
    import io

    di = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{name}/__init__.py": b"", f"{di}/METADATA": meta.encode(),
             f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    buf = io.BytesIO()
    record = []
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
            digest = base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b"=").decode()
            record.append(f"{k},sha256={digest},{len(v)}")
        z.writestr(f"{di}/RECORD", "\n".join([*record, f"{di}/RECORD,,"]) + "\n")
    return buf.getvalue()


@pytest.fixture
def fake_index() -> Iterator[FakeIndex]:
    idx = FakeIndex()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "simple" and parts[1] in idx.raw:
                self._send(200, idx.raw[parts[1]], "application/vnd.pypi.simple.v1+json")
            elif len(parts) == 2 and parts[0] == "simple" and parts[1] in idx.files:
                body = json.dumps({"meta": {"api-version": "1.1"}, "name": parts[1], "files": idx.files[parts[1]]})
                self._send(200, body.encode(), "application/vnd.pypi.simple.v1+json")
            elif len(parts) == 2 and parts[0] == "files" and parts[1] in idx.blobs:
                self._send(200, idx.blobs[parts[1]], "application/octet-stream")
            else:
                self._send(404, b"not found", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    idx.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield idx
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user matrix's path (in tmp; it does not exist until a row is added)."""
    path = tmp_path / "images" / "matrix.local.toml"
    monkeypatch.setenv("KIT_LOCAL_MATRIX", str(path))
    return path


def simple(idx: FakeIndex) -> str:
    return f"{idx.url}/simple"


def fake_lock(*extra: str) -> add_mod.LockFn:
    """A lock function standing in for pip: the row's framework pin plus ``extra`` pins, with hashes."""
    def lock(row: ImageRow, find_links: Iterable[Path] = ()) -> str:
        top = row.requirements[0].split("[")[0].split("==")[0]
        pins = [f"{top}=={row.requirements[0].split('==')[1]}", *extra]
        return "".join(f"{p} \\\n    --hash=sha256:{hashlib.sha256(p.encode()).hexdigest()}\n" for p in pins)
    return lock


def nothing_written(local: Path) -> bool:
    root = local.parent
    return not local.exists() and not any((root / "locks").rglob("*.txt")) and not any((root / "wheels").rglob("*"))


# -- specs --------------------------------------------------------------------

def test_release_specs_are_read_and_bad_ones_refused(tmp_path: Path) -> None:
    s = parse_release_spec("torch==2.11.0")
    assert (s.framework, s.version, s.project) == ("pytorch", "2.11.0", "")
    assert parse_release_spec("tensorflow==2.18.1").framework == "tensorflow"
    n = parse_release_spec("tf-nightly==2.22.0.dev20261120", index_url="http://x/simple")
    assert (n.project, n.is_pre, n.index_url) == ("tf-nightly", True, "http://x/simple")
    assert is_release_spec("tensorflow==2.18.1") and not is_release_spec("tensorflow-2.19-cpu")
    for bad in ("jax==0.4.1", "torch>=2.1", "torch==latest", "torch==2.1; rm -rf /", ""):
        with pytest.raises(ImageError, match="not a release spec"):
            parse_release_spec(bad)
    w = tmp_path / "torch-2.11.0+mine-cp311-cp311-linux_x86_64.whl"
    spec = parse_release_spec("", wheel=w)
    assert (spec.framework, spec.version, spec.wheel) == ("pytorch", "2.11.0+mine", w)
    with pytest.raises(ImageError, match="not a wheel file name"):
        parse_release_spec("", wheel=tmp_path / "torch.zip")
    with pytest.raises(ImageError, match=r"the wheel .* is torch==2\.11\.0"):
        parse_release_spec("torch==2.12.0", wheel=w)


# -- the index ----------------------------------------------------------------

def test_releases_between_skips_yanked_unfit_and_pre_releases(fake_index: FakeIndex) -> None:
    for v in ("2.17.1", "2.18.0", "2.19.0rc1", "2.19.0", "2.20.0", "2.21.0"):
        fake_index.add_wheel("tensorflow-cpu", v, CP311, yanked="broken" if v == "2.18.0" else False)
    fake_index.add_wheel("tensorflow-cpu", "2.19.1", "cp312-cp312-manylinux_2_17_x86_64")  # no cp311 wheel
    got = releases_between("tensorflow", "cpu", "2.17.1", "2.21.0", python="3.11", index_url=simple(fake_index))
    assert got == ("2.17.1", "2.19.0", "2.20.0", "2.21.0")
    assert "2.19.0rc1" in releases_between("tensorflow", "cpu", "2.17.1", "2.21.0", python="3.11",
                                           index_url=simple(fake_index), pre=True)
    with pytest.raises(ImageError, match=r"yanked .*broken"):
        releases_between("tensorflow", "cpu", "2.18.0", "2.21.0", python="3.11", index_url=simple(fake_index))
    with pytest.raises(ImageError, match="not on the index"):
        releases_between("tensorflow", "cpu", "2.17.1", "2.99.0", python="3.11", index_url=simple(fake_index))
    rel = list_releases("tensorflow-cpu", simple(fake_index))
    assert [r.version for r in rel][:3] == ["2.17.1", "2.18.0", "2.19.0rc1"]  # PEP 440 order


def test_a_release_without_a_wheel_for_the_python_is_refused_naming_those_it_has(
        fake_index: FakeIndex, local: Path) -> None:
    for py in ("312", "313"):
        fake_index.add_wheel("torch", "2.11.0", f"cp{py}-cp{py}-manylinux_2_28_x86_64")
    with pytest.raises(ImageError, match=r"no wheel for CPython 3\.11 .*3\.12, 3\.13") as e:
        add_row(parse_release_spec("torch==2.11.0", index_url=simple(fake_index)), "cuda", lock=fake_lock())
    assert "--python 3.13" in e.value.fix and "/simple/torch/" in e.value.where
    assert nothing_written(local)


def test_a_yanked_release_is_refused_with_its_reason(fake_index: FakeIndex, local: Path) -> None:
    fake_index.add_wheel("torch", "2.11.0", CP311, yanked="wrong CUDA libraries in the wheel")
    with pytest.raises(ImageError, match=r"yanked .*wrong CUDA libraries in the wheel"):
        add_row(parse_release_spec("torch==2.11.0", index_url=simple(fake_index)), "cuda", lock=fake_lock())
    assert nothing_written(local)


def test_an_unreachable_index_is_refused_with_cause_where_and_fix(local: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}/simple"
    with pytest.raises(ImageError, match="cannot be reached") as e:
        add_row(parse_release_spec("torch==2.11.0", index_url=url), "cpu", lock=fake_lock())
    assert e.value.where == f"{url}/torch/" and "--index-url" in e.value.fix and "--wheel" in e.value.fix
    assert nothing_written(local)


@pytest.mark.parametrize(("body", "match"), [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "no 'files' list"),
    (b'{"files": {"a": 1}}', "no 'files' list"),
    (b'{"files": [7]}', r"files\[0\] is not an object"),
    (b'{"files": [{"filename": 7, "url": "x"}]}', r"files\[0\].filename is a int"),
    (b'{"files": [{"filename": "../torch-1.0-py3-none-any.whl", "url": "x"}]}', "lacks a filename"),
    (b'{"files": [{"filename": "torch-1.0-py3-none-any.whl", "url": "x", "hashes": []}]}', "hashes is a list"),
    (b'{"files": [{"filename": "torch-1.0-py3-none-any.whl", "url": "x", "hashes": {"sha256": "zz"}}]}',
     "not 64 hex digits"),
    (b'{"files": [{"filename": "torch-1.0-py3-none-any.whl", "url": "x", "yanked": 3}]}', "yanked is neither"),
    (b'[' * 100000 + b']' * 100000, "not JSON|no 'files' list"),
])
def test_hostile_index_answers_are_refused_cleanly(fake_index: FakeIndex, body: bytes, match: str) -> None:
    fake_index.raw["torch"] = body
    with pytest.raises(ImageError, match=match) as e:
        list_releases("torch", simple(fake_index))
    assert e.value.where.endswith("/simple/torch/")


def test_an_answer_over_the_size_cap_is_refused(fake_index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_mod, "MAX_RESPONSE_BYTES", 4096)
    fake_index.raw["torch"] = b'{"files": []' + b" " * 10000 + b"}"
    with pytest.raises(ImageError, match="larger than"):
        list_releases("torch", simple(fake_index))


# -- adding rows --------------------------------------------------------------

def test_cuda_and_cudnn_come_from_the_locks_nvidia_pins(fake_index: FakeIndex, local: Path) -> None:
    fake_index.add_wheel("torch", "2.11.0", CP311, upload_time="2026-03-01T00:00:00Z")
    lock = fake_lock("nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cudnn-cu12==9.10.2.21")
    row = add_row(parse_release_spec("torch==2.11.0", index_url=simple(fake_index)), "cuda", lock=lock)
    assert (row.name, row.cuda, row.cudnn, row.local) == ("pytorch-2.11.0-cuda", "12.8", "9.10.2", True)
    assert row.requirements[:2] == ("torch==2.11.0", "torchvision>=0.26,<0.27")
    again = load_matrix().get("pytorch-2.11.0-cuda")
    assert again == row and again.local and again.lock_path == local.parent / "locks/local/pytorch-2.11.0-cuda.txt"
    assert len(parse_lock(again.lock_text())) == 3
    # TensorFlow reports the CUDA it was built with and cuDNN's major only: its rows keep the majors
    fake_index.add_wheel("tensorflow", "2.18.1", CP311, upload_time="2024-12-15T00:00:00Z")
    for v, t in (("3.6.0", "2024-10-01T00:00:00Z"), ("3.7.0", "2024-12-01T00:00:00Z"), ("3.8.0", "2025-01-10T00:00:00Z")):
        fake_index.add_wheel("keras", v, upload_time=t)
    tf = add_row(parse_release_spec("tensorflow==2.18.1", index_url=simple(fake_index)), "cuda",
                 lock=fake_lock("nvidia-cuda-runtime-cu12==12.5.82", "nvidia-cudnn-cu12==9.3.0.75"))
    assert (tf.cuda, tf.cudnn) == ("12", "9")
    assert tf.requirements == ("tensorflow[and-cuda]==2.18.1", "keras==3.7.0", "scikit-learn>=1.4,<2")


def test_nothing_is_written_when_locking_fails_or_pins_no_cuda(fake_index: FakeIndex, local: Path) -> None:
    fake_index.add_wheel("torch", "2.11.0", CP311)
    spec = parse_release_spec("torch==2.11.0", index_url=simple(fake_index))

    def failing(row: ImageRow, find_links: Iterable[Path] = ()) -> str:
        raise ImageError("pip could not resolve", where="pip", fix="-")

    with pytest.raises(ImageError, match="pip could not resolve"):
        add_row(spec, "cpu", lock=failing)
    with pytest.raises(ImageError, match="pins no nvidia-cuda-runtime"):
        add_row(spec, "cuda", lock=fake_lock())  # a CUDA row whose lock has no CUDA wheels
    assert nothing_written(local)


def test_a_local_row_is_listed_as_local_and_a_second_add_is_refused(fake_index: FakeIndex, local: Path) -> None:
    fake_index.add_wheel("torch", "2.11.0", CP311)
    spec = parse_release_spec("torch==2.11.0", index_url=simple(fake_index))
    row = add_row(spec, "cpu", lock=fake_lock())
    listed = {x["name"]: x for x in list_images(load_matrix())}
    assert listed[row.name]["era"] == "local" and listed[row.name]["local"] is True
    assert listed["tensorflow-2.19-cpu"]["era"] == "current"
    before = local.read_text(encoding="utf-8")
    with pytest.raises(ImageError, match="already has a row"):
        add_row(spec, "cpu", lock=fake_lock())
    assert local.read_text(encoding="utf-8") == before


def test_a_local_row_named_like_a_shipped_one_is_an_error_naming_both(local: Path) -> None:
    shipped = load_matrix().get("tensorflow-2.19-cpu")
    local.parent.mkdir(parents=True)
    local.write_text(f"""schema = 1
[[image]]
name = "tensorflow-2.19-cpu"
framework = "tensorflow"
version = "2.19.1"
device = "cpu"
python = "3.11"
base = "{shipped.base}"
base_digest = "{shipped.base_digest}"
requirements = ["tensorflow-cpu==2.19.1"]
lock = "locks/local/x.txt"
""", encoding="utf-8")
    with pytest.raises(ImageError, match="name of a row of the shipped matrix") as e:
        load_matrix()
    assert str(local) in e.value.where and "matrix.toml" in e.value.where and "image[0].name" in e.value.where
    local.write_text(local.read_text().replace('version = "2.19.1"', 'version = "2.19.1"\nwheel_sha256 = "x"'))
    with pytest.raises(ImageError, match="wheel_sha256"):
        load_matrix()
    assert load_matrix(with_local=False).get("tensorflow-2.19-cpu") == shipped


def test_ensure_row_reuses_an_existing_row(fake_index: FakeIndex, local: Path) -> None:
    m = load_matrix()
    assert ensure_row(parse_release_spec("tensorflow==2.19.1"), "cpu", matrix=m).name == "tensorflow-2.19-cpu"
    assert ensure_row(parse_release_spec("torch==2.13.0+cpu"), "cpu", matrix=m).name == "pytorch-2.13-cpu"
    assert ensure_row(parse_release_spec("torch==2.13.0"), "cpu", matrix=m).name == "pytorch-2.13-cpu"
    fake_index.add_wheel("torch", "2.11.0", CP311)
    made = add_row(parse_release_spec("torch==2.11.0", index_url=simple(fake_index)), "cpu", lock=fake_lock())
    fake_index.files.clear()  # a reused row asks no index
    assert ensure_row(parse_release_spec("torch==2.11.0"), "cpu") == made


def test_a_wheel_file_is_copied_with_its_digest_recorded_and_pinned(
        fake_index: FakeIndex, local: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "dist" / "torch-2.11.0+mine-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(wheel_bytes("torch", "2.11.0+mine"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    deps = tmp_path / "deps"
    deps.mkdir()
    for name, v in (("torchvision", "0.26.0"), ("numpy", "2.1.0"), ("scikit_learn", "1.5.2")):
        (deps / f"{name}-{v}-py3-none-any.whl").write_bytes(wheel_bytes(name, v))

    def real_pip(row: ImageRow, find_links: Iterable[Path] = ()) -> str:  # pip itself, offline but for the fake index
        return make_lock(row, [*find_links, deps], index_urls=[simple(fake_index)], timeout_s=60)

    row = add_row(parse_release_spec("", wheel=wheel), "cpu", lock=real_pip)
    assert row.wheel == "wheels/local/torch-2.11.0+mine-py3-none-any.whl" and row.wheel_sha256 == digest
    assert row.wheel_path is not None and hashlib.sha256(row.wheel_path.read_bytes()).hexdigest() == digest
    torch = next(p for p in parse_lock(row.lock_text()) if p.key == "torch")
    assert torch.sha256 == (digest,) and torch.version == "2.11.0+mine" and row.version == "2.11.0"
    assert str(row.wheel_path.parent) in fetch_command(row, tmp_path / "house")  # fetch finds the local file
    assert load_matrix().get(row.name).wheel_sha256 == digest
    assert ensure_row(parse_release_spec("", wheel=wheel), "cpu").name == row.name


def test_cli_add_no_build_prints_the_row(fake_index: FakeIndex, local: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake_index.add_wheel("tensorflow-cpu", "2.18.1", CP311, upload_time="2024-12-15T00:00:00Z")
    fake_index.add_wheel("keras", "3.7.0", upload_time="2024-12-01T00:00:00Z")
    fake_index.add_wheel("keras", "3.8.0", upload_time="2025-01-10T00:00:00Z")
    fake_index.add_wheel("scikit-learn", "1.5.2")
    monkeypatch.setattr(add_mod, "PYPI_SIMPLE", simple(fake_index))  # the row's dependencies: the fake index too
    result = CliRunner().invoke(app, ["images", "add", "tensorflow==2.18.1", "--index-url", simple(fake_index),
                                      "--no-build"])
    assert result.exit_code == 0, result.output
    assert "added tensorflow-2.18.1-cpu" in result.output and "3 pinned files" in result.output
    row = load_matrix().get("tensorflow-2.18.1-cpu")
    assert row.requirements == ("tensorflow-cpu==2.18.1", "keras==3.7.0", "scikit-learn>=1.4,<2") and row.local
    bad = CliRunner().invoke(app, ["images", "add", "tensorflow==2.99.0", "--index-url", simple(fake_index),
                                   "--no-build"])
    assert bad.exit_code != 0 and isinstance(bad.exception, ImageError) and "not on the index" in str(bad.exception)
    assert load_matrix().rows[-1].name == "tensorflow-2.18.1-cpu"  # the refused one wrote nothing


def test_the_html_form_of_an_index_is_read_too(fake_index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """download.pytorch.org answers PEP 503 HTML: versions with +cpu labels, data-yanked, escaped names."""
    sha = "a" * 64
    html = (f'<html><body><a href="/files/torch-2.12.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256={sha}" '
            f'data-requires-python="&gt;=3.10">torch-2.12.0+cpu</a>'
            f'<a href="/files/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl" data-yanked="bad build">x</a>'
            f'<a href="/files/torch-2.13.1%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl">x</a>'
            '<a href="javascript:alert(1)">not a file</a><a>no href</a></body></html>').encode()
    body, ctype = html, "text/html"
    monkeypatch.setattr(index_mod, "fetch_project", lambda *a, **k: (body, ctype, f"{fake_index.url}/simple/torch/"))
    rel = list_releases("torch", "http://unused/simple")
    assert [(r.version, r.yanked, r.yanked_reason) for r in rel] == [
        ("2.12.0+cpu", False, ""), ("2.13.0+cpu", True, "bad build"), ("2.13.1+cpu", False, "")]
    assert rel[0].files[0].sha256 == sha and rel[0].files[0].url.startswith(fake_index.url + "/files/")
    assert releases_between("pytorch", "cpu", "2.12.0", "2.13.1", python="3.11") == ("2.12.0", "2.13.1")


def test_the_base_follows_the_python(fake_index: FakeIndex, local: Path) -> None:
    fake_index.add_wheel("tensorflow-cpu", "1.15.0", "cp36-cp36m-manylinux1_x86_64")
    fake_index.add_wheel("keras", "2.3.1", upload_time="2019-10-01T00:00:00Z")
    row = add_row(parse_release_spec("tensorflow==1.15.0", index_url=simple(fake_index)), "cpu", python="3.6",
                  lock=fake_lock())
    era = load_matrix().get("tensorflow-1.8-py36-cpu")  # the only CPython 3.6 base of the matrix
    assert (row.base, row.base_digest, row.platforms) == (era.base, era.base_digest, era.platforms)
    with pytest.raises(ImageError, match=r"no base image for CPython 3\.13") as e:
        add_row(parse_release_spec("tensorflow==1.15.0", index_url=simple(fake_index)), "cpu", python="3.13",
                lock=fake_lock())
    assert "--python" in e.value.fix


def test_a_wheel_row_builds_from_a_fetched_wheelhouse_and_ensure_built_skips_built_rows(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import kit.images.build as build_mod
    import kit.images.commands as commands_mod
    import kit.images.lock as lock_mod

    monkeypatch.setenv("KIT_WHEELHOUSE", str(tmp_path / "house"))
    row = ImageRow(name="pytorch-2.11.0-mine-cpu", framework="pytorch", version="2.11.0", device="cpu", python="3.11",
                   base="docker.io/library/python:3.11", base_digest="sha256:" + "0" * 64, requirements=("torch",),
                   lock="locks/local/x.txt", wheel="wheels/local/torch-2.11.0+mine-py3-none-any.whl",
                   wheel_sha256="1" * 64, root=tmp_path, local=True)
    fetched: list[Path] = []
    built: list[tuple[str, Path | None]] = []
    monkeypatch.setattr(lock_mod, "fetch_wheels", lambda r, dest, on_line=None, **k: fetched.append(dest) or [])
    monkeypatch.setattr(build_mod, "build_image", lambda eng, r, base, house, *a: built.append((r.name, house)) or "ok")
    assert commands_mod.build_rows([row], engine=object()) == ["ok"]  # type: ignore[arg-type]
    assert fetched == [tmp_path / "house" / row.name] and built == [(row.name, tmp_path / "house")]
    started: list[str] = []
    monkeypatch.setattr(build_mod, "find_built", lambda eng, r: {"tag": "t"})
    add_mod.ensure_built(row, engine=object(), on_start=lambda r: started.append(r.name))  # type: ignore[arg-type]
    assert started == [] and len(built) == 1  # built already: nothing happens
    monkeypatch.setattr(build_mod, "find_built", lambda eng, r: None)
    add_mod.ensure_built(row, engine=object(), on_start=lambda r: started.append(r.name))  # type: ignore[arg-type]
    assert started == [row.name] and len(built) == 2
