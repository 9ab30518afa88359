"""`kit images ...`: list, lock, fetch, render, build and verify the pinned framework images (thin layer)."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from kit.cli.output import Output

if TYPE_CHECKING:
    from kit.images.matrix import ImageRow

images_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="Pinned framework images: list, lock, fetch, render, build, verify.")


class ImageFormat(StrEnum):
    dockerfile = "dockerfile"
    apptainer = "apptainer"
    both = "both"


class BuildFormat(StrEnum):
    docker = "docker"
    sif = "sif"


class FrameworkChoice(StrEnum):
    pytorch = "pytorch"
    tensorflow = "tensorflow"


class DeviceChoice(StrEnum):
    cpu = "cpu"
    cuda = "cuda"

Names = Annotated[list[str] | None, typer.Argument(help="Matrix rows (default: the rows this host needs).")]
AllRows = Annotated[bool, typer.Option("--all", help="Every row of the matrix.")]
Framework = Annotated[FrameworkChoice | None, typer.Option(help="Only rows of this framework.")]
Device = Annotated[DeviceChoice | None, typer.Option(help="Only rows for this device.")]
Index = Annotated[list[str] | None, typer.Option("--index", metavar="<url>", help="Index URL replacing the row's (repeatable; first is the main one).")]


def _rows(names: list[str] | None, all_: bool, framework: FrameworkChoice | None, device: DeviceChoice | None,
          engine: object = None) -> list:
    from kit.images.commands import Selection, select
    from kit.images.matrix import load_matrix

    fw, dev = (framework.value if framework else None), (device.value if device else None)
    return select(load_matrix(), Selection(names, all_, fw, dev), engine)  # type: ignore[arg-type]


@images_app.command("list")
def list_cmd(ctx: typer.Context, engine: Annotated[bool, typer.Option(help="Ask the engine which rows are built.")] = True) -> None:
    """The image matrix: one row per framework build, its lock and whether it is built here."""
    from kit.images.commands import list_images, try_engine

    io = Output.of(ctx)
    eng = try_engine() if engine else None
    table = Table(title="Image matrix (images/matrix.toml + your matrix.local.toml)" + (f" · {eng.label()}" if eng else " · no engine"))
    for col in ("name", "framework", "device", "CUDA", "cuDNN", "python", "default", "era", "lock", "built"):
        table.add_column(col, overflow="fold")
    for r in list_images(engine=eng):
        table.add_row(r["name"], r["framework"], r["device"], r["cuda"], r["cudnn"], r["python"],
                      "yes" if r["default"] else "", r["era"], r["lock"], r["built"] or "-")
    io.out.print(table)


@images_app.command("lock")
def lock_cmd(ctx: typer.Context, names: Names = None, all_: AllRows = False, framework: Framework = None, device: Device = None,
             find_links: Annotated[list[Path] | None, typer.Option(metavar="<path>", help="Local wheel directory (repeatable).")] = None,
             index: Index = None) -> None:
    """Resolve each row's requirements with pip and write its lock with sha256 hashes."""
    from kit.images.commands import lock_rows

    io = Output.of(ctx)
    rows = _rows(names, all_ or not (names or framework or device), framework, device)
    lock_rows(rows, list(find_links or []), index,
              on_row=lambda r, p, n: io.out.print(f"{r.name}: {n} pinned files -> {p}"))


@images_app.command("fetch")
def fetch_cmd(ctx: typer.Context, names: Names = None, all_: AllRows = False, framework: Framework = None, device: Device = None,
              dest: Annotated[Path | None, typer.Option(help="Wheelhouse (default $KIT_WHEELHOUSE or ~/.cache/kit/wheelhouse).")] = None,
              index: Index = None) -> None:
    """Download each row's locked wheels (hash-checked) into a wheelhouse for offline builds."""
    from kit.images.commands import fetch_rows, try_engine
    from kit.images.lock import default_wheelhouse

    io = Output.of(ctx)
    dest = dest or default_wheelhouse()
    rows = _rows(names, all_, framework, device, try_engine())
    for name, n in fetch_rows(rows, dest, index, on_line=lambda s: io.err.out(f"  | {s}", highlight=False)).items():
        io.out.print(f"{name}: {n} locked files in {dest / name}")


@images_app.command("render")
def render_cmd(ctx: typer.Context, names: Names = None, all_: AllRows = False, framework: Framework = None, device: Device = None,
               out_dir: Annotated[Path, typer.Option("--out", help="Where recipes are written (one directory per row).")] = Path("build/images"),
               base: Annotated[str | None, typer.Option(help="Base image replacing the pinned one (default $KIT_BASE_IMAGE).")] = None,
               format: Annotated[ImageFormat, typer.Option("--format", help="Which recipes to write.")] = ImageFormat.both) -> None:
    """Render the Dockerfile and Apptainer definition of each row."""
    from kit.images.commands import render_rows

    io = Output.of(ctx)
    kinds = ("dockerfile", "apptainer") if format is ImageFormat.both else (format.value,)
    for tag, path in render_rows(_rows(names, all_ or not (names or framework or device), framework, device),
                                 out_dir, base, kinds):
        io.out.print(f"{path}  ({tag})")


