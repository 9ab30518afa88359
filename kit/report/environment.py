"""The report's record of where the run ran: host, backend, images, devices, the self-test, the raw files.

Apart from kit.report.context because none of it is a result: these tables only restate the manifest and what
the trials reported from inside.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, TypedDict

from kit.analysis_record import Analysis
from kit.manifest import Manifest
from kit.records import JsonTable


def _bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def environment_rows(manifest: Manifest, analysis: Analysis) -> list[tuple[str, str]]:
    """The host, backend, images, what each arm reported from inside its first trial, the data, the kit."""
    host = manifest.host
    kit = manifest.kit
    be = manifest.backend
    rows = [
        ("host", f"{host.get('hostname', '?')} · {host.get('os', '?')} · kernel {host.get('kernel', '?')}"),
        ("CPU", f"{host.get('cpu_model', '?')} · {host.get('cpu_physical', '?')} cores / {host.get('cpu_logical', '?')} threads"),
        ("CPU governor", ", ".join(host.get("cpu_freq", {}).get("governors", [])) or "not exposed"),
        ("memory", _bytes(host.get("memory_total_bytes"))),
    ]
    for g in host.get("gpus", []) or [{"name": "none detected (NVML unavailable or no GPU)"}]:
        parts = [g.get("name", "?")] + [f"{k} {g[k]}" for k in ("driver_version", "uuid", "vbios", "power_limit_w") if g.get(k)]
        rows.append((f"GPU {g.get('index', '')}".strip(), " · ".join(str(p) for p in parts)))
    rows.append(("backend", f"{be.get('backend', '?')}" + (f" ({be['isolation']})" if be.get("isolation") else "")))
    for fw, img in (be.get("images") or {}).items():
        rows.append((f"image {fw}", f"{img.get('tag', '?')} · digest {img.get('digest') or img.get('id', '?')}"))
    envs: dict[str, JsonTable] = {}
    for v in analysis.trial_env:
        envs.setdefault(str(v["arm"]), v)
    for arm, env in envs.items():
        extra = " · ".join(f"{k} {env[k]}" for k in ("framework_version", "keras_version", "cuda", "cudnn", "device_name", "threads")
                           if env.get(k) is not None)
        rows.append((f"{arm} (inside the trial)", extra))
    datasets = manifest.used_datasets()
    if not datasets:
        rows.append(("dataset", "none: the workload generates its inputs"))
    for ds in datasets:
        rows.append(("dataset", f"{ds.name} ({ds.source}) from {ds.directory} [{ds.origin}], SHA-256 verified"))
    rows.append(("kit", f"{kit.get('version')} · commit {kit.get('commit') or 'not a git checkout'}"
                        + (" (with local changes)" if kit.get("dirty") else "")))
    rows.append(("plan", f"{manifest.plan.blocking} blocks, seed {manifest.plan.seed}, digest {manifest.plan_digest}"))
    return rows


def _counted(counts: dict[str, int] | None) -> str:
    """{"gpu": 10} -> "gpu"; several values: each with its number of trials."""
    if not counts:
        return "–"
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{k} ({n} trials)" for k, n in counts.items())


DEVICE_COLUMNS = ["arm", "kind", "device", "GPU UUID (inside the trial)", "GPU sampled by the host (index: UUID)",
                  "TF32 (mode, matmul, conv)", "precision", "trials"]


def device_rows(analysis: Analysis) -> list[list[str]]:
    """Per arm: the device kind, name and GPU UUID its trials reported, the GPU(s) the host sampled,
    TF32 and precision (``analysis.devices``; an analysis from before issue 13 has none)."""
    rows = []
    arms: Any = analysis.devices.get("arms")  # still a JSON table (kit.analysis.devices.device_summary writes it)
    for a in arms if isinstance(arms, list) else []:
        if not isinstance(a, dict):
            continue
        tf32 = _counted(a.get("tf32")) if a.get("tf32") else "not recorded"
        rows.append([str(a["arm"]), _counted(a.get("kinds")), _counted(a.get("names")), _counted(a.get("gpu_uuids")),
                     ", ".join(a.get("host_gpus") or []) or "–", tf32, _counted(a.get("precision")),
                     str(a.get("n_trials", "–"))])
    return rows


def _numbers_text(numbers: object) -> str:
    """A self-test check's numbers (a JSON table in the manifest) as one line."""
    if not isinstance(numbers, dict) or not numbers:
        return ""
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in numbers.items())


class SelfTest(TypedDict):
    """The host self-test as the report shows it."""

    ok: bool
    gpu: bool
    summary: str
    columns: list[str]
    rows: list[list[str]]


class RawEntry(TypedDict):
    """One file or directory of the run's raw data, with its size."""

    path: str
    files: int
    size: str


def selftest_context(manifest: Manifest) -> SelfTest | None:
    """The host self-test recorded in the manifest (``kit.selftest.host_selftest``), or None."""
    st = manifest.selftest
    if st is None:
        return None
    checks = st.get("checks") or []
    summary = ("passed" if st.get("ok") else "FAILED") + (
        "" if st.get("gpu") else " (CPU path only: the GPU checks were skipped)")
    failed = [c.get("name") for c in checks if c.get("status") == "fail"]
    if failed:
        summary += f"; failed: {', '.join(str(f) for f in failed)}"
    return {"ok": bool(st.get("ok")), "gpu": bool(st.get("gpu")), "summary": summary,
            "columns": ["check", "status", "detail", "numbers"],
            "rows": [[str(c.get("name", "?")), str(c.get("status", "?")), str(c.get("detail") or ""),
                      _numbers_text(c.get("numbers"))] for c in checks]}


def raw_index(run_path: Path) -> list[RawEntry]:
    """The run directory's raw files and folders (never following a link), for the raw-data table."""
    out: list[RawEntry] = []
    for name in ("manifest.json", "trials", "samples", "attempts", "events.jsonl", "analysis.json"):
        p = run_path / name
        try:
            st = p.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):  # a link is not followed: its target is none of the run's business
            sizes = [f.lstat() for f in p.iterdir()]
            regular = [s.st_size for s in sizes if stat.S_ISREG(s.st_mode)]
            out.append({"path": f"{name}/", "files": len(regular), "size": _bytes(sum(regular))})
        elif stat.S_ISREG(st.st_mode):
            out.append({"path": name, "files": 1, "size": _bytes(st.st_size)})
    return out
