"""What `kit run` was asked, checked as a whole before anything runs: a new run of a spec, or a resumed run
directory, with the options of where and how (kit.run.options.RunOptions). The command line only parses its
flags into :func:`run_request` and hands the result to :func:`execute`; every rule about which flags go
together lives here, where it is tested without a terminal."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError
from kit.images.arms import ImageProgress, is_release, refuse_on_local, resolve_items, resolve_release, run_device
from kit.run.options import RETRY_FAILED, RunEvents, RunOptions, SlurmOverrides
from kit.run.resume import resume_run
from kit.run.start import start_run
from kit.spec import Spec, load_spec
from kit.store import RunDir
from kit.trust import StudyTrust


@dataclass(frozen=True)
class RunRequest:
    spec: Spec | None  # a new run's spec (None: resume)
    resume: Path | None  # the run directory to continue (None: a new run)
    opts: RunOptions


def image_overrides(items: list[str]) -> dict[str, str]:
    """``--image FRAMEWORK=ROW`` (repeatable) as {framework: matrix row}."""
    out = {}
    for item in items:
        fw, sep, row = item.partition("=")
        if not sep or not fw or not row:
            raise KitError(f"--image {item!r} is not FRAMEWORK=ROW", where="--image",
                           fix="e.g. --image pytorch=pytorch-2.6-cu124 (rows: kit images list)")
        out[fw.strip()] = row.strip()
    return out


def check_image_rows(overrides: dict[str, str]) -> None:
    """Before any engine is asked: each ``--image`` row exists and can host the kit's trials (not a paper-era row)."""
    from kit.images.matrix import load_matrix, require_harness

    matrix = load_matrix()
    for fw, row in overrides.items():
        require_harness(matrix.get(row), f"--image {fw}={row}")


def _check_release_overrides(overrides: dict[str, str], loaded: Spec | None) -> None:
    """``--image FRAMEWORK=RELEASE``: a new run's, and a release of that framework (before anything is built)."""
    from kit.images.add import parse_release_spec

    for fw, item in overrides.items():
        if not is_release(item):
            continue
        if loaded is None:
            raise KitError(f"--image {fw}={item} names a release; a resumed run keeps the images of its manifest",
                           where=f"--image {fw}={item}", fix="drop --image when resuming")
        got = parse_release_spec(item).framework
        if got != fw:
            raise KitError(f"{item} is a {got} release, not {fw}", where=f"--image {fw}={item}",
                           fix=f"give a release of {fw}, e.g. --image {got}={item}")


def run_request(*, spec: Path | None, profile: str | None, resume: Path | None, backend: str, runs_dir: Path,
                data_dir: Path | None = None, download: bool = True, seed: int | None = None,
                max_trials: int | None = None, executor: str = "local", slurm: SlurmOverrides | None = None,
                chunk: int | None = None, label: str | None = None, retry_failed: bool = False,
                retry_oom: bool = False, image: list[str] | None = None, images: str | None = None,
                trust_study_code: bool = False, study: Path | None = None,
                study_digest: str | None = None, progress: ImageProgress | None = None) -> RunRequest:
    """Check the flags together (KitError naming them) and load the spec of a new run.

    Releases among the images (``tensorflow==2.18.1``, kit.images.arms) become rows for the device the run computes
    on, and (Docker/Podman) built images, here, before the run starts; ``progress`` hears about each."""
    if resume is not None and spec is not None:
        raise KitError("give either a spec or --resume, not both", where="kit run",
                       fix="drop the spec: the run directory holds its own copy")
    if resume is None and spec is None:
        raise KitError("no experiment given", where="kit run",
                       fix="kit run experiments/<study> (a study folder or experiment TOML; see `kit list`)")
    from kit.executors import EXECUTORS

    if executor not in EXECUTORS:  # a mistyped name must not fall back to running here
        raise KitError(f"unknown executor {executor!r}", where="--executor", fix=f"use one of: {', '.join(EXECUTORS)}")
    retry = (RETRY_FAILED if retry_failed else ()) + (("oom",) if retry_oom else ())
    if retry and resume is None:
        raise KitError("--retry-failed and --retry-oom re-run trials of an existing run", where="kit run",
                       fix="kit run --resume RUN_DIR --retry-failed")
    if image and images:
        raise KitError("give either --image FRAMEWORK=ROW or --images ROW,ROW, not both", where="kit run",
                       fix="--image picks the row of each framework; --images makes one arm per row")
    if images and resume is not None:
        raise KitError("--images applies to a new run, not --resume", where="--images",
                       fix="a resumed run keeps the arms and images of its manifest")
    if (trust_study_code or study is not None or study_digest is not None) and resume is None:
        flag = "--trust-study-code" if trust_study_code else "--study" if study is not None else "--study-digest"
        raise KitError(f"{flag} says whose code a resumed run may execute; a new run runs the study you give it",
                       where=flag, fix="use it with --resume RUN_DIR, or drop it")
    if study_digest is not None and not (len(study_digest) == 64 and all(c in "0123456789abcdef" for c in study_digest)):
        raise KitError("--study-digest is not a SHA-256 digest (64 lower-case hex digits)", where="--study-digest",
                       fix="the kit writes this option into the jobs it submits; do not set it by hand")
    opts = RunOptions(runs_root=runs_dir, backend=backend, data_dir=data_dir, download=download, seed=seed,
                      max_trials=max_trials, executor=executor, slurm=SlurmOverrides(**(slurm or {})), chunk=chunk, label=label,
                      retry=retry, study_trust=StudyTrust(trust_run_copy=trust_study_code, study_dir=study),
                      study_digest=study_digest)
    refuse_on_local(images.split(",") if images else list(image_overrides(image or []).values()), backend,
                    "--images" if images else "--image")
    loaded = load_spec(spec, profile) if spec is not None else None
    if image:
        overrides = image_overrides(image)
        if any(is_release(r) for r in overrides.values()):
            _check_release_overrides(overrides, loaded)
        if loaded is not None and any(is_release(r) for r in overrides.values()):
            device = run_device(loaded)
            overrides = {fw: resolve_release(r, device, build=backend == "docker", progress=progress,
                                             where=f"--image {fw}={r}").row if is_release(r) else r
                         for fw, r in overrides.items()}
        opts.backend_options["images"] = overrides
        check_image_rows(opts.backend_options["images"])
    if images and loaded is not None:
        from kit.backends.container import image_arms

        items = images.split(",")
        if any(is_release(i) for i in items):
            items = resolve_items(items, run_device(loaded), build=backend == "docker", progress=progress)[0]
        opts.arms, opts.backend_options["images"] = image_arms(items, loaded.experiment.frameworks)
    return RunRequest(loaded, resume, opts)


def execute(req: RunRequest, events: RunEvents) -> RunDir:
    """Start the new run or resume the given one."""
    if req.resume is not None:
        return resume_run(req.resume, req.opts, events)
    assert req.spec is not None  # run_request refuses a request with neither
    return start_run(req.spec, req.opts, events)
