"""The papers' CPU protocols on CPU hosts (issue 42, part 1): the ``paper-cpu`` profiles of Germino, DLBench and
Patel run the paper profile's own CPU configurations (so the claims judge them as the paper protocol's), `--profile
auto` picks them on a host without a GPU, `kit reproduce-all` plans them with estimates within a budget, and the
real dataset files they need are fetched ahead (`kit datasets fetch`) or named before a run's first trial.
No test here touches the network: downloads come from a local http.server, "unreachable" is a closed port.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kit.datasets
from kit.analysis.claim_facts import _NOT_PROTOCOL, _device_param
from kit.cli import app
from kit.dataset_fetch import FileState, fetch_command, needed_files, study_files, with_fetch_hint
from kit.dataset_types import DatasetFile, DatasetInfo
from kit.errors import DatasetError, KitError
from kit.reproduce import Host, choose_profile, discover, make_plan
from kit.spec import Spec, load_spec

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
STUDIES = ("germino_mnist_energy", "elshawi_dlbench", "patel_models_sweep")
CPU = Host(0, (), "NVML unavailable")
ONE_GPU = Host(1, ("NVIDIA H100",))


def _specs(study: str) -> tuple[Spec, Spec]:
    return load_spec(EXPERIMENTS / study, "paper-cpu"), load_spec(EXPERIMENTS / study)


# -- the profiles ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("study", STUDIES)
def test_paper_cpu_runs_the_paper_protocols_configurations_on_the_cpu(study: str) -> None:
    mine, paper = _specs(study)
    assert mine.profile == "paper-cpu" and "paper-cpu" in paper.profiles and mine.profile_estimate_s
    assert mine.profile_description.startswith("PAPER'S CPU")
    configs = mine.configurations()
    assert configs and all(mine.workload_for(c).device == "cpu" for c in configs)
    paper_configs = paper.configurations()
    for cfg in configs:  # the claims' rule (kit.analysis.claim_facts): no protocol key differs from the paper's
        assert cfg in paper_configs, cfg
        a, b = dataclasses.asdict(mine.workload_for(cfg)), dataclasses.asdict(paper.workload_for(cfg))
        assert [k for k in a if k not in _NOT_PROTOCOL and a[k] != b.get(k)] == [], cfg
        pa, pb = mine.workload_for(cfg).params, paper.workload_for(cfg).params
        assert [k for k in set(pa) | set(pb) if not _device_param(k) and pa.get(k) != pb.get(k)] == [], cfg
        assert mine.dataset_for(cfg) == paper.dataset_for(cfg), cfg
    assert mine.design.repetitions == paper.design.repetitions


def test_germino_paper_cpu_is_the_cpu_column_20_runs_full_mnist_with_rapl() -> None:
    spec, _ = _specs("germino_mnist_energy")
    assert sorted({c["case"] for c in spec.configurations()}) == ["cnn", "knn", "mlp"]
    assert spec.design.repetitions == 20 and spec.dataset is not None and spec.dataset.source == "full"
    assert "rapl" in spec.telemetry.collectors
    assert {c.id for c in spec.claims if c.device == "cpu" and not c.untestable} == {"C2", "C4", "C6"}


def test_dlbench_paper_cpu_runs_what_the_paper_ran_on_its_cpu_environment() -> None:
    spec, _ = _specs("elshawi_dlbench")
    assert sorted({c["case"] for c in spec.configurations()}) == sorted(
        ["mnist", "cifar10", "cifar100", "imdb", "ptb", "spa_eng", "voc2012"])  # no SVHN (Sec. 5)
    assert spec.design.timeout_s == 86400  # the paper's 24 h limit per run


def test_patel_paper_cpu_is_one_pinned_core_at_the_papers_grid() -> None:
    spec, _ = _specs("patel_models_sweep")
    configs = spec.configurations()
    assert {c["case"] for c in configs} == {f"cpu_{m}" for m in ("resnet18", "resnet152", "vgg16", "mobilenet_v2",
                                                                 "efficientnet_b4")}
    assert len(configs) == 5 * 5 * 3
    assert all(spec.workload_for(c).params.get("cpu_cores") == 1 for c in configs)
    assert all(spec.workload_for(c).params.get("mode") == "infer" for c in configs)


# -- profile choice and the plan ------------------------------------------------------------------------------------

def test_auto_picks_paper_cpu_on_a_cpu_host_where_a_study_has_it() -> None:
    both = ("paper", "quick", "paper-cpu")
    assert choose_profile("auto", CPU, both) == "paper-cpu"
    assert choose_profile("auto", CPU, ("paper", "quick")) == "quick"
    assert choose_profile("auto", CPU) == "quick"
    assert choose_profile("auto", ONE_GPU, both) == "paper"
    assert choose_profile("quick", CPU, both) == "quick"


def test_the_plan_on_a_cpu_host_runs_the_papers_cpu_protocols_with_estimates(tmp_path: Path) -> None:
    plan = {e.study: e for e in make_plan(discover(EXPERIMENTS), CPU, "auto", tmp_path, {})}
    for study in STUDIES:
        e = plan[study]
        assert (e.profile, e.action, e.estimate_from) == ("paper-cpu", "run", "spec"), e
        assert e.estimate_s and e.estimate_s > 0
    assert plan["florencio2019_lenet"].profile == "quick"
    # the plan says what each would download before its first trial (the conftest's empty cache; MNIST's test
    # files are bundled, its training files are not), and the command that fetches them ahead
    assert plan["germino_mnist_energy"].data.startswith("2 dataset files to download first, 10 MB")
    assert "kit datasets fetch germino_mnist_energy --profile paper-cpu" in plan["germino_mnist_energy"].data
    assert plan["patel_models_sweep"].data == ""  # random tensors: nothing to download
    on_gpu = {e.study: e for e in make_plan(discover(EXPERIMENTS), ONE_GPU, "auto", tmp_path, {})}
    assert all(on_gpu[s].profile == "paper" for s in STUDIES)


def test_a_budget_skips_the_cpu_protocols_that_would_not_fit(tmp_path: Path) -> None:
    studies = discover(EXPERIMENTS, only=STUDIES)
    plan = {e.study: e for e in make_plan(studies, CPU, "auto", tmp_path, {}, budget_s=20000)}
    assert plan["elshawi_dlbench"].reason.startswith("would not fit the budget: estimate 7776000 s, 20000 s left")
    assert plan["germino_mnist_energy"].action == "run"  # 16000 s of the 20000
    assert plan["patel_models_sweep"].reason == "would not fit the budget: estimate 60000 s, 4000 s left"


# -- datasets ---------------------------------------------------------------------------------------------------

MNIST_FULL = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
              "t10k-labels-idx1-ubyte.gz")


def _fake_mnist(base_url: str, payloads: dict[str, bytes]) -> DatasetInfo:
    """An MNIST entry whose four files are small payloads served at ``base_url`` (nothing bundled)."""
    files = tuple(DatasetFile(n, hashlib.sha256(payloads[n]).hexdigest(), (f"{base_url}/{n}",), len(payloads[n]))
                  for n in MNIST_FULL)
    return DatasetInfo("mnist", "fake MNIST", "test", files, {"full": MNIST_FULL, "t10k_split": MNIST_FULL[2:]},
                       {"full": (60000, 10000), "t10k_split": (10000, 0)})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, dict[str, bytes]]]:
    root = tmp_path / "served"
    root.mkdir()
    payloads = {n: f"fake {n} ".encode() * 50 for n in MNIST_FULL}
    for n, data in payloads.items():
        (root / n).write_bytes(data)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", payloads
    srv.shutdown()
    srv.server_close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens: connection refused


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("KIT_CACHE_DIR", str(d))
    monkeypatch.delenv("KIT_DATA_DIR", raising=False)
    return d


def test_needed_files_are_the_real_ones_of_the_profile() -> None:
    germino, _ = _specs("germino_mnist_energy")
    assert [f.file.name for f in needed_files(germino)] == list(MNIST_FULL)
    assert needed_files(_specs("patel_models_sweep")[0]) == ()  # random inputs
    dl = {(f.dataset, f.source) for f in needed_files(_specs("elshawi_dlbench")[0])}
    assert ("svhn", "cropped") not in dl and ("voc2012", "trainval") in dl
    assert fetch_command(germino) == "kit datasets fetch germino_mnist_energy --profile paper-cpu"


def test_kit_datasets_fetch_downloads_and_verifies_every_file(served: tuple[str, dict[str, bytes]], cache: Path,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, payloads = served
    monkeypatch.setitem(kit.datasets.DATASETS, "mnist", _fake_mnist(url, payloads))
    data = tmp_path / "data"
    res = CliRunner().invoke(app, ["datasets", "fetch", "germino_mnist_energy", "-p", "paper-cpu",
                                   "--data-dir", str(data)])
    assert res.exit_code == 0, res.output
    assert "all 4 files here and verified (4 fetched)" in res.output
    assert all((data / "mnist" / n).read_bytes() == payloads[n] for n in MNIST_FULL)
    again = study_files(_specs("germino_mnist_energy")[0], data)  # a second call finds them, fetches nothing
    assert again.ok and {f.state for f in again.files} == {FileState.present}
    listed = CliRunner().invoke(app, ["datasets", "list", "germino_mnist_energy", "-p", "paper-cpu",
                                      "--data-dir", str(data)])
    assert listed.exit_code == 0 and "present" in listed.output


def test_kit_datasets_fetch_without_network_says_what_to_copy_and_writes_nothing(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payloads = {n: b"x" for n in MNIST_FULL}
    monkeypatch.setitem(kit.datasets.DATASETS, "mnist", _fake_mnist(_closed_port(), payloads))
    res = CliRunner().invoke(app, ["datasets", "fetch", "germino_mnist_energy", "-p", "paper-cpu"])
    assert res.exit_code != 0 and isinstance(res.exception, DatasetError)
    err = res.exception
    assert "4 of 4 dataset files of germino_mnist_energy (paper-cpu) could not be fetched" in err.cause
    assert err.fix and "--data-dir DIR" in err.fix and "train-images-idx3-ubyte.gz into " + str(cache / "mnist") \
        in err.fix and "127.0.0.1" in err.fix and "\n" not in str(err)
    assert "failed" in res.output
    assert not any(p.is_file() and not p.name.endswith(".part") for p in cache.rglob("*"))  # no unverified file


def test_a_run_without_network_stops_before_its_first_trial_saying_what_to_fetch(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payloads = {n: b"x" for n in MNIST_FULL}
    monkeypatch.setitem(kit.datasets.DATASETS, "mnist", _fake_mnist(_closed_port(), payloads))
    runs = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", "germino_mnist_energy", "-p", "paper-cpu", "--runs-dir", str(runs)])
    assert res.exit_code != 0 and isinstance(res.exception, KitError), res.output
    assert "could not download" in res.exception.cause
    fix = res.exception.fix or ""
    assert "`kit datasets fetch germino_mnist_energy --profile paper-cpu`" in fix and "t10k-labels-idx1-ubyte.gz" in fix
    assert not runs.exists() or not any(runs.iterdir())  # nothing written: no run started


def test_a_checksum_mismatch_keeps_its_own_fix() -> None:
    from kit.errors import ChecksumError

    err = ChecksumError("SHA-256 mismatch", where="x", fix="delete the file")
    assert with_fetch_hint(err, _specs("germino_mnist_energy")[0]) is err


def test_the_plan_looks_for_data_in_the_data_dir_it_is_given(tmp_path: Path) -> None:
    """`kit reproduce-all --data-dir DIR`: files in DIR are not "to download first"."""
    studies = discover(EXPERIMENTS, only=["germino_mnist_energy"])
    (entry,) = make_plan(studies, CPU, "auto", tmp_path, {})
    assert entry.data.startswith("2 dataset files to download first")
    data = tmp_path / "data" / "mnist"
    data.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (data / name).write_bytes(b"present")  # presence only: the run checks the digests
    (entry,) = make_plan(studies, CPU, "auto", tmp_path, {}, data_dir=tmp_path / "data")
    assert entry.data == ""
