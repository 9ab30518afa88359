"""`kit doctor`: what this host offers for benchmarking, and the fix for each gap.

Every check returns ``{"check", "ok", "detail", "fix", "optional"}``; a
missing optional capability (no GPU, no RAPL) is reported, never an error.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

from kit.errors import KitError

Finding = dict[str, Any]


def _finding(check: str, ok: bool, detail: str, fix: str = "", optional: bool = True) -> Finding:
    return {"check": check, "ok": ok, "detail": detail, "fix": "" if ok else fix, "optional": optional}


def check_frameworks() -> list[Finding]:
    out = []
    for fw, mod, dist in (("pytorch", "torch", "torch"), ("tensorflow", "tensorflow", None)):
        if importlib.util.find_spec(mod) is None:
            out.append(_finding(f"framework {fw} (local backend)", False, "not importable in " + sys.executable,
                                "make setup (installs the CPU builds), or use --backend docker", optional=False))
            continue
        version = "?"
        for d in ([dist] if dist else ["tensorflow", "tensorflow-cpu"]):
            try:
                version = importlib.metadata.version(d)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        out.append(_finding(f"framework {fw} (local backend)", True, f"{mod} {version}"))
    return out


def check_engine() -> list[Finding]:
    try:
        from kit.engine import doctor_engine
    except ImportError:
        return [_finding("container engine", False, "container support not installed in this kit", "update the kit")]
    try:
        return [dict(f, optional=f.get("optional", True)) for f in doctor_engine()]
    except KitError as err:
        return [_finding("container engine", False, err.cause, err.fix or "")]


def check_collectors() -> list[Finding]:
    try:
        from kit.collectors import probe_all
    except ImportError:
        return [_finding("collectors", False, "collectors not installed in this kit", "update the kit")]
    return [_finding(f"sensor {p['name']}", p["ok"], p["detail"], p.get("fix", "")) for p in probe_all()]


def check_governor() -> list[Finding]:
    from kit.provenance import cpu_governors

    g = cpu_governors()
    if not g["readable"]:
        return [_finding("CPU frequency governor", False, "cpufreq not exposed (VM or container?)",
                         "nothing to do on a VM; on bare metal load the cpufreq driver")]
    ok = g["governors"] == ["performance"]
    return [_finding("CPU frequency governor", ok, ", ".join(g["governors"]),
                     "sudo cpupower frequency-set -g performance (benchmarks want a fixed frequency)")]


def check_datasets(data_dir: Path | None) -> list[Finding]:
    from kit.datasets import DATASETS, SYNTHETIC, resolve

    out = []
    for name, info in DATASETS.items():
        for source in info.sources:
            if source == SYNTHETIC:  # written on first use (kit.synthetic), nothing to check here
                continue
            try:
                r = resolve(name, source, data_dir=data_dir, download=False)
                out.append(_finding(f"dataset {name} ({source})", True, f"{r.directory} ({r.origin}), checksums ok"))
            except KitError as err:
                out.append(_finding(f"dataset {name} ({source})", False, err.cause,
                                    err.fix or "", optional=True))
    return out


def check_tex() -> list[Finding]:
    latexmk = shutil.which("latexmk")
    return [_finding("LaTeX (PDF reports)", latexmk is not None, latexmk or "latexmk not found",
                     "apt-get install texlive-latex-base texlive-latex-recommended texlive-latex-extra latexmk")]


def run_checks(data_dir: Path | None = None) -> list[Finding]:
    findings = [_finding("python", sys.version_info >= (3, 11), sys.version.split()[0], "use Python 3.11 or newer",
                         optional=False)]
    for check in (check_frameworks, check_engine, check_collectors, check_governor, check_tex):
        findings += check()
    findings += check_datasets(data_dir)
    return findings