@images_app.command("build", short_help="Build images through the engine's API, tagged by recipe hash.")
def build_cmd(ctx: typer.Context, names: Names = None, all_: AllRows = False, framework: Framework = None, device: Device = None,
              base: Annotated[str | None, typer.Option(help="Base image on the engine replacing the pinned one (offline hosts; default $KIT_BASE_IMAGE).")] = None,
              wheelhouse: Annotated[Path | None, typer.Option(help="Install from these wheels (kit images fetch) instead of an index.")] = None,
              no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild even when the recipe is built.")] = False,
              format_: Annotated[BuildFormat, typer.Option("--format", help="docker (Docker/Podman image) or sif (Apptainer).")] = BuildFormat.docker,
              from_docker: Annotated[bool, typer.Option(help="With --format sif: convert the built Docker image.")] = False) -> None:
    """Build images through the engine's API (log streamed), tagged by recipe hash, recorded in images/images.lock.json."""
    from kit.images.commands import build_rows, try_engine

    io = Output.of(ctx)
    format = format_.value

    eng = try_engine() if format == "docker" or from_docker or not names else None
    rows = _rows(names, all_, framework, device, eng)
    on_line, on_start = _progress(io)
    results = build_rows(rows, base, wheelhouse, no_cache, format, from_docker, eng,
                         on_line=on_line, on_start=on_start)
    table = Table(title="Built")
    for col in ("image", "tag / file", "id / sha256", "seconds", "note"):
        table.add_column(col, overflow="fold")
    for r in results:
        if isinstance(r, dict):
            table.add_row(Path(r["path"]).stem, r["path"], r["sha256"], "", "sif")
        else:
            note = "already built (same recipe)" if r.cached else ("offline wheelhouse" if r.offline else "from the index")
            table.add_row(r.row, r.tag, r.id, f"{r.seconds:.0f}", note)
    io.out.print(table)


def _progress(io: Output) -> tuple[Callable[[str], None], Callable[[ImageRow], None]]:
    """(on_line, on_start) printing a build's log and each row it starts, as `kit images build` does."""
    return (lambda s: io.err.out(f"  | {s}", highlight=False),
            lambda r: io.err.print(f"[bold]building {r.name}[/] ({r.framework} {r.version}, {r.device})"))


@images_app.command("add", short_help="Add a row for any release, nightly or wheel file to the user matrix, and build it.")
def add_cmd(ctx: typer.Context,
            spec: Annotated[str, typer.Argument(metavar="SPEC", help="tensorflow==2.18.1, torch==2.11.0, torch==2.15.0.dev20261120 (with --index-url); may be empty with --wheel.")] = "",
            index_url: Annotated[str | None, typer.Option("--index-url", metavar="<url>", help="The index that publishes the release (pre-releases, nightlies).")] = None,
            wheel: Annotated[Path | None, typer.Option("--wheel", metavar="<path>", help="A wheel file to build the row from (its sha256 is recorded).")] = None,
            device: Annotated[DeviceChoice, typer.Option(help="The row's device.")] = DeviceChoice.cpu,
            python: Annotated[str | None, typer.Option(help="The row's CPython (default: the matrix's, 3.11).")] = None,
            build: Annotated[bool, typer.Option("--build/--no-build", help="Build the image now (default) or on first use.")] = True) -> None:
    """Check a release on its index (not yanked, a wheel for the row's Python), lock it with pip and write the row into images/matrix.local.toml; then build it unless --no-build."""
    from kit.errors import ImageError
    from kit.images.add import add_row, ensure_built, parse_release_spec
    from kit.images.lock import parse_lock

    io = Output.of(ctx)
    if not spec and wheel is None:
        raise ImageError("no release given", where="kit images add", fix="give SPEC (e.g. tensorflow==2.18.1) or --wheel PATH")
    release = parse_release_spec(spec, index_url=index_url, wheel=wheel)
    row = add_row(release, device.value, python=python, on_line=lambda s: io.err.out(f"  {s}", highlight=False))
    pins = len(parse_lock(row.lock_text(), str(row.lock_path)))
    cuda = f", CUDA {row.cuda}, cuDNN {row.cudnn}" if row.device == "cuda" else ""
    io.out.print(f"added {row.name}: {row.framework} {row.version} ({row.device}{cuda}), CPython {row.python}; "
                 f"lock {row.lock_path} ({pins} pinned files)" + (f"; wheel sha256 {row.wheel_sha256}" if row.wheel else ""),
                 highlight=False)
    if build:
        on_line, on_start = _progress(io)
        ensure_built(row, on_line=on_line, on_start=on_start)
        io.out.print(f"built {row.name}", highlight=False)
    else:
        io.out.print(f"not built: kit images build {row.name} (or it is built on first use)", highlight=False)


@images_app.command("verify", short_help="Start each image and check its framework, CUDA and cuDNN versions from inside.")
def verify_cmd(ctx: typer.Context, names: Names = None, all_: AllRows = False, framework: Framework = None, device: Device = None) -> None:
    """Start each image and check from inside that framework, CUDA and cuDNN versions match the matrix; a CUDA row must see a GPU and run one real GPU op per framework (TensorFlow: also an XLA-compiled one)."""
    from kit.errors import ImageError
    from kit.images.commands import verify_rows
    from kit.images.matrix import load_matrix
    from kit.images.verify import mismatch_error, table_rows

    io = Output.of(ctx)
    only_built = not names
    rows = _rows(names, all_ or not (names or framework or device), framework, device)
    results, skipped = verify_rows(rows, only_built=only_built)
    table = Table(title="Image verification")
    for col in ("image", "check", "matrix", "inside the image", "ok"):
        table.add_column(col, overflow="fold")
    matrix = load_matrix()
    for v in results:
        for check, want, got, ok in table_rows(v, matrix.get(v.row)):
            table.add_row(v.row, check, want, got, "" if ok is None else ("[green]yes[/]" if ok else "[red]NO[/]"))
    io.out.print(table)
    if skipped:
        io.out.print(f"not built here (skipped): {', '.join(skipped)}")
    err = mismatch_error(results)
    if err is not None:
        raise err
    if not results:
        raise ImageError("no image was verified: none of the selected rows is built here", where="kit images verify",
                         fix="kit images build (or name the rows to verify)")
