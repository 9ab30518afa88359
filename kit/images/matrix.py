"""The image matrix (``images/matrix.toml``): one row per framework build.

A row pins everything an image is made of: framework and version, the CUDA
and cuDNN it was built against (as the framework reports them from inside),
Python, the base image by tag *and* digest, the top-level requirements and
the requirements lock with hashes that is installed. Rows are frozen
dataclasses validated at load; an error names the file, the key path and what
is expected.

A ``paper_era = true`` row rebuilds the stack a paper ran (TensorFlow 1.x,
PyTorch 0.4/1.0 on CPython 3.6/3.7) so that a user can run the paper's own code
in it. It is never a default, never part of a version-to-version series, and
names the studies it serves (``papers``) and its own ``python`` and base. The
kit's trial harness needs CPython >= 3.10 and today's framework APIs (Keras 3),
so such a row says ``harness = false`` and the kit refuses to schedule trials in
it (:func:`require_harness`).

The user matrix (``images/matrix.local.toml``, or ``$KIT_LOCAL_MATRIX``) holds the rows a user added with
``kit images add``: same format and validation, merged after the shipped rows, never committed. Its rows say
``local`` and keep their locks and wheel files under its own folder (``locks/local/``, ``wheels/local/``), so
the shipped matrix and its locks are never rewritten. A local row whose name a shipped row has is an error,
not an override: a run's manifest names a row, and one name must mean one build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import ImageError
from kit.records import JsonTable

MATRIX_SCHEMA = 1
IMAGES_DIR = Path(__file__).resolve().parents[2] / "images"
ENV_LOCAL_MATRIX = "KIT_LOCAL_MATRIX"
FRAMEWORK_NAMES = ("pytorch", "tensorflow")
DEVICES = ("cpu", "cuda")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VERSION = re.compile(r"^\d+(\.\d+)*$")
_PUBLIC_VERSION = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_ROW_KEYS = {"name", "framework", "version", "device", "cuda", "cudnn", "python", "base", "base_digest",
             "requirements", "lock", "index_url", "extra_index_urls", "default", "notes",
             "paper_era", "papers", "harness", "platforms", "sdists", "wheel", "wheel_sha256"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_WHEEL_PATH = re.compile(r"^[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*\.whl$")
_SDIST_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==\d[0-9A-Za-z.]*$")
_EXPERIMENT_ID = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_PLATFORM = re.compile(r"^(manylinux1|manylinux2010|manylinux2014|manylinux_2_\d+|linux)_x86_64$")
# The oldest CPython the in-container harness (kit/harness.py, kit/workloads/*) imports on: it evaluates
# ``int | float`` at run time (3.10) and uses typing.Literal (3.8) and zip(strict=True) (3.10); under 3.6
# ``from __future__ import annotations`` is already a syntax error.
HARNESS_MIN_PYTHON = (3, 10)


@dataclass(frozen=True)
class ImageRow:
    """One framework build of the matrix."""

    name: str
    framework: str
    version: str
    device: str  # cpu | cuda
    python: str
    base: str  # repository:tag
    base_digest: str  # sha256:... (the index digest the tag pointed to when the row was written)
    requirements: tuple[str, ...]
    lock: str  # path relative to images/
    cuda: str = ""  # the CUDA the framework was built with, e.g. "12.4"; "" for CPU rows
    cudnn: str = ""  # e.g. "9.1.0"; "" for CPU rows
    index_url: str = "https://pypi.org/simple"
    extra_index_urls: tuple[str, ...] = ()
    default: bool = False  # the row `kit run` takes for this framework and device unless told otherwise
    notes: str = ""
    paper_era: bool = False  # the stack a paper ran, for its own code: never a default, never in a series
    papers: tuple[str, ...] = ()  # the experiment ids (experiments/<id>) whose paper this stack reproduces
    harness: bool = True  # the kit's trial harness runs in this image (False: the kit schedules no trials here)
    platforms: tuple[str, ...] = ()  # wheel platform tags the lock resolves for; () = the bookworm default
    # paper-era only: pure-Python dependencies the index publishes as source archives only ("termcolor==1.1.0"),
    # locked by the archive's sha256 and built in the image (pip --no-binary for exactly these)
    sdists: tuple[str, ...] = ()
    # a row made from a wheel file (kit images add --wheel): its path relative to the matrix's folder and sha256
    wheel: str = ""
    wheel_sha256: str = ""
    root: Path = field(default=IMAGES_DIR, compare=False, repr=False)
    local: bool = field(default=False, compare=False)  # from the user matrix (images/matrix.local.toml)

    @property
    def wheel_path(self) -> Path | None:
        """The wheel file a ``--wheel`` row installs (None for rows from an index)."""
        return self.root / self.wheel if self.wheel else None

    @property
    def base_ref(self) -> str:
        """The pinned base: ``repository:tag@sha256:...``."""
        return f"{self.base}@{self.base_digest}"

    @property
    def lock_path(self) -> Path:
        return self.root / self.lock

    def lock_text(self) -> str:
        try:
            return self.lock_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ImageError(f"the requirements lock of image {self.name} cannot be read ({exc.strerror})",
                             where=str(self.lock_path), fix=f"kit images lock {self.name}") from None

    def lock_sha256(self) -> str:
        return hashlib.sha256(self.lock_text().encode()).hexdigest()

    @property
    def no_binary(self) -> tuple[str, ...]:
        """The normalised names of ``sdists`` (what pip installs from source for this row, and nothing else)."""
        return tuple(re.sub(r"[-_.]+", "-", s.split("==")[0]).lower() for s in self.sdists)

    def python_tuple(self) -> tuple[int, int]:
        major, minor = self.python.split(".")[:2]
        return int(major), int(minor)

    def harness_problem(self) -> str | None:
        """Why the kit's trial harness cannot run in this image, or None when it can."""
        if self.python_tuple() < HARNESS_MIN_PYTHON:
            want = ".".join(map(str, HARNESS_MIN_PYTHON))
            return (f"its CPython {self.python} is older than the {want} the kit's trial harness needs "
                    "(kit/harness.py and kit/workloads use typing.Literal, `int | float` at run time and zip(strict=))")
        if not self.harness:
            return ("it is marked harness = false: its framework stack predates the APIs the kit's workloads call "
                    "(Keras 3, torch >= 2)")
        return None

    def expected(self) -> dict[str, str]:
        """What ``kit images verify`` compares with the versions reported inside the image."""
        return {"python": self.python, "framework_version": self.version, "cuda": self.cuda, "cudnn": self.cudnn}


