"""The checks of this host: frameworks, torchvision, container engine, sensors, CPU governor, noise controls, TeX,
the analysis seal key and (on a host without a GPU) the frameworks' builds; ``run_checks`` runs them all.

Each check imports what it inspects inside itself: this module imports only the standard library at import time.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import cast

from kit.doctor.downloads import Probe, check_datasets, check_downloads, download_hosts, probe_hosts
from kit.doctor.drivers import TORCH_INDEX, check_driver, framework_cuda, nvidia_driver
from kit.doctor.findings import Finding, finding
from kit.doctor.torch_cpu import TORCH_CPU_INDEX, torchvision_pin
from kit.errors import KitError


def check_frameworks() -> list[Finding]:
    out = []
    for fw, mod, dist in (("pytorch", "torch", "torch"), ("tensorflow", "tensorflow", None)):
        if importlib.util.find_spec(mod) is None:
            out.append(finding(f"framework {fw} (local backend)", False, "not importable in " + sys.executable,
                               "make setup (installs the CPU builds), or use --backend docker", optional=False))
            continue
        version = "?"
        for d in ([dist] if dist else ["tensorflow", "tensorflow-cpu"]):
            try:
                version = importlib.metadata.version(d)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        out.append(finding(f"framework {fw} (local backend)", True, f"{mod} {version}"))
    return out


def torchvision_studies() -> list[str]:
    """The bundled studies whose PyTorch arm needs torchvision, each with its profiles and why
    (kit.studies.torchvision_need); a spec that does not load is left to `kit list` to report."""
    from kit.spec import load_spec
    from kit.studies import BUNDLED, experiment_paths, torchvision_need

    out = []
    for path in experiment_paths(BUNDLED):
        try:
            base = load_spec(path)
            needs = {name: torchvision_need(load_spec(path, name)) for name in base.profiles}
        except KitError:
            continue
        wanting = [n for n, why in needs.items() if why]
        if wanting:
            why = next(needs[n] for n in wanting)
            out.append(f"{base.experiment.id} ({'/'.join(wanting)}: {why})")
    return out


def check_torchvision() -> list[Finding]:
    """torchvision beside torch: a lean CPU install has torch alone (cpu_torch_choice), and then the studies whose
    PyTorch arm builds torchvision's models cannot run locally; said here with which ones and the fix."""
    if importlib.util.find_spec("torch") is None:
        return []  # check_frameworks says torch is missing
    try:
        version = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is not None and importlib.util.find_spec("torchvision") is not None:
        return [finding("torchvision (local backend)", True, f"torchvision {version}")]
    return [finding("torchvision (local backend)", False,
                    "not installed (a lean CPU install: torch alone); the studies that need it are skipped: "
                    + "; ".join(torchvision_studies()), torchvision_fix())]


def torchvision_fix() -> str:
    """How to add torchvision to a lean CPU install: its +cpu build matching the installed torch, from PyTorch's CPU
    index or wherever pip is configured to look; never PyPI's plain torchvision, which would bring the CUDA torch
    (gigabytes) back with it."""
    from kit.fmt import from_here

    pin = torchvision_pin()
    return (f"{from_here(Path(sys.executable).parent / 'pip')} install --extra-index-url {TORCH_CPU_INDEX} '{pin}' "
            f"where that index is reachable; else put the wheel {pin} where pip looks (pip's find-links or "
            f"extra-index-url; `pip download --no-deps --index-url {TORCH_CPU_INDEX} '{pin}'` fetches it on another "
            "machine) and run the same install; or run the study in a container (--backend docker), whose images "
            "carry torchvision")


def check_engine() -> list[Finding]:
    try:
        from kit.images.doctor import doctor_engine
    except ImportError:
        return [finding("container engine", False, "container support not installed in this kit", "update the kit")]
    try:
        # the engine module's rows have this shape (kit.images.doctor); only "optional" may be left out
        return [cast(Finding, {**f, "optional": f.get("optional", True)}) for f in doctor_engine()]
    except KitError as err:
        return [finding("container engine", False, err.cause, err.fix or "")]


