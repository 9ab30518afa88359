"""The row every `kit doctor` check returns, and the verdict the rows add up to.

A row is JSON as written by ``kit doctor --json`` (kit/schemas/doctor.schema.json), hence a TypedDict: the shape is
the contract. A missing optional capability (no GPU, no RAPL) is a row with ``ok`` False, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NotRequired, TypedDict


class Finding(TypedDict):
    """One check's outcome: ``fix`` is empty when ``ok``; ``status`` qualifies a row that is neither ready nor
    missing (a dataset fetched "on first use", a host "not checked" or "unreachable")."""

    check: str
    ok: bool
    detail: str
    fix: str
    optional: bool
    status: NotRequired[str]


class Unavailable(TypedDict):
    """What the host cannot do, and the reason (the first clause of the failing rows' details)."""

    what: str
    because: str


class Verdict(TypedDict):
    """What the findings mean for a user: the first line of `kit doctor` (``line``) and its parts."""

    ready: list[str]
    unavailable: list[Unavailable]
    not_checked: list[str]
    line: str


def finding(check: str, ok: bool, detail: str, fix: str = "", optional: bool = True) -> Finding:
    return {"check": check, "ok": ok, "detail": detail, "fix": "" if ok else fix, "optional": optional}


# -- the verdict: what this host can run, and what a study needs -----------------------------------------------------

def _named(findings: list[Finding], prefix: str) -> list[Finding]:
    return [f for f in findings if f["check"].startswith(prefix)]


def _short(detail: str) -> str:
    """A finding's detail up to its first clause: the reason in a verdict line (the table has the rest)."""
    return re.split(r";| \(|: CPU", detail, maxsplit=1)[0].strip()


def verdict(findings: list[Finding]) -> Verdict:
    """What the findings mean for a user: ``ready`` (what this host can run) and ``unavailable`` (what it cannot,
    each with the reason), from the same rows the table shows."""
    ready: list[str] = []
    unavailable: list[Unavailable] = []

    def judge(what: str, rows: list[Finding], any_ok: bool = False) -> None:
        if not rows:
            return
        good = any(f["ok"] for f in rows) if any_ok else all(f["ok"] for f in rows)
        if good:
            ready.append(what)
        else:
            bad = [f for f in rows if not f["ok"]]
            unavailable.append({"what": what, "because": " and ".join(_short(f["detail"]) for f in bad[:2])})

    judge("local runs (PyTorch and TensorFlow)", _named(findings, "framework "))
    judge("studies that need torchvision (locally)", _named(findings, "torchvision"))
    judge("quick profiles (CPU)", _named(findings, "python") + _named(findings, "framework "))
    judge("GPU profiles (the papers' protocols)", _named(findings, "NVIDIA driver"))
    judge("container backends", _named(findings, "container engine") + _named(findings, "apptainer"), any_ok=True)
    judge("energy measurement (RAPL or NVML)", _named(findings, "sensor rapl") + _named(findings, "sensor nvml"),
          any_ok=True)
    judge("PDF reports", _named(findings, "LaTeX"))
    not_checked = _datasets_verdict([f for f in _named(findings, "dataset ") if f["check"] != "dataset downloads"],
                                    ready, unavailable, judge)
    line = "Ready for: " + (", ".join(ready) or "nothing yet")
    if unavailable:
        line += "; not available here: " + "; ".join(f"{u['what']}, because {u['because']}" for u in unavailable)
    if not_checked:
        line += "; not checked: " + "; ".join(not_checked)
    return {"ready": ready, "unavailable": unavailable, "not_checked": not_checked, "line": line}


def _datasets_verdict(datasets: list[Finding], ready: list[str], unavailable: list[Unavailable],
                      judge: Callable[[str, list[Finding]], None]) -> list[str]:
    """"every dataset" only when each is cached here or downloads from a host that answered; otherwise the cached
    ones, the ones whose host did not answer, and the "not checked" ones (returned) are said apart."""
    if not datasets:
        return []
    status = [("cached" if f["ok"] else str(f.get("status") or "missing")) for f in datasets]
    n = len(datasets)
    if all(s in ("cached", "on first use") for s in status):
        ready.append("every dataset" + ("" if "on first use" not in status else
                                        " (some downloaded on first use; their hosts answered)"))
        return []
    usable = status.count("cached") + status.count("on first use")
    if usable:
        ready.append(f"the datasets cached here ({status.count('cached')} of {n})" + (
            f" and {status.count('on first use')} downloaded on first use" if "on first use" in status else ""))
    if "unreachable" in status:
        unavailable.append({"what": f"{status.count('unreachable')} datasets not cached here",
                            "because": "their download hosts did not answer (no internet, or a proxy to set)"})
    judge("every dataset", [f for f, s in zip(datasets, status, strict=True) if s == "missing"])
    return [f"downloads of {status.count('not checked')} datasets not cached here (kit doctor without "
            "--no-check-downloads)"] if "not checked" in status else []