@dataclass(frozen=True)
class RowDefaults:
    """The shipped matrix's ``[defaults]`` a new row starts from (``kit images add``)."""

    python: str = ""
    base: str = ""
    base_digest: str = ""
    index_url: str = "https://pypi.org/simple"


@dataclass(frozen=True)
class Matrix:
    """Every row, in file order (the shipped rows, then the user's local ones)."""

    rows: tuple[ImageRow, ...]
    path: Path
    local_path: Path | None = None  # the user matrix merged in (None: none was)
    defaults: RowDefaults = RowDefaults()

    def get(self, name: str) -> ImageRow:
        for row in self.rows:
            if row.name == name:
                return row
        raise ImageError(f"no image {name!r} in the matrix", where=str(self.path),
                         fix=f"use one of: {', '.join(r.name for r in self.rows)} (see `kit images list`)")

    def select(self, names: list[str] | None = None, framework: str | None = None,
               device: str | None = None) -> list[ImageRow]:
        """Rows by name, or all rows of a framework and/or device."""
        if names:
            return [self.get(n) for n in names]
        return [r for r in self.rows if (framework is None or r.framework == framework)
                and (device is None or r.device == device)]

    def default_for(self, framework: str, device: str) -> ImageRow:
        """The row a run uses for ``framework`` on ``device`` (cpu or cuda)."""
        rows = self.select(framework=framework, device=device)
        if not rows:
            raise ImageError(f"the matrix has no {device} image for {framework}", where=str(self.path),
                             fix=f"add a row with framework = {framework!r} and device = {device!r} (images/README.md)")
        current = [r for r in rows if not r.paper_era]  # a paper-era row is never what a run picks by itself
        if not current:
            raise ImageError(f"the matrix has only paper-era {device} images for {framework}", where=str(self.path),
                             fix=f"add a current row with framework = {framework!r} and device = {device!r}")
        return next((r for r in current if r.default), current[0])


