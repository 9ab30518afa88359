"""`kit doctor`'s container checks: which engine, its GPU support, GPUs inside a container, the kit's images.

Kept out of kit/engine.py, which the image builder imports: the doctor needs the builder (which images are
built) and the matrix, so living in the engine module closed an import circle engine <-> images.build.
"""

from __future__ import annotations

import shutil

from kit.doctor.findings import Finding
from kit.engine import START_FIX, Engine, GpuSupport, _short, device_requests, find_engine, gpu_support, host_gpus
from kit.errors import EngineError, KitError
from kit.images.build import find_built
from kit.images.matrix import load_matrix


def _finding(check: str, ok: bool, detail: str, fix: str = "", optional: bool = True) -> Finding:
    return {"check": check, "ok": ok, "detail": detail, "fix": "" if ok else fix, "optional": optional}


def gpu_smoke(engine: Engine, support: GpuSupport, image: str) -> tuple[bool, str]:
    """Run ``nvidia-smi -L`` in ``image`` with every GPU attached: can containers really see them?"""
    import docker

    try:
        out = engine.client.containers.run(
            image, ["nvidia-smi", "-L"], remove=True, network_mode="none", user="root",
            device_requests=device_requests(engine.kind, support.mechanism, None),
            environment={"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"},
        )
    except docker.errors.DockerException as exc:
        return False, _short(exc)
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("GPU")]
    return bool(lines), "; ".join(lines) or "nvidia-smi listed no GPU"


def doctor_engine() -> list[Finding]:
    """`kit doctor`'s engine checks: which engine, GPU support, GPUs inside a container, images, Apptainer."""
    out: list[Finding] = []
    gpus = host_gpus()
    try:
        engine = find_engine()
    except EngineError as err:
        out.append(_finding("container engine", False, err.cause, err.fix or START_FIX))
        out.append(_apptainer_finding())
        return out
    out.append(_finding("container engine", True, f"{engine.label()}, found via {engine.source}"))
    support = gpu_support(engine)
    if not gpus:
        out.append(_finding("engine GPU support", support.ok, support.detail + "; no NVIDIA GPU on this host",
                            support.fix or "nothing to do without a GPU: the CPU images run here"))
    else:
        out.append(_finding("engine GPU support", support.ok, support.detail, support.fix))
    out += _image_findings(engine, gpus, support)
    out.append(_apptainer_finding())
    return out


def _image_findings(engine: Engine, gpus: list[str], support: GpuSupport) -> list[Finding]:
    try:
        matrix = load_matrix()
    except KitError as err:
        return [_finding("kit images", False, err.cause, err.fix or "")]
    device = "cuda" if gpus and support.ok else "cpu"
    out: list[Finding] = []
    built_tags = []
    for fw in ("pytorch", "tensorflow"):
        try:
            row = matrix.default_for(fw, device)
        except KitError as err:
            out.append(_finding(f"image for {fw} ({device})", False, err.cause, err.fix or ""))
            continue
        img = find_built(engine, row)
        if img is None:
            out.append(_finding(f"image for {fw} ({device})", False, f"{row.name} is not built on this engine",
                                f"kit images build {row.name}"))
        else:
            built_tags.append(img["tag"])
            out.append(_finding(f"image for {fw} ({device})", True, f"{row.name}: {img['tag']} ({img['id'][:19]})"))
    if gpus:
        if not support.ok:
            out.append(_finding("GPUs inside containers", False, f"{len(gpus)} GPU(s) on the host ({gpus[0]}), "
                                "but the engine cannot attach them", support.fix))
        elif not built_tags:
            out.append(_finding("GPUs inside containers", False, "not tested: no kit image is built yet",
                                "kit images build, then kit doctor again"))
        else:
            ok, detail = gpu_smoke(engine, support, built_tags[0])
            out.append(_finding("GPUs inside containers", ok, detail,
                                "check the driver (nvidia-smi on the host) and the toolkit/CDI set-up "
                                "(README: Running on an NVIDIA host)"))
    return out


def _apptainer_finding() -> Finding:
    exe = shutil.which("apptainer") or shutil.which("singularity")
    return _finding("apptainer (HPC sites)", exe is not None, exe or "apptainer not found",
                    "only needed for --backend apptainer: install Apptainer (https://apptainer.org/docs/admin/main/installation.html)")
