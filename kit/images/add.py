"""`kit images add SPEC`: a matrix row for any release, pre-release, nightly or wheel file, on demand.

A row is added to the user matrix (``images/matrix.local.toml``, see :mod:`kit.images.matrix`), never to the
shipped one. Before anything is locked the index is asked about the release (:mod:`kit.images.index`): a
yanked release is refused with its reason, one without a wheel for the row's CPython and platform with the
Pythons it does have, an unreachable index with the URL. The requirements follow the shipped rows of the same
framework and device (TensorFlow with the Keras of its season, torch with its torchvision), and the lock is
made by :func:`kit.images.lock.make_lock`, the same pip resolution and marker checks as ``kit images lock``.
pip is kept rather than uv or pip-tools because it resolves for a *target* CPython and platform
(``--python-version``/``--platform``/``--abi``) from wheels only and reports each chosen file's sha256 in one
dry run; the kit's marker check covers what pip evaluates for the host instead of the target.

The CUDA and cuDNN of a CUDA row are read from the lock's ``nvidia-cuda-runtime*`` and ``nvidia-cudnn*`` pins,
in the form ``kit images verify`` compares (components both sides give): PyTorch pins its CUDA wheels exactly
and reports them (``torch.version.cuda`` = major.minor, cuDNN major.minor.patch); TensorFlow reports the CUDA
it was *built* with and only cuDNN's major, while its ``[and-cuda]`` extra accepts newer runtimes since 2.20,
so its rows record the majors only (the lock's 12.9 runtime under a 12.5.1 build is not a mismatch).

Nothing is half-written: the lock, the wheel copy and the matrix are staged and written (each atomically)
only after everything was checked; a failure while writing removes what this call created.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from kit.errors import ImageError
from kit.images.index import (
    PYPI_SIMPLE,
    TORCH_CPU_INDEX,
    IndexFile,
    Release,
    find_release,
    installable,
    list_releases,
    project_for,
    refuse_release,
    wheel_pythons,
)
from kit.images.lock import make_lock, parse_lock, row_platforms
from kit.images.matrix import (
    DEVICES,
    MATRIX_SCHEMA,
    ImageRow,
    Matrix,
    load_matrix,
    local_matrix_path,
    merge_local,
    parse_matrix,
)

if TYPE_CHECKING:
    from kit.engine import Engine

# project names a SPEC may use, and the framework each is
PROJECTS = {"torch": "pytorch", "pytorch": "pytorch", "tensorflow": "tensorflow", "tensorflow-cpu": "tensorflow",
            "tf-nightly": "tensorflow", "tf-nightly-cpu": "tensorflow"}
_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([0-9][0-9A-Za-z.+!_-]*)\s*$")
_CUDA_RUNTIME = re.compile(r"^nvidia-cuda-runtime(-cu\d+)?$")
_CUDNN = re.compile(r"^nvidia-cudnn(-cu\d+)?$")
LOCAL_HEADER = ("# The user image matrix: rows added with `kit images add` (merged with images/matrix.toml,\n"
                "# shown as \"local\" by `kit images list`). Not committed; each row's lock is under locks/local/.\n"
                f"schema = {MATRIX_SCHEMA}\n")


class LockFn(Protocol):
    def __call__(self, row: ImageRow, find_links: Iterable[Path] = ...) -> str: ...


@dataclass(frozen=True)
class ReleaseSpec:
    """A release to add: ``torch==2.11.0``, a nightly on ``index_url``, or a wheel file."""

    framework: str  # pytorch | tensorflow
    version: str
    index_url: str | None
    wheel: Path | None
    text: str
    project: str = ""  # the project named ("tf-nightly"); "" = the framework's usual one for the device

    @property
    def is_pre(self) -> bool:
        v = Version(self.version)
        return v.is_prerelease or v.is_devrelease


def is_release_spec(text: str) -> bool:
    """Whether ``text`` names a release (``tensorflow==2.18.1``) rather than a matrix row."""
    return "==" in text


def _spec_error(text: str, why: str, where: str = "SPEC") -> ImageError:
    return ImageError(f"{text!r} is not a release spec: {why}", where=where,
                      fix="write PROJECT==VERSION with PROJECT one of " + ", ".join(sorted(PROJECTS))
                          + " (e.g. tensorflow==2.18.1, torch==2.11.0), or give --wheel PATH")


def parse_release_spec(text: str, *, index_url: str | None = None, wheel: Path | None = None) -> ReleaseSpec:
    """Read ``PROJECT==VERSION`` (or a wheel file's name when ``wheel`` is given and ``text`` is empty)."""
    if wheel is not None:
        try:
            wname, wversion, _, _ = parse_wheel_filename(wheel.name)
        except (InvalidWheelFilename, InvalidVersion) as exc:
            raise ImageError(f"not a wheel file name: {wheel.name!r} ({exc})", where=f"--wheel {wheel}",
                             fix="give the .whl file as built (name-version-python-abi-platform.whl)") from None
        wtext = f"{wname}=={wversion}"
        if text.strip():
            given = parse_release_spec(text, index_url=index_url)
            if given.framework != PROJECTS.get(str(wname)) or Version(given.version) != wversion:
                raise _spec_error(text, f"the wheel {wheel.name} is {wtext}", where=f"--wheel {wheel}")
        if str(wname) not in PROJECTS:
            raise _spec_error(wtext, f"the wheel's project {wname!r} is not a framework the kit runs",
                              where=f"--wheel {wheel}")
        return ReleaseSpec(PROJECTS[str(wname)], str(wversion), index_url, wheel, text.strip() or wtext, str(wname))
    m = _SPEC.match(text)
    if not m:
        raise _spec_error(text, "expected PROJECT==VERSION")
    project = str(canonicalize_name(m.group(1)))
    if project not in PROJECTS:
        raise _spec_error(text, f"unknown project {m.group(1)!r}")
    try:
        version = str(Version(m.group(2)))
    except InvalidVersion:
        raise _spec_error(text, f"{m.group(2)!r} is not a PEP 440 version") from None
    usual = project in ("torch", "pytorch", "tensorflow", "tensorflow-cpu")
    return ReleaseSpec(PROJECTS[project], version, index_url, None, text.strip(), "" if usual else project)


# -- the row ------------------------------------------------------------------

def row_name(framework: str, version: str, device: str) -> str:
    """``<framework>-<version>-<device>`` with the version made fit for a row name (``+`` and ``!`` become ``-``)."""
    clean = re.sub(r"[^a-z0-9._-]+", "-", version.lower()).strip("-._")
    return f"{framework}-{clean}-{device}"


def pick_base(matrix: Matrix, python: str) -> tuple[str, str, tuple[str, ...]]:
    """(base, base_digest, platforms) for CPython ``python``: the [defaults] base, else another row's."""
    d = matrix.defaults
    if d.python == python and d.base and d.base_digest:
        return d.base, d.base_digest, ()
    for r in matrix.rows:
        if r.python == python:
            return r.base, r.base_digest, r.platforms
    have = sorted({r.python for r in matrix.rows} | ({d.python} if d.python else set()))
    raise ImageError(f"no base image for CPython {python} in the matrix", where=str(matrix.path),
                     fix=f"use --python {' or '.join(have)}, or add a row with a python:{python} base and its digest "
                         "to images/matrix.local.toml (images/README.md)")


def season_keras(before: str, index_url: str, on_line: Callable[[str], None] | None = None) -> str:
    """The newest final Keras release uploaded before ``before`` (ISO time; "" = the newest of all)."""
    releases = list_releases("keras", index_url)
    finals = [r for r in releases if not r.yanked and not Version(r.version).is_prerelease
              and not Version(r.version).is_devrelease and (not before or (r.upload_time and r.upload_time < before))]
    if not finals:
        raise ImageError(f"the index lists no Keras release uploaded before {before or 'now'}",
                         where=f"{index_url.rstrip('/')}/keras/", fix="pick a newer TensorFlow release")
    if on_line:
        on_line(f"keras {finals[-1].version}: the newest uploaded before " + (before or "now"))
    return finals[-1].version


def requirements_for(spec: ReleaseSpec, device: str, pin: str, release: Release | None, index: str,
                     on_line: Callable[[str], None] | None) -> tuple[str, ...]:
    """The top-level requirements, like the shipped rows of that framework and device."""
    v = Version(spec.version)
    if spec.framework == "tensorflow":
        project = spec.project or ("tensorflow-cpu" if device == "cpu" else "tensorflow")
        top = f"{project}=={pin}" if device == "cpu" else f"{project}[and-cuda]=={pin}"
        keras = season_keras(release.upload_time if release else "", index if spec.index_url else PYPI_SIMPLE, on_line)
        return top, f"keras=={keras}", "scikit-learn>=1.4,<2"
    if v.is_devrelease or v.is_prerelease or v.major != 2:
        # a nightly's torchvision is the nightly of the same day: a pre-release specifier lets pip take it
        vision = "torchvision>=0.0.dev0"
    else:
        vision = f"torchvision>=0.{v.minor + 15},<0.{v.minor + 16}"
    return f"torch=={pin}", vision, "numpy>=1.26,<3", "scikit-learn>=1.4,<2"


def cuda_from_lock(framework: str, lock_text: str, where: str) -> tuple[str, str]:
    """(cuda, cudnn) from the lock's NVIDIA runtime and cuDNN pins, in the form ``kit images verify`` compares."""
    cuda = cudnn = ""
    for p in parse_lock(lock_text, where):
        parts = p.version.split("+")[0].split(".")
        if _CUDA_RUNTIME.match(p.key):
            cuda = ".".join(parts[:1] if framework == "tensorflow" else parts[:2])
        elif _CUDNN.match(p.key):
            cudnn = ".".join(parts[:1] if framework == "tensorflow" else parts[:3])
    if not cuda or not cudnn:
        raise ImageError("the lock of a CUDA row pins no " + ("nvidia-cuda-runtime" if not cuda else "nvidia-cudnn")
                         + " wheel, so the CUDA the build needs is unknown", where=where,
                         fix="add it with --device cpu, or pick a release whose wheel depends on NVIDIA's CUDA wheels")
    return cuda, cudnn


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _wheel_release(path: Path, version: str) -> Release:
    """A wheel file seen as a release with that one file (for the same Python/platform check)."""
    tags = tuple(sorted(str(t) for t in parse_wheel_filename(path.name)[3]))
    return Release(version, False, "", (IndexFile(path.name, path.as_uri(), "", "", False, "", "", tags),), "")


def _check_release(spec: ReleaseSpec, row: ImageRow, index: str, on_line: Callable[[str], None] | None
                   ) -> tuple[str, Release | None]:
    """(the version to pin, the index's release) after refusing a missing, yanked or unfitting one."""
    platforms = row_platforms(row)
    if spec.wheel is not None:
        rel = _wheel_release(spec.wheel, spec.version)
        if not installable(rel, row.python, platforms):
            have = wheel_pythons(rel, platforms)
            raise ImageError(f"the wheel {spec.wheel.name} does not install on CPython {row.python} linux x86_64"
                             + (f" (it is for CPython {', '.join(have)})" if have else ""), where=f"--wheel {spec.wheel}",
                             fix=f"use --python {have[-1]}" if have else "build the wheel for linux x86_64")
        return spec.version, None
    project, _ = project_for(spec.framework, row.device)
    project = spec.project or project
    where = f"{index.rstrip('/')}/{project}/"
    if on_line:
        on_line(f"asking {where} about {project} {spec.version}")
    releases = list_releases(project, index)
    found = find_release(releases, spec.version)
    if found is None:
        near = ", ".join(r.version for r in releases[-5:])
        raise ImageError(f"{project} {spec.version} is not on the index" + (f" (its newest: {near})" if near else ""),
                         where=where, fix=("give --index-url of the index that publishes it (nightlies: the "
                                           "framework's nightly index)" if spec.is_pre else
                                           "check the version (kit bisect --between lists releases), or --wheel PATH"))
    refuse_release(found, project, row.python, platforms, where)
    return found.version, found


def add_row(spec: ReleaseSpec, device: str, *, python: str | None = None, matrix: Matrix | None = None,
            on_line: Callable[[str], None] | None = None, lock: LockFn = make_lock) -> ImageRow:
    """Check the release on its index, lock it, and write it as a row of the user matrix (see the module doc)."""
    if device not in DEVICES:
        raise ImageError(f"unknown device {device!r}", where="--device", fix="use cpu or cuda")
    matrix = matrix or load_matrix()
    local_path = matrix.local_path or local_matrix_path()
    root = local_path.parent
    python = python or matrix.defaults.python
    if not re.match(r"^3\.\d+$", python or ""):
        raise ImageError(f"not a CPython version: {python!r}", where="--python", fix="give e.g. --python 3.11")
    base, digest, platforms = pick_base(matrix, python)
    name = row_name(spec.framework, spec.version, device)
    if any(r.name == name for r in matrix.rows):
        raise ImageError(f"the matrix already has a row {name!r}", where=str(local_path),
                         fix="use that row (kit images list), or remove it from the user matrix first")
    project_index = spec.index_url or project_for(spec.framework, device)[1]
    extra: tuple[str, ...]
    if spec.framework == "pytorch" and device == "cpu" and not spec.index_url:
        main, extra = PYPI_SIMPLE, (TORCH_CPU_INDEX,)
    else:
        main = spec.index_url or matrix.defaults.index_url or PYPI_SIMPLE
        extra = (PYPI_SIMPLE,) if spec.index_url and spec.index_url.rstrip("/") != PYPI_SIMPLE else ()
    draft = ImageRow(name=name, framework=spec.framework, version=Version(spec.version).public, device=device,
                     python=python, base=base, base_digest=digest, requirements=("placeholder",),
                     lock=f"locks/local/{name}.txt", index_url=main, extra_index_urls=extra, platforms=platforms,
                     root=root, local=True)
    pin, release = _check_release(spec, draft, project_index, on_line)
    reqs = requirements_for(spec, device, pin, release, project_index, on_line)
    with tempfile.TemporaryDirectory(prefix="kit-add-") as tmp:
        links: list[Path] = []
        wheel_sha = ""
        if spec.wheel is not None:
            wheel_sha, staged = _stage_wheel(spec.wheel, Path(tmp))
            links.append(staged.parent)
            draft = replace(draft, wheel=f"wheels/local/{spec.wheel.name}", wheel_sha256=wheel_sha)
        draft = replace(draft, requirements=reqs, notes=_notes(spec, release, reqs))
        if on_line:
            on_line(f"locking {name} with pip for CPython {python} linux x86_64: {' '.join(reqs)}")
        text = lock(draft, links)
        if spec.wheel is not None:
            _assert_wheel_pinned(text, spec, wheel_sha)
        if device == "cuda":
            cuda, cudnn = cuda_from_lock(spec.framework, text, f"the lock of {name}")
            draft = replace(draft, cuda=cuda, cudnn=cudnn)
        row = _write(draft, text, matrix, local_path, Path(tmp) / "wheel" if spec.wheel else None)
    if on_line:
        on_line(f"wrote {row.name} to {local_path} (lock {row.lock_path})")
    return row


def _notes(spec: ReleaseSpec, release: Release | None, reqs: tuple[str, ...]) -> str:
    src = f"the wheel file {spec.wheel.name}" if spec.wheel else f"{spec.text}" + (
        f" from {spec.index_url}" if spec.index_url else "")
    when = f", uploaded {release.upload_time}" if release and release.upload_time else ""
    return f"added by `kit images add` from {src}{when}; requirements like the shipped rows: {', '.join(reqs[1:])}"


def _stage_wheel(wheel: Path, tmp: Path) -> tuple[str, Path]:
    """Copy the wheel into ``tmp/wheel/`` (hash-checked against the source after the copy)."""
    if not wheel.is_file():
        raise ImageError(f"no wheel file at {wheel}", where="--wheel", fix="give the path of a .whl file")
    digest = sha256_file(wheel)
    staged = tmp / "wheel" / wheel.name
    staged.parent.mkdir()
    shutil.copyfile(wheel, staged)
    if sha256_file(staged) != digest:
        raise ImageError(f"the copy of {wheel.name} differs from the file (changed while copying?)", where=str(wheel),
                         fix="run kit images add again")
    return digest, staged


def _assert_wheel_pinned(text: str, spec: ReleaseSpec, digest: str) -> None:
    assert spec.wheel is not None
    wname, wversion = parse_wheel_filename(spec.wheel.name)[:2]
    pins = [p for p in parse_lock(text, "lock") if p.key == wname]
    if not pins or Version(pins[0].version) != wversion or digest not in pins[0].sha256:
        got = f"{pins[0].version} {pins[0].sha256}" if pins else "nothing"
        raise ImageError(f"the lock does not pin the wheel file {spec.wheel.name} by its sha256 {digest[:12]}... "
                         f"(pip chose {got})", where=f"--wheel {spec.wheel}",
                         fix="give the wheel a local version label the index does not publish (e.g. 2.11.0+mine)")


def _toml_row(row: ImageRow) -> str:
    """The ``[[image]]`` table of a row (strings as JSON, which TOML's basic strings accept)."""
    import json

    def q(v: str) -> str:
        return json.dumps(v)

    lines = ["", "[[image]]"]
    for key in ("name", "framework", "version", "device", "cuda", "cudnn", "python", "base", "base_digest"):
        val = getattr(row, key)
        if val:
            lines.append(f"{key} = {q(val)}")
    if row.platforms:
        lines.append(f"platforms = [{', '.join(q(p) for p in row.platforms)}]")
    lines.append(f"requirements = [{', '.join(q(r) for r in row.requirements)}]")
    lines.append(f"index_url = {q(row.index_url)}")
    if row.extra_index_urls:
        lines.append(f"extra_index_urls = [{', '.join(q(u) for u in row.extra_index_urls)}]")
    lines.append(f"lock = {q(row.lock)}")
    if row.wheel:
        lines += [f"wheel = {q(row.wheel)}", f"wheel_sha256 = {q(row.wheel_sha256)}"]
    lines.append(f"notes = {q(row.notes)}")
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write(row: ImageRow, lock_text: str, matrix: Matrix, local_path: Path, staged: Path | None) -> ImageRow:
    """Validate the new user matrix with the shipped one, then write lock, wheel and matrix (undone on failure)."""
    old = local_path.read_text(encoding="utf-8") if local_path.exists() else LOCAL_HEADER
    new = old + ("" if old.endswith("\n") else "\n") + _toml_row(row)
    local = parse_matrix(new, local_path, local=True)
    shipped = Matrix(tuple(r for r in matrix.rows if not r.local), matrix.path, None, matrix.defaults)
    written = merge_local(shipped, local).get(row.name)
    created: list[Path] = []
    try:
        for target, data in ((written.lock_path, lock_text.encode()),
                             *(((written.wheel_path, (staged / Path(row.wheel).name).read_bytes()),)
                               if staged is not None and written.wheel_path is not None else ())):
            if target.exists():
                if target.read_bytes() == data:
                    continue
                raise ImageError(f"{target} exists with other contents", where=str(target),
                                 fix="remove it (a leftover of a removed row) and add the row again")
            _atomic_write(target, data)
            created.append(target)
        _atomic_write(local_path, new.encode())
    except BaseException:
        for p in created:
            p.unlink(missing_ok=True)
        raise
    return written


# -- used by `--images tensorflow==2.18.1` and `kit bisect --between` ---------

def _same_release(row: ImageRow, spec: ReleaseSpec, device: str) -> bool:
    if row.paper_era or row.framework != spec.framework or row.device != device:
        return False
    try:
        want, have = Version(spec.version), Version(row.version)
    except InvalidVersion:
        return False
    if spec.wheel is not None:
        return bool(row.wheel) and row.wheel_sha256 == sha256_file(spec.wheel)
    if row.wheel:
        return False
    return want == have or (device == "cpu" and Version(want.public) == Version(have.public))


def ensure_row(spec: ReleaseSpec, device: str, *, matrix: Matrix | None = None,
               on_line: Callable[[str], None] | None = None) -> ImageRow:
    """The existing current row (shipped or local) of that framework, device and version, else a new one."""
    matrix = matrix or load_matrix()
    for row in matrix.rows:
        if _same_release(row, spec, device):
            return row
    return add_row(spec, device, matrix=matrix, on_line=on_line)


def ensure_built(row: ImageRow, *, engine: Engine | None = None, on_line: Callable[[str], None] | None = None,
                 on_start: Callable[[ImageRow], None] | None = None) -> None:
    """Build ``row`` through :func:`kit.images.commands.build_rows` unless its current recipe is built.

    The locked files are fetched on this host first (hash-checked into the wheelhouse, $KIT_WHEELHOUSE or
    ~/.cache/kit/wheelhouse) and the image installs them offline: the host's pip has its certificates, mirror
    and proxy settings, the build container has none of them (a TLS-inspecting proxy fails every index request
    from inside it), and the files are the lock's either way (--require-hashes in the image too), so the image
    is the same. A rebuild reuses the fetched files."""
    from kit.engine import find_engine
    from kit.images.build import find_built
    from kit.images.commands import build_rows, wheel_row_house

    engine = engine or find_engine()
    if find_built(engine, row) is not None:
        return
    if on_start:
        on_start(row)
    house = wheel_row_house(row, on_line)
    build_rows([row], wheelhouse=house, engine=engine, on_line=on_line)