def require_harness(row: ImageRow, where: str) -> None:
    """Refuse to schedule trials in ``row`` when the kit's harness cannot run there (paper-era stacks)."""
    problem = row.harness_problem()
    if problem is None:
        return
    papers = f" (the stack of {', '.join(row.papers)})" if row.papers else ""
    raise ImageError(
        f"the kit cannot run trials in image {row.name}{papers}: {problem}", where=where,
        fix=f"run the kit's trials in a current row (kit images list shows them); use {row.name} to run the "
            f"paper's own code: kit images build {row.name}, then docker run -it <its tag>")


def _err(path: Path, key: str, expected: str, got: Any = None) -> ImageError:
    shown = "" if got is None else f", got {got!r}"
    return ImageError(f"expected {expected}{shown}", where=f"{path}: {key}",
                      fix="correct the matrix (images/README.md says how to write a row)")


def _str(raw: JsonTable, key: str, p: str, path: Path, required: bool = True, default: str = "") -> str:
    if key not in raw:
        if required:
            raise _err(path, f"{p}.{key}", "a string (required)")
        return default
    val = raw[key]
    if not isinstance(val, str):
        raise _err(path, f"{p}.{key}", "a string", val)
    return val


def _strs(raw: JsonTable, key: str, p: str, path: Path, required: bool = False) -> tuple[str, ...]:
    val = raw.get(key, [] if not required else None)
    if val is None or not isinstance(val, list) or not all(isinstance(v, str) for v in val):
        raise _err(path, f"{p}.{key}", "a list of strings" + (" (required)" if required else ""), val)
    return tuple(str(v) for v in val)