def check_collectors() -> list[Finding]:
    try:
        from kit.collectors import probe_all
    except ImportError:
        return [finding("collectors", False, "collectors not installed in this kit", "update the kit")]
    return [*(finding(f"sensor {p['name']}", p["ok"], p["detail"], p.get("fix", "")) for p in probe_all()),
            check_ambient()]


def check_ambient() -> Finding:
    """The room's temperature sensor a run's telemetry.ambient_sensor = "auto" would read (kit.collectors.ambient)."""
    from kit.collectors.ambient import AmbientReader

    r = AmbientReader("auto").read()
    if r.sensor_c is not None:
        return finding("sensor ambient", True, f"{r.sensor}: {r.sensor_c:g} °C (recorded before every trial)")
    return finding("sensor ambient", False, r.note, "state the room's temperature in the spec's [telemetry] "
                   "ambient_c, or name a sensor with ambient_sensor = \"chip:label\"; the report says which it was")


def check_governor() -> list[Finding]:
    from kit.provenance import cpu_governors

    g = cpu_governors()
    if not g["readable"]:
        return [finding("CPU frequency governor", False, "cpufreq not exposed (VM or container?)",
                        "nothing to do on a VM; on bare metal load the cpufreq driver")]
    ok = g["governors"] == ["performance"]
    return [finding("CPU frequency governor", ok, ", ".join(g["governors"]),
                    "sudo kit tune (governor performance, boost off; kit tune --reset undoes it)")]


def check_controls() -> list[Finding]:
    """What this host lets the kit control against noise (a VM: usually nothing but affinity)."""
    from kit.tune import controls

    return [finding(f"control: {what}", ok, detail, "" if ok else "nothing the kit can do here; see 'Noisy hosts' "
                    "in the README") for what, ok, detail in controls()]

def check_visibility(root: Path = Path("/")) -> list[Finding]:
    """What the host lets the kit see of other work, and what it cannot (issue 43).

    The disturbance check (kit.disturbance) reads per-CPU busy time (steal included) from /proc/stat, so it can
    tell load on the trial's own CPUs from load elsewhere; inside a container the cgroup's CPU accounting is the
    container's own share. Nothing on a guest shows another VM's memory-bandwidth or cache traffic, or I/O
    contention: those are caught only by their effect, a phase slow against the run's quiet trials with no cause
    seen (kit.slow_phase). ``root``: the file system to read (tests)."""
    def read(rel: str) -> str:
        try:
            return (root / rel).read_text(encoding="utf-8", errors="replace")[:1_000_000]
        except OSError:
            return ""

    stat = read("proc/stat").splitlines()
    cpus = [ln.split() for ln in stat if ln.startswith("cpu") and ln[3:4].isdigit()]
    total = next((ln.split() for ln in stat if ln.startswith("cpu ")), [])
    seen, unseen = [], []
    if cpus:
        seen.append(f"per-CPU busy time of {len(cpus)} CPUs (load on the trial's own CPUs told from load elsewhere)")
    else:
        unseen.append("per-CPU counters (/proc/stat unreadable: only host-wide load, if any)")
    vm = " hypervisor" in read("proc/cpuinfo").replace("\t", " ")
    if len(total) > 8:
        steal_s = int(total[8]) / 100 if total[8].isdigit() else 0.0
        seen.append(f"steal time ({steal_s:.0f} s since boot{'; a VM' if vm else ''})" if steal_s or vm
                    else "steal time (0 so far: bare metal, or a hypervisor that does not report it)")
    if read("sys/fs/cgroup/cpu.stat").startswith("usage_usec"):
        seen.append("cgroup CPU accounting (v2 cpu.stat: a container's own CPU time)")
    elif read("sys/fs/cgroup/cpuacct/cpuacct.usage").strip():
        seen.append("cgroup CPU accounting (v1 cpuacct)")
    else:
        unseen.append("cgroup CPU accounting (no cpu.stat or cpuacct here)")
    unseen.append("another VM's or process's memory-bandwidth, cache and I/O contention, except by its effect: a "
                  "phase slow against the run's quiet trials with no cause seen is flagged 'slow, cause not seen'")
    detail = ("sees: " + "; ".join(seen) + " | cannot see: " + "; ".join(unseen)) if seen else \
        "cannot see: " + "; ".join(unseen)
    return [finding("host visibility", bool(cpus), detail, "on a host without /proc/stat the kit cannot tell "
                    "whose CPU time a phase lost; run on Linux, or read a disturbed trial's figures with care")]


