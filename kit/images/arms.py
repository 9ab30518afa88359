"""Releases wherever an image row is accepted: ``--images tensorflow==2.18.1,tensorflow==2.19.1``.

A release spec (``FRAMEWORK==VERSION``, kit.images.add) names a framework build that may have no row yet. Before a
run starts, each one becomes a row of the matrix for the device the run will compute on (added to the user matrix
when missing, :func:`kit.images.add.ensure_row`) and, for the Docker/Podman backend, an image built for the row's
current recipe (:func:`kit.images.add.ensure_built`); from then on the run is exactly a run of row names, so the
runner and the backends never see a release spec. The device is the runner's own resolution (kit.gpus over the
spec's workloads and ``[container] gpus``): a release resolved for another device than the trials compute on would
be a silent CPU-for-GPU comparison. The library prints nothing: the caller is told through :class:`ImageProgress`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kit.errors import KitError
from kit.images.matrix import ImageRow, Matrix, load_matrix
from kit.spec import Spec

SPEC_FIX = "give a matrix row (kit images list) or a release such as tensorflow==2.18.1 or torch==2.11.0"


@dataclass(frozen=True)
class ImageProgress:
    """What the caller is told while releases become rows (the library itself prints nothing)."""

    on_row: Callable[[ResolvedRelease], None] | None = None  # a release has its row (added or found)
    on_start: Callable[[ImageRow], None] | None = None  # a build starts
    on_line: Callable[[str], None] | None = None  # a line of the lock's or the build's output


@dataclass(frozen=True)
class ResolvedRelease:
    """One release spec and the row it runs in: whether the row was added to the user matrix, and built now."""

    item: str  # the spec as given, e.g. "tensorflow==2.18.1"
    row: str  # the matrix row's name
    added: bool
    built: bool


def is_release(item: str) -> bool:
    """``FRAMEWORK==VERSION`` (a release to resolve) rather than a matrix row's name."""
    if "==" not in item:  # a row name: no need to load the release parser
        return False
    from kit.images.add import is_release_spec

    return is_release_spec(item.strip())


def run_device(spec: Spec) -> str:
    """``cpu`` or ``cuda``: the image device a container run of ``spec`` needs, by the runner's resolution.

    The same rule as kit.run.prepare: every configuration's workload resolved by kit.gpus (``device = "auto"`` is the
    GPU as soon as NVML sees one that ``[container] gpus`` allows); any trial on the GPU makes it a CUDA run. A
    workload that asks for ``gpu`` on a host without one is refused here, as the run would refuse it.
    """
    from kit.gpus import DevicePlan

    devices = DevicePlan.build(spec.container.gpus)
    summary = devices.check(spec.workload_for(cfg).flat() for cfg in spec.configurations())
    return "cuda" if "gpu" in summary["resolved"] else "cpu"


def refuse_on_local(items: list[str], backend: str, where: str) -> None:
    """A release names an image; the local backend runs this interpreter's framework, whatever its version."""
    releases = [i.strip() for i in items if i.strip() and is_release(i)]
    if releases and backend == "local":
        raise KitError(f"{releases[0]} is a release to run in a container image; the local backend runs the "
                       "framework installed in this interpreter, whatever its version", where=where,
                       fix=f"add --backend docker (the kit adds and builds the row of {releases[0]}), or drop the "
                           "version to measure this host's install")


def resolve_release(item: str, device: str, *, build: bool, progress: ImageProgress | None = None,
                    matrix: Matrix | None = None, where: str | None = None) -> ResolvedRelease:
    """The row of release ``item`` for ``device`` (added when missing), built for its recipe when ``build``."""
    from kit.images.add import ensure_built, ensure_row, parse_release_spec

    progress = progress or ImageProgress()
    try:
        spec = parse_release_spec(item.strip())
    except KitError as err:  # say which option held it; keep the parser's cause and fix
        raise type(err)(err.cause, where=where or f"--images {item.strip()}", fix=err.fix or SPEC_FIX) from None
    matrix = matrix or load_matrix()
    row = ensure_row(spec, device, matrix=matrix, on_line=progress.on_line)
    existed = row.name in {r.name for r in matrix.rows}  # ensure_row returns a row of this matrix, or a new one
    started: list[str] = []
    if build:
        def on_start(r: ImageRow) -> None:
            started.append(r.name)
            if progress.on_start is not None:
                progress.on_start(r)

        ensure_built(row, on_line=progress.on_line, on_start=on_start)
    out = ResolvedRelease(item.strip(), row.name, added=not existed, built=bool(started))
    if progress.on_row is not None:
        progress.on_row(out)
    return out


def resolve_items(items: list[str], device: str, *, build: bool, progress: ImageProgress | None = None,
                  option: str = "--images") -> tuple[list[str], tuple[ResolvedRelease, ...]]:
    """Row names for ``items`` (rows pass through, releases are resolved in order) and the releases resolved."""
    names: list[str] = []
    done: list[ResolvedRelease] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        if is_release(item):
            r = resolve_release(item, device, build=build, progress=progress, where=f"{option} {item}")
            done.append(r)
            names.append(r.row)
        else:
            names.append(item)
    return names, tuple(done)
