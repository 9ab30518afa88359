"""A run's host class: the normalised, comparable key a replication map groups runs by.

Built from the manifest's provenance and the analysis's trial environment only, and never from the fields a shared
bundle removes (hostname, user names, paths, environment variables: ``kit pack --share``), so a run and its shared
bundle fall in the same class. What goes in is what can change a framework comparison: the CPU's vendor, model,
family/model and the ISA flags that decide which kernels oneDNN/MKL/Eigen/ATen dispatch to (AVX2, AVX-512, VNNI,
AMX), the cores the trials used, the machine's architecture, the GPU and its compute capability and driver, the
framework versions reported from inside the trials, the backend and the profile. Every string comes from someone
else's host: it is length-capped here, and escaped where it is shown.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from kit.analysis_record import Analysis
from kit.manifest import Manifest

MAX_TEXT = 80  # characters kept of any provenance string (a 10 MB "CPU model" is someone's input, not a CPU)
# The ISA flags (kit.provenance.KERNEL_FLAGS) that separate kernel paths of the frameworks' CPU back ends.
ISA_THAT_MATTERS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
_THREADS_LINE = re.compile(r"CPU threads per trial: (\d+)")


def cap(text: object, limit: int = MAX_TEXT) -> str:
    """An untrusted value as a short one-line string: control characters dropped, at most ``limit`` characters."""
    s = "".join(ch if ch.isprintable() else " " for ch in str(text)[: limit * 4])
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


@dataclass(frozen=True)
class HostClass:
    """What a run's trials ran on, normalised so that runs of the same kind of host compare equal."""

    arch: str  # "x86-64", "arm64", or the machine string as recorded
    cpu_vendor: str  # "Intel", "AMD", "ARM", or "" when unknown
    cpu_model: str  # the model name without trademarks and clock ("Xeon Platinum 8375C")
    cpu_family_model: str  # "6/106" (family/model), "" when not recorded
    isa: tuple[str, ...]  # the flags of ISA_THAT_MATTERS the CPU has
    threads: int | None  # CPU threads the trials used (None: not known)
    device: str  # "cpu", "gpu", or "cpu+gpu"
    gpu: str  # GPU name ("" for none)
    gpu_cc: str  # compute capability ("9.0")
    driver: str  # the NVIDIA driver version ("" for none)
    versions: tuple[tuple[str, str], ...]  # (framework, version as reported from inside the trial), sorted
    backend: str
    profile: str

    @property
    def isa_level(self) -> str:
        """The kernel tier a reader names a CPU by: "AMX", "AVX-512", "AVX2", or "" (none of them recorded)."""
        if any(f.startswith("amx") for f in self.isa):
            return "AMX"
        if "avx512f" in self.isa:
            return "AVX-512"
        return "AVX2" if "avx2" in self.isa else ""

    @property
    def key(self) -> str:
        """A stable short key: the first 10 hex digits of the SHA-256 of the class's canonical JSON."""
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def label(self) -> str:
        """"x86-64 Intel Xeon Platinum 8375C (AVX-512) · 1 core · torch 2.14 / tf 2.21 · local"."""
        cpu = " ".join(p for p in (self.arch, self.cpu_vendor, self.cpu_model) if p)
        if self.isa_level:
            cpu += f" ({self.isa_level})"
        parts = [cpu or "unknown CPU"]
        if self.gpu:
            parts.append(self.gpu + (f" (sm {self.gpu_cc})" if self.gpu_cc else ""))
        if self.threads is not None:
            parts.append(f"{self.threads} core" + ("" if self.threads == 1 else "s"))
        if self.versions:
            parts.append(" / ".join(f"{_short(fw)} {_minor(v)}" for fw, v in self.versions))
        parts.append(self.backend or "unknown backend")
        return " · ".join(parts)

    def attributes(self) -> dict[str, str]:
        """The attributes a one-line answer may name a group of classes by (attribute -> value in words)."""
        return {"arch": {"arm64": "ARM CPUs", "x86-64": "x86-64 CPUs"}.get(self.arch, f"{self.arch} hosts"),
                "vendor": f"{self.cpu_vendor} CPUs" if self.cpu_vendor else "CPUs of unknown vendor",
                "isa": f"{self.isa_level} CPUs" if self.isa_level else "CPUs without AVX2",
                "device": {"gpu": "GPU hosts", "cpu": "CPU-only runs"}.get(self.device, f"{self.device} runs"),
                "gpu": self.gpu or "no GPU",
                "threads": f"{self.threads}-core runs" if self.threads is not None else "runs of unknown cores",
                "versions": " / ".join(f"{_short(fw)} {v}" for fw, v in self.versions) or "unknown versions"}

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {k: v for k, v in asdict(self).items() if k != "versions"}
        out.update(isa=list(self.isa), versions={fw: v for fw, v in self.versions}, key=self.key, label=self.label,
                   isa_level=self.isa_level)
        return out


