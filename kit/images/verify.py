"""`kit images verify`: start each image and check from inside that it is what the matrix says.

The probe (``kit/images/probe.py``) runs in the image without network and
reports Python, framework, CUDA and cuDNN versions as the framework itself
sees them. Versions are compared component by component over the parts both
sides give (TensorFlow reports cuDNN's major version only; the matrix may give
more), after dropping a local version label (``2.13.0+cpu`` is 2.13.0). CPU
rows must report no CUDA at all. Any mismatch is an :class:`ImageError`
listing every difference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.engine import Engine, _short
from kit.errors import ImageError
from kit.images.build import find_built, now_iso, record
from kit.images.matrix import ImageRow

PROBE_SOURCE = Path(__file__).with_name("probe.py")
PROBE_TIMEOUT_S = 300


@dataclass
class Mismatch:
    key: str
    expected: str
    reported: str


@dataclass
class Verification:
    row: str
    tag: str
    id: str
    reported: dict[str, Any]
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> dict[str, Any]:
        return {"row": self.row, "tag": self.tag, "id": self.id, "ok": self.ok, "reported": self.reported,
                "mismatches": [m.__dict__ for m in self.mismatches], "notes": self.notes}


def _parts(version: str) -> list[str]:
    return version.split("+", 1)[0].strip().split(".")


def versions_match(expected: str, reported: str) -> bool:
    """Equal over the components both give: '9.3' matches '9' and '9.3.0', not '9.1'."""
    e, r = _parts(expected), _parts(reported)
    n = min(len(e), len(r))
    return n > 0 and e[:n] == r[:n]


def compare(row: ImageRow, reported: dict[str, Any]) -> tuple[list[Mismatch], list[str]]:
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
    if reported.get("cudnn_error"):
        notes.append(f"cuDNN could not be queried: {reported['cudnn_error']}")
    return bad, notes


def run_probe(engine: Engine, image: str, framework: str, device_requests: list[Any] | None = None) -> dict[str, Any]:
    """Run the probe in ``image`` (no network, removed afterwards) and return its report."""
    import docker
    import requests

    source = PROBE_SOURCE.read_text(encoding="utf-8")
    container = None
    try:
        container = engine.client.containers.create(
            image, ["python3", "-c", source, framework], network_mode="none", device_requests=device_requests or None,
            labels={"io.kit.role": "probe"}, environment={"TF_CPP_MIN_LOG_LEVEL": "2"})
        container.start()
        status = container.wait(timeout=PROBE_TIMEOUT_S)
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
    code = status.get("StatusCode")
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        raise ImageError(f"the version probe failed in {image} (exit {code}): {err.strip()[-1500:] or out.strip()[-500:]}",
                         where=image, fix="rebuild the image (kit images build --no-cache)")
    return json.loads(lines[-1])


def verify_row(engine: Engine, row: ImageRow) -> Verification:
    """Probe the current image of ``row`` and compare; records the outcome in the images lock."""
    built = find_built(engine, row)
    if built is None:
        raise ImageError(f"image {row.name} is not built for its current recipe on this engine", where=engine.url,
                         fix=f"kit images build {row.name}")
    reported = run_probe(engine, built["tag"], row.framework)
    bad, notes = compare(row, reported)
    v = Verification(row.name, built["tag"], built["id"], reported, bad, notes)
    record("images", row.name, {"verified": {"t": now_iso(), "ok": v.ok, "reported": reported,
                                             "mismatches": [m.__dict__ for m in bad]}})
    return v


def mismatch_error(results: list[Verification]) -> ImageError | None:
    """One error naming every mismatch of every image (None when all match)."""
    bad = [v for v in results if not v.ok]
    if not bad:
        return None
    lines = [f"{v.row}: {m.key} expected {m.expected}, image reports {m.reported}" for v in bad for m in v.mismatches]
    return ImageError("image(s) do not match the matrix: " + "; ".join(lines), where="images/matrix.toml",
                      fix="rebuild the image (kit images build --no-cache NAME) or correct the row's versions")
