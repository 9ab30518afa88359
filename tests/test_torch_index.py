"""The torch build `make setup` installs on a host without an NVIDIA GPU (kit.doctor torch-index --cpu): PyTorch's
CPU index where it answers, else a +cpu pair this host's pip configuration offers, else the default CUDA build with a
line on its cost. Probes are injected: no network here."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.doctor import setup_cli, torch_cpu
from kit.doctor.torch_cpu import TORCH_CPU_INDEX, Pins, cpu_torch_choice, pip_offers_cpu, probe_cpu_index, torch_pins

ROOT = Path(__file__).resolve().parents[1]
CPU_PAIR = "torch==2.13.0 torchvision==0.28.0"
DEFAULT_PAIR = "torch==2.14.1 torchvision==0.29.1"


class Probe:
    """A probe asked one pin at a time (torch first); ``ok`` for every pin, or per package name."""

    def __init__(self, ok: bool | dict[str, bool], why: str) -> None:
        self.ok, self.why, self.calls = ok, why, 0
        self.asked: list[str] = []

    def __call__(self, pins: Pins) -> tuple[bool, str]:
        self.calls += 1
        (pin,) = pins
        assert pin in (("torch", "2.13.0"), ("torchvision", "0.28.0"))
        self.asked.append(pin[0])
        ok = self.ok if isinstance(self.ok, bool) else self.ok[pin[0]]
        return ok, self.why if isinstance(self.ok, bool) else f"{self.why}: {pin[0]} {'offered' if ok else 'missing'}"


def test_the_cpu_index_when_it_answers() -> None:
    pip = Probe(True, "pip")
    c = cpu_torch_choice(CPU_PAIR, DEFAULT_PAIR, system="Linux", index_probe=Probe(True, "the CPU index"),
                         pip_probe=pip)
    assert c["source"] == "cpu-index"
    assert c["args"] == ["--extra-index-url", "https://download.pytorch.org/whl/cpu",
                         "torch==2.13.0+cpu", "torchvision==0.28.0+cpu"]
    assert "torch 2.13.0+cpu from PyTorch's CPU index" in c["reason"] and "0.8 GB" in c["reason"]
    assert "torchvision 0.28.0+cpu from PyTorch's CPU index" in c["reason"] and c["torchvision"] is True
    assert pip.calls == 0  # not asked once the index answered


def test_the_pip_configuration_when_the_index_is_unreachable() -> None:
    c = cpu_torch_choice(CPU_PAIR, DEFAULT_PAIR, system="Linux",
                         index_probe=Probe(False, "PyPI's CPU index is unreachable (timed out)"),
                         pip_probe=Probe(True, "this host's pip configuration"))
    assert c["source"] == "pip-config"
    assert c["args"] == ["torch==2.13.0+cpu", "torchvision==0.28.0+cpu"]  # pinned +cpu: never the CUDA build
    assert "pip configuration" in c["reason"] and c["torchvision"] is True


def test_a_cpu_torch_without_its_torchvision_is_installed_alone() -> None:
    """This machine: the pip configuration offers torch 2.13.0+cpu but no torchvision 0.28.0+cpu. The CPU torch
    alone (0.8 GB), never PyPI's CUDA pair (5.3 GB): the studies that need torchvision say so and are skipped."""
    index = Probe(False, "PyTorch's CPU index is unreachable (no DNS)")
    c = cpu_torch_choice(CPU_PAIR, DEFAULT_PAIR, system="Linux", index_probe=index,
                         pip_probe=Probe({"torch": True, "torchvision": False}, "this host's pip configuration"))
    assert c["source"] == "pip-config" and c["args"] == ["torch==2.13.0+cpu"] and c["torchvision"] is False
    assert index.asked == ["torch"]  # an unreachable index is asked once, not once per pin
    reason = c["reason"]
    assert "torch 2.13.0+cpu from this host's pip configuration" in reason and "installing torch alone" in reason
    assert "No torchvision 0.28.0+cpu" in reason and "unreachable (no DNS)" in reason
    assert "kit reproduce-all" in reason and "CUDA torch" in reason
    # the index offers torch but not torchvision, the pip configuration offers torchvision: the pair, both sources
    both = cpu_torch_choice(CPU_PAIR, DEFAULT_PAIR, system="Linux",
                            index_probe=Probe({"torch": True, "torchvision": False}, "index"),
                            pip_probe=Probe({"torch": False, "torchvision": True}, "pip"))
    assert both["args"] == ["--extra-index-url", TORCH_CPU_INDEX, "torch==2.13.0+cpu", "torchvision==0.28.0+cpu"]
    assert both["torchvision"] is True and both["source"] == "cpu-index"


