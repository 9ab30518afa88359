"""`kit images verify`: start each image and check from inside that it is what the matrix says.

The probe (``kit/images/probe.py``) runs in the image without network and
reports Python, framework, CUDA and cuDNN versions as the framework itself
sees them. Versions are compared component by component over the parts both
sides give (TensorFlow reports cuDNN's major version only; the matrix may give
more), after dropping a local version label (``2.13.0+cpu`` is 2.13.0). CPU
rows must report no CUDA at all. A CUDA row is started with the host's GPUs
attached and must see at least one; then it runs one real operation per
framework on it (TensorFlow: an eager matmul and an XLA-compiled function, which
needs the ptxas and libdevice of the pip-installed CUDA), and any that fails is a
mismatch. Any mismatch is an :class:`ImageError` listing every difference.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from kit.engine import Engine, _short, wait_for_exit
from kit.errors import ImageError
from kit.images.build import find_built, now_iso, record
from kit.images.matrix import ImageRow
from kit.records import JsonTable

PROBE_SOURCE = Path(__file__).with_name("probe.py")
PROBE_TIMEOUT_S = 300


@dataclass
class Mismatch:
    key: str
    expected: str
    reported: str


class VerificationJson(TypedDict):
    """One image's verification as `kit images verify --json` and the run's manifest give it."""

    row: str
    tag: str
    id: str
    ok: bool
    reported: JsonTable
    mismatches: list[dict[str, str]]
    notes: list[str]


@dataclass
class Verification:
    row: str
    tag: str
    id: str
    reported: JsonTable  # the probe's report, as the image's own Python wrote it
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> VerificationJson:
        return {"row": self.row, "tag": self.tag, "id": self.id, "ok": self.ok, "reported": self.reported,
                "mismatches": [m.__dict__ for m in self.mismatches], "notes": self.notes}


def _parts(version: str) -> list[str]:
    return version.split("+", 1)[0].strip().split(".")


def versions_match(expected: str, reported: str) -> bool:
    """Equal over the components both give: '9.3' matches '9' and '9.3.0', not '9.1'."""
    e, r = _parts(expected), _parts(reported)
    n = min(len(e), len(r))
    return n > 0 and e[:n] == r[:n]


def _gpu_ops(reported: JsonTable) -> list[JsonTable]:
    """The probe's ``gpu_ops`` (one object per GPU operation tried); anything else in their place counts as none."""
    ops = reported.get("gpu_ops")
    return [op for op in ops if isinstance(op, dict)] if isinstance(ops, list) else []


def compare(row: ImageRow, reported: JsonTable) -> tuple[list[Mismatch], list[str]]:
    """Mismatches between the row and what the image reported, and notes on partial comparisons."""
    bad: list[Mismatch] = []
    notes: list[str] = []
    if reported.get("framework") != row.framework:
        bad.append(Mismatch("framework", row.framework, str(reported.get("framework"))))
    for key, want in row.expected().items():
        got = reported.get(key)
        got_text = "" if got in (None, "") else str(got)
        if not want:  # a CPU row: no CUDA/cuDNN may be reported
            if got_text:
                bad.append(Mismatch(key, "none (CPU-only build)", got_text))
            continue
        if not got_text:
            bad.append(Mismatch(key, want, "none reported"))
        elif not versions_match(want, got_text):
            bad.append(Mismatch(key, want, got_text))
        elif len(_parts(got_text)) < len(_parts(want)):
            notes.append(f"{key}: the image reports only {got_text!r}; compared with {want!r} on that part")
    if reported.get("uid") == 0:
        bad.append(Mismatch("user", "an unprivileged user", "root (uid 0)"))
    if row.device == "cuda":
        gpus = reported.get("gpus") or []
        if not gpus:
            bad.append(Mismatch("gpu", "at least one GPU visible (a CUDA row)", "none: the framework sees no GPU"))
        for op in _gpu_ops(reported):
            if not op.get("ok"):
                bad.append(Mismatch(f"gpu op: {op.get('op')}", "runs on the GPU", str(op.get("detail"))))
    if reported.get("cudnn_error"):
        notes.append(f"cuDNN could not be queried: {reported['cudnn_error']}")
    return bad, notes


