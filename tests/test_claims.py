"""The paper's claims as data and their verdicts (kit.claim_spec, kit.analysis.claims).

Each kind of claim gets planted data for each verdict it can reach: replicated, contradicted,
inconclusive, not testable. The data are drawn with a fixed seed from log-normal noise around a
planted ratio, so a verdict is what the procedure says about data whose truth is known.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kit.analysis.claims import Ledger, RunContext, headline, judge, judge_claim
from kit.claim_spec import Claim
from kit.errors import SpecError
from kit.spec import load_spec, parse_claims

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"
CPU = RunContext(profile="quick", device_kinds=("cpu",), gpus_per_trial=0, hardware="AMD EPYC",
                 versions={"tensorflow": "2.20.0", "pytorch": "2.14.1"},
                 arm_of={"tensorflow": "tensorflow", "pytorch": "pytorch"})
GPU = dataclasses.replace(CPU, profile="paper", device_kinds=("gpu",), gpus_per_trial=1, hardware="NVIDIA H100")


def _values(ratio: float, n: int = 12, sd: float = 0.03, seed: int = 0, metric: str = "time_s",
            config_id: str = "c00", phase: str = "train") -> pd.DataFrame:
    """n blocks of one paired trial per arm: tensorflow = ratio x pytorch, each with log-normal noise."""
    rng = np.random.default_rng(seed)
    base = 2.0 * np.exp(rng.normal(0, sd, n))
    tf = base * ratio * np.exp(rng.normal(0, sd, n))
    rows = [{"arm": arm, "block": i, "config_id": config_id, "metric": metric, "phase": phase, "value": float(v)}
            for arm, vals in (("tensorflow", tf), ("pytorch", base)) for i, v in enumerate(vals)]
    return pd.DataFrame(rows)


def _claim(**kw: Any) -> Claim:
    base: dict[str, Any] = {"id": "C1", "source": "Fig. 4", "statement": "a finding", "kind": "direction",
                            "metric": "time_s", "phase": "train", "arms": ("tensorflow", "pytorch"),
                            "direction": "greater"}
    base.update(kw)
    c = Claim(**base)
    c.check("claims[0]")
    return c


ONE = {"c00": {}}


def _verdict(claim: Claim, use: pd.DataFrame, ctx: RunContext = CPU, configs: dict[str, Any] | None = None) -> Any:
    return judge_claim(claim, use, configs or ONE, ctx, 0.05)


# --------------------------------------------------------------------------- direction


def test_direction_replicated_contradicted_inconclusive() -> None:
    c = _claim(kind="direction", direction="greater")  # the paper: tensorflow slower (TF/PT > 1)
    assert _verdict(c, _values(1.25)).verdict == "replicated"
    v = _verdict(c, _values(0.8))
    assert v.verdict == "contradicted" and v.estimate < 1 and "opposite" in v.reason
    v = _verdict(c, _values(1.0, sd=0.2, seed=3))
    assert v.verdict == "inconclusive" and v.n_needed and v.n_needed > 12
    assert "repetitions" in v.reason


def test_direction_with_too_few_repetitions_is_inconclusive_not_decided() -> None:
    v = _verdict(_claim(), _values(2.0, n=4))
    assert v.verdict == "inconclusive" and "fewer than 10 repetitions" in v.reason


# --------------------------------------------------------------------------- difference


def test_difference_replicated_or_contradicted_by_equivalence() -> None:
    c = _claim(kind="difference", direction="", margin=0.05)
    assert _verdict(c, _values(0.7)).verdict == "replicated"
    v = _verdict(c, _values(1.0, sd=0.002))
    assert v.verdict == "contradicted", v
    assert _verdict(c, _values(1.0, sd=0.2, seed=5)).verdict == "inconclusive"


# --------------------------------------------------------------------------- magnitude


def test_magnitude_band_decides() -> None:
    c = _claim(kind="magnitude", direction="", paper_value=1.5, tolerance=0.1)
    assert _verdict(c, _values(1.5, sd=0.01)).verdict == "replicated"
    v = _verdict(c, _values(1.0, sd=0.01))
    assert v.verdict == "contradicted" and v.high < 1.35
    assert _verdict(c, _values(1.37, sd=0.08, seed=2)).verdict == "inconclusive"


def test_a_figure_reading_widens_the_band() -> None:
    exact = _claim(kind="magnitude", direction="", paper_value=1.5, tolerance=0.05)
    read = _claim(kind="magnitude", direction="", paper_value=1.5, tolerance=0.05, approximate=True, uncertainty=0.2)
    data = _values(1.25, sd=0.005)
    assert _verdict(exact, data).verdict == "contradicted"
    assert _verdict(read, data).verdict == "replicated"


# --------------------------------------------------------------------------- no difference


def test_no_difference_is_equivalence() -> None:
    c = _claim(kind="no_difference", direction="", margin=0.05)
    assert _verdict(c, _values(1.0, sd=0.005)).verdict == "replicated"
    assert _verdict(c, _values(1.3, sd=0.01)).verdict == "contradicted"
    v = _verdict(c, _values(1.0, sd=0.15, seed=4))
    assert v.verdict == "inconclusive" and v.n_needed and v.n_needed > 12


# --------------------------------------------------------------------------- trend


def _sweep(slope: float, sd: float = 0.02, seed: int = 0) -> tuple[pd.DataFrame, dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows, configs = [], {}
    for i, bs in enumerate((16, 32, 64, 128)):
        for model in ("resnet18", "vgg16"):
            cid = f"c{i}{model[0]}"
            configs[cid] = {"batch_size": bs, "model": model}
            for arm in ("tensorflow", "pytorch"):
                for r in range(5):
                    v = float(np.exp(slope * np.log2(bs) + rng.normal(0, sd)))
                    rows.append({"arm": arm, "block": r, "config_id": cid, "metric": "time_s", "phase": "infer",
                                 "value": v})
    return pd.DataFrame(rows), configs


def test_trend_verdicts_within_strata() -> None:
    c = _claim(kind="trend", direction="", phase="infer", factor="batch_size", trend="decreasing")
    falls, configs = _sweep(-0.3)
    assert _verdict(c, falls, configs=configs).verdict == "replicated"
    rises, configs = _sweep(+0.3)
    assert _verdict(c, rises, configs=configs).verdict == "contradicted"
    flat, configs = _sweep(0.0, sd=0.3, seed=7)
    assert _verdict(c, flat, configs=configs).verdict == "inconclusive"
    up_to = _claim(kind="trend", direction="", phase="infer", factor="batch_size", trend="decreasing", up_to=8.0)
    v = _verdict(up_to, falls, configs=configs)
    assert v.verdict == "not testable" and "no configuration" in v.reason


# --------------------------------------------------------------------------- scope and configurations


def test_each_scope_needs_every_configuration_and_one_contradiction_suffices() -> None:
    use = pd.concat([_values(1.3, config_id="a"), _values(1.3, config_id="b", seed=1)])
    configs = {"a": {"case": "mnist"}, "b": {"case": "cifar10"}}
    assert _verdict(_claim(), use, configs=configs).verdict == "replicated"
    mixed = pd.concat([_values(1.3, config_id="a"), _values(0.7, config_id="b", seed=1)])
    v = _verdict(_claim(), mixed, configs=configs)
    assert v.verdict == "contradicted" and "b" in v.reason
    only_a = _verdict(_claim(where={"case": "mnist"}), mixed, configs=configs)
    assert only_a.verdict == "replicated" and [r["config_id"] for r in only_a.per_config] == ["a"]


def test_overall_scope_uses_configurations_as_units() -> None:
    parts = [_values(r, n=2, config_id=f"k{i}", seed=i) for i, r in enumerate((1.2, 1.3, 1.25, 1.4, 1.15))]
    configs = {f"k{i}": {"case": f"d{i}"} for i in range(5)}
    c = _claim(scope="overall")
    v = _verdict(c, pd.concat(parts), configs=configs)
    assert v.verdict == "replicated" and v.n == 5 and "geometric mean of 5" in v.value_text
    assert _verdict(_claim(), pd.concat(parts), configs=configs).verdict == "inconclusive"  # 2 reps each: no test


# --------------------------------------------------------------------------- not testable


def test_a_gpu_claim_on_a_cpu_run_is_not_testable_never_contradicted() -> None:
    c = _claim(device="gpu", hardware="NVIDIA GTX 1050 laptop", versions={"tensorflow": "1.12"})
    v = _verdict(c, _values(0.7))  # the CPU run shows the opposite, significantly
    assert v.verdict == "not testable"
    assert "GPU (NVIDIA GTX 1050 laptop)" in v.reason and "the CPU" in v.reason
    assert v.value_text and v.estimate < 1  # shown for information
    assert any("tensorflow 1.12" in d for d in v.differences)
    assert _verdict(c, _values(1.3), ctx=GPU).verdict == "replicated"


def test_other_reasons_for_not_testable() -> None:
    two_gpu = _claim(gpus=2, device="gpu")
    assert "2-GPU claim" in _verdict(two_gpu, _values(1.3), ctx=GPU).reason
    missing = _verdict(_claim(metric="gpu_util_pct"), _values(1.3))
    assert missing.verdict == "not testable" and "no gpu_util_pct values" in missing.reason
    by_design = _claim(untestable="the paper measured an Apple M1, which the kit does not run on", metric="")
    v = _verdict(by_design, _values(1.3))
    assert v.verdict == "not testable" and "Apple M1" in v.reason
    refused = dataclasses.replace(CPU, refusal="the arms ran on different devices")
    assert _verdict(_claim(), _values(1.3), ctx=refused).reason == "the arms ran on different devices"

    def short(metric: str, phase: str, arms: tuple[str, ...], cid: str | None) -> str | None:
        return "tensorflow train phase median 0.05 s = 0.5 sampling periods: the hypothesis is not tested"

    v = judge_claim(_claim(), _values(1.3), ONE, CPU, 0.05, short)
    assert v.verdict == "not testable" and "the claim is not tested" in v.reason


def test_headline_and_ledger_round_trip() -> None:
    claims = [_claim(id="C1"), _claim(id="C2", device="gpu"), _claim(id="C3", direction="less")]
    ledger = judge(claims, _values(1.3), ONE, CPU, 0.05)
    assert [r.verdict for r in ledger.rows] == ["replicated", "not testable", "contradicted"]
    assert ledger.headline == "1 of 3 claims replicated, 1 contradicted, 1 not testable on this host"
    again = Ledger.from_json(ledger.as_dict(), "analysis.json")
    assert again.as_dict() == ledger.as_dict()
    bad = ledger.as_dict()
    bad["rows"][0]["verdict"] = "proven"
    with pytest.raises(Exception, match=r"claims.rows\[0\].verdict"):
        Ledger.from_json(bad, "analysis.json")
    assert headline([]).startswith("this experiment lists no claims")


# --------------------------------------------------------------------------- the spec


def _spec_with(tmp_path: Path, block: str) -> Path:
    p = tmp_path / "experiment.toml"
    p.write_text(LENET.read_text() + "\n" + block)
    return p


@pytest.mark.parametrize(("block", "where"), [
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "sideways"\nmetric = "time_s"\n'
     'arms = ["tensorflow", "pytorch"]\n', "claims[0].kind"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\nmetric = "time_s"\n'
     'arms = ["tensorflow", "pytorch"]\n', "claims[0].direction"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "magnitude"\nmetric = "time_s"\n'
     'arms = ["tensorflow", "pytorch"]\npaper_value = 1.2\n', "claims[0].tolerance"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
     'metric = "speed"\narms = ["tensorflow", "pytorch"]\n', "claims[0].metric"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
     'metric = "time_s"\narms = ["tensorflow", "mxnet"]\n', "claims[0].arms[1]"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
     'metric = "time_s"\narms = ["tensorflow", "pytorch"]\nwhere = { batch_size = 64 }\n', "claims[0].where.batch_size"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
     'metric = "time_s"\narms = ["tensorflow", "pytorch"]\nwhere = { batch_size = { a = 1 } }\n',
     "claims[0].where.batch_size"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "trend"\ntrend = "increasing"\n'
     'metric = "time_s"\narms = ["pytorch"]\nfactor = "batch_size"\n', "claims[0].factor"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
     'metric = "time_s"\narms = ["tensorflow", "pytorch"]\ndevice = "tpu"\n', "claims[0].device"),
    ('[[claims]]\nid = "X9"\nsource = ""\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
     'metric = "time_s"\narms = ["tensorflow", "pytorch"]\n', "claims[0].source"),
    ('[[claims]]\nid = "X9"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
     'metric = "time_s"\narms = ["tensorflow", "pytorch"]\nversions = { tensorflow = 1.12 }\n',
     "claims[0].versions.tensorflow"),
    ('[profiles.quick.claims]\nid = "X9"\n', "profiles.quick.claims"),
])
def test_invalid_claims_are_refused_with_the_key_path(tmp_path: Path, block: str, where: str) -> None:
    text = LENET.read_text()
    if block.startswith("[profiles"):
        p = tmp_path / "experiment.toml"
        p.write_text(text.replace("[profiles.quick.dataset]", '[[profiles.quick.claims]]\nid = "X9"\n'
                                                              '[profiles.quick.dataset]', 1))
        with pytest.raises(SpecError, match=r"profiles\.quick\.claims.*cannot replace what the paper claimed"):
            load_spec(p)
        return
    # existing claims in the file come first: count them to name the new one's index
    n = text.count("[[claims]]")
    with pytest.raises(SpecError) as err:
        load_spec(_spec_with(tmp_path, block))
    assert where.replace("claims[0]", f"claims[{n}]") in str(err.value)


def test_every_bundled_claim_filter_matches_a_configuration_of_the_paper_protocol() -> None:
    """Filter values are not checked at load (a copy may run fewer cases), so a typo in a bundled experiment
    would leave its claim not testable for good: each filter must select a configuration the paper profile runs."""
    for path in sorted((ROOT / "experiments").glob("*/experiment.toml")):
        spec = load_spec(path)
        configs = spec.configurations()
        for c in spec.claims:
            if not c.untestable:
                assert any(c.matches(cfg) for cfg in configs), (path.parent.name, c.id, c.where)
                for key, want in c.where.items():
                    for v in want if isinstance(want, list) else [want]:
                        assert any(cfg.get(key) == v for cfg in configs), (path.parent.name, c.id, key, v)


def test_duplicate_ids_and_the_manifest_copy_is_validated_again(tmp_path: Path) -> None:
    one = ('[[claims]]\nid = "Z1"\nsource = "Fig. 1"\nstatement = "x"\nkind = "direction"\ndirection = "less"\n'
           'metric = "time_s"\narms = ["tensorflow", "pytorch"]\n')
    with pytest.raises(SpecError, match=r"claims\[\d+\]\.id"):
        load_spec(_spec_with(tmp_path, one + "\n" + one))
    crafted = [{"id": "C1", "source": "s", "statement": "x", "kind": "direction", "direction": "up",
                "metric": "time_s", "arms": ["tensorflow", "pytorch"]}]
    with pytest.raises(SpecError, match=r"manifest.json: spec.claims: claims\[0\].direction"):
        parse_claims(crafted, ["tensorflow", "pytorch"], "manifest.json: spec.claims")
    huge = [dict(crafted[0], direction="less", statement="x" * 5000)]
    with pytest.raises(SpecError, match=r"claims\[0\].statement"):
        parse_claims(huge, ["tensorflow", "pytorch"], "manifest.json: spec.claims")


# --------------------------------------------------------------------------- the report, the terminal, kit list

GOLDEN_RUN = ROOT / "tests" / "data" / "golden" / "run"
GOLDEN_CLAIMS = [
    {"id": "P1", "source": "Fig. 4", "statement": "TensorFlow trains more slowly than PyTorch", "kind": "direction",
     "metric": "time_s", "phase": "train", "arms": ["tensorflow", "pytorch"], "direction": "greater",
     "paper_text": "TF 41.3 s, PT 35.2 s (Table 5) & 50% more", "device": "any"},
    {"id": "P2", "source": "Table 3", "statement": "PyTorch's GPU use is lower", "kind": "direction",
     "metric": "gpu_util_pct", "phase": "train", "arms": ["tensorflow", "pytorch"], "direction": "greater",
     "device": "gpu", "hardware": "GTX 1050"},
]


def _golden_with_claims(tmp_path: Path) -> Path:
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run)
    man = json.loads((run / "manifest.json").read_text())
    man["spec"]["claims"] = GOLDEN_CLAIMS
    (run / "manifest.json").write_text(json.dumps(man))
    return run


def test_the_report_opens_with_the_claims_and_latex_has_the_table(tmp_path: Path) -> None:
    from kit.analysis.analyze import analyze_run
    from kit.report import write_report

    run = _golden_with_claims(tmp_path)
    analysis = analyze_run(run)
    ledger = analysis["claims"]
    assert [r["verdict"] for r in ledger["rows"]] == ["inconclusive", "not testable"]
    assert ledger["headline"] == "0 of 2 claims replicated, 1 inconclusive, 1 not testable on this host"
    write_report(run, analysis, ("html", "latex"))
    html = (run / "report" / "index.html").read_text()
    body = html[html.index("<body>"):]
    sections = [body.index(f'<section id="{s}">') for s in ("claims", "findings", "figures", "hypotheses", "threats", "goal")]
    assert sections == sorted(sections)  # the paper's findings come before everything else
    assert "Did the paper&#39;s findings hold?" in html or "Did the paper's findings hold?" in html
    assert "0 of 2 claims replicated, 1 inconclusive, 1 not testable on this host" in html
    assert "the paper measured this on a GPU (GTX 1050)" in html
    latex = run / "report" / "latex"
    tex = (latex / "report.tex").read_text()
    assert tex.index("Did the paper's findings hold?") < tex.index(r"\section{Findings}")
    table = (latex / "tables" / "claims.tex").read_text()
    assert r"\label{tab:claims}" in table and r"50\% more" in table and r"TF 41.3 s, PT 35.2 s (Table 5) \&" in table


def test_kit_report_prints_the_claims_first_and_kit_list_claims(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kit.cli import app

    run = _golden_with_claims(tmp_path)
    res = CliRunner().invoke(app, ["report", str(run), "--format", "html"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert res.output.index("Did the paper's findings hold?") < res.output.index("Hypotheses")
    assert "not testable" in res.output and "P2 (Table 3)" in res.output
    res = CliRunner().invoke(app, ["list", "--claims"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "what the paper claimed" in res.output


# --------------------------------------------------------------------------- accuracy claims need the paper's training

DLBENCH = ROOT / "experiments" / "elshawi_dlbench" / "experiment.toml"


def _configs_of(path: Path, profile: str) -> dict[str, Any]:
    return {f"c{i:02d}": cfg for i, cfg in enumerate(load_spec(path, profile).configurations())}


@pytest.mark.parametrize(("path", "profile", "case", "why"), [
    (DLBENCH, "quick", "cifar10", "trains on synthetic data: its accuracy means nothing"),
    (DLBENCH, "quick", "mnist", "trains configuration case=mnist otherwise than the paper (batch_size, epochs"),
    (LENET, "quick", None, "otherwise than the paper (epochs, steps_per_epoch"),
])
def test_accuracy_of_a_profile_that_trains_otherwise_is_not_the_papers(path: Path, profile: str, case: str | None,
                                                                       why: str) -> None:
    from _runs import bare_manifest

    from kit.analysis.analyze import _untrained

    configs = _configs_of(path, profile)
    man = bare_manifest(profile=profile, spec_source={"path": str(path), "text": path.read_text()})
    out = _untrained(man, configs)
    cid = next(c for c, cfg in configs.items() if cfg.get("case") == case)
    assert why in out[cid], out[cid]
    assert _untrained(bare_manifest(profile="paper", spec_source={"path": str(path), "text": path.read_text()}),
                      _configs_of(path, "paper")) == {}  # the paper protocol: every accuracy is the paper's


def test_an_accuracy_claim_skips_untrained_configurations() -> None:
    c = _claim(metric="accuracy", phase="infer", kind="no_difference", direction="", margin=0.01)
    use = pd.concat([_values(1.0, sd=0.001, metric="accuracy", phase="infer", config_id="a"),
                     _values(1.0, sd=0.001, metric="accuracy", phase="infer", config_id="b", seed=1)])
    configs = {"a": {"case": "mnist"}, "b": {"case": "cifar10"}}
    ctx = dataclasses.replace(CPU, untrained={"b": "configuration case=cifar10 trains on synthetic data"})
    v = judge_claim(c, use, configs, ctx, 0.05)
    assert v.verdict == "replicated" and [r["config_id"] for r in v.per_config] == ["a"]
    only_b = judge_claim(_claim(metric="accuracy", phase="infer", kind="no_difference", direction="", margin=0.01,
                                where={"case": "cifar10"}), use, configs, ctx, 0.05)
    assert only_b.verdict == "not testable" and "synthetic data" in only_b.reason


def test_compare_across_hosts_lists_claims_whose_verdict_changed(tmp_path: Path) -> None:
    import json
    import shutil

    from kit.compare import CompareOptions, compare_runs

    a = _golden_with_claims(tmp_path)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    man = json.loads((b / "manifest.json").read_text())
    man["host"].update(hostname="other", cpu_model="Intel Xeon Platinum 8480+",
                       cpu={"isa": ["avx512f", "amx_tile"]})
    (b / "manifest.json").write_text(json.dumps(man))
    for f in (b / "trials").glob("*-tensorflow.json"):  # on host B TensorFlow trains 50 % more slowly
        rec = json.loads(f.read_text())
        rec["results"]["train_time_s"] *= 1.5
        f.write_text(json.dumps(rec))
    res = compare_runs(a, b, CompareOptions(allow_different_hosts=True))
    (changed,) = res["claims_changed"]
    assert (changed["id"], changed["verdict_a"], changed["verdict_b"]) == ("P1", "inconclusive", "replicated")
    assert any(w.startswith("host.cpu.isa: None vs avx512f,amx_tile (CPU generation/ISA") for w in
               changed["could_explain"]), changed["could_explain"]
    assert not any(w.startswith("host.hostname") for w in changed["could_explain"])  # bookkeeping, not a cause


def test_claims_descriptions_and_estimates_are_not_protocol() -> None:
    """Editing what the paper claimed (or a profile's words or estimate) between a kill and --resume changes no
    measurement: the resume check compares the protocol only."""
    from kit.runner import protocol_differences, protocol_of

    recorded = {"workload": {"epochs": 3}, "claims": [{"id": "C1"}], "profile_description": "old",
                "profile_estimate_s": 200.0}
    now = {"workload": {"epochs": 3}, "claims": [{"id": "C1"}, {"id": "C2"}], "profile_description": "new",
           "profile_estimate_s": 240.0}
    assert protocol_differences(protocol_of(now), protocol_of(recorded), strict=True) == []
    changed = {**now, "workload": {"epochs": 4}}
    assert protocol_differences(protocol_of(changed), protocol_of(recorded)) == ["spec.workload.epochs: 3 recorded, 4 now"]
