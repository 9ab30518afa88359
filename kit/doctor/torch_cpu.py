"""The torch build for a host without an NVIDIA GPU: the +cpu wheels of the CPU image row's pair, from PyTorch's CPU
index or this host's pip configuration, and what the CUDA fallback costs (``make setup`` asks through
``python3 -m kit.doctor torch-index --cpu``: standard library only at import time).
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from collections.abc import Callable
from typing import TypedDict

from kit.doctor.drivers import TORCH_INDEX


class CpuTorchChoice(TypedDict):
    """pip's arguments for torch and where they come from (``source``: "cpu-index", "pip-config", "default",
    "pypi" or "kept"), whether torchvision is among them, and the reason said on stderr."""

    source: str
    args: list[str]
    torchvision: bool
    reason: str


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
                     pip_probe: Callable[[Pins], tuple[bool, str]] | None = None) -> CpuTorchChoice:
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


def kept_pair(cpu_pair: str, default_pair: str | None,
              installed: dict[str, str] | None = None) -> CpuTorchChoice | None:
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
