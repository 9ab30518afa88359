"""Apptainer images (.sif): built from the row's definition, or converted from the built Docker image.

From the recipe: ``apptainer build [--fakeroot] OUT.sif ROW.def`` in the
rendered directory (the definition copies the lock and, when given, the
wheelhouse). From the Docker image: the engine exports it as a docker-archive
through its API (Docker and Podman alike) and ``apptainer build OUT.sif
docker-archive://ARCHIVE`` converts it. Either way the .sif's sha256 is its
digest, recorded in the images lock and, per run, in the manifest.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.errors import ImageError
from kit.images.build import now_iso, read_images_lock, record
from kit.images.matrix import IMAGES_DIR, ImageRow
from kit.images.render import Recipe, render, write_recipe

SIF_DIR = IMAGES_DIR.parent / "build" / "sif"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sif_path(recipe: Recipe, out_dir: Path = SIF_DIR) -> Path:
    return out_dir / f"{recipe.row.name}-{recipe.sha256[:12]}.sif"


def build_from_def_command(apptainer: str, sif: Path, definition: Path, fakeroot: bool) -> list[str]:
    return [apptainer, "build", *(["--fakeroot"] if fakeroot else []), "--force", str(sif), definition.name]


def build_from_archive_command(apptainer: str, sif: Path, archive: Path) -> list[str]:
    return [apptainer, "build", "--force", str(sif), f"docker-archive://{archive}"]


def _run(cmd: list[str], cwd: Path, on_line: Callable[[str], None] | None, what: str) -> None:
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise ImageError(f"cannot start {cmd[0]} ({exc})", where=what,
                         fix="install Apptainer (https://apptainer.org/docs/admin/main/installation.html)") from None
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if on_line:
            on_line(line.rstrip())
    if proc.wait() != 0:
        raise ImageError(f"{' '.join(cmd[:3])} failed (exit {proc.returncode}):\n" + "\n".join(lines[-30:]), where=what,
                         fix="read the log tail above; unprivileged builds need --fakeroot (or build from the Docker image)")


def build_sif(row: ImageRow, apptainer: str | None = None, base: str | None = None, wheelhouse: Path | None = None,
              from_image: str | None = None, engine: Any = None, out_dir: Path = SIF_DIR, fakeroot: bool = True,
              on_line: Callable[[str], None] | None = None, render_dir: Path | None = None) -> dict[str, Any]:
    """Build ``row``'s .sif from its definition, or from the Docker image ``from_image`` on ``engine``."""
    exe = apptainer or shutil.which("apptainer") or shutil.which("singularity")
    if not exe:
        raise ImageError("apptainer is not installed", where="kit images build --format sif",
                         fix="install Apptainer (https://apptainer.org/docs/admin/main/installation.html)")
    recipe = render(row, "apptainer", base)
    out_dir.mkdir(parents=True, exist_ok=True)
    sif = sif_path(recipe, out_dir)
    with tempfile.TemporaryDirectory(prefix="kit-sif-", dir=render_dir) as tmp:
        if from_image:
            if engine is None:
                raise ImageError("converting a Docker image needs a container engine", where="--from-image",
                                 fix="start Docker or Podman (kit doctor), or build from the definition")
            archive = Path(tmp) / "image.tar"
            export_image(engine, from_image, archive)
            _run(build_from_archive_command(exe, sif, archive), Path(tmp), on_line, f"{row.name} from {from_image}")
            source = {"docker_image": from_image}
        else:
            definition = write_recipe(recipe, Path(tmp))
            if wheelhouse is not None:
                from kit.images.build import _wheels

                for w in _wheels(row, wheelhouse):
                    shutil.copy2(w, definition.parent / "wheelhouse" / w.name)
            _run(build_from_def_command(exe, sif, definition, fakeroot), definition.parent, on_line, str(definition))
            source = {"definition_sha256": recipe.sha256}
    digest = sha256_file(sif)
    entry = {"path": str(sif), "sha256": digest, "recipe_sha256": recipe.sha256, "lock_sha256": row.lock_sha256(),
             "source": source, "built": now_iso(), "size_bytes": sif.stat().st_size}
    record("sif", row.name, entry)
    return entry


def export_image(engine: Any, ref: str, archive: Path) -> None:
    """Save ``ref`` from the engine as a docker-archive tar (Docker and Podman both serve it)."""
    import docker

    try:
        image = engine.client.images.get(ref)
        with archive.open("wb") as fh:
            for chunk in image.save(named=True):
                fh.write(chunk)
    except docker.errors.DockerException as exc:
        raise ImageError(f"the engine could not export {ref} ({exc})", where=engine.url,
                         fix=f"kit images build {ref.split('/')[-1].split(':')[0]} first") from None


def find_sif(row: ImageRow) -> dict[str, Any]:
    """The recorded .sif of ``row``, its file present and its sha256 unchanged; ImageError otherwise."""
    entry = read_images_lock().get("sif", {}).get(row.name)
    if not entry:
        raise ImageError(f"no .sif is built for {row.name}", where="images lock",
                         fix=f"kit images build --format sif {row.name}")
    path = Path(entry["path"])
    if not path.is_file():
        raise ImageError(f"the .sif of {row.name} is missing", where=str(path),
                         fix=f"kit images build --format sif {row.name}")
    if entry.get("lock_sha256") != row.lock_sha256():
        raise ImageError(f"the .sif of {row.name} was built from an older lock", where=str(path),
                         fix=f"kit images build --format sif {row.name}")
    digest = sha256_file(path)
    if digest != entry.get("sha256"):
        raise ImageError(f"the .sif of {row.name} changed since it was built (sha256 {digest[:12]}, "
                         f"recorded {str(entry.get('sha256'))[:12]})", where=str(path),
                         fix=f"rebuild it: kit images build --format sif {row.name}")
    return {**entry, "sha256": digest}
