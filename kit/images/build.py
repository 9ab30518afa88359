"""Building images through the engine's API (docker SDK), with the build log streamed as it comes.

An image is found again by its recipe: the candidate images carrying the
row's label are re-rendered with the base recorded in their labels, and the
one whose recipe hash matches its ``io.kit.recipe.sha256`` label is current.
A changed row, template or lock therefore means "not built", never a silently
stale image. Every build (and verification) is recorded in the images lock
(``images/images.lock.json``; ``KIT_IMAGES_LOCK`` moves it): tag, image ID,
repository digests, recipe and lock hashes, base, engine.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from kit.engine import Engine, _short
from kit.errors import ImageError, KitError
from kit.images.lock import missing_wheels, wheels_for
from kit.images.matrix import IMAGES_DIR, ImageRow
from kit.images.render import LABEL_PREFIX, Recipe, render, write_context

BUILD_TIMEOUT_S = 3 * 3600
LOG_TAIL_LINES = 40


def images_lock_path() -> Path:
    return Path(os.environ.get("KIT_IMAGES_LOCK") or IMAGES_DIR / "images.lock.json")


def read_images_lock(path: Path | None = None) -> dict[str, Any]:
    path = path or images_lock_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"schema": 1, "images": {}, "sif": {}}
    except (OSError, json.JSONDecodeError) as exc:
        raise ImageError(f"the images lock cannot be read ({exc})", where=str(path),
                         fix="delete it; `kit images build` writes it again") from None
    data.setdefault("images", {})
    data.setdefault("sif", {})
    return data


def record(section: str, name: str, entry: dict[str, Any], path: Path | None = None) -> None:
    """Update one entry of the images lock (under a file lock, written atomically)."""
    path = path or images_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / (path.name + ".flock")).open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        data = read_images_lock(path)
        data[section][name] = {**data[section].get(name, {}), **entry}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ImageInfo(TypedDict, total=False):
    """An image on the engine as the kit knows it (:func:`image_info`); :func:`find_built` adds the base it was built
    from. The backends copy it into the manifest's ``backend.images``, and the images lock keeps part of it."""

    tag: str
    id: str
    repo_digests: list[str]
    digest: str
    labels: dict[str, str]
    size_bytes: int | None
    created: str | None
    base: str
    base_pinned: bool


def image_info(engine: Engine, ref: str) -> ImageInfo | None:
    """Tag, ID, repo digests and labels of ``ref`` on the engine; None when it is not there."""
    import docker

    try:
        img = engine.client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.DockerException as exc:
        raise ImageError(f"the engine could not look up {ref} ({_short(exc)})", where=engine.url,
                         fix="check the engine (kit doctor)") from None
    attrs = img.attrs
    digests = list(attrs.get("RepoDigests") or [])
    return {"tag": ref, "id": img.id, "repo_digests": digests, "digest": digests[0].split("@", 1)[-1] if digests else img.id,
            "labels": dict((attrs.get("Config") or {}).get("Labels") or {}), "size_bytes": attrs.get("Size"),
            "created": attrs.get("Created")}


def _base_from_labels(labels: dict[str, str]) -> str | None:
    """The base override an image was built with (None: the matrix's pinned base)."""
    if labels.get(f"{LABEL_PREFIX}.base.pinned", "true") == "true":
        return None
    name = labels.get("org.opencontainers.image.base.name", "")
    digest = labels.get("org.opencontainers.image.base.digest", "")
    return f"{name}@{digest}" if digest else name


def find_built(engine: Engine, row: ImageRow) -> ImageInfo | None:
    """The newest image on the engine built from ``row``'s current recipe, or None."""
    import docker

    try:
        candidates = engine.client.images.list(filters={"label": f"{LABEL_PREFIX}.image={row.name}"})
    except docker.errors.DockerException as exc:
        raise ImageError(f"the engine could not list images ({_short(exc)})", where=engine.url,
                         fix="check the engine (kit doctor)") from None
    best: tuple[str, ImageInfo] | None = None
    for img in candidates:
        labels = dict((img.attrs.get("Config") or {}).get("Labels") or img.attrs.get("Labels") or {})
        want = labels.get(f"{LABEL_PREFIX}.recipe.sha256")
        if not want:
            continue
        try:
            recipe = render(row, "dockerfile", _base_from_labels(labels))
        except KitError:
            return None
        if recipe.sha256 != want:
            continue
        info = image_info(engine, recipe.tag)
        if info is None:  # built under another name (an older kit): run it by a tag it has, or by ID
            info = image_info(engine, img.id)
            if info is not None:
                info["tag"] = img.tags[0] if img.tags else img.id
        if info is not None and (best is None or str(info.get("created")) > best[0]):
            info["base"] = recipe.base
            info["base_pinned"] = recipe.base_pinned
            best = (str(info.get("created")), info)
    return best[1] if best else None


@dataclass
class BuildResult:
    row: str
    tag: str
    id: str
    cached: bool
    seconds: float
    offline: bool
    digest: str


