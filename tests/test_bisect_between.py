"""`kit bisect --between GOOD BAD` (issue 41, item 2): every release on the index between two, bisected lazily.

Hermetic: the index (kit.images.index.releases_between), adding and building rows (kit.images.add), the runs
(kit.run.start_run) and the comparison (kit.compare.compare_arms) are fakes; each fake comparison draws both arms
around the levels of a planted step and judges them with kit.compare.judge, the rule `kit compare --arms` applies.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import kit.backends.container
import kit.compare
import kit.images.index
import kit.run
from kit import bisect
from kit.bisect import BisectOptions, BisectResult, PairVerdict, bisect_releases, releases_between, run_bisect
from kit.cli import app
from kit.compare import CompareOptions, judge
from kit.errors import ImageError, KitError
from kit.images import add, arms
from kit.run import RunOptions
from kit.spec import load_spec
from tests.test_bisect import releases_with

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"
VERSIONS = ("2.17.1", "2.18.0", "2.18.1", "2.19.0", "2.19.1", "2.20.0", "2.21.0")


@dataclasses.dataclass
class Fakes:
    step_at: int = 5  # VERSIONS[step_at] and later are 12 % slower
    index_calls: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    rows: list[str] = dataclasses.field(default_factory=list)  # ensure_row's releases, in call order
    built: list[str] = dataclasses.field(default_factory=list)  # ensure_built's rows
    runs: list[tuple[str, ...]] = dataclasses.field(default_factory=list)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fakes:
    f = Fakes()

    def on_index(framework: str, device: str, low: str, high: str, *, python: str, index_url: Any = None,
                 pre: bool = False) -> tuple[str, ...]:
        f.index_calls.append((framework, device, low, high, python, pre))
        return tuple(v for v in VERSIONS if low <= v <= high)

    def ensure_row(spec: Any, device: str, *, matrix: Any = None, on_line: Any = None) -> Any:
        f.rows.append(spec.version)
        return SimpleNamespace(name=f"tensorflow-{spec.version}-{device}", version=spec.version)

    def ensure_built(row: Any, *, engine: Any = None, on_line: Any = None, on_start: Any = None) -> None:
        f.built.append(row.version)
        on_start(row)

    def image_arms(names: list[str], frameworks: tuple[str, ...], matrix: Any = None) -> Any:
        names_ = tuple(f"tensorflow@{n.removeprefix('tensorflow-')}" for n in names)
        return names_, dict(zip(names_, names, strict=True))

    def start_run(spec: Any, opts: Any, events: Any = None) -> Any:
        f.runs.append(opts.arms)
        return SimpleNamespace(path=tmp_path / f"run{len(f.runs)}", manifest=lambda: SimpleNamespace(status="complete"))

    def compare_arms(run: Path, a: str, b: str, opts: CompareOptions) -> Any:
        level = {v: 1.0 if i < f.step_at else 1.12 for i, v in enumerate(VERSIONS)}
        va, vb = (arm.split("@")[1].removesuffix("-cpu") for arm in (a, b))
        rng = np.random.default_rng(len(f.runs))
        block = rng.lognormal(0, 0.1, 16)
        res = judge([("default", "time_s", "train", f"{b} vs {a}", level[va] * block * rng.lognormal(0, 0.02, 16),
                      level[vb] * block * rng.lognormal(0, 0.02, 16))], paired=True, opts=CompareOptions(n_boot=300))
        return SimpleNamespace(rows=res.rows, provenance_differences=None)

    monkeypatch.setattr(kit.images.index, "releases_between", on_index)
    monkeypatch.setattr(add, "ensure_row", ensure_row)
    monkeypatch.setattr(add, "ensure_built", ensure_built)
    monkeypatch.setattr(arms, "run_device", lambda spec: "cpu")
    monkeypatch.setattr(kit.backends.container, "image_arms", image_arms)
    monkeypatch.setattr(kit.run, "start_run", start_run)
    monkeypatch.setattr(kit.compare, "compare_arms", compare_arms)
    return f


def test_between_lists_the_releases_on_the_index_as_release_specs(fakes: Fakes) -> None:
    spec = load_spec(LENET, "quick")
    got = releases_between(spec, "tensorflow==2.17.1", "tensorflow==2.21.0", pre=True)
    assert got == [f"tensorflow=={v}" for v in VERSIONS]
    assert fakes.index_calls == [("tensorflow", "cpu", "2.17.1", "2.21.0", "3.11", True)]
    assert fakes.rows == [] and fakes.built == []  # listing adds and builds nothing


@pytest.mark.parametrize(("low", "high", "match"), [
    ("tensorflow-2.19-cpu", "tensorflow==2.21.0", "is not a release"),
    ("tensorflow==2.21.0", "tensorflow==2.17.1", "is not older than"),
    ("tensorflow==2.17.1", "torch==2.11.0", "two frameworks"),
    ("tensorflow==2.17.1", "tensorflow==2.22.0", "not among the releases on the index"),
    ("tensorflw==2.17.1", "tensorflow==2.21.0", "not a release spec"),
])
def test_bad_between_is_refused_with_cause_where_and_fix(fakes: Fakes, low: str, high: str, match: str) -> None:
    with pytest.raises(KitError, match=match) as e:
        releases_between(load_spec(LENET, "quick"), low, high)
    assert e.value.where == "--between" and e.value.fix


def test_a_framework_the_experiment_does_not_run_is_refused(fakes: Fakes) -> None:
    spec = dataclasses.replace(load_spec(LENET, "quick"))
    spec = dataclasses.replace(spec, experiment=dataclasses.replace(spec.experiment, frameworks=("pytorch",)))
    with pytest.raises(KitError, match="not tensorflow"):
        releases_between(spec, "tensorflow==2.17.1", "tensorflow==2.21.0")


@pytest.mark.parametrize("step_at", [1, 3, 5, 6])
def test_only_the_visited_releases_are_added_and_built(fakes: Fakes, step_at: int, tmp_path: Path) -> None:
    fakes.step_at = step_at
    spec = load_spec(LENET, "quick")
    releases = releases_between(spec, "tensorflow==2.17.1", "tensorflow==2.21.0")
    res = run_bisect(spec, releases, BisectOptions(), RunOptions(runs_root=tmp_path / "runs", backend="docker"))
    assert res.status == "located", res.answer
    assert res.first_changed == f"tensorflow=={VERSIONS[step_at]}"
    assert res.last_unchanged == f"tensorflow=={VERSIONS[step_at - 1]}"
    visited = {f"tensorflow=={v}" for v in fakes.rows}
    assert set(res.visited) == visited == {f"tensorflow=={v}" for v in fakes.built}
    assert len(fakes.rows) == len(set(fakes.rows)) < len(VERSIONS)  # each visited release added once, not all
    assert res.n_comparisons <= 1 + math.ceil(math.log2(len(VERSIONS) - 1))
    assert set(res.added) == set(res.built) == {f"tensorflow-{v}-cpu" for v in fakes.rows}
    assert fakes.runs[0] == ("tensorflow@2.17.1-cpu", "tensorflow@2.21.0-cpu")
    doc = res.to_json()
    assert doc["visited"] == list(res.visited) and doc["message"] == res.message()


def test_an_apptainer_bisection_adds_rows_but_builds_no_docker_image(fakes: Fakes, tmp_path: Path) -> None:
    spec = load_spec(LENET, "quick")
    res = run_bisect(spec, ["tensorflow==2.17.1", "tensorflow==2.21.0"], BisectOptions(),
                     RunOptions(runs_root=tmp_path / "runs", backend="apptainer"))
    assert fakes.built == [] and res.built == () and len(res.added) == 2


def test_check_releases_orders_specs_and_rows_by_version() -> None:
    frameworks = ("tensorflow", "pytorch")
    assert bisect.check_releases(["tensorflow==2.18.1", "tensorflow-2.19-cpu", "tensorflow==2.20.1"], frameworks,
                                 device="cpu") == ["tensorflow==2.18.1", "tensorflow-2.19-cpu", "tensorflow==2.20.1"]
    with pytest.raises(KitError, match="increasing version order"):
        bisect.check_releases(["tensorflow==2.20.0", "tensorflow-2.20-cpu"], frameworks, device="cpu")
    with pytest.raises(KitError, match="one framework on one device"):
        bisect.check_releases(["tensorflow==2.18.1", "tensorflow-2.20-cu125"], frameworks, device="cpu")
    with pytest.raises(KitError, match="one framework on one device"):
        bisect.check_releases(["tensorflow==2.18.1", "torch==2.11.0"], frameworks, device="cpu")
    with pytest.raises(ImageError, match="not a release spec") as e:
        bisect.check_releases(["tensorflow==2.18.1", "tensorflw==2.19.0"], frameworks, device="cpu")
    assert e.value.where == "--images tensorflw==2.19.0"
    assert bisect.check_releases(["tensorflow==2.19.0rc1", "tensorflow==2.19.0"], frameworks) == [
        "tensorflow==2.19.0rc1", "tensorflow==2.19.0"]  # a pre-release comes before its release


def _named(levels: list[float], **kw: Any) -> BisectResult:
    names, pair, _ = releases_with(levels, **kw)
    specs = [f"tensorflow==2.{17 + i}.0" for i in range(len(names))]
    by = dict(zip(specs, names, strict=True))
    res = bisect_releases(specs, lambda a, b: pair(by[a], by[b]))
    return dataclasses.replace(res, metric="time_s", phase="train", threshold=0.05)


def test_the_message_of_a_located_step() -> None:
    res = _named([1.0, 1.0, 1.0, 1.12, 1.12, 1.12, 1.12], seed=30)
    assert res.status == "located"
    msg = res.message()
    first = next(c for c in res.comparisons if c.candidate == res.first_changed)
    assert msg.startswith("first release with the regression: tensorflow 2.20.0 -- time_s (train) "
                          f"{first.ratio:.3f}x [95 % CI {first.ratio_low:.3f}, {first.ratio_high:.3f}]")
    assert "against tensorflow 2.17.0 (last release like it: tensorflow 2.19.0)" in msg
    assert "runs: synthetic/" in msg and f"({len(res.visited)} of 7)" in msg


def test_the_message_of_no_change_says_what_was_shown() -> None:
    res = _named([1.0, 1.01, 0.995, 1.0])
    assert res.status == "no change"
    msg = res.message()
    assert msg.startswith("no change: time_s (train) of tensorflow 2.20.0 against tensorflow 2.17.0 is ")
    assert "detectable change" in msg and "within the 5% threshold" in msg and "cancel out" in msg
    assert "releases visited: tensorflow 2.17.0, tensorflow 2.20.0 (2 of 4)" in msg


def test_the_message_of_an_inconclusive_bisection_says_what_would_decide() -> None:
    res = _named([1.0, 1.0, 1.06, 1.06], n=10, noise=0.2, seed=3)
    assert res.status == "inconclusive"
    msg = res.message()
    assert msg.startswith("inconclusive: ") and "neither a change nor within the threshold; to decide: " in msg
    assert "repetitions per arm would make it conclusive" in msg or "reduce it (kit doctor)" in msg


def test_the_message_of_a_non_monotonic_change() -> None:
    res = _named([1.0, 1.15, 1.15, 0.85, 0.85])
    assert res.status == "non-monotonic"
    msg = res.message()
    assert msg.startswith("non-monotonic: time_s (train) of tensorflow 2.19.0 against tensorflow 2.17.0 is a "
                          "regression") and "moved both ways" in msg and "kit run --images" in msg


def test_saved_results_without_the_new_fields_keep_their_json() -> None:
    old = BisectResult(status="no change", answer="x", releases=("a", "b"), baseline="a",
                       comparisons=(PairVerdict("no change", 1.0, 0.99, 1.01, 0.5, 0.03, None, (), run="r",
                                                baseline="a", candidate="b"),))
    assert set(old.to_json()) == {"status", "answer", "releases", "baseline", "comparisons", "n_comparisons"}
    assert old.message().startswith("no change: the metric of b against a is 1.000x")


def test_markdown_escapes_and_leads_with_the_verdict() -> None:
    res = dataclasses.replace(_named([1.0, 1.0, 1.12, 1.12]), experiment="lenet|x")
    md = bisect.markdown(res)
    assert md.startswith("**kit bisect lenet\\|x**: first release with the regression")
    assert "| verdict | candidate | baseline | time_s (train) B/A [95 % CI] | detectable | run |" in md
    assert md.count("\n| regression |") + md.count("\n| no change |") == res.n_comparisons


def test_cli_between(fakes: Fakes, tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    res = CliRunner().invoke(app, ["bisect", str(LENET), "-p", "quick", "--between", "tensorflow==2.17.1",
                                   "tensorflow==2.21.0", "--runs-dir", str(tmp_path / "runs"), "--json-file", str(out)])
    assert res.exit_code == 0, res.output
    assert "7 releases from tensorflow==2.17.1 to tensorflow==2.21.0 on the index: 2.17.1, 2.18.0" in res.output
    table_end = res.output.index("first release with the regression: tensorflow 2.20.0")
    assert "└" in res.output[:table_end]  # the message is the first thing after the table
    doc = json.loads(out.read_text())
    assert doc["first_changed"] == "tensorflow==2.20.0" and set(doc["visited"]) == {f"tensorflow=={v}" for v in
                                                                                    fakes.rows}
    assert "building image tensorflow-2.17.1-cpu" in res.output


def test_cli_markdown(fakes: Fakes, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bisect", str(LENET), "-p", "quick", "--images",
                                   "tensorflow==2.17.1,tensorflow==2.19.1,tensorflow==2.21.0", "--markdown",
                                   "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("**kit bisect florencio2019_lenet**: first release with the regression")
    assert fakes.rows and set(fakes.rows) <= {"2.17.1", "2.19.1", "2.21.0"}


@pytest.mark.parametrize(("args", "match"), [
    (["--images", "tensorflow-2.19-cpu,tensorflow-2.21-cpu", "--between", "tensorflow==2.17.1", "tensorflow==2.21.0"],
     "--images and --between both name the releases"),
    ([], "either as --images"),
    (["--images", "tensorflow-2.19-cpu,tensorflow-2.21-cpu", "--pre"], "--pre belongs to --between"),
    (["--images", "tensorflow-2.19-cpu,tensorflow-2.21-cpu", "--json", "--markdown"], "both print on stdout"),
])
def test_cli_refusals(fakes: Fakes, tmp_path: Path, args: list[str], match: str) -> None:
    res = CliRunner().invoke(app, ["bisect", str(LENET), "-p", "quick", "--runs-dir", str(tmp_path / "runs"), *args])
    assert res.exit_code != 0 and isinstance(res.exception, KitError), res.output
    assert match in str(res.exception) and res.exception.fix
    assert fakes.runs == [] and fakes.rows == []
