"""What each `kit images` command does, as library functions (the CLI only parses and prints).

Row selection is shared: names given on the command line, else ``--all``,
else the rows this host needs (the default CUDA rows when an engine can hand
GPUs to containers and the host has one, the default CPU rows otherwise),
narrowed by ``--framework`` and ``--device``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.engine import Engine, find_engine, gpu_support, host_gpus
from kit.errors import EngineError, ImageError, KitError
from kit.images.matrix import FRAMEWORK_NAMES, ImageRow, Matrix, load_matrix

ENV_BASE = "KIT_BASE_IMAGE"


@dataclass
class Selection:
    names: list[str] | None = None
    all: bool = False
    framework: str | None = None
    device: str | None = None


def host_device(engine: Engine | None) -> str:
    """cuda when this host has an NVIDIA GPU and the engine can attach it, else cpu."""
    if engine is None or not host_gpus():
        return "cpu"
    return "cuda" if gpu_support(engine).ok else "cpu"


def select(matrix: Matrix, sel: Selection, engine: Engine | None = None) -> list[ImageRow]:
    if sel.names:
        return matrix.select(sel.names)
    if sel.all or sel.device or sel.framework:
        rows = matrix.select(framework=sel.framework, device=sel.device)
        if not sel.all and not sel.device:
            return [r for r in rows if r.default] or rows
        return rows
    device = host_device(engine)
    return [matrix.default_for(fw, device) for fw in FRAMEWORK_NAMES]


def default_base(base: str | None) -> str | None:
    """``--base``, else $KIT_BASE_IMAGE (CI's locally made base), else None: the matrix's pinned base."""
    return base or os.environ.get(ENV_BASE) or None


def list_images(matrix: Matrix | None = None, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Every row with its lock state and, when an engine answers, whether its current recipe is built."""
    from kit.images.build import find_built

    matrix = matrix or load_matrix()
    out = []
    for r in matrix.rows:
        try:
            lock = f"{r.lock} ({r.lock_sha256()[:12]})"
        except ImageError:
            lock = f"{r.lock} (MISSING)"
        built = None
        if engine is not None:
            info = find_built(engine, r)
            built = f"{info['tag']} {info['id'][:19]}" if info else "not built"
        out.append({"name": r.name, "framework": f"{r.framework} {r.version}", "device": r.device,
                    "cuda": r.cuda or "-", "cudnn": r.cudnn or "-", "python": r.python, "default": r.default,
                    "paper_era": r.paper_era, "papers": list(r.papers), "harness": r.harness_problem() is None, "local": r.local,
                    "era": era_text(r), "base": r.base_ref, "lock": lock, "built": built})
    return out


def era_text(row: ImageRow) -> str:
    """The list's "era" cell: "current", or whose paper-era stack the row is and whether the harness runs there."""
    if not row.paper_era:
        return "local" if row.local else "current"
    era = f"paper era: {', '.join(row.papers)}" + ("" if row.harness_problem() is None else " (no kit trials)")
    return f"local, {era}" if row.local else era


def try_engine() -> Engine | None:
    try:
        return find_engine()
    except EngineError:
        return None


def lock_rows(rows: list[ImageRow], find_links: list[Path], index_urls: list[str] | None,
              on_row: Callable[[ImageRow, Path, int], None] | None = None) -> list[Path]:
    from kit.images.lock import make_lock, parse_lock, write_lock

    out = []
    for r in rows:
        links = [*find_links, *([r.wheel_path.parent] if r.wheel_path is not None else [])]  # a --wheel row's file
        text = make_lock(r, links, index_urls)
        path = write_lock(r, text)
        out.append(path)
        if on_row:
            on_row(r, path, len(parse_lock(text)))
    return out


def fetch_rows(rows: list[ImageRow], dest: Path, index_urls: list[str] | None,
               on_line: Callable[[str], None] | None = None) -> dict[str, int]:
    from kit.images.lock import fetch_wheels

    return {r.name: len(fetch_wheels(r, dest / r.name, on_line, index_urls=index_urls)) for r in rows}


def render_rows(rows: list[ImageRow], out_dir: Path, base: str | None, kinds: tuple[str, ...]) -> list[tuple[str, Path]]:
    from kit.images.render import render, write_recipe

    out = []
    for r in rows:
        for kind in kinds:
            recipe = render(r, kind, default_base(base))
            out.append((recipe.tag if kind == "dockerfile" else f"sha256 {recipe.sha256[:12]}", write_recipe(recipe, out_dir)))
    return out


def build_rows(rows: list[ImageRow], base: str | None = None, wheelhouse: Path | None = None, nocache: bool = False,
               fmt: str = "docker", from_docker: bool = False, engine: Engine | None = None,
               on_line: Callable[[str], None] | None = None, on_start: Callable[[ImageRow], None] | None = None) -> list[Any]:
    """Build each row as a Docker/Podman image (``fmt="docker"``) or an Apptainer .sif (``fmt="sif"``)."""
    from kit.images.build import BuildResult, build_image, find_built

    base = default_base(base)
    results: list[BuildResult | dict[str, Any]] = []  # docker: BuildResult; sif: build_sif's dict
    for r in rows:
        if on_start:
            on_start(r)
        house = wheelhouse if wheelhouse is not None or r.wheel_path is None else wheel_row_house(r, on_line)
        if fmt == "docker":
            results.append(build_image(engine or find_engine(), r, base, house, on_line, nocache))
        elif fmt == "sif":
            from kit.images.sif import build_sif

            image = None
            if from_docker:
                engine = engine or find_engine()
                built = find_built(engine, r)
                if built is None:
                    raise ImageError(f"{r.name} is not built as a Docker image to convert", where="--from-docker",
                                     fix=f"kit images build {r.name} first, or build the .sif from its definition")
                image = built["tag"]
            results.append(build_sif(r, base=base, wheelhouse=house, from_image=image, engine=engine,
                                     on_line=on_line))
        else:
            raise KitError(f"unknown format {fmt!r}", where="--format", fix="use docker or sif")
    return results


def wheel_row_house(row: ImageRow, on_line: Callable[[str], None] | None = None) -> Path:
    """A wheelhouse with every locked file of ``row``, fetched on this host into the default wheelhouse,
    hash-checked, before the build: a ``--wheel`` row's own wheel is on no index, so the image cannot install
    from one; :func:`kit.images.add.ensure_built` builds every row it adds this way."""
    from kit.images.lock import default_wheelhouse, fetch_wheels

    house = default_wheelhouse()
    fetch_wheels(row, house / row.name, on_line)
    return house


def verify_rows(rows: list[ImageRow], engine: Engine | None = None, only_built: bool = False) -> tuple[list[Any], list[str]]:
    """Verify each row's image; with ``only_built`` rows without an image are skipped (and named)."""
    from kit.images.build import find_built
    from kit.images.verify import verify_row

    engine = engine or find_engine()
    results, skipped = [], []
    for r in rows:
        if only_built and find_built(engine, r) is None:
            skipped.append(r.name)
            continue
        results.append(verify_row(engine, r))
    return results, skipped


def ensure_images(arms: tuple[str, ...], overrides: dict[str, str] | None, container: Any,
                  on_line: Callable[[str], None] | None = None,
                  on_start: Callable[[ImageRow], None] | None = None) -> list[Any]:
    """Build the images a `--backend docker` run of ``arms`` will use, where missing (`kit run --build-images`)."""
    from kit.backends.container import choose_rows
    from kit.images.build import find_built

    engine = find_engine()
    device = host_device(engine) if container.gpu_indices() != [] else "cpu"
    chosen = {r.name: r for r in choose_rows(arms, device, overrides).values()}
    rows = [r for r in chosen.values() if find_built(engine, r) is None]
    wheelhouse = os.environ.get("KIT_WHEELHOUSE")
    return build_rows(rows, wheelhouse=Path(wheelhouse) if wheelhouse else None, engine=engine,
                      on_line=on_line, on_start=on_start)