def parse_row(raw: Any, p: str, path: Path, defaults: JsonTable, root: Path) -> ImageRow:
    """Validate one ``[[image]]`` table (``defaults`` fill keys the row leaves out)."""
    if not isinstance(raw, dict):
        raise _err(path, p, "a table", raw)
    unknown = sorted(set(raw) - _ROW_KEYS)
    if unknown:
        raise _err(path, f"{p}.{unknown[0]}", f"one of the keys {', '.join(sorted(_ROW_KEYS))}", unknown[0])
    merged = {**defaults, **raw}
    name = _str(merged, "name", p, path)
    if not _NAME.match(name):
        raise _err(path, f"{p}.name", "lower-case letters, digits, '.', '_' or '-'", name)
    framework = _str(merged, "framework", p, path)
    if framework not in FRAMEWORK_NAMES:
        raise _err(path, f"{p}.framework", f"one of {', '.join(FRAMEWORK_NAMES)}", framework)
    device = _str(merged, "device", p, path)
    if device not in DEVICES:
        raise _err(path, f"{p}.device", "'cpu' or 'cuda'", device)
    version, python = _str(merged, "version", p, path), _str(merged, "python", p, path)
    if not _VERSION.match(python):
        raise _err(path, f"{p}.python", "a dotted version such as '3.11'", python)
    if not _PUBLIC_VERSION.match(version):  # releases, pre-releases and nightlies (2.15.0.dev20261120), no +local
        raise _err(path, f"{p}.version", "a public PEP 440 version such as '2.6.0' or '2.15.0.dev20261120'", version)
    cuda, cudnn = _str(merged, "cuda", p, path, False), _str(merged, "cudnn", p, path, False)
    if device == "cuda":
        for key, val in (("cuda", cuda), ("cudnn", cudnn)):
            if not _VERSION.match(val):
                raise _err(path, f"{p}.{key}", "a dotted version (required for device = 'cuda')", val or None)
    elif cuda or cudnn:
        raise _err(path, f"{p}.cuda", "no CUDA/cuDNN on a device = 'cpu' row", cuda or cudnn)
    base, digest = _str(merged, "base", p, path), _str(merged, "base_digest", p, path)
    if "@" in base or ":" not in base.rsplit("/", 1)[-1]:
        raise _err(path, f"{p}.base", "repository:tag without a digest (the digest goes in base_digest)", base)
    if not _DIGEST.match(digest):
        raise _err(path, f"{p}.base_digest", "sha256: and 64 hex digits", digest)
    reqs = _strs(merged, "requirements", p, path, required=True)
    if not reqs:
        raise _err(path, f"{p}.requirements", "at least one requirement (the framework)", [])
    lock = _str(merged, "lock", p, path)
    flags = {}
    for key, fallback in (("default", False), ("paper_era", False)):
        flags[key] = merged.get(key, fallback)
        if not isinstance(flags[key], bool):
            raise _err(path, f"{p}.{key}", "true or false", flags[key])
    default, paper_era = flags["default"], flags["paper_era"]
    harness = merged.get("harness", not paper_era)
    if not isinstance(harness, bool):
        raise _err(path, f"{p}.harness", "true or false", harness)
    papers = _strs(merged, "papers", p, path)
    platforms = _strs(merged, "platforms", p, path)
    for i, pl in enumerate(platforms):
        if not _PLATFORM.match(pl):
            raise _err(path, f"{p}.platforms[{i}]", "a linux x86_64 wheel platform tag such as 'manylinux1_x86_64'", pl)
    sdists = _strs(merged, "sdists", p, path)
    for i, sd in enumerate(sdists):
        if not _SDIST_PIN.match(sd):
            raise _err(path, f"{p}.sdists[{i}]", "a pinned source-only distribution such as 'termcolor==1.1.0'", sd)
    if sdists and not paper_era:
        raise _err(path, f"{p}.sdists", "no source archives on a current row (current rows install wheels only)",
                   list(sdists))
    wheel, wheel_sha = _str(merged, "wheel", p, path, False), _str(merged, "wheel_sha256", p, path, False)
    if wheel and (not _WHEEL_PATH.match(wheel) or ".." in wheel.split("/")):
        raise _err(path, f"{p}.wheel", "a .whl path relative to the matrix's folder (such as 'wheels/local/x.whl')",
                   wheel)
    if bool(wheel) != bool(wheel_sha) or (wheel_sha and not _SHA256.match(wheel_sha)):
        raise _err(path, f"{p}.wheel_sha256", "64 lower-case hex digits, given exactly when wheel is", wheel_sha or None)
    _check_era(raw, p, path, python, base, paper_era, papers, default, harness)
    _check_base_python(p, path, python, base)
    return ImageRow(
        name=name, framework=framework, version=version, device=device, python=python, base=base,
        base_digest=digest, requirements=reqs, lock=lock, cuda=cuda, cudnn=cudnn,
        index_url=_str(merged, "index_url", p, path, False, "https://pypi.org/simple"),
        extra_index_urls=_strs(merged, "extra_index_urls", p, path), default=default,
        notes=_str(merged, "notes", p, path, False), paper_era=paper_era, papers=papers, harness=harness,
        platforms=platforms, sdists=sdists, wheel=wheel, wheel_sha256=wheel_sha, root=root,
    )


def _check_era(raw: JsonTable, p: str, path: Path, python: str, base: str, paper_era: bool,
               papers: tuple[str, ...], default: bool, harness: bool) -> None:
    """A paper-era row says whose stack it is, with its own Python and base; it is never a default."""
    for i, pid in enumerate(papers):
        if not _EXPERIMENT_ID.match(pid):
            raise _err(path, f"{p}.papers[{i}]", "an experiment id (the folder name under experiments/)", pid)
    if not paper_era:
        if papers:
            raise _err(path, f"{p}.papers", "no papers on a row without paper_era = true", list(papers))
        return
    if not papers:
        raise _err(path, f"{p}.papers", "the experiment(s) whose paper this stack serves (required for paper_era = true)")
    for key in ("python", "base", "base_digest"):
        if key not in raw:
            raise _err(path, f"{p}.{key}", f"the row's own {key} (required for paper_era = true; [defaults] is today's)")
    if default:
        raise _err(path, f"{p}.default", "false: a paper-era row is never a default", True)
    if harness and tuple(int(x) for x in python.split(".")[:2]) < HARNESS_MIN_PYTHON:
        raise _err(path, f"{p}.harness", f"false: the kit's harness needs CPython >= "
                   f"{'.'.join(map(str, HARNESS_MIN_PYTHON))}, this row has {python}", True)


