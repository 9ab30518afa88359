"""Study folders (issue 17): the dependency rule, the [study] table, the folder's defences, the scaffold.

The slow test creates a study with `kit new study` in a temporary directory
outside the repository, runs its smoke profile (the quick profile's workload in
2 repetitions) through the local backend, reads its report, packs it, deletes
the folder and verifies the bundle (the podman run is in
tests/test_container_integration.py); what the quick profile promises (its
trials, a test of H1 it can decide) is read from the spec without running it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.catalog import list_experiments
from kit.cli import app
from kit.errors import ExitCode, KitError, SpecError, StoreError
from kit.scaffold import new_study
from kit.spec import load_spec
from kit.studies import StudyError, checked_copy, study_files
from tests._runs import bare_manifest

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "data" / "mnist-t10k"
# The generic layers: nothing study-specific may be imported by them (the registries name study modules as strings).
GENERIC = ("kit.spec", "kit.plan", "kit.run", "kit.harness", "kit.store", "kit.studies", "kit.backends",
           "kit.collectors", "kit.executors", "kit.stats", "kit.analysis.analyze", "kit.analysis.validity",
           "kit.report.html", "kit.report.latex", "kit.report.context", "kit.pack", "kit.compare")
# What used to be study code inside the kit: now each study folder's analysis.py and report.py.
STUDY_SPECIFIC = ("kit.analysis.zoo", "kit.analysis.dai", "kit.analysis.zoo_dist", "kit.analysis.germino",
                  "kit.analysis.dlbench", "kit.report.zoo", "kit.report.dai", "kit.report.zoo_dist",
                  "kit.report.germino", "kit.report.dlbench")


def import_graph() -> dict[str, set[str]]:
    """module -> the modules it imports (absolute names), for every module under kit/."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "kit").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pkg = mod if parts[-1] == "__init__" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                deps.add(base)
                deps.update(f"{base}.{a.name}" for a in node.names)
        graph[mod] = deps
    return graph


def test_nothing_under_kit_imports_a_study() -> None:
    graph = import_graph()
    assert len(graph) > 90
    bad = {m: sorted(d for d in deps if d.split(".")[0] in ("experiments", "kit_study", "kit_study_host"))
           for m, deps in graph.items()}
    assert not {m: d for m, d in bad.items() if d}, "kit/ -> experiments/ or a study folder"
    generic = {m: sorted(d for d in deps if d.startswith(STUDY_SPECIFIC)) for m, deps in graph.items()}
    assert not {m: d for m, d in generic.items() if d}, "kit/ imports study-specific code"
    print("\nkit/ modules:", len(graph), "| imports of experiments/ or a study folder: 0 | generic layers "
          "importing study-specific modules: 0")


STUDY_TABLE = """
[study]
workload = "toy"
datasets = ["mnist"]
[study.modules]
pytorch = "workload_torch"
tensorflow = "workload_keras"
[study.params.hidden_units]
type = "int"
default = 8
minimum = 1
"""


def _folder(tmp_path: Path, table: str = STUDY_TABLE) -> Path:
    d = tmp_path / "toy"
    d.mkdir()
    text = (ROOT / "kit" / "scaffold" / "study" / "experiment.toml.tmpl").read_text().replace("__NAME__", "toy")
    text = re.sub(r"^\[study\].*?(?=\n\[goal\])", table.strip(), text, flags=re.S | re.M)
    (d / "experiment.toml").write_text(text.replace("hidden_units = 128", "hidden_units = 16"))
    for mod in ("workload_torch", "workload_keras"):
        (d / f"{mod}.py").write_text("def run(req, data, markers):\n    return {}, {}\n")
    return d


def test_moved_study_code_is_only_in_its_folder() -> None:
    for study in ("germino_mnist_energy", "elshawi_dlbench", "patel_models_sweep", "patel_distributed",
                  "dai_single_gpu_factors"):
        folder = ROOT / "experiments" / study
        assert (folder / "analysis.py").is_file() and (folder / "report.py").is_file() and (folder / "README.md").is_file()
    for mod in STUDY_SPECIFIC:
        assert not (ROOT / (mod.replace(".", "/") + ".py")).exists(), mod
    every = sorted(p.parent.name for p in (ROOT / "experiments").glob("*/experiment.toml"))
    assert every == ["dai_single_gpu_factors", "elshawi_dlbench", "florencio2019_lenet", "germino_mnist_energy",
                     "patel_distributed", "patel_models_sweep"]
    assert not list((ROOT / "experiments").glob("*.toml"))  # each study is one folder


