"""What a package index says about a framework's releases (PEP 691 JSON simple API, PEP 503 HTML as fallback).

``kit images add`` and ``kit bisect --between`` ask an index which releases of
a framework exist, which are yanked (PEP 592) and which have a wheel for a
row's CPython and platform, before pip is asked to lock anything: a refusal
then names the reason (the yank reason, the Pythons the release does have)
instead of a resolver error. The index is untrusted input: the response is
size-capped, every field is type-checked, and anything malformed is an
:class:`ImageError` naming the URL. Only the standard library talks to the
network (urllib), with a timeout.

PyPI answers in JSON (api-version 1.1 carries ``upload-time``, which "the
Keras of the same season" needs); download.pytorch.org answers in HTML, so
the HTML form (anchors with ``data-requires-python`` / ``data-yanked``) is
read too, without upload times.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kit.errors import ImageError

PYPI_SIMPLE = "https://pypi.org/simple"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
TIMEOUT_S = 30.0
_FIX = "check the network and the index URL (--index-url), or build the row from a wheel file (--wheel PATH)"


@dataclass(frozen=True)
class IndexFile:
    """One file of a project on the index."""

    filename: str
    url: str
    sha256: str  # "" when the index gives no sha256
    requires_python: str  # "" = any
    yanked: bool
    yanked_reason: str
    upload_time: str  # ISO 8601 as the index gives it; "" when it does not
    tags: tuple[str, ...]  # a wheel's tags ("cp311-cp311-manylinux_2_17_x86_64"); () for a source archive

    @property
    def is_wheel(self) -> bool:
        return bool(self.tags)


@dataclass(frozen=True)
class Release:
    """One version of a project and its files (yanked when every file is, PEP 592)."""

    version: str
    yanked: bool
    yanked_reason: str
    files: tuple[IndexFile, ...]
    upload_time: str  # the earliest upload of its files ("" when unknown)

    @property
    def wheels(self) -> tuple[IndexFile, ...]:
        return tuple(f for f in self.files if f.is_wheel)

    @property
    def public_version(self) -> str:
        """The version without a local label (``2.13.0+cpu`` is ``2.13.0``)."""
        return Version(self.version).public


def project_for(framework: str, device: str) -> tuple[str, str]:
    """(project, index URL) a framework's build for a device comes from.

    TensorFlow on CPU is ``tensorflow-cpu``: PyPI's ``tensorflow`` Linux wheels are CUDA builds (their build
    info reports CUDA, which ``kit images verify`` refuses on a CPU row), so there is no fallback to them; a
    release without a ``tensorflow-cpu`` wheel is refused. TensorFlow on CUDA is ``tensorflow`` (installed as
    ``tensorflow[and-cuda]``); PyTorch on CUDA is PyPI's ``torch``; PyTorch on CPU is ``torch`` from the
    PyTorch CPU index, whose versions carry a ``+cpu`` label.
    """
    if framework == "tensorflow":
        return ("tensorflow-cpu" if device == "cpu" else "tensorflow"), PYPI_SIMPLE
    if framework == "pytorch":
        return "torch", (TORCH_CPU_INDEX if device == "cpu" else PYPI_SIMPLE)
    raise ImageError(f"unknown framework {framework!r}", where="framework", fix="use pytorch or tensorflow")


def _fail(cause: str, url: str) -> ImageError:
    return ImageError(cause, where=url, fix=_FIX)


def fetch_project(project: str, index_url: str, *, timeout_s: float = TIMEOUT_S) -> tuple[bytes, str, str]:
    """(body, content type, final URL) of ``{index_url}/{project}/``, capped at :data:`MAX_RESPONSE_BYTES`."""
    name = canonicalize_name(project)
    url = index_url.rstrip("/") + f"/{name}/"
    if urllib.parse.urlsplit(url).scheme not in ("http", "https", "file"):
        raise ImageError(f"not an index URL: {index_url!r}", where="--index-url", fix="give an http(s) URL")
    req = urllib.request.Request(url, headers={"Accept": f"{JSON_ACCEPT}, text/html;q=0.1"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read(MAX_RESPONSE_BYTES + 1)
            ctype = str(resp.headers.get("Content-Type") or "")
            final = str(resp.geturl())
    except urllib.error.HTTPError as exc:
        what = f"{project} is not on this index" if exc.code == 404 else f"the index answered HTTP {exc.code}"
        raise _fail(f"{what} ({exc.reason})", url) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _fail(f"the index cannot be reached ({reason})", url) from None
    if len(body) > MAX_RESPONSE_BYTES:
        raise _fail(f"the index's answer is larger than {MAX_RESPONSE_BYTES // 2**20} MiB", url)
    return body, ctype, final


def _field(obj: dict[str, object], key: str, kind: type, url: str, where: str) -> object:
    val = obj.get(key)
    if val is not None and not isinstance(val, kind):
        raise _fail(f"malformed index answer: {where}.{key} is a {type(val).__name__}, not a {kind.__name__}", url)
    return val


def _file(filename: str, href: str, sha256: str, requires_python: str, yanked: bool | str, upload_time: str,
          url: str) -> IndexFile | None:
    """One validated file record; None for files that are neither a wheel nor a source archive."""
    if sha256 and (len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256.lower())):
        raise _fail(f"malformed index answer: the sha256 of {filename!r} is not 64 hex digits", url)
    if requires_python:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            requires_python = ""  # an unreadable constraint constrains nothing pip would honour either
    tags: tuple[str, ...] = ()
    if filename.endswith(".whl"):
        try:
            tags = tuple(sorted(str(t) for t in parse_wheel_filename(filename)[3]))
        except (InvalidWheelFilename, InvalidVersion):
            return None
    else:
        try:
            parse_sdist_filename(filename)
        except (InvalidSdistFilename, InvalidVersion):
            return None
    return IndexFile(filename, urllib.parse.urljoin(url, href), sha256.lower(), requires_python,
                     yanked is not False, yanked if isinstance(yanked, str) else "", upload_time, tags)


def parse_json_files(body: bytes, url: str) -> list[IndexFile]:
    """The files of a PEP 691 JSON answer, every field checked."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise _fail(f"the index's answer is not JSON ({str(exc)[:120]})", url) from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise _fail("malformed index answer: no 'files' list (PEP 691)", url)
    out = []
    for i, raw in enumerate(data["files"]):
        if not isinstance(raw, dict):
            raise _fail(f"malformed index answer: files[{i}] is not an object", url)
        where = f"files[{i}]"
        filename, href = _field(raw, "filename", str, url, where), _field(raw, "url", str, url, where)
        if not filename or not href or "/" in str(filename):
            raise _fail(f"malformed index answer: {where} lacks a filename or url", url)
        hashes = _field(raw, "hashes", dict, url, where) or {}
        assert isinstance(hashes, dict)
        sha = hashes.get("sha256", "")
        if not isinstance(sha, str):
            raise _fail(f"malformed index answer: {where}.hashes.sha256 is not a string", url)
        yanked = raw.get("yanked", False)
        if not isinstance(yanked, bool | str):
            raise _fail(f"malformed index answer: {where}.yanked is neither true/false nor a reason", url)
        rp = _field(raw, "requires-python", str, url, where) or ""
        up = _field(raw, "upload-time", str, url, where) or ""
        f = _file(str(filename), str(href), sha, str(rp), yanked, str(up), url)
        if f is not None:
            out.append(f)
    return out


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], list[str]]] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._text = []
            self.anchors.append((dict(attrs), self._text))

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._text = None