def test_the_default_build_with_its_cost_when_no_cpu_torch_is_offered() -> None:
    c = cpu_torch_choice(CPU_PAIR, DEFAULT_PAIR, system="Linux",
                         index_probe=Probe(False, "PyTorch's CPU index is unreachable (no DNS)"),
                         pip_probe=Probe(False, "this host's pip configuration has no torch 2.13.0+cpu"))
    assert c["source"] == "default" and c["args"] == DEFAULT_PAIR.split()
    reason = c["reason"]
    assert "unreachable (no DNS)" in reason and "no torch 2.13.0+cpu" in reason
    assert re.search(r"about \d\.\d GB to download and \d\.\d GB in \.venv", reason)  # what it costs
    assert "To avoid it" in reason and TORCH_CPU_INDEX in reason and "make distclean setup" in reason
    assert "not the CPU pair's 2.13.0" in reason  # the venv's torch then differs from the CPU image row's
    same = cpu_torch_choice(CPU_PAIR, None, system="Linux", index_probe=Probe(False, "x"), pip_probe=Probe(False, "y"))
    assert same["args"] == CPU_PAIR.split() and "not the CPU pair" not in same["reason"]


def test_off_linux_pypi_has_no_cuda_build_to_avoid() -> None:
    index = Probe(True, "x")
    c = cpu_torch_choice(CPU_PAIR, DEFAULT_PAIR, system="Darwin", index_probe=index, pip_probe=Probe(True, "y"))
    assert c["source"] == "pypi" and c["args"] == CPU_PAIR.split() and index.calls == 0


def test_pins_must_be_exact() -> None:
    assert torch_pins("torch==2.13.0+cpu  torchvision==0.28.0") == [("torch", "2.13.0"), ("torchvision", "0.28.0")]
    for bad in ("torch>=2.13", "torch", "", "torch===2.13.0"):
        with pytest.raises(ValueError):
            torch_pins(bad)


def test_the_index_probe_reads_the_simple_index_page(monkeypatch: pytest.MonkeyPatch) -> None:
    import platform
    import urllib.request

    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    machine = platform.machine()
    pages = {
        f"{TORCH_CPU_INDEX}/torch/": f'<a href="/whl/cpu/torch-2.13.0%2Bcpu-{tag}-{tag}-manylinux_2_28_{machine}.whl'
                                     '#sha256=00">torch-2.13.0+cpu</a>',
        f"{TORCH_CPU_INDEX}/torchvision/": f'<a href="torchvision-0.28.0+cpu-{tag}-{tag}-manylinux_2_28_{machine}.whl">',
    }
    seen: list[float] = []

    class Page:
        def __init__(self, text: str) -> None:
            self.text = text

        def __enter__(self) -> Page:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def read(self) -> bytes:
            return self.text.encode()

    def urlopen(url: str, timeout: float) -> Page:
        seen.append(timeout)
        if url not in pages:
            raise urllib.error.URLError("[Errno -2] Name or service not known")
        return Page(pages[url])

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert probe_cpu_index(torch_pins(CPU_PAIR))[0]
    assert seen and max(seen) <= 10  # a short timeout, not pip's minutes
    ok, why = probe_cpu_index(torch_pins("torch==2.13.0 torchvision==0.29.1"))
    assert not ok and "no torchvision 0.29.1+cpu" in why
    ok, why = probe_cpu_index(torch_pins(CPU_PAIR), index="https://unreachable.example/whl/cpu")
    assert not ok and "unreachable (" in why and "Name or service not known" in why


def test_the_pip_probe_reads_pip_index_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = {"torch": "torch (2.15.0)\nAvailable versions: 2.15.0, 2.14.1, 2.13.0+cpu, 2.13.0\n",
              "torchvision": "torchvision (0.29.2)\nAvailable versions: 0.29.2, 0.29.1, 0.28.0\n"}
    calls: list[list[str]] = []

    def run(cmd: list[str], **kw: object) -> SimpleNamespace:
        calls.append(cmd)
        return SimpleNamespace(stdout=listed[cmd[cmd.index("versions") + 1]], returncode=0)

    monkeypatch.setattr(subprocess, "run", run)
    ok, why = pip_offers_cpu(torch_pins(CPU_PAIR))
    assert not ok and "offers torch 2.13.0+cpu but has no torchvision 0.28.0+cpu" in why
    assert calls[0][:5] == [sys.executable, "-m", "pip", "index", "versions"]  # this Python's pip and its config
    listed["torchvision"] = "torchvision (0.29.2)\nAvailable versions: 0.29.2, 0.28.0+cpu, 0.28.0\n"
    assert pip_offers_cpu(torch_pins(CPU_PAIR))[0]


