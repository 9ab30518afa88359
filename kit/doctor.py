"""`kit doctor`: what this host offers for benchmarking, and the fix for each gap.

Every check returns ``{"check", "ok", "detail", "fix", "optional"}``; a
missing optional capability (no GPU, no RAPL) is reported, never an error.

It also holds the one table of NVIDIA driver versions each CUDA release needs
(``CUDA_TOOLKIT_DRIVER``, ``CUDA_MINOR_COMPAT_DRIVER``) and the choice of the
PyTorch wheel that fits a driver (``torch_choice``), used by ``kit doctor``,
``kit selftest`` and the Makefile (``python3 -m kit.doctor torch-index``; this
module imports only the standard library at import time, so it runs before
the virtual environment exists).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import sys
from collections.abc import Callable
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
        return [_finding("torchvision (local backend)", True, f"torchvision {version}")]
    return [_finding("torchvision (local backend)", False,
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
    return [*(_finding(f"sensor {p['name']}", p["ok"], p["detail"], p.get("fix", "")) for p in probe_all()),
            check_ambient()]


def check_ambient() -> Finding:
    """The room's temperature sensor a run's telemetry.ambient_sensor = "auto" would read (kit.collectors.ambient)."""
    from kit.collectors.ambient import AmbientReader

    r = AmbientReader("auto").read()
    if r.sensor_c is not None:
        return _finding("sensor ambient", True, f"{r.sensor}: {r.sensor_c:g} °C (recorded before every trial)")
    return _finding("sensor ambient", False, r.note, "state the room's temperature in the spec's [telemetry] "
                    "ambient_c, or name a sensor with ambient_sensor = \"chip:label\"; the report says which it was")


def check_governor() -> list[Finding]:
    from kit.provenance import cpu_governors

    g = cpu_governors()
    if not g["readable"]:
        return [_finding("CPU frequency governor", False, "cpufreq not exposed (VM or container?)",
                         "nothing to do on a VM; on bare metal load the cpufreq driver")]
    ok = g["governors"] == ["performance"]
    return [_finding("CPU frequency governor", ok, ", ".join(g["governors"]),
                     "sudo kit tune (governor performance, boost off; kit tune --reset undoes it)")]


def check_controls() -> list[Finding]:
    """What this host lets the kit control against noise (a VM: usually nothing but affinity)."""
    from kit.tune import controls

    return [_finding(f"control: {what}", ok, detail, "" if ok else "nothing the kit can do here; see 'Noisy hosts' "
                     "in the README") for what, ok, detail in controls()]


# Dataset downloads: a TCP connection to each download host within this time says it answers (no file is fetched).
DOWNLOAD_PROBE_TIMEOUT_S = 3.0
Probe = Callable[[str, int, float], bool]


def reach_host(host: str, port: int, timeout_s: float) -> bool:
    """Does ``host`` accept a TCP connection on ``port`` within ``timeout_s``? (name resolution included)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _url_host(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or url, parts.port or (80 if parts.scheme == "http" else 443)


def download_hosts() -> list[tuple[str, int]]:
    """The hosts the dataset registry downloads from (kit/dataset_registry.py), each once, first URL of each file."""
    from kit.datasets import DATASETS

    hosts: dict[tuple[str, int], None] = {}
    for info in DATASETS.values():
        for files in info.sources.values():
            for f in files:
                urls = info.file(f).urls
                if urls:
                    hosts.setdefault(_url_host(urls[0]))
    return list(hosts)


def probe_hosts(hosts: list[tuple[str, int]], probe: Probe | None = None,
                timeout_s: float = DOWNLOAD_PROBE_TIMEOUT_S) -> dict[str, bool]:
    """host -> answered, probed in parallel: the whole check takes about ``timeout_s`` however many hosts (name
    resolution ignores socket timeouts, so each probe runs in a daemon thread and one still waiting at the deadline
    counts as unreachable, never holds the command or its exit)."""
    import threading
    import time

    fn = probe or reach_host
    got: dict[str, bool] = {}

    def one(host: str, port: int) -> None:
        got[host] = fn(host, port, timeout_s)

    threads = [threading.Thread(target=one, args=hp, daemon=True) for hp in hosts]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s + min(0.5, timeout_s)  # a connection made at the deadline: counted
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {host: bool(got.get(host)) for host, _ in hosts}


def check_downloads(reached: dict[str, bool] | None, download: bool = True) -> list[Finding]:
    """Whether the dataset download hosts answered from here (``reached``: probe_hosts's answer), or "not checked"
    (None): a host without internet must not read as ready for datasets it has not got."""
    if not download:
        return []
    names = ", ".join(h for h, _ in download_hosts())
    if reached is None:
        return [dict(_finding("dataset downloads", False, f"not checked (kit doctor --no-check-downloads): {names}",
                              "kit doctor (without --no-check-downloads) probes them"), status="not checked")]
    if not reached:
        return []
    down = [h for h, ok in reached.items() if not ok]
    if not down:
        return [_finding("dataset downloads", True, f"reachable: {names} (each answered within "
                                                    f"{DOWNLOAD_PROBE_TIMEOUT_S:g} s)")]
    return [_finding("dataset downloads", False, f"not reachable from here within {DOWNLOAD_PROBE_TIMEOUT_S:g} s: "
                                                 f"{', '.join(down)}" + (f" (reachable: {', '.join(h for h in reached if reached[h])})"
                                                                         if len(down) < len(reached) else ""),
                     "offline host: fetch the dataset files elsewhere and pass --data-dir or set KIT_DATA_DIR "
                     "(README, Datasets); behind a proxy: set https_proxy")]


def check_datasets(data_dir: Path | None, download: bool = True,
                   reachable: dict[str, bool] | None = None) -> list[Finding]:
    """Each dataset source: here and verified, or fetched on first use (``download``: `kit run` downloads by
    default; ``--no-download`` turns it off) when its host answered (``reachable``; None: not checked), or missing
    with how to supply it."""
    from kit.datasets import DATASETS, SYNTHETIC, resolve

    out = []
    for name, info in DATASETS.items():
        for source in info.sources:
            if source == SYNTHETIC:  # written on first use (kit.synthetic), nothing to check here
                continue
            check = f"dataset {name} ({source})"
            try:
                r = resolve(name, source, data_dir=data_dir, download=False)
                out.append(_finding(check, True, f"{r.directory} ({r.origin}), checksums ok"))
                continue
            except KitError as err:
                missing = _finding(check, False, err.cause, err.fix or "", optional=True)
            files = [info.file(f) for f in info.sources[source]]
            if download and "not found" in missing["detail"] and all(f.urls for f in files):
                size = sum(f.size or 0 for f in files)
                host = _url_host(files[0].urls[0])[0]
                answered = None if reachable is None else reachable.get(host)
                where = f"{size / 1e6:.0f} MB from {host}"
                missing = dict(missing, status="on first use" if answered else (
                    "not checked" if answered is None else "unreachable"), detail=(
                    f"not cached, and {host} did not answer from here (kit run would download {where})"
                    if answered is False else
                    f"not cached yet: kit run downloads it on first use ({where}, checksums verified); downloads "
                    "are on (kit run --no-download turns them off)" + ("; its host was not checked"
                                                                        if answered is None else "")),
                    fix=f"offline: fetch {', '.join(f.name for f in files)} elsewhere and pass --data-dir or set "
                        "KIT_DATA_DIR")
            out.append(missing)
    return out


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
            out.append(_finding(f"{fw} build (no NVIDIA GPU here)", True, f"{fw} is a CPU build"))
            continue
        v = (versions or {}).get(fw) or _dist_version(fw)
        base = v.split("+", 1)[0] if v else "<version>"
        fix = ("make distclean setup: the Makefile installs the CPU image row's +cpu torch/torchvision pair from "
               f"PyTorch's CPU wheel index ({TORCH_INDEX}/cpu) or a +cpu pair your pip configuration offers, and says "
               "so when neither is reachable" if fw == "pytorch" else
               f"pip uninstall -y tensorflow && pip install 'tensorflow-cpu=={base}' (the kit's cpu extra)")
        out.append(_finding(f"{fw} build (no NVIDIA GPU here)", False,
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
    return [_finding("LaTeX (PDF reports)", latexmk is not None, latexmk or "latexmk not found",
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
    return [_finding("analysis seal key", ok, detail, status.fix, optional=False)]


def run_checks(data_dir: Path | None = None, download: bool = True, check_downloads_: bool = True,
               probe: Probe | None = None) -> list[Finding]:
    """Every check; ``check_downloads_`` False skips the dataset hosts' probe (said "not checked"), ``probe``
    replaces the TCP connection (tests)."""
    findings = [_finding("python", sys.version_info >= (3, 11), sys.version.split()[0], "use Python 3.11 or newer",
                         optional=False)]
    for check in (check_frameworks, check_torchvision, check_seal_key, check_driver, check_cpu_builds, check_engine, check_collectors,
                  check_governor, check_controls, check_tex):
        findings += check()
    reachable = probe_hosts(download_hosts(), probe) if download and check_downloads_ else None
    findings += check_downloads(reachable, download) + check_datasets(data_dir, download, reachable)
    return findings


# -- the verdict: what this host can run, and what a study needs -----------------------------------------------------

def _named(findings: list[Finding], prefix: str) -> list[Finding]:
    return [f for f in findings if f["check"].startswith(prefix)]


def _short(detail: str) -> str:
    """A finding's detail up to its first clause: the reason in a verdict line (the table has the rest)."""
    return re.split(r";| \(|: CPU", detail, maxsplit=1)[0].strip()


def verdict(findings: list[Finding]) -> dict[str, Any]:
    """What the findings mean for a user: ``ready`` (what this host can run) and ``unavailable`` (what it cannot,
    each with the reason), from the same rows the table shows."""
    ready: list[str] = []
    unavailable: list[dict[str, str]] = []

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


def _datasets_verdict(datasets: list[Finding], ready: list[str], unavailable: list[dict[str, str]],
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


# -- NVIDIA driver vs the CUDA the frameworks were built for ---------------------------------------------------------
#
# From NVIDIA's CUDA Toolkit release notes ("CUDA Toolkit and Corresponding Driver Versions", Linux x86_64) and the
# CUDA compatibility guide ("Minor Version Compatibility": CUDA 12.x runs on >= 525 drivers, 13.x on >= 580, with
# a limited feature set: no PTX JIT of code newer than the driver). Sources:
#   https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/  (table 3)
#   https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html

CUDA_TOOLKIT_DRIVER: dict[str, str] = {  # CUDA major.minor -> the driver of its GA release (full feature set)
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}
CUDA_MINOR_COMPAT_DRIVER: dict[int, str] = {  # CUDA major -> the oldest driver that runs any of its minor releases
    11: "450.80.02",
    12: "525.60.13",
    13: "580",
}
# The CUDA flavours PyTorch publishes wheels for (index https://download.pytorch.org/whl/<flavour>), newest first.
# PyPI's plain `torch` wheel is the newest flavour (torch 2.14: CUDA 13.0).
TORCH_INDEX = "https://download.pytorch.org/whl"
TORCH_FLAVOURS: tuple[str, ...] = ("cu130", "cu128", "cu126")
TORCH_PYPI_FLAVOUR = "cu130"
TF_CUDA = "12.5.1"  # tensorflow[and-cuda] 2.21 (its wheel's build_info; the pip CUDA libraries are >= 12.5)


def version_tuple(v: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15); non-numeric parts end the tuple."""
    out = []
    for part in str(v).strip().split("+", 1)[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _cuda_key(cuda: str) -> str:
    t = version_tuple(cuda)
    return f"{t[0]}.{t[1] if len(t) > 1 else 0}" if t else ""


def flavour_cuda(flavour: str) -> str:
    """'cu126' -> '12.6', 'cu130' -> '13.0'."""
    digits = flavour.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"


def driver_cuda(driver: str) -> str | None:
    """The newest CUDA major.minor whose GA driver this driver reaches (None: older than every row)."""
    d = version_tuple(driver)
    fits = [c for c, need in CUDA_TOOLKIT_DRIVER.items() if d >= version_tuple(need)]
    return max(fits, key=version_tuple) if fits else None


def driver_fits(driver: str, cuda: str) -> tuple[bool, str]:
    """Can a framework built for ``cuda`` run on ``driver``? (ok, how or why not)."""
    key = _cuda_key(cuda)
    if not key:
        return True, "no CUDA (CPU build)"
    d = version_tuple(driver)
    major = version_tuple(key)[0]
    ga = CUDA_TOOLKIT_DRIVER.get(key)
    if ga is not None and d >= version_tuple(ga):
        return True, f"driver {driver} >= {ga}, the driver of CUDA {key}"
    compat = CUDA_MINOR_COMPAT_DRIVER.get(major)
    if compat is not None and d >= version_tuple(compat):
        return True, (f"driver {driver} runs CUDA {key} through minor-version compatibility (>= {compat}; "
                      f"the full feature set wants >= {ga or 'a newer driver'})")
    need = compat or ga or "a newer driver"
    return False, f"CUDA {key} needs a driver >= {need}; this host has {driver}"


def torch_choice(driver: str) -> dict[str, Any]:
    """The PyTorch wheel flavour that fits ``driver``: {"flavour", "index_url" (None: PyPI), "ok", "reason"}.

    The newest flavour the driver runs at its full feature set; else the oldest CUDA 12 flavour through minor-version
    compatibility; none below 525.60.13 (then ``ok`` is False).
    """
    full = [f for f in TORCH_FLAVOURS if (need := CUDA_TOOLKIT_DRIVER.get(flavour_cuda(f)))
            and version_tuple(driver) >= version_tuple(need)]
    if full:
        f = full[0]
        how = f"driver {driver} >= {CUDA_TOOLKIT_DRIVER[flavour_cuda(f)]} (CUDA {flavour_cuda(f)})"
    else:
        compat = [f for f in reversed(TORCH_FLAVOURS) if driver_fits(driver, flavour_cuda(f))[0]]
        if not compat:
            return {"flavour": None, "index_url": None, "ok": False,
                    "reason": (f"driver {driver} is older than every CUDA build of torch "
                               f"({', '.join(TORCH_FLAVOURS)}: >= {CUDA_MINOR_COMPAT_DRIVER[12]}); update the "
                               "NVIDIA driver (nvidia-smi shows it), or run the CPU build")}
        f = compat[0]
        how = driver_fits(driver, flavour_cuda(f))[1]
    index = None if f == TORCH_PYPI_FLAVOUR else f"{TORCH_INDEX}/{f}"
    where = "PyPI's default wheel" if index is None else f"--index-url {index}"
    return {"flavour": f, "index_url": index, "ok": True, "reason": f"torch {f} ({where}): {how}"}


# -- the torch build for a host without an NVIDIA GPU ----------------------------------------------------------------
#
# PyPI's Linux torch wheel is a CUDA build. torch 2.14.1's, measured on Linux x86_64 with Python 3.11 (issue 27): the
# torch wheel (0.55 GB), its nvidia-* wheels (2.2 GB) and triton (0.25 GB), about 3.0 GB to download, and 5.3 GB in
# .venv (torch 1.2, nvidia/ 3.2, triton 0.9); the +cpu wheels of the same pair: 0.2 GB to download, 0.8 GB in .venv.
TORCH_CPU_INDEX = f"{TORCH_INDEX}/cpu"
CUDA_BUILD_GB = {"download": 3.0, "venv": 5.3}
CPU_BUILD_GB = {"download": 0.2, "venv": 0.8}
PROBE_TIMEOUT_S = 5.0

Pins = list[tuple[str, str]]


def torch_pins(pair: str) -> Pins:
    """'torch==2.13.0 torchvision==0.28.0' -> [('torch', '2.13.0'), ('torchvision', '0.28.0')] (local labels dropped)."""
    pins = []
    for req in pair.split():
        name, sep, version = req.partition("==")
        if not (sep and name and version) or "=" in version:
            raise ValueError(f"not an exact pin: {req!r} (want NAME==VERSION)")
        pins.append((name, version.split("+", 1)[0]))
    if not pins:
        raise ValueError("no pins given (want e.g. 'torch==2.13.0 torchvision==0.28.0')")
    return pins


def _cpu_wheel(name: str, version: str) -> re.Pattern[str]:
    """A link to the +cpu wheel of ``name`` ``version`` for this Python and machine on a simple-index page."""
    import platform

    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return re.compile(rf"{re.escape(name.replace('-', '_'))}-{re.escape(version)}(?:\+|%2B)cpu-{tag}-"
                      rf"[^\"'<>#\s]*{re.escape(platform.machine())}\.whl", re.IGNORECASE)


def probe_cpu_index(pins: Pins, index: str = TORCH_CPU_INDEX, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Does PyTorch's CPU index answer within ``timeout`` and list a +cpu wheel of every pin for this Python?
    (ok, what was found or why not)."""
    import urllib.request

    for name, version in pins:
        try:
            with urllib.request.urlopen(f"{index}/{name}/", timeout=timeout) as resp:
                page = resp.read().decode("utf-8", "replace")
        except (OSError, ValueError) as exc:  # URLError (no DNS, refused, proxy), HTTPError, a timeout
            return False, f"PyTorch's CPU index {index} is unreachable ({getattr(exc, 'reason', None) or exc})"
        if not _cpu_wheel(name, version).search(page):
            return False, f"PyTorch's CPU index {index} has no {name} {version}+cpu wheel for this Python"
    return True, f"PyTorch's CPU index {index}"


def pip_offers_cpu(pins: Pins, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Do the indexes and find-links of this host's pip configuration offer the +cpu build of every pin? Asks this
    Python's ``pip index versions`` (index pages only, nothing downloaded). (ok, what was found or why not)."""
    import subprocess

    offered: list[str] = []
    missing: list[str] = []
    for name, version in pins:
        want = f"{name} {version}+cpu"
        try:
            p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name, "--disable-pip-version-check",
                                "--timeout", str(timeout), "--retries", "0"],
                               capture_output=True, text=True, timeout=60, check=False)
            m = re.search(r"^Available versions:(.*)$", p.stdout, re.MULTILINE)
        except (OSError, subprocess.TimeoutExpired):
            m = None
        listed = {v.strip() for v in m.group(1).split(",")} if m else set()
        (offered if f"{version}+cpu" in listed else missing).append(want)
    if missing:
        has = f" offers {' and '.join(offered)} but" if offered else ""
        return False, f"this host's pip configuration{has} has no {' or '.join(missing)}"
    return True, f"this host's pip configuration (its find-links or extra indexes offer {' and '.join(offered)})"


def torchvision_pin(torch_version: str | None = None) -> str:
    """The torchvision build that pairs with a torch (this interpreter's by default): torchvision 0.(N+15).P for
    torch 2.N.P, with the same local label (+cpu); the CPU image row's pair when torch is not installed."""
    if torch_version is None:
        try:
            torch_version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            torch_version = "2.13.0+cpu"
    base, _, label = torch_version.partition("+")
    major, minor, patch = ([*base.split("."), "0", "0"])[:3]
    if major != "2" or not minor.isdigit():
        return "torchvision"  # a torch this table does not know: let pip pair it
    return f"torchvision==0.{int(minor) + 15}.{patch}" + (f"+{label}" if label else "")


def cpu_torch_choice(cpu_pair: str, default_pair: str | None = None, *, system: str | None = None,
                     index_probe: Callable[[Pins], tuple[bool, str]] | None = None,
                     pip_probe: Callable[[Pins], tuple[bool, str]] | None = None) -> dict[str, Any]:
    """pip's arguments for torch on a host without an NVIDIA GPU: {"source", "args", "reason", "torchvision"}.

    ``cpu_pair`` ('torch==2.13.0 torchvision==0.28.0', the CPU image row's torch) is installed as +cpu builds (no CUDA
    libraries), each pin from PyTorch's CPU index where it answers within a few seconds and lists it, else from this
    host's pip configuration ("cpu-index" or "pip-config": where torch comes from). Where a +cpu torch is to be had
    but no +cpu torchvision, the +cpu torch is installed alone (``torchvision`` False): LeNet, Germino and most of
    DLBench need no torchvision, and the studies that do say so and are skipped (kit.studies.torchvision_need), while
    the alternative, PyPI's torchvision, would bring the CUDA torch (gigabytes) back. Only where no +cpu torch is to
    be had at all, ``default_pair`` from PyPI, a CUDA build, and the reason says what that costs and how to avoid it
    ("default"). Off Linux PyPI's torch has no CUDA libraries: ``cpu_pair`` as given ("pypi"). The probes (default
    ``probe_cpu_index`` and ``pip_offers_cpu``) are asked one pin at a time, torch first.
    """
    import platform

    pins = torch_pins(cpu_pair)
    default_pair = default_pair or cpu_pair
    system = system or platform.system()
    if system != "Linux":
        return {"source": "pypi", "args": cpu_pair.split(), "torchvision": True,
                "reason": f"no NVIDIA GPU: {cpu_pair} from PyPI (its {system} wheels have no CUDA libraries)"}
    index_probe = index_probe or probe_cpu_index
    pip_probe = pip_probe or pip_offers_cpu
    torch_pin, rest = pins[0], pins[1:]
    found: dict[str, str] = {}  # pin name -> "index" | "pip"
    whys: list[str] = []
    index_ok, index_why = index_probe([torch_pin])
    if index_ok:
        found[torch_pin[0]] = "index"
        for pin in rest:
            ok, why = index_probe([pin])
            if ok:
                found[pin[0]] = "index"
            else:
                whys.append(why)
    else:
        whys.append(index_why)
    wanted = [p for p in pins if p[0] not in found]
    if wanted:
        for pin in wanted:
            ok, why = pip_probe([pin])
            if ok:
                found[pin[0]] = "pip"
            else:
                whys.append(why)
    saving = (f"no CUDA libraries: about {CPU_BUILD_GB['venv']:.1f} GB in .venv instead of "
              f"{CUDA_BUILD_GB['venv']:.1f} GB")
    where = {"index": f"PyTorch's CPU index {TORCH_CPU_INDEX}", "pip": "this host's pip configuration"}
    if torch_pin[0] in found:
        got = [p for p in pins if p[0] in found]
        lacking = [p for p in pins if p[0] not in found]
        args = (["--extra-index-url", TORCH_CPU_INDEX] if "index" in found.values() else []) + \
            [f"{n}=={v}+cpu" for n, v in got]
        builds = " and ".join(f"{n} {v}+cpu from {where[found[n]]}" for n, v in got)
        reason = f"no NVIDIA GPU: {builds} ({saving})"
        if lacking:
            missing = " or ".join(f"{n} {v}+cpu" for n, v in lacking)
            reason += (f".\nNo {missing} to be had ({'; '.join(whys)}): installing torch alone. The studies whose "
                       "PyTorch arm needs torchvision (Patel's model zoo, DLBench's Faster R-CNN case) say so in `kit "
                       "list`, `kit show` and `kit doctor`, and `kit reproduce-all` skips them with the fix. PyPI's "
                       "torchvision is not used: it would bring the CUDA torch back")
        return {"source": "cpu-index" if found[torch_pin[0]] == "index" else "pip-config", "args": args,
                "torchvision": not lacking, "reason": reason}
    cpu_args = [f"{n}=={v}+cpu" for n, v in pins]
    default = dict(torch_pins(default_pair)).get("torch", "?")
    differs = ("" if default == pins[0][1] else
               f"; and this torch {default} is not the CPU pair's {pins[0][1]}, which the CPU image row runs")
    return {"source": "default", "args": default_pair.split(), "torchvision": True, "reason": (
        f"no NVIDIA GPU, but no CPU build of torch {torch_pin[1]} to be had: {'; '.join(whys)}.\n"
        f"Installing {default_pair} from PyPI instead: a CUDA build, about {CUDA_BUILD_GB['download']:.1f} GB to "
        f"download and {CUDA_BUILD_GB['venv']:.1f} GB in .venv (the CPU build: {CPU_BUILD_GB['download']:.1f} GB and "
        f"{CPU_BUILD_GB['venv']:.1f} GB) for a GPU this host does not have{differs}.\n"
        f"To avoid it: let this host reach {TORCH_CPU_INDEX} (https_proxy), or put the wheels "
        f"{' '.join(cpu_args)} where pip looks (find-links or extra-index-url in pip's configuration; `pip download "
        f"--no-deps --index-url {TORCH_CPU_INDEX} {' '.join(cpu_args)}` fetches them elsewhere), then "
        "`make distclean setup`")}


def nvidia_driver() -> tuple[str | None, str | None]:
    """(driver version, the CUDA version the driver supports) from NVML; (None, None) without a driver."""
    from kit.nvml import cuda_version, nvml_session, text

    try:
        with nvml_session() as nv:
            driver = text(nv.nvmlSystemGetDriverVersion())
            try:
                cuda = cuda_version(int(nv.nvmlSystemGetCudaDriverVersion()))
            except Exception:  # an old driver without the query
                cuda = None
            return driver, cuda
    except Exception:  # no NVML here (NVMLError from the session) or no driver version
        return None, None


def framework_cuda() -> dict[str, str | None]:
    """The CUDA each installed framework was built for, read without importing the frameworks.

    torch: ``torch/version.py`` (``cuda = '13.0'``, None for the CPU build); TensorFlow: the CUDA pip libraries its
    wheel depends on (``tensorflow[and-cuda]`` pulls nvidia-cuda-runtime-cu12; ``tensorflow-cpu`` none) and, where
    present, ``tensorflow/python/platform/build_info.py``.
    """
    out: dict[str, str | None] = {}
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        ver = Path(spec.origin).with_name("version.py")
        cuda = None
        try:
            for line in ver.read_text(encoding="utf-8").splitlines():
                if line.startswith("cuda") and "=" in line:
                    val = line.split("=", 1)[1].split("#", 1)[0].strip().strip("'\"")
                    cuda = None if val in ("None", "") else val
        except OSError:
            pass
        out["pytorch"] = cuda
    tf_spec = importlib.util.find_spec("tensorflow")
    if tf_spec is not None and tf_spec.submodule_search_locations:
        base = Path(next(iter(tf_spec.submodule_search_locations)))
        cuda = None
        try:
            text = (base / "python" / "platform" / "build_info.py").read_text(encoding="utf-8")
            m = re.search(r"""['"]cuda_version['"]\s*[,:]\s*['"]([^'"]*)['"]""", text)
            cuda = m.group(1) if m and m.group(1) else None
        except OSError:
            pass
        if cuda is None:
            for dist in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"):
                try:
                    v = version_tuple(importlib.metadata.version(dist))
                    cuda = f"{v[0]}.{v[1]}"
                    break
                except importlib.metadata.PackageNotFoundError:
                    continue
        out["tensorflow"] = cuda
    return out


def check_driver(driver: str | None = None, cudas: dict[str, str | None] | None = None) -> list[Finding]:
    """The NVIDIA driver against the CUDA of each installed framework, and the torch build that fits."""
    if driver is None:
        driver, driver_max = nvidia_driver()
    else:
        driver_max = driver_cuda(driver)
    if driver is None:
        return [_finding("NVIDIA driver", False, "no NVIDIA driver (NVML) on this host: CPU trials only",
                         "on an NVIDIA host install the driver; `nvidia-smi` must work")]
    out = [_finding("NVIDIA driver", True, f"{driver} (supports CUDA up to {driver_max or '?'})")]
    cudas = framework_cuda() if cudas is None else cudas
    for fw, cuda in cudas.items():
        if cuda is None:
            out.append(_finding(f"{fw} build vs driver", False, f"{fw} is a CPU build: it cannot use this host's GPU",
                                _fit_fix(fw, driver), optional=False))
            continue
        ok, why = driver_fits(driver, cuda)
        ga = CUDA_TOOLKIT_DRIVER.get(_cuda_key(cuda))
        if ok and fw == "tensorflow" and ga and version_tuple(driver) < version_tuple(ga):
            why += (f"; but TensorFlow ships only PTX (compute_90) for Hopper and newer GPUs, which the driver must "
                    f"JIT-compile, and minor-version compatibility does not cover PTX: on those GPUs use a driver "
                    f">= {ga}")
        out.append(_finding(f"{fw} build vs driver", ok, f"built for CUDA {cuda}: {why}", _fit_fix(fw, driver),
                            optional=False))
    choice = torch_choice(driver)
    out.append(_finding("torch build for this driver", choice["ok"], choice["reason"],
                        "update the NVIDIA driver (>= 525.60.13 for CUDA 12, >= 580 for CUDA 13)"))
    return out


def _fit_fix(framework: str, driver: str) -> str:
    if framework == "pytorch":
        c = torch_choice(driver)
        if not c["ok"]:
            return c["reason"]
        idx = f" --index-url {c['index_url']}" if c["index_url"] else ""
        return (f"pip install{idx} 'torch==<version>' (the {c['flavour']} build; `make setup` on this host picks it), "
                f"or run in an image row that fits (kit images list)")
    return ("pip install 'tensorflow[and-cuda]' (CUDA 12 wheels, driver >= 525.60.13), or update the driver; "
            "images: tensorflow-2.21-cu125")


def _main(argv: list[str]) -> int:
    """``python3 -m kit.doctor torch-index [DRIVER]``: print pip's index option for torch (empty: PyPI).

    ``python3 -m kit.doctor torch-index --cpu 'torch==A torchvision==B' [--default 'torch==C torchvision==D']``: for
    a host without an NVIDIA GPU, print pip's arguments for torch (index option and pins: ``cpu_torch_choice``) and
    say on stderr where they come from, or what the default build costs.

    ``python3 -m kit.doctor driver-check [DRIVER]``: say on stderr what was chosen and why; exit 1 when no torch
    CUDA build fits the driver. DRIVER defaults to NVML's, else ``nvidia-smi``'s.
    """
    if not argv or argv[0] not in ("torch-index", "driver-check"):
        print("usage: python3 -m kit.doctor torch-index|driver-check [DRIVER]", file=sys.stderr)
        return 2
    if argv[0] == "torch-index" and argv[1:2] == ["--cpu"]:
        return _cpu_index_main(argv[2:])
    driver = argv[1] if len(argv) > 1 else (nvidia_driver()[0] or _smi_driver())
    if not driver:
        print("kit: no NVIDIA driver found (nvidia-smi); keeping the default torch wheel (`torch-index --cpu PAIR` "
              "picks a CPU build)", file=sys.stderr)
        return 0 if argv[0] == "torch-index" else 1
    choice = torch_choice(driver)
    if argv[0] == "torch-index":
        if choice["index_url"]:
            print(f"--index-url {choice['index_url']}")
        return 0
    print(f"kit: NVIDIA driver {driver}: {choice['reason']}", file=sys.stderr)
    tf_ok, tf_why = driver_fits(driver, TF_CUDA)
    print(f"kit: NVIDIA driver {driver}: tensorflow[and-cuda] 2.21 (CUDA {TF_CUDA}): "
          + (tf_why if tf_ok else f"cannot run: {tf_why}"), file=sys.stderr)
    return 0 if choice["ok"] and tf_ok else 1


def kept_pair(cpu_pair: str, default_pair: str | None, installed: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The torch and torchvision this venv already has, where they are one of the kit's two pairs (the CPU pair or
    the default): re-running `make setup` (pyproject.toml changed) then keeps them. Without this a venv set up with
    PyPI's pair would get the +cpu torch alone pinned over it, leaving a torchvision built for another torch.
    ``installed``: name -> version (default: this interpreter's distributions, read without importing torch)."""
    if installed is None:
        installed = {}
        for name in ("torch", "torchvision"):
            try:
                installed[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                pass
    if "torch" not in installed or "torchvision" not in installed:
        return None
    have = {n: v.split("+")[0] for n, v in installed.items()}
    for pair in (cpu_pair, default_pair or cpu_pair):
        if all(have.get(n) == v for n, v in torch_pins(pair)):
            args = [f"{n}=={installed[n]}" for n in ("torch", "torchvision")]
            return {"source": "kept", "args": args, "torchvision": True,
                    "reason": f"keeping {' and '.join(args)}, already in this venv (`make distclean setup` chooses "
                              "again)"}
    return None


def _cpu_index_main(args: list[str]) -> int:
    if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--default"):
        print("usage: python3 -m kit.doctor torch-index --cpu 'torch==A torchvision==B' "
              "[--default 'torch==C torchvision==D']", file=sys.stderr)
        return 2
    try:
        kept = kept_pair(args[0], args[2] if len(args) == 3 else None)
        choice = kept or cpu_torch_choice(args[0], args[2] if len(args) == 3 else None)
    except ValueError as exc:
        print(f"kit: torch-index --cpu: {exc}", file=sys.stderr)
        return 2
    for line in choice["reason"].splitlines():
        print(f"kit: {line}", file=sys.stderr)
    print(" ".join(choice["args"]))
    return 0


def _smi_driver() -> str | None:
    import subprocess

    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    return lines[0] if p.returncode == 0 and lines else None


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
