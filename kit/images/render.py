"""Image recipes rendered with jinja2 from a matrix row: a Dockerfile and an Apptainer definition.

The tag of an image is a content hash of what it is built from (the rendered
recipe and the lock it installs), so a changed row, template, lock or base
gives a new tag and an unchanged one finds the image already built. A base
override (``--base``, for hosts without a registry) is rendered into the
recipe, so it changes the hash too and is recorded in the labels.
"""

from __future__ import annotations

import hashlib
import io
import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import jinja2

from kit.images.matrix import IMAGES_DIR, ImageRow

KINDS = ("dockerfile", "apptainer")
TEMPLATES = {"dockerfile": "Dockerfile.j2", "apptainer": "apptainer.def.j2"}
IMAGE_UID = 1000
LABEL_PREFIX = "io.kit"


@dataclass(frozen=True)
class Recipe:
    """A rendered recipe with the lock it installs."""

    row: ImageRow
    kind: str
    text: str
    lock_text: str
    base: str
    base_pinned: bool

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for part in (self.kind, self.text, self.lock_text):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    @property
    def tag(self) -> str:
        """``localhost/kit/<row>:<first 12 hex digits of the content hash>`` (a local name, never pushed)."""
        return f"localhost/kit/{self.row.name}:{self.sha256[:12]}"

    @property
    def filename(self) -> str:
        return "Dockerfile" if self.kind == "dockerfile" else f"{self.row.name}.def"


def image_labels(row: ImageRow, lock_sha256: str, base: str, pinned: bool) -> dict[str, str]:
    """OCI annotations plus the kit's own: what the image is and what it was made from."""
    name, _, digest = base.partition("@")
    return {
        "org.opencontainers.image.title": f"kit {row.name}",
        "org.opencontainers.image.description": f"{row.framework} {row.version} ({_device_text(row)}) for the kit trial harness",
        "org.opencontainers.image.version": row.version,
        "org.opencontainers.image.vendor": "dlbench-kit",
        "org.opencontainers.image.licenses": "MIT",
        "org.opencontainers.image.base.name": name,
        "org.opencontainers.image.base.digest": digest,
        f"{LABEL_PREFIX}.image": row.name,
        f"{LABEL_PREFIX}.framework": row.framework,
        f"{LABEL_PREFIX}.framework.version": row.version,
        f"{LABEL_PREFIX}.device": row.device,
        f"{LABEL_PREFIX}.cuda": row.cuda,
        f"{LABEL_PREFIX}.cudnn": row.cudnn,
        f"{LABEL_PREFIX}.python": row.python,
        f"{LABEL_PREFIX}.lock": row.lock,
        f"{LABEL_PREFIX}.lock.sha256": lock_sha256,
        f"{LABEL_PREFIX}.base.pinned": "true" if pinned else f"false (matrix: {row.base_ref})",
    }


def cuda_env(row: ImageRow, lock_text: str) -> dict[str, str]:
    """Run-time environment a TensorFlow CUDA row needs to find its pip-installed CUDA ({} for other rows).

    TensorFlow's ``[and-cuda]`` wheels put the CUDA libraries under ``site-packages/nvidia/<lib>/lib``, where the
    dynamic loader does not look: ``LD_LIBRARY_PATH`` lists them (one directory per ``nvidia-*-cuNN`` pin of the
    lock). XLA compiles PTX with ``ptxas`` and links ``libdevice``, both in the ``nvidia-cuda-nvcc`` wheel:
    ``XLA_FLAGS=--xla_gpu_cuda_data_dir`` points at it and its ``bin`` goes on ``PATH``. The driver library
    (libcuda) stays the one the container toolkit injects from the host.
    """
    if row.framework != "tensorflow" or row.device != "cuda":
        return {}
    from kit.images.lock import parse_lock

    major, minor = row.python.split(".")[:2]
    nvidia = f"/opt/venv/lib/python{major}.{minor}/site-packages/nvidia"
    libs, nvcc = [], False
    for pin in parse_lock(lock_text, row.lock):
        m = re.match(r"^nvidia-(.+)-cu\d+$", pin.key)
        if not m:
            continue
        name = m.group(1).replace("-", "_")
        if name == "cuda_nvcc":
            nvcc = True
            continue
        libs.append(f"{nvidia}/{name}/lib")
    env = {"LD_LIBRARY_PATH": ":".join(sorted(libs))}
    if nvcc:
        env["XLA_FLAGS"] = f"--xla_gpu_cuda_data_dir={nvidia}/cuda_nvcc"
        env["NVCC_BIN"] = f"{nvidia}/cuda_nvcc/bin"
    return env


def _device_text(row: ImageRow) -> str:
    return "CPU only" if row.device == "cpu" else f"CUDA {row.cuda}, cuDNN {row.cudnn}"


def dockerfile_quote(value: str) -> str:
    """A double-quoted Dockerfile word (LABEL/ENV): backslash, quote and ``$`` escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _env(templates: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters["dq"] = dockerfile_quote
    return env


def render(row: ImageRow, kind: str = "dockerfile", base: str | None = None, templates: Path = IMAGES_DIR) -> Recipe:
    """Render ``row``'s recipe; ``base`` replaces the pinned base (an image present on the engine)."""
    if kind not in KINDS:
        raise ValueError(kind)
    lock_text = row.lock_text()
    effective = base or row.base_ref
    pinned = base is None
    labels = image_labels(row, hashlib.sha256(lock_text.encode()).hexdigest(), effective, pinned)
    index = ["--index-url", row.index_url] + [x for u in row.extra_index_urls for x in ("--extra-index-url", u)]
    bootstrap = "docker" if pinned else "docker-daemon"  # an override is an image on the local engine
    text = _env(templates).get_template(TEMPLATES[kind]).render(
        row=row, base_ref=effective, labels=labels, uid=IMAGE_UID, device_text=_device_text(row),
        index_options=" ".join(shlex.quote(x) for x in index), bootstrap=bootstrap,
        cuda_env=cuda_env(row, lock_text),
    )
    return Recipe(row, kind, text, lock_text, effective, pinned)


def write_recipe(recipe: Recipe, out_dir: Path) -> Path:
    """Write the recipe, its lock and an empty wheelhouse into ``out_dir/<row>/``; returns the recipe path."""
    d = out_dir / recipe.row.name
    (d / "wheelhouse").mkdir(parents=True, exist_ok=True)
    (d / "requirements.lock").write_text(recipe.lock_text, encoding="utf-8")
    path = d / recipe.filename
    path.write_text(recipe.text, encoding="utf-8")
    return path


def write_context(recipe: Recipe, wheels: list[Path], fileobj: IO[bytes]) -> None:
    """The build context as a tar stream: Dockerfile, requirements.lock and wheelhouse/ (the given wheels)."""
    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for name, data in (("Dockerfile", recipe.text.encode()), ("requirements.lock", recipe.lock_text.encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
        d = tarfile.TarInfo("wheelhouse")
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, 0
        tar.addfile(d)
        for w in wheels:
            info = tar.gettarinfo(str(w), arcname=f"wheelhouse/{w.name}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o644
            with w.open("rb") as fh:
                tar.addfile(info, fh)