def test_a_run_without_a_copy_uses_the_bundled_folder_by_name_only(tmp_path: Path) -> None:
    from kit.studies import BUNDLED, bundled_folder, resolve_hooks

    hooks = resolve_hooks(tmp_path, bare_manifest(experiment="germino_mnist_energy"))
    assert (hooks.kind, hooks.root) == ("bundled", BUNDLED / "germino_mnist_energy")
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "experiment.toml").write_text("")
    for crafted in ("../" * 12 + str(tmp_path / "evil"), str(tmp_path / "evil"), "nope", None, 3):
        assert bundled_folder(crafted) is None  # never a path taken from the manifest
        if isinstance(crafted, str):  # (a manifest's experiment is a name: anything else is refused when read)
            assert resolve_hooks(tmp_path, bare_manifest(experiment=crafted)).kind == "none"


def test_a_study_folder_loads_as_a_spec(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    for path in (d, d / "experiment.toml"):
        spec = load_spec(path)
        assert spec.study_dir == str(d.resolve()) and spec.study["modules"]["pytorch"] == "workload_torch"
        assert spec.workload.params["hidden_units"] == 16


@pytest.mark.parametrize(("table", "where"), [
    (STUDY_TABLE.replace('workload = "toy"', 'workload = "lenet5"'), "study.workload"),
    (STUDY_TABLE.replace('"workload_torch"', '"../evil"'), "study.modules.pytorch"),
    (STUDY_TABLE.replace("pytorch = ", "jax = "), "study.modules.jax"),
    (STUDY_TABLE.replace("default = 8", 'default = "eight"'), "study.params.hidden_units.default"),
    (STUDY_TABLE.replace("minimum = 1", "minimum = 10"), "study.params.hidden_units.default"),
    (STUDY_TABLE + "colour = 1\n", "study.params.hidden_units.colour"),
    (STUDY_TABLE.replace('"workload_torch"', '"missing"'), "study.modules.pytorch"),
])
def test_a_bad_study_table_names_its_key(tmp_path: Path, table: str, where: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_spec(_folder(tmp_path, table))
    assert where in exc.value.where and exc.value.fix


def test_a_link_in_the_folder_is_refused_not_followed(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (d / "data.txt").symlink_to(secret)
    with pytest.raises(StudyError) as exc:
        study_files(d)
    assert "symbolic link" in str(exc.value) and exc.value.where.endswith("data.txt")
    runs = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(d), "--runs-dir", str(runs), "--no-report"])
    assert res.exit_code != 0 and isinstance(res.exception, StudyError) and "symbolic link" in str(res.exception)
    assert not runs.exists() or not any(runs.iterdir())  # nothing half-written


def test_a_fifo_or_a_huge_file_is_refused(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    os.mkfifo(d / "pipe")
    with pytest.raises(StudyError, match="special file"):
        study_files(d)  # refused without opening it (a read would hang)
    (d / "pipe").unlink()
    with (d / "weights.bin").open("wb") as fh:
        fh.truncate(3 << 20)
    with pytest.raises(StudyError, match="exceeds the limit"):
        study_files(d)


def test_a_deep_chain_of_folders_is_refused(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    (d / "/".join(["x"] * 20)).mkdir(parents=True)  # empty folders: no file cap would stop the walk
    with pytest.raises(StudyError, match="nests folders"):
        study_files(d)


def test_the_run_copy_is_checked_against_the_manifest(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    from kit.studies import describe, write_copy

    files = study_files(d)
    run = tmp_path / "run"
    write_copy(files, run / "study")
    man = bare_manifest(study=describe(d, files))
    assert checked_copy(run, man) == run / "study"
    target = run / "study" / "workload_torch.py"
    target.chmod(0o644)
    target.write_text("import os  # edited after the run\n")
    with pytest.raises(StoreError, match="changed after the run started"):
        checked_copy(run, man)
    assert checked_copy(run, bare_manifest()) is None  # not a folder study


def test_the_harness_refuses_a_study_request_without_the_folder(tmp_path: Path) -> None:
    req = {"schema": 1, "trial_id": "t", "framework": "pytorch", "seed": 1, "device": "cpu", "threads": 1,
           "dataset": None, "workload": {"name": "toy"}, "study": {"workload": "toy", "module": "workload_torch"}}
    (tmp_path / "request.json").write_text(json.dumps(req))
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(tmp_path), "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 4
    assert "no --study folder" in json.loads((tmp_path / "result.json").read_text())["error"]


def test_new_study_refuses_bad_names_and_existing_folders(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="not a study name"):
        new_study("Bad-Name", tmp_path)
    with pytest.raises(KitError, match="kit's workloads"):
        new_study("lenet5", tmp_path)
    (tmp_path / "taken").mkdir()
    with pytest.raises(KitError, match="exists already"):
        new_study("taken", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_kit_new_study_and_kit_list_experiments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    res = CliRunner().invoke(app, ["new", "study", "my_mlp", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "my_mlp").iterdir()) == [
        "README.md", "analysis.py", "experiment.toml", "model.py", "report.py", "workload_keras.py", "workload_torch.py"]
    res = CliRunner().invoke(app, ["list", "--experiments", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "my_mlp/" in res.output and "florencio2019_lenet" in res.output  # the kit's own, then the folder's
    smoke = [line.split() for line in res.output.splitlines() if line.split()[:2] == ["my_mlp", "smoke"]]
    assert smoke and smoke[0][-2] == "no", res.output  # the smoke profile cannot decide H1 (decidable: no)
    (mine,) = [e for e in list_experiments([tmp_path]) if e["id"] == "my_mlp"]
    profiles = {p["name"]: p for p in mine["profiles"]}
    assert set(profiles) == {"paper", "quick", "smoke"}
    # the quick profile can decide H1 in both phases: 10 blocks of one trial per arm after one warm-up block
    quick = profiles["quick"]["design"]
    assert profiles["quick"]["trials"] == 22 and quick["all_decidable"], quick
    assert {(r["phase"], r["n"], r["decidable"]) for r in quick["rows"]} == {("train", 10, True), ("infer", 10, True)}
    # the smoke profile (what the slow tests run) says that it cannot: 2 blocks, under the kit's minimum of 10
    smoke = profiles["smoke"]["design"]
    assert profiles["smoke"]["trials"] == 6 and not any(r["decidable"] for r in smoke["rows"]), smoke
    monkeypatch.setenv("KIT_EXPERIMENTS", str(tmp_path))
    res = CliRunner().invoke(app, ["list"])
    assert res.exit_code == 0 and "my_mlp/" in res.output


# -- the scaffold, run for real (slow) ---------------------------------------------------------------------------------

def kit(*args: str, cwd: Path, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


def read_report(run: Path) -> tuple[dict, str]:
    analysis = json.loads((run / "analysis.json").read_text())
    text = re.sub(r"<[^>]+>", " ", (run / "report" / "index.html").read_text())
    return analysis, re.sub(r"\s+", " ", text)


@pytest.mark.slow
def test_scaffold_study_runs_outside_the_repository_packs_and_verifies(tmp_path: Path) -> None:
    assert not tmp_path.resolve().is_relative_to(ROOT)
    out = kit("new", "study", "mlp_check", "--dir", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    study = tmp_path / "mlp_check"
    # the smoke profile: the quick profile's workload (40 steps, the same data and weights) in 2 repetitions
    out = kit("run", str(study), "--profile", "smoke", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(MNIST),
              cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    man = json.loads((run / "manifest.json").read_text())
    trials = [json.loads(p.read_text()) for p in (run / "trials").glob("*.json")]
    assert man["status"] == "complete" and len(trials) == 6 and {t["status"] for t in trials} == {"ok"}
    # every phase repeated its unit (the template's reset between training passes ran) and kept every pass's time
    assert all(t["results"]["train_passes"] > 1 and t["results"]["infer_passes"] > 1 for t in trials), [
        (t["trial_id"], t["results"]["train_passes"], t["results"]["infer_passes"]) for t in trials]
    assert man["study"]["source"] == str(study.resolve()) and "workload_torch.py" in man["study"]["files"]
    analysis, text = read_report(run)
    eq = analysis["equivalence"]
    assert eq["consistent"] and eq["param_counts_equal"] and eq["max_rel_loss_gap"] < 1e-4, eq
    arms = {a["arm"]: a for a in analysis["extras"]["mlp_check"]["arms"]}
    assert set(arms) == {"pytorch", "tensorflow"} and all(a["trials"] == 2 for a in arms.values())
    assert arms["pytorch"]["test_accuracy_mean"] > 0.5  # 40 SGD steps of an MLP on MNIST learn something
    assert "Model quality per framework" in text and "median training loss" in text
    # 2 blocks: H1 is described, not tested (the quick profile's 10 can decide it: test_kit_new_study_and_kit_list_...)
    assert {h["phase"] for h in analysis["hypotheses"]} == {"train", "infer"}
    assert not any(h["tested"] for h in analysis["hypotheses"]), analysis["hypotheses"]
    print(f"\nscaffold study (smoke), local backend: {len(trials)} trials ok; equivalence verified (max loss gap "
          f"{eq['max_rel_loss_gap']:.2e}); H1 " + "; ".join(
              f"{h['phase']} {h['decision']['text'] if isinstance(h.get('decision'), dict) else h.get('decision')}"
              for h in analysis["hypotheses"]))

    out = kit("pack", str(run), "--out", str(tmp_path / "bundle"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    bundle = next(p for p in tmp_path.iterdir() if p.name.startswith("bundle") and p.suffixes[-2:] == [".tar", ".gz"])
    for p in sorted(study.rglob("*"), reverse=True):  # the evaluator has the kit and the bundle, not the folder
        p.unlink() if p.is_file() else p.rmdir()
    study.rmdir()
    # the bundle carries study code: without a container engine it runs on the local backend only when the
    # evaluator says so (the output then says it ran unsandboxed)
    refused = kit("verify", str(bundle), "--data-dir", str(MNIST), "--runs-dir", str(tmp_path / "verify"),
                  "--backend", "local", cwd=tmp_path)
    assert refused.returncode == ExitCode.INPUT and "--trust-bundle-code" in refused.stderr, refused.stderr[-2000:]
    out = kit("verify", str(bundle), "--data-dir", str(MNIST), "--runs-dir", str(tmp_path / "verify"),
              "--backend", "local", "--trust-bundle-code", cwd=tmp_path)
    # Exit 1 means the results were not called reproduced: with the smoke profile's 2 blocks nothing is tested
    # (and with more, a timing decision near its threshold may flip between two runs). What is under test is that
    # the bundle alone re-ran the study: integrity checked, the re-run complete, from the bundle's copy of the folder.
    assert out.returncode in (0, 1), out.stdout[-3000:] + out.stderr[-3000:]
    flat = " ".join(out.stdout.split())
    assert "integrity: ok" in flat and "(complete, profile smoke)" in flat, out.stdout[-3000:]
    assert "ran UNSANDBOXED on this host" in flat
    (rerun,) = (tmp_path / "verify").iterdir()
    assert json.loads((rerun / "manifest.json").read_text())["study"]["digest"] == man["study"]["digest"]
    assert "mlp_check" in json.loads((rerun / "analysis.json").read_text())["extras"]


def test_the_seed_studies_define_their_workloads_in_their_folders() -> None:
    """germino, dlbench, dai_factors and zoo_distributed moved out of the kit's registry into their study folders'
    [study] tables; the folders' modules serve the kit's shared model library, and the kit's table names none."""
    from kit.workloads import MOVED_TO_STUDIES, WORKLOADS

    assert set(MOVED_TO_STUDIES) == {"germino", "dlbench", "dai_factors", "zoo_distributed"}
    for name, folder in MOVED_TO_STUDIES.items():
        assert name not in WORKLOADS
        spec = load_spec(ROOT / "experiments" / folder, "quick")
        info = spec.workload_info
        assert spec.workload.name == name and info.folder and spec.study is not None
        assert info.modules == {"pytorch": "workload_torch", "tensorflow": "workload_keras"}
        for mod in info.modules.values():
            assert "from kit.workloads." in (ROOT / "experiments" / folder / f"{mod}.py").read_text()


def test_a_spec_naming_a_moved_workload_is_told_which_folder_defines_it(tmp_path: Path) -> None:
    """A copy of an older spec (in a run an earlier kit made) names the workload without its [study] table: the
    error names the folder, never silently another workload."""
    old = tmp_path / "old.toml"
    old.write_text((ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml").read_text()
                   .replace('name = "lenet5"', 'name = "germino"', 1))
    with pytest.raises(SpecError, match="experiments/germino_mnist_energy") as err:
        load_spec(old)
    assert "workload.name" in (err.value.where or "")