class _StripAnnotations(ast.NodeTransformer):
    """Remove what CPython 3.6 cannot run: ``from __future__ import annotations`` and evaluated annotations."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if node.module == "__future__" else node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        a = node.args
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
            if arg is not None:
                arg.annotation = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:
            return ast.Pass()
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def probe_source() -> str:
    """The probe as sent into an image: without annotations, so that it runs on CPython >= 3.6 (paper-era rows)."""
    tree = _StripAnnotations().visit(ast.parse(PROBE_SOURCE.read_text(encoding="utf-8")))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def run_probe(engine: Engine, image: str, framework: str, device_requests: list[Any] | None = None,
              args: tuple[str, ...] = ()) -> JsonTable:
    """Run the probe in ``image`` (no network, removed afterwards) and return its report.

    ``args`` are the probe's options (``--gpu-ops``, ``--selftest SECONDS``).
    """
    import docker
    import requests

    source = probe_source()
    container = None
    try:
        container = engine.client.containers.create(
            image, ["python3", "-c", source, framework, *args], network_mode="none", device_requests=device_requests or None,
            labels={"io.kit.role": "probe"}, environment={"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        container.start()
        code = wait_for_exit(container, PROBE_TIMEOUT_S)  # not container.wait(): Podman's spins a CPU (kit.engine)
        if code is None:
            raise ImageError(f"the version probe in {image} did not finish in {PROBE_TIMEOUT_S:g} s", where=image,
                             fix="check the engine (kit doctor) and the image (kit images build --no-cache)")
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
    except docker.errors.ImageNotFound:
        raise ImageError(f"image {image} is not on the engine", where=engine.url,
                         fix="kit images build (see kit images list)") from None
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise ImageError(f"could not run the version probe in {image} ({_short(exc)})", where=engine.url,
                         fix="check the engine (kit doctor)") from None
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except docker.errors.DockerException:
                pass
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        raise ImageError(f"the version probe failed in {image} (exit {code}): {err.strip()[-1500:] or out.strip()[-500:]}",
                         where=image, fix="rebuild the image (kit images build --no-cache)")
    report = json.loads(lines[-1])
    if not isinstance(report, dict):
        raise ImageError(f"the version probe in {image} reported a JSON {type(report).__name__}, not an object",
                         where=image, fix="rebuild the image (kit images build --no-cache)")
    return report


def gpu_requests(engine: Engine) -> tuple[list[Any] | None, str]:
    """Device requests that attach every host GPU to a probe container, or (None, why not)."""
    from kit.engine import device_requests, gpu_support, host_gpus

    if not host_gpus():
        return None, "this host has no NVIDIA GPU (NVML sees none)"
    support = gpu_support(engine)
    if not support.ok:
        return None, f"the engine cannot attach GPUs: {support.detail}" + (f" (fix: {support.fix})" if support.fix else "")
    return device_requests(engine.kind, support.mechanism, None), ""


def verify_row(engine: Engine, row: ImageRow) -> Verification:
    """Probe the current image of ``row`` and compare; records the outcome in the images lock.

    A CUDA row runs with the host's GPUs attached and its real GPU operations (``--gpu-ops``).
    """
    built = find_built(engine, row)
    if built is None:
        raise ImageError(f"image {row.name} is not built for its current recipe on this engine", where=engine.url,
                         fix=f"kit images build {row.name}")
    reqs, why_not = gpu_requests(engine) if row.device == "cuda" else (None, "")
    args = ("--gpu-ops",) if row.device == "cuda" else ()
    reported = run_probe(engine, built["tag"], row.framework, reqs, args)
    bad, notes = compare(row, reported)
    if why_not:
        notes.append(f"no GPU attached: {why_not}")
    v = Verification(row.name, built["tag"], built["id"], reported, bad, notes)
    record("images", row.name, {"verified": {"t": now_iso(), "ok": v.ok, "reported": reported,
                                             "mismatches": [m.__dict__ for m in bad]}})
    return v


def table_rows(v: Verification, row: ImageRow) -> list[tuple[str, str, str, bool | None]]:
    """(check, matrix, inside the image, ok) for `kit images verify`'s table: versions, GPU, GPU operations, notes."""
    bad = {m.key: m for m in v.mismatches}
    out: list[tuple[str, str, str, bool | None]] = []
    for key, want in row.expected().items():
        got = v.reported.get(key)
        out.append((key, want or "none", str(got) if got not in (None, "") else "none", key not in bad))
    if row.device == "cuda":
        gpus = v.reported.get("gpus") or []
        out.append(("gpu", "a GPU visible", ", ".join(map(str, gpus if isinstance(gpus, list) else [gpus])) or "none",
                    "gpu" not in bad))
        for op in _gpu_ops(v.reported):
            out.append((f"gpu op: {op.get('op')}", "runs on the GPU", str(op.get("detail")), bool(op.get("ok"))))
    for m in v.mismatches:
        if m.key not in {r[0] for r in out}:
            out.append((m.key, m.expected, m.reported, False))
    out.extend(("note", "", n, None) for n in v.notes)
    return out


def mismatch_error(results: list[Verification]) -> ImageError | None:
    """One error naming every mismatch of every image (None when all match)."""
    bad = [v for v in results if not v.ok]
    if not bad:
        return None
    lines = [f"{v.row}: {m.key} expected {m.expected}, image reports {m.reported}" for v in bad for m in v.mismatches]
    return ImageError("image(s) do not match the matrix: " + "; ".join(lines), where="images/matrix.toml",
                      fix="rebuild the image (kit images build --no-cache NAME) or correct the row's versions; a CUDA "
                          "row needs a host GPU the engine can attach (kit doctor) and a driver that fits its CUDA")