def test_the_makefile_cpu_pair_is_the_cpu_image_rows_torch() -> None:
    """The venv's torch on a CPU host equals the default CPU image row's, so local and container trials agree."""
    make = (ROOT / "Makefile").read_text()
    pair = re.search(r"^CPU_TORCH_PAIR \?= (.+)$", make, re.MULTILINE)
    assert pair is not None
    matrix = tomllib.loads((ROOT / "images" / "matrix.toml").read_text())
    (row,) = [r for r in matrix["image"] if r["framework"] == "pytorch" and r["device"] == "cpu" and r.get("default")]
    assert dict(torch_pins(pair.group(1)))["torch"] == row["version"]
    assert f"torch=={row['version']}+cpu" in row["requirements"]
    # torchvision 0.N pairs with torch 2.(N-15) (0.28 with 2.13, 0.29 with 2.14)
    for p in (pair.group(1), re.search(r"^TORCH_PAIR \?= (.+)$", make, re.MULTILINE).group(1)):  # type: ignore[union-attr]
        v = dict(torch_pins(p))
        assert int(v["torchvision"].split(".")[1]) == int(v["torch"].split(".")[1]) + 15


def test_torchvision_pairs_with_the_installed_torch() -> None:
    assert torch_cpu.torchvision_pin("2.13.0+cpu") == "torchvision==0.28.0+cpu"
    assert torch_cpu.torchvision_pin("2.14.1") == "torchvision==0.29.1"
    assert torch_cpu.torchvision_pin("3.0.0") == "torchvision"  # unknown pairing: pip decides


def test_the_cpu_extra_cannot_pull_the_cuda_torch_back() -> None:
    """`pip install -e .[cpu,dev]` runs after the +cpu torch: a torchvision there would come from PyPI and bring
    PyPI's CUDA torch (7.7 GB) with it, undoing the lean install."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not [r for r in extras["cpu"] + extras["dev"] if r.split("[")[0].split(">")[0].split("=")[0].strip()
                == "torchvision"]
    assert any(r.startswith("torchvision") for r in extras["gpu"])


def test_the_helper_prints_pip_arguments_and_the_line(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch_cpu, "probe_cpu_index", Probe(False, "PyTorch's CPU index is unreachable (x)"))
    monkeypatch.setattr(torch_cpu, "pip_offers_cpu", Probe(False, "pip has none"))
    monkeypatch.setattr("platform.system", lambda: "Linux")
    monkeypatch.setattr(setup_cli, "kept_pair", lambda *a: None)  # a fresh venv: nothing to keep
    assert setup_cli.main(["torch-index", "--cpu", CPU_PAIR, "--default", DEFAULT_PAIR]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == DEFAULT_PAIR
    assert all(line.startswith("kit: ") for line in err.strip().splitlines()) and "GB to download" in err
    assert setup_cli.main(["torch-index", "--cpu", "torch>=2"]) == 2
    assert setup_cli.main(["torch-index", "--cpu"]) == 2
    capsys.readouterr()


def test_a_venv_that_has_one_of_the_pairs_keeps_it_when_setup_runs_again() -> None:
    """`make setup` re-runs when pyproject.toml changes: a venv set up with PyPI's pair must not get the +cpu torch
    alone pinned over it (its torchvision would then belong to another torch); a lean venv is chosen for again."""
    from kit.doctor.torch_cpu import kept_pair

    cpu, default = "torch==2.13.0 torchvision==0.28.0", "torch==2.14.1 torchvision==0.29.1"
    kept = kept_pair(cpu, default, {"torch": "2.14.1", "torchvision": "0.29.1"})
    assert kept is not None and kept["args"] == ["torch==2.14.1", "torchvision==0.29.1"] and kept["source"] == "kept"
    kept = kept_pair(cpu, default, {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu"})
    assert kept is not None and kept["args"] == ["torch==2.13.0+cpu", "torchvision==0.28.0+cpu"]
    assert kept_pair(cpu, default, {"torch": "2.13.0+cpu"}) is None  # lean: no torchvision, the choice runs
    assert kept_pair(cpu, default, {"torch": "2.12.0", "torchvision": "0.27.0"}) is None  # an old pair is replaced