def check_cpu_builds(driver: str | None = None, cudas: dict[str, str | None] | None = None,
                     versions: dict[str, str] | None = None) -> list[Finding]:
    """On a host without an NVIDIA driver: a CUDA build of a framework carries gigabytes of GPU libraries it
    cannot use (and may be another release than the CPU image row's); the fix is the CPU wheel."""
    if driver is None:
        driver = nvidia_driver()[0]
    if driver is not None:
        return []  # a GPU host: check_driver says whether the builds fit its driver
    return cpu_host_builds(framework_cuda() if cudas is None else cudas, versions)


def cpu_host_builds(cudas: dict[str, str | None], versions: dict[str, str] | None = None) -> list[Finding]:
    """The rows of :func:`check_cpu_builds` for a host known to have no NVIDIA GPU (pure: tests pass the builds)."""
    out = []
    for fw, cuda in cudas.items():
        if cuda is None:
            out.append(finding(f"{fw} build (no NVIDIA GPU here)", True, f"{fw} is a CPU build"))
            continue
        v = (versions or {}).get(fw) or _dist_version(fw)
        base = v.split("+", 1)[0] if v else "<version>"
        fix = ("make distclean setup: the Makefile installs the CPU image row's +cpu torch/torchvision pair from "
               f"PyTorch's CPU wheel index ({TORCH_INDEX}/cpu) or a +cpu pair your pip configuration offers, and says "
               "so when neither is reachable" if fw == "pytorch" else
               f"pip uninstall -y tensorflow && pip install 'tensorflow-cpu=={base}' (the kit's cpu extra)")
        out.append(finding(f"{fw} build (no NVIDIA GPU here)", False,
                           f"{fw} {v or '?'} is a CUDA {cuda} build on a host without an NVIDIA GPU: its GPU "
                           "libraries (gigabytes) are never used", fix))
    return out


def _dist_version(framework: str) -> str | None:
    for dist in (("torch",) if framework == "pytorch" else ("tensorflow", "tensorflow-cpu")):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_tex() -> list[Finding]:
    latexmk = shutil.which("latexmk")
    return [finding("LaTeX (PDF reports)", latexmk is not None, latexmk or "latexmk not found",
                    "apt-get install texlive-latex-base texlive-latex-recommended texlive-latex-extra latexmk")]


def check_seal_key() -> list[Finding]:
    """The key that seals this kit's analyses (kit.trust): private, or replaced, or unusable.

    Not optional: a replaced key means every analysis sealed with the old one is recomputed and that someone else
    may have read it (and sealed forged analyses this kit trusted until now); an unusable one means nothing stored
    is trusted and everything is recomputed. ``--strict`` fails on either, saying why, until it is dealt with."""
    from kit.trust import seal_key_status

    status = seal_key_status()
    ok = status.state == "ok"
    detail = f"{status.path}: {status.reason}" if ok else f"{status.state.upper()}: {status.path}: {status.reason}"
    return [finding("analysis seal key", ok, detail, status.fix, optional=False)]


def run_checks(data_dir: Path | None = None, download: bool = True, check_downloads_: bool = True,
               probe: Probe | None = None) -> list[Finding]:
    """Every check; ``check_downloads_`` False skips the dataset hosts' probe (said "not checked"), ``probe``
    replaces the TCP connection (tests)."""
    findings = [finding("python", sys.version_info >= (3, 11), sys.version.split()[0], "use Python 3.11 or newer",
                        optional=False)]
    for check in (check_frameworks, check_torchvision, check_seal_key, check_driver, check_cpu_builds, check_engine, check_collectors,
                  check_governor, check_controls, check_visibility, check_tex):
        findings += check()
    reachable = probe_hosts(download_hosts(), probe) if download and check_downloads_ else None
    findings += check_downloads(reachable, download) + check_datasets(data_dir, download, reachable)
    return findings
