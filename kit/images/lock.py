"""Requirements locks with hashes, made by pip itself, and the offline wheelhouse.

``kit images lock ROW`` resolves a row's top-level requirements for the image's
platform (linux x86_64, the row's CPython) with ``pip install --dry-run
--ignore-installed --report``: pip's own resolver, and the report carries the
sha256 of every file it chose. The lock is a pip requirements file with one
pinned line and ``--hash`` per distribution, installed in the image with
``--require-hashes --no-deps``. ``kit images fetch ROW`` downloads exactly those
files (hash-checked again) into a wheelhouse that a build can carry instead of
reaching an index.

The user's pip configuration is left out of locking (``PIP_CONFIG_FILE`` is the
null device, ``PIP_FIND_LINKS`` is cleared) so a lock reflects the indexes the
row names; ``--find-links`` adds a local wheel directory explicitly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import ImageError
from kit.images.matrix import ImageRow

GLIBC_MINOR = 36  # Debian bookworm, the base of every current row: wheels up to manylinux_2_36 run there
# glibc of the Debian release an official python image's tag names (python:3.6.15-slim-bullseye: 2.31)
GLIBC_BY_DEBIAN = {"bookworm": 36, "bullseye": 31, "buster": 28, "stretch": 24}


def glibc_platforms(minor: int) -> tuple[str, ...]:
    return (*(f"manylinux_2_{m}_x86_64" for m in range(minor, 4, -1)), "manylinux2014_x86_64",
            "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")


PLATFORMS = glibc_platforms(GLIBC_MINOR)


def row_platforms(row: ImageRow) -> tuple[str, ...]:
    """The row's ``platforms``, else those its base's Debian release runs (bookworm when the tag does not say)."""
    if row.platforms:
        return row.platforms
    codename = row.base.rsplit(":", 1)[-1].rsplit("-", 1)[-1]
    return glibc_platforms(GLIBC_BY_DEBIAN.get(codename, GLIBC_MINOR))
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    """One locked distribution."""

    name: str
    version: str
    sha256: tuple[str, ...]
    filename: str = ""

    @property
    def key(self) -> str:
        return normalize(self.name)


def normalize(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def target_args(row: ImageRow) -> list[str]:
    """pip options that resolve for the image (linux x86_64, the row's CPython), not for this host.

    CPython before 3.8 tags its ABI ``cp36m``/``cp37m`` (pymalloc); a row's ``platforms`` replace the
    bookworm default (a paper-era row on Python 3.6 installs with that Python's pip 18.1, which knows
    only manylinux1).
    """
    major, minor = row.python.split(".")[:2]
    abi = f"cp{major}{minor}" + ("m" if (int(major), int(minor)) < (3, 8) else "")
    args = ["--only-binary=:all:", "--python-version", f"{major}.{minor}", "--implementation", "cp", "--abi", abi]
    for p in row_platforms(row):
        args += ["--platform", p]
    return args


def index_args(row: ImageRow, index_urls: list[str] | None = None) -> list[str]:
    urls = index_urls if index_urls else [row.index_url, *row.extra_index_urls]
    args = ["--index-url", urls[0]]
    for u in urls[1:]:
        args += ["--extra-index-url", u]
    return args


def lock_command(row: ImageRow, report: Path, find_links: Iterable[Path] = (), index_urls: list[str] | None = None,
                 python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
           *target_args(row), *index_args(row, index_urls)]
    for d in find_links:
        cmd += ["--find-links", str(d)]
    return [*cmd, *row.requirements]


def isolated_env() -> dict[str, str]:
    """This process's environment without the user's pip configuration (certificates stay)."""
    env = dict(os.environ)
    env["PIP_CONFIG_FILE"] = os.devnull
    for key in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_REQUIRE_HASHES"):
        env.pop(key, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def pins_from_report(report: dict[str, Any]) -> list[Pin]:
    """Pins from pip's installation report (format version 1)."""
    pins = []
    for item in report.get("install", []):
        meta = item["metadata"]
        info = item["download_info"]
        archive = info.get("archive_info", {})
        sha = (archive.get("hashes") or {}).get("sha256") or archive.get("hash", "").removeprefix("sha256=")
        if not sha:
            raise ImageError(f"pip reported no sha256 for {meta['name']} {meta['version']}", where=info.get("url", "?"),
                             fix="lock from an index or wheel directory that serves files with hashes")
        filename = str(info.get("url", "")).rsplit("/", 1)[-1].replace("%2B", "+")
        pins.append(Pin(meta["name"], meta["version"], (sha,), filename))
    return sorted(pins, key=lambda p: p.key)


def target_environment(row: ImageRow) -> dict[str, str]:
    """PEP 508 marker values of the image (linux x86_64, the row's CPython), not of this host."""
    from packaging.markers import default_environment

    major, minor = row.python.split(".")[:2]
    host = {k: str(v) for k, v in default_environment().items()}
    return {**host, "python_version": f"{major}.{minor}", "python_full_version": f"{major}.{minor}.0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def marker_gaps(row: ImageRow, report: dict[str, Any]) -> list[str]:
    """Dependencies the resolution left out although the row's Python needs them.

    pip evaluates environment markers (``dataclasses; python_version < "3.7"``) for the Python it runs on,
    not for ``--python-version``: a lock for CPython 3.6 made on 3.11 silently lacks them, and the image's
    ``pip check`` would fail. Each gap is named with the package and the line that requires it.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    env = target_environment(row)
    items = report.get("install", [])
    have = {normalize(i["metadata"]["name"]) for i in items}
    gaps = []
    for item in items:
        meta = item["metadata"]
        for raw in meta.get("requires_dist") or []:
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                continue  # pip itself resolved past it
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if normalize(req.name) not in have:
                gaps.append(f"{req.name} (required by {meta['name']} {meta['version']}: {raw!r})")
    return sorted(set(gaps))


def format_lock(row: ImageRow, pins: list[Pin], pip_version: str) -> str:
    lines = [
        f"# Requirements lock of image {row.name}: {row.framework} {row.version} ({row.device}), CPython {row.python}, linux x86_64.",
        f"# Made by `kit images lock {row.name}` with pip {pip_version} (install --dry-run --report) from:",
        f"#   {' '.join(row.requirements)}",
        "# Installed with: pip install --require-hashes --no-deps --only-binary=:all: "
        + (f"--no-binary={','.join(row.no_binary)} " if row.no_binary else "") + "-r <this file>",
        "# Do not edit: change the row in images/matrix.toml and lock again.",
    ]
    for p in pins:
        lines.append(f"# file: {p.filename}" if p.filename else f"# {p.name}")
        lines.append(f"{p.key}=={p.version} \\")
        lines.extend(f"    --hash=sha256:{h}" + (" \\" if i < len(p.sha256) - 1 else "") for i, h in enumerate(p.sha256))
    return "\n".join(lines) + "\n"


def parse_lock(text: str, where: str = "lock") -> list[Pin]:
    """The pins of a lock file (joined continuation lines; every pin must carry a hash)."""
    pins: list[Pin] = []
    filename = ""
    logical = text.replace("\\\n", " ")
    for n, line in enumerate(logical.splitlines(), 1):
        s = line.strip()
        if s.startswith("# file:"):
            filename = s.removeprefix("# file:").strip()
            continue
        if not s or s.startswith("#"):
            continue
        m = _REQ.match(s)
        if not m:
            raise ImageError(f"line {n} is not a pinned requirement ({s[:80]!r})", where=where,
                             fix="re-make the lock with `kit images lock`")
        hashes = tuple(_HASH.findall(s))
        if not hashes:
            raise ImageError(f"{m.group(1)} has no --hash", where=where, fix="re-make the lock with `kit images lock`")
        pins.append(Pin(m.group(1), m.group(2), hashes, filename))
        filename = ""
    if not pins:
        raise ImageError("the lock pins nothing", where=where, fix="re-make the lock with `kit images lock`")
    return pins


def pip_version(python: str = sys.executable) -> str:
    out = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.split()[1] if out.returncode == 0 and len(out.stdout.split()) > 1 else "?"


def _run_pip(cmd: list[str], row: ImageRow, what: str, timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=isolated_env(), timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ImageError(f"pip did not {what} for {row.name} within {timeout_s:.0f} s", where=" ".join(cmd[:4]),
                         fix="check the network or give --find-links with the wheels") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise ImageError(f"pip could not {what} for {row.name}:\n{tail}", where="images/matrix.toml",
                         fix="correct the row's requirements, or give --find-links/--index for files the index lacks")


def source_pins(row: ImageRow, work: Path, index_urls: list[str] | None = None, python: str = sys.executable,
                timeout_s: float = 900) -> dict[str, Pin]:
    """The row's ``sdists``: each source archive as the index serves it (its sha256), and a wheel built from it.

    pip resolves for a foreign Python and platform from wheels only, so each archive is also built into a
    wheel under ``work/built`` for the resolver to see; the lock pins the archive, never that local wheel.
    """
    pins: dict[str, Pin] = {}
    built = work / "built"
    for sd in row.sdists:
        report = work / f"sdist-{len(pins)}.json"
        _run_pip([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--no-binary=:all:",
                  "--quiet", "--report", str(report), *index_args(row, index_urls), sd], row, f"find the source of {sd}",
                 timeout_s)
        (pin,) = pins_from_report(json.loads(report.read_text(encoding="utf-8")))
        if not pin.filename.endswith((".tar.gz", ".zip")):
            raise ImageError(f"the index serves {sd} as {pin.filename!r}, not as a source archive", where=f"sdists: {sd}",
                             fix="drop it from sdists: a wheel needs no source build")
        _run_pip([python, "-m", "pip", "wheel", "--no-deps", "--no-binary=:all:", "--quiet", "-w", str(built),
                  *index_args(row, index_urls), sd], row, f"build {sd} for the resolver", timeout_s)
        pins[pin.key] = pin
    return pins


def make_lock(row: ImageRow, find_links: Iterable[Path] = (), index_urls: list[str] | None = None,
              python: str = sys.executable, timeout_s: float = 900) -> str:
    """Resolve ``row`` with pip and return the lock text (nothing is installed or written)."""
    with tempfile.TemporaryDirectory(prefix="kit-lock-") as tmp:
        links = list(find_links)
        sources = source_pins(row, Path(tmp), index_urls, python, timeout_s) if row.sdists else {}
        if sources:
            links.append(Path(tmp) / "built")
        report = Path(tmp) / "report.json"
        cmd = lock_command(row, report, links, index_urls, python)
        _run_pip(cmd, row, "resolve the requirements", timeout_s)
        if not report.exists():
            raise ImageError(f"pip wrote no report for {row.name}", where=" ".join(cmd[:4]), fix="run kit images lock again")
        data = json.loads(report.read_text(encoding="utf-8"))
        pins = pins_from_report(data)
    gaps = marker_gaps(row, data)
    if gaps:
        raise ImageError(f"the resolution for CPython {row.python} lacks what its packages require there: "
                         + "; ".join(gaps[:6]), where=f"images/matrix.toml: {row.name}",
                         fix="add them to the row's requirements, or pin older versions that do not need them "
                             f"(pip evaluated these markers for this host's Python {sys.version_info[0]}."
                             f"{sys.version_info[1]}, not the row's)")
    chosen = {p.key: p for p in pins}
    for key, src in sources.items():
        if key not in chosen or chosen[key].version != src.version:
            got = chosen[key].version if key in chosen else "nothing"
            raise ImageError(f"sdists pins {src.name}=={src.version}, but the resolution chose {got}",
                             where=f"images/matrix.toml: {row.name}.sdists", fix="pin the version the resolution needs")
    return format_lock(row, [sources.get(p.key, p) for p in pins], pip_version(python))


def write_lock(row: ImageRow, text: str) -> Path:
    path = row.lock_path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


# -- wheelhouse ---------------------------------------------------------------

def default_wheelhouse() -> Path:
    base = os.environ.get("KIT_WHEELHOUSE")
    return Path(base) if base else Path.home() / ".cache" / "kit" / "wheelhouse"


def wheel_key(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of a wheel or source archive file name; None for anything else."""
    for ext in (".tar.gz", ".zip"):  # a paper-era row's sdists: name-version.tar.gz
        if filename.endswith(ext):
            name, _, version = filename[: -len(ext)].rpartition("-")
            return (normalize(name), version) if name and version else None
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) < 5:
        return None
    return normalize(parts[0]), parts[1]


def wheels_for(row: ImageRow, wheelhouse: Path) -> list[Path]:
    """The wheel files in ``wheelhouse`` that the row's lock pins (others are left out of the build)."""
    wanted = {(p.key, p.version) for p in parse_lock(row.lock_text(), str(row.lock_path))}
    if not wheelhouse.is_dir():
        return []
    return sorted(f for f in wheelhouse.iterdir() if (k := wheel_key(f.name)) and (k[0], k[1]) in wanted)


def missing_wheels(row: ImageRow, wheelhouse: Path) -> list[str]:
    have = {wheel_key(f.name) for f in wheels_for(row, wheelhouse)}
    return [f"{p.key}=={p.version}" for p in parse_lock(row.lock_text(), str(row.lock_path)) if (p.key, p.version) not in have]


def fetch_command(row: ImageRow, dest: Path, index_urls: list[str] | None = None,
                  python: str = sys.executable) -> list[str]:
    no_binary = [f"--no-binary={','.join(row.no_binary)}"] if row.no_binary else []
    # a --wheel row's own file is in the matrix's wheels folder, not on any index (the lock pins it by sha256)
    links = ["--find-links", str(row.wheel_path.parent)] if row.wheel_path is not None else []
    return [python, "-m", "pip", "download", "--no-deps", "--require-hashes", "--progress-bar", "off",
            *target_args(row), *no_binary, *index_args(row, index_urls), *links, "--dest", str(dest),
            "-r", str(row.lock_path)]


def fetch_wheels(row: ImageRow, dest: Path, on_line: Callable[[str], None] | None = None,
                 index_urls: list[str] | None = None, python: str = sys.executable) -> list[Path]:
    """Download the row's locked files into ``dest`` (hash-checked); the user's pip config (mirrors) applies."""
    dest.mkdir(parents=True, exist_ok=True)
    if not missing_wheels(row, dest):
        return wheels_for(row, dest)
    cmd = fetch_command(row, dest, index_urls, python)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if on_line:
            on_line(line.rstrip())
    if proc.wait() != 0:
        raise ImageError(f"pip could not download the locked files of {row.name}:\n" + "\n".join(lines[-8:]),
                         where=str(row.lock_path), fix="check the network or the index; a hash mismatch means the lock is stale")
    missing = missing_wheels(row, dest)
    if missing:
        raise ImageError(f"after download the wheelhouse still lacks {', '.join(missing[:5])}", where=str(dest),
                         fix="re-run `kit images fetch`")
    return wheels_for(row, dest)