def build_image(engine: Engine, row: ImageRow, base: str | None = None, wheelhouse: Path | None = None,
                on_line: Callable[[str], None] | None = None, nocache: bool = False) -> BuildResult:
    """Build ``row`` (unless its current recipe is already built) and record it in the images lock."""
    recipe = render(row, "dockerfile", base)
    existing = None if nocache else image_info(engine, recipe.tag)
    if existing is not None and existing["labels"].get(f"{LABEL_PREFIX}.recipe.sha256") == recipe.sha256:
        _record_build(engine, recipe, existing, 0.0, offline=False, cached=True)
        return BuildResult(row.name, recipe.tag, existing["id"], True, 0.0, False, existing["digest"])
    wheels = _wheels(row, wheelhouse)
    if base is not None and image_info(engine, base) is None:
        raise ImageError(f"the base image {base} is not on the engine", where=f"--base {base}",
                         fix="build or load it first (on CI: source .ci/podman.sh), or drop --base to use the pinned base")
    t0 = time.monotonic()
    log: list[str] = []
    _stream_build(engine, recipe, wheels, nocache, log, on_line)
    seconds = time.monotonic() - t0
    info = image_info(engine, recipe.tag)
    if info is None:
        raise ImageError(f"the build of {row.name} finished but {recipe.tag} is not on the engine",
                         where=engine.url, fix="see the build log above; retry with --no-cache")
    _record_build(engine, recipe, info, seconds, offline=bool(wheels), cached=False)
    return BuildResult(row.name, recipe.tag, info["id"], False, seconds, bool(wheels), info["digest"])


def _wheels(row: ImageRow, wheelhouse: Path | None) -> list[Path]:
    if wheelhouse is None:
        return []
    wh = wheelhouse / row.name if (wheelhouse / row.name).is_dir() else wheelhouse
    missing = missing_wheels(row, wh)
    if missing:
        raise ImageError(f"the wheelhouse lacks {len(missing)} locked file(s) of {row.name}: {', '.join(missing[:4])}"
                         + (" ..." if len(missing) > 4 else ""), where=str(wh),
                         fix=f"kit images fetch {row.name} --dest {wheelhouse}")
    return wheels_for(row, wh)


def build_labels(recipe: Recipe) -> dict[str, str]:
    """Labels given at build time (not part of the recipe, so they do not change its hash)."""
    from kit.provenance import kit_provenance

    kit = kit_provenance()
    return {"org.opencontainers.image.created": now_iso(),
            "org.opencontainers.image.revision": str(kit.get("commit") or ""),
            f"{LABEL_PREFIX}.version": str(kit.get("version")),
            f"{LABEL_PREFIX}.recipe.sha256": recipe.sha256}


def _stream_build(engine: Engine, recipe: Recipe, wheels: list[Path], nocache: bool, log: list[str],
                  on_line: Callable[[str], None] | None) -> str:
    import docker
    import requests

    image_id = ""
    with tempfile.TemporaryFile(prefix="kit-context-") as ctx:
        write_context(recipe, wheels, ctx)
        ctx.seek(0)
        api = engine.client.api
        old_timeout, api.timeout = api.timeout, BUILD_TIMEOUT_S
        try:
            stream = api.build(fileobj=ctx, custom_context=True, tag=recipe.tag, pull=False, rm=True, forcerm=True,
                               nocache=nocache, decode=True, labels=build_labels(recipe))
            for chunk in stream:
                if "error" in chunk or "errorDetail" in chunk:
                    msg = chunk.get("error") or chunk.get("errorDetail", {}).get("message", "?")
                    log.append(str(msg).rstrip())
                    raise ImageError(f"the build of {recipe.row.name} failed: {str(msg).strip()[:500]}\n"
                                     + "\n".join(log[-LOG_TAIL_LINES:]), where=f"{recipe.tag} ({engine.kind})",
                                     fix="read the log tail above (a hash mismatch means a stale lock or wheelhouse)")
                text = chunk.get("stream") or chunk.get("status") or ""
                if "aux" in chunk and isinstance(chunk["aux"], dict):
                    image_id = chunk["aux"].get("ID", image_id)
                for line in str(text).splitlines():
                    if line.strip():
                        log.append(line.rstrip())
                        if on_line:
                            on_line(line.rstrip())
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise ImageError(f"the engine failed while building {recipe.row.name} ({_short(exc)})\n"
                             + "\n".join(log[-LOG_TAIL_LINES:]), where=engine.url,
                             fix="check the engine (kit doctor) and retry") from None
        finally:
            api.timeout = old_timeout
    return image_id


def _record_build(engine: Engine, recipe: Recipe, info: ImageInfo, seconds: float, offline: bool,
                  cached: bool) -> None:
    entry = {"tag": recipe.tag, "id": info["id"], "repo_digests": info["repo_digests"], "digest": info["digest"],
             "recipe_sha256": recipe.sha256, "lock_sha256": recipe.row.lock_sha256(), "base": recipe.base,
             "base_pinned": recipe.base_pinned, "engine": f"{engine.kind} {engine.version}",
             "size_bytes": info.get("size_bytes")}
    if not cached:
        entry.update(built=now_iso(), build_seconds=round(seconds, 1), offline_wheelhouse=offline)
    record("images", recipe.row.name, entry)