def _check_base_python(p: str, path: Path, python: str, base: str) -> None:
    """An official python image's tag names its CPython: the row's ``python`` must agree (locks resolve for it)."""
    tag = base.rsplit(":", 1)[-1]
    if "/python:" in f"/{base}" and re.match(r"^\d+\.\d+", tag) and not (
            tag == python or tag.startswith((python + ".", python + "-"))):
        raise _err(path, f"{p}.python", f"the Python of the base image {base} (its tag says {tag.split('-')[0]})", python)


def parse_matrix(text: str, path: Path, root: Path | None = None, local: bool = False) -> Matrix:
    """Validate a matrix file's text (``local``: the user matrix, whose rows are marked local)."""
    root = root or path.parent
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ImageError(f"not valid TOML ({exc})", where=str(path), fix="fix the syntax") from None
    if data.get("schema") != MATRIX_SCHEMA:
        raise _err(path, "schema", f"{MATRIX_SCHEMA} (this kit's matrix format)", data.get("schema"))
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict) or set(defaults) - _ROW_KEYS:
        raise _err(path, "defaults", f"a table of row keys ({', '.join(sorted(_ROW_KEYS))})", defaults)
    raw_rows = data.get("image")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise _err(path, "image", "at least one [[image]] table")
    rows = tuple(parse_row(r, f"image[{i}]", path, defaults, root) for i, r in enumerate(raw_rows))
    if local:
        rows = tuple(dataclasses.replace(r, local=True) for r in rows)
    seen: dict[str, int] = {}
    for i, r in enumerate(rows):
        if r.name in seen:
            raise _err(path, f"image[{i}].name", f"a name not used before (image[{seen[r.name]}] has it)", r.name)
        seen[r.name] = i
    _check_defaults(rows, path)
    return Matrix(rows, path, defaults=_row_defaults(defaults))


def _check_defaults(rows: tuple[ImageRow, ...], path: Path) -> None:
    for fw in FRAMEWORK_NAMES:
        for dev in DEVICES:
            n = sum(r.default for r in rows if r.framework == fw and r.device == dev)
            if n > 1:
                raise _err(path, "image", f"at most one default row for {fw} on {dev}", n)


def _row_defaults(raw: JsonTable) -> RowDefaults:
    def text(key: str, fallback: str = "") -> str:
        val = raw.get(key, fallback)
        return val if isinstance(val, str) else fallback

    return RowDefaults(text("python"), text("base"), text("base_digest"), text("index_url", "https://pypi.org/simple"))


def local_matrix_path() -> Path:
    """Where the user matrix is: ``$KIT_LOCAL_MATRIX``, else ``images/matrix.local.toml``."""
    env = os.environ.get(ENV_LOCAL_MATRIX)
    return Path(env) if env else IMAGES_DIR / "matrix.local.toml"


def merge_local(shipped: Matrix, local: Matrix) -> Matrix:
    """The shipped rows then the local ones; a name both use, or a second default, is an error naming both files."""
    names = {r.name for r in shipped.rows}
    assert local.path is not None
    for i, r in enumerate(local.rows):
        if r.name in names:
            raise ImageError(f"the local row {r.name!r} has the name of a row of the shipped matrix",
                             where=f"{local.path}: image[{i}].name (and {shipped.path})",
                             fix="rename the local row (and its lock), or remove it: the shipped row already is "
                                 "that build")
    rows = shipped.rows + local.rows
    _check_defaults(rows, local.path)
    return Matrix(rows, shipped.path, local.path, shipped.defaults)


def read_matrix_text(path: Path, what: str = "the image matrix") -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImageError(f"{what} cannot be read ({exc.strerror})", where=str(path),
                         fix="run from the kit's checkout (images/matrix.toml)") from None


def load_matrix(path: Path | None = None, local_path: Path | None = None, with_local: bool = True) -> Matrix:
    """Load and validate ``images/matrix.toml`` (or ``path``) merged with the user matrix when it exists.

    ``local_path`` replaces :func:`local_matrix_path`; ``with_local=False`` loads the shipped rows only.
    """
    path = path or IMAGES_DIR / "matrix.toml"
    shipped = parse_matrix(read_matrix_text(path), path)
    if not with_local:
        return shipped
    local_path = local_path or local_matrix_path()
    if not local_path.exists():
        return shipped
    local = parse_matrix(read_matrix_text(local_path, "the user image matrix"), local_path, local=True)
    return merge_local(shipped, local)