def _short(framework: str) -> str:
    return {"pytorch": "torch", "tensorflow": "tf"}.get(framework, framework)


def _minor(version: str) -> str:
    """"2.14.1" -> "2.14" (the label; the class keeps the full version)."""
    m = re.match(r"(\d+\.\d+)", version)
    return m.group(1) if m else version


def _arch(machine: str) -> str:
    m = machine.lower()
    if m in ("x86_64", "amd64", "x86-64"):
        return "x86-64"
    if m in ("aarch64", "arm64", "armv8"):
        return "arm64"
    return cap(machine, 20)


def _vendor(raw: object, model: str) -> str:
    v = cap(raw or "", 24)
    table = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "ARM": "ARM", "0x41": "ARM", "0x61": "Apple"}
    if v in table:
        return table[v]
    low = model.lower()
    for word, name in (("intel", "Intel"), ("amd", "AMD"), ("epyc", "AMD"), ("ryzen", "AMD"), ("neoverse", "ARM"),
                       ("graviton", "ARM"), ("ampere", "ARM"), ("apple", "Apple")):
        if word in low:
            return name
    return v


def _model(raw: object) -> str:
    """"Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz" -> "Xeon Platinum 8375C"."""
    s = re.sub(r"\((R|TM|r|tm)\)", "", str(raw)[:400])
    s = re.sub(r"\bCPU\b|@\s*[\d.]+\s*GHz|\b\d+-Core Processor\b|\bProcessor\b", " ", s)
    s = re.sub(r"^\s*(Intel|AMD)\s+", "", " ".join(s.split()))
    return cap(s)


def _threads(analysis: Analysis, host: Mapping[str, object]) -> int | None:
    """The CPU threads the trials used: what the trials reported (env.threads), else the ledger's condition line,
    else the host's logical CPUs (a trial that was not limited computes on all of them)."""
    reported = [t.get("threads") for t in analysis.trial_env]  # a list: a crafted value may be unhashable
    ints = sorted({v for v in reported if isinstance(v, int) and not isinstance(v, bool) and v > 0})
    if ints:
        return ints[0] if len(ints) == 1 else ints[-1]
    conditions = (analysis.claims or {}).get("conditions")
    for line in conditions if isinstance(conditions, list) else []:
        m = _THREADS_LINE.search(str(line))
        if m:
            return int(m.group(1))
    n = host.get("cpu_logical")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _versions(analysis: Analysis) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for env in analysis.trial_env:
        fw, v = env.get("framework") or env.get("arm"), env.get("framework_version")
        if isinstance(fw, str) and isinstance(v, str):
            out.setdefault(cap(fw, 24), cap(v, 24))
    return tuple(sorted(out.items()))


def _devices(analysis: Analysis, gpus: Sequence[object]) -> str:
    kinds = sorted({str(env.get("device")) for env in analysis.trial_env if env.get("device") in ("cpu", "gpu",
                                                                                                 "cuda")})
    kinds = sorted({"gpu" if k == "cuda" else k for k in kinds})
    if not kinds:
        return "gpu" if gpus else "cpu"
    return "+".join(kinds)


def host_class(manifest: Manifest, analysis: Analysis) -> HostClass:
    """The host class of a run, from its provenance (never hostname, env or paths: they may have been removed)."""
    host = manifest.host if isinstance(manifest.host, Mapping) else {}
    cpu = host.get("cpu") if isinstance(host.get("cpu"), Mapping) else {}
    assert isinstance(cpu, Mapping)
    raw_model = host.get("cpu_model") or ""
    isa_raw = cpu.get("isa") if isinstance(cpu.get("isa"), list) else []
    assert isinstance(isa_raw, list)
    isa = tuple(f for f in ISA_THAT_MATTERS if f in {str(x) for x in isa_raw[:64]})
    fam, mod = cpu.get("family"), cpu.get("model")
    fm = f"{fam}/{mod}" if isinstance(fam, int) and isinstance(mod, int) else ""
    gpus_raw = host.get("gpus") if isinstance(host.get("gpus"), list) else []
    assert isinstance(gpus_raw, list)
    device = _devices(analysis, gpus_raw)
    first = gpus_raw[0] if gpus_raw and isinstance(gpus_raw[0], Mapping) and "gpu" in device else {}
    assert isinstance(first, Mapping)
    driver = first.get("driver_version") or first.get("driver") or ""
    backend = manifest.backend.get("backend") if isinstance(manifest.backend, Mapping) else ""
    return HostClass(
        arch=_arch(str(host.get("machine") or "")), cpu_vendor=_vendor(cpu.get("vendor"), str(raw_model)),
        cpu_model=_model(raw_model), cpu_family_model=fm, isa=isa, threads=_threads(analysis, host),
        device=device, gpu=cap(first.get("name") or "", 48), gpu_cc=cap(first.get("compute_capability") or "", 8),
        driver=cap(driver, 24), versions=_versions(analysis), backend=cap(backend or "", 24),
        profile=cap(analysis.profile or manifest.profile or "", 40))