def parse_html_files(body: bytes, url: str) -> list[IndexFile]:
    """The files of a PEP 503 HTML answer (no upload times there)."""
    parser = _Anchors()
    try:
        parser.feed(body.decode("utf-8", errors="replace"))
    except (ValueError, AssertionError) as exc:
        raise _fail(f"the index's HTML answer cannot be read ({exc})", url) from None
    out = []
    for attrs, text in parser.anchors:
        href = attrs.get("href") or ""
        path, _, frag = href.partition("#")
        filename = urllib.parse.unquote(path.rsplit("/", 1)[-1]) or "".join(text).strip()
        sha = frag.removeprefix("sha256=") if frag.startswith("sha256=") else ""
        y = attrs.get("data-yanked")
        f = _file(filename, path, sha, attrs.get("data-requires-python") or "", False if y is None else (y or True),
                  "", url)
        if f is not None:
            out.append(f)
    return out


def group_releases(files: list[IndexFile], url: str) -> tuple[Release, ...]:
    """Files grouped by version, in PEP 440 order (oldest first)."""
    by: dict[Version, list[IndexFile]] = {}
    for f in files:
        try:
            v = parse_wheel_filename(f.filename)[1] if f.is_wheel else parse_sdist_filename(f.filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        by.setdefault(v, []).append(f)
    out = []
    for v in sorted(by):
        fs = tuple(by[v])
        yanked = all(f.yanked for f in fs)
        reason = next((f.yanked_reason for f in fs if f.yanked_reason), "") if yanked else ""
        times = sorted(f.upload_time for f in fs if f.upload_time)
        out.append(Release(str(v), yanked, reason, fs, times[0] if times else ""))
    return tuple(out)


def list_releases(project: str, index_url: str, *, timeout_s: float = TIMEOUT_S) -> tuple[Release, ...]:
    """Every release of ``project`` on ``index_url``, oldest first (PEP 440 order)."""
    body, ctype, url = fetch_project(project, index_url, timeout_s=timeout_s)
    files = parse_json_files(body, url) if "json" in ctype.lower() else parse_html_files(body, url)
    return group_releases(files, url)


def _python_tuple(python: str) -> tuple[int, int]:
    major, minor = python.split(".")[:2]
    return int(major), int(minor)


def supported_tags(python: str, platforms: tuple[str, ...]) -> frozenset[Tag]:
    """The wheel tags a CPython ``python`` on one of ``platforms`` installs (cp3XY, abi3, none, py3)."""
    pv = _python_tuple(python)
    abi = f"cp{pv[0]}{pv[1]}" + ("m" if pv < (3, 8) else "")
    plats = list(platforms)
    return frozenset([*cpython_tags(pv, abis=[abi], platforms=plats),
                      *compatible_tags(pv, interpreter=f"cp{pv[0]}{pv[1]}", platforms=plats)])


def _fits_python(f: IndexFile, python: str) -> bool:
    if not f.requires_python:
        return True
    return Version(f"{python}.0") in SpecifierSet(f.requires_python)


def installable(release: Release, python: str, platforms: tuple[str, ...]) -> bool:
    """Whether a non-yanked wheel of ``release`` installs on CPython ``python`` on one of ``platforms``."""
    ok = supported_tags(python, platforms)
    return any(not f.yanked and _fits_python(f, python) and any(Tag(*t.split("-")) in ok for t in f.tags)
               for f in release.wheels)


def wheel_pythons(release: Release, platforms: tuple[str, ...]) -> tuple[str, ...]:
    """The CPython versions (``3.12``) a release has wheels for on ``platforms`` (for a refusal's message)."""
    found = set()
    for minor in range(6, 20):
        py = f"3.{minor}"
        if installable(release, py, platforms):
            found.add(minor)
    return tuple(f"3.{m}" for m in sorted(found))


def find_release(releases: tuple[Release, ...], version: str, match_local: bool = True) -> Release | None:
    """The release ``version`` names: the exact one, else (``match_local``) the one whose public version it is."""
    try:
        want = Version(version)
    except InvalidVersion:
        return None
    exact = [r for r in releases if Version(r.version) == want]
    if exact or not match_local or want.local:
        return exact[0] if exact else None
    same = [r for r in releases if Version(r.public_version) == want]
    return same[-1] if same else None


def releases_between(framework: str, device: str, low: str, high: str, *, python: str,
                     index_url: str | None = None, pre: bool = False) -> tuple[str, ...]:
    """The releases from ``low`` to ``high`` inclusive, oldest first, that are not yanked and have a wheel for
    CPython ``python`` on linux x86_64 (bookworm's glibc); pre-releases and dev builds only with ``pre``.

    Versions are returned as public versions (the CPU index's ``2.13.0+cpu`` is ``2.13.0``). ``low`` or
    ``high`` missing from the index, yanked or without such a wheel is an :class:`ImageError`.
    """
    from kit.images.lock import PLATFORMS

    project, default_index = project_for(framework, device)
    index = index_url or default_index
    releases = list_releases(project, index)
    ends = []
    for label, version in (("low", low), ("high", high)):
        r = find_release(releases, version)
        where = f"{index.rstrip('/')}/{project}/"
        if r is None:
            raise ImageError(f"{project} {version} ({label} end) is not on the index", where=where,
                             fix="give a version the index lists (or --index-url for pre-releases and nightlies)")
        refuse_release(r, project, python, PLATFORMS, where)
        ends.append(Version(r.public_version))
    lo, hi = sorted(ends)
    out: list[str] = []
    for r in releases:
        v = Version(r.public_version)
        if not lo <= v <= hi or r.yanked or ((v.is_prerelease or v.is_devrelease) and not pre and v not in ends):
            continue
        if installable(r, python, PLATFORMS) and r.public_version not in out:
            out.append(r.public_version)
    return tuple(out)


def refuse_release(release: Release, project: str, python: str, platforms: tuple[str, ...], where: str) -> None:
    """Raise why ``release`` cannot be a row for CPython ``python`` (yanked, or no wheel that fits); else nothing."""
    if release.yanked:
        reason = release.yanked_reason or "no reason given"
        raise ImageError(f"{project} {release.version} is yanked from the index (reason: {reason})", where=where,
                         fix="pick another release (the index's maintainers withdrew this one)")
    if not installable(release, python, platforms):
        have = wheel_pythons(release, platforms)
        shown = ", ".join(platforms[:3]) + (", ..." if len(platforms) > 3 else "")
        has = f"it has wheels for CPython {', '.join(have)}" if have else f"it has no wheel for the platforms {shown}"
        raise ImageError(f"{project} {release.version} has no wheel for CPython {python} on linux x86_64 ({has})",
                         where=where, fix=(f"add it with --python {have[-1]}" if have else
                                           "pick another release, or build a wheel and give it with --wheel PATH"))
