"""The paper's claims as data and their verdicts (kit.claim_spec, kit.analysis.claims).

Each kind of claim gets planted data for each verdict it can reach: replicated, contradicted,
inconclusive, not testable. The data are drawn with a fixed seed from log-normal noise around a
planted ratio, so a verdict is what the procedure says about data whose truth is known.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kit.analysis.claim_records import BY_DESIGN, ConfigFacts, Ledger, RunContext, headline
from kit.analysis.claim_tests import min_n
from kit.analysis.claims import judge, judge_claim
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
    """Below the simulated minimum (paired direction: 12, where one arm's occasional slow trials no longer cost the
    level; claim_tests.MIN_N) a clear effect still gets no verdict, and the reason names the n that would."""
    need = min_n("direction", "each", "paired").enforced
    assert need == 12
    v = _verdict(_claim(), _values(2.0, n=4))
    assert v.verdict == "inconclusive" and f"{need} repetitions per arm would decide it" in v.reason
    assert v.n_needed == need
    assert _verdict(_claim(), _values(2.0, n=need)).verdict == "replicated"


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


def test_overall_scope_takes_the_networks_as_units_from_the_simulated_minimum() -> None:
    """Issue 38 item 3: configurations nested in a network are summarised per network first and the test runs
    across networks, only where 2/2^J < alpha (J >= 6 at 0.05), and only from the repetitions per configuration the
    simulation found the procedure needs (claim_tests.MIN_N). Each configuration its own network here."""
    need = min_n("direction", "overall", "networks").enforced
    ratios = (1.2, 1.3, 1.25, 1.4, 1.15, 1.22, 1.33)
    parts = [_values(r, n=max(need, 2), config_id=f"k{i}", seed=i) for i, r in enumerate(ratios)]
    configs = {f"k{i}": {"case": f"d{i}"} for i in range(len(ratios))}
    c = _claim(scope="overall")
    v = _verdict(c, pd.concat(parts), configs=configs)
    assert v.verdict == "replicated" and v.n == 7 and "geometric mean over 7" in v.value_text
    five = {k: configs[k] for k in list(configs)[:5]}
    v5 = _verdict(c, pd.concat(parts[:5]), configs=five)
    assert v5.verdict == "inconclusive" and "6 " in v5.reason and "would" in v5.reason, v5.reason
    if need > 1:  # below the simulated minimum: no verdict, and the repetitions that would give one
        few = [_values(r, n=need - 1, config_id=f"k{i}", seed=i) for i, r in enumerate(ratios)]
        vf = _verdict(c, pd.concat(few), configs=configs)
        assert vf.verdict == "inconclusive" and f"{need} repetitions per arm would decide it" in vf.reason, vf.reason


def test_overall_scope_no_longer_counts_configurations_of_one_network_as_independent() -> None:
    """The old failure mode: 5 networks x 3 configurations, every configuration's ratio above 1. With the
    configurations as units (15 > 6) the claim was "replicated" whatever the networks' spread; with the network as
    the unit 5 networks cannot decide it, and the reason says how many would."""
    need = max(min_n("direction", "overall", "networks").enforced, 2)
    ratios = [1.1 + 0.03 * i for i in range(15)]
    parts = [_values(r, n=need, config_id=f"k{i}", seed=i) for i, r in enumerate(ratios)]
    configs = {f"k{i}": {"case": f"d{i}", "batch_size": 16 * (1 + i % 3)} for i in range(15)}
    nets = dataclasses.replace(CPU, facts={f"k{i}": ConfigFacts(network=f"net{i // 3}") for i in range(15)})
    c = _claim(scope="overall")
    by_network = judge_claim(c, pd.concat(parts), configs, nets, 0.05)
    assert by_network.verdict == "inconclusive" and "5 networks cannot decide" in by_network.reason, by_network.reason
    assert "6 networks would" in by_network.reason
    assert judge_claim(c, pd.concat(parts), configs, CPU, 0.05).verdict == "replicated"  # 15 separate networks


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
    again = Ledger.from_json(ledger.to_json(), "analysis.json")
    assert again.to_json() == ledger.to_json()
    bad = ledger.to_json()
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
    ledger = analysis.claims
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
    assert "not testable" in res.output and "P2: differs in the device" in res.output
    assert "Would test it: kit run golden --profile paper on a host with one NVIDIA GPU" in res.output
    res = CliRunner().invoke(app, ["list", "--claims"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "what the paper claimed" in res.output
    for path in sorted((ROOT / "experiments").glob("*/experiment.toml")):  # every claim, the new ones included
        claims = load_spec(path).claims
        section = res.output[res.output.index(f"{path.parent.name}: what the paper claimed ({len(claims)})"):]
        section = section[:section.find("what the paper claimed", 30) % (len(section) + 1)]
        assert all(re.search(rf"│ {re.escape(c.id)} +│", section) for c in claims), path.parent.name


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

    from kit.analysis.claim_facts import untrained_configs as _untrained

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
    # the golden run has 11 paired repetitions, below the 12 a paired direction claim needs (claim_tests.MIN_N):
    # P1 as "no difference within 5 %", whose procedure decides from the kit's floor of 10
    man = json.loads((a / "manifest.json").read_text())
    p1 = man["spec"]["claims"][0]
    p1.pop("direction")
    p1.update(kind="no_difference", margin=0.05, statement="TensorFlow and PyTorch train equally fast")
    (a / "manifest.json").write_text(json.dumps(man))
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
    res = compare_runs(a, b, CompareOptions(allow_different_hosts=True)).to_json()
    (changed,) = res["claims_changed"]
    assert (changed["id"], changed["verdict_a"], changed["verdict_b"]) == ("P1", "inconclusive", "contradicted")
    assert any(w.startswith("host.cpu.isa: None vs avx512f,amx_tile (CPU generation/ISA") for w in
               changed["could_explain"]), changed["could_explain"]
    assert not any(w.startswith("host.hostname") for w in changed["could_explain"])  # bookkeeping, not a cause


def test_claims_descriptions_and_estimates_are_not_protocol() -> None:
    """Editing what the paper claimed (or a profile's words or estimate) between a kill and --resume changes no
    measurement: the resume check compares the protocol only."""
    from kit.run.resume import protocol_differences, protocol_of

    recorded = {"workload": {"epochs": 3}, "claims": [{"id": "C1"}], "profile_description": "old",
                "profile_estimate_s": 200.0}
    now = {"workload": {"epochs": 3}, "claims": [{"id": "C1"}, {"id": "C2"}], "profile_description": "new",
           "profile_estimate_s": 240.0}
    assert protocol_differences(protocol_of(now), protocol_of(recorded), strict=True) == []
    changed = {**now, "workload": {"epochs": 4}}
    assert protocol_differences(protocol_of(changed), protocol_of(recorded)) == ["spec.workload.epochs: 3 recorded, 4 now"]


# --------------------------------------------------------------------------- conditions (issue 38, item 2)

XEON = dataclasses.replace(CPU, profile="paper", experiment="dlbench", cpu_model="Intel(R) Xeon(R) Gold 6148 CPU",
                           facts={"c00": ConfigFacts(device="cpu", threads=64, network="cnn")}, paper_estimate_s=4200)


def test_a_run_that_differs_in_a_condition_is_not_testable_with_its_figure_and_what_would_test_it() -> None:
    """CPU threads, the CPU model, a tied version, a stand-in, the profile's protocol: each blocks a verdict (the
    run below shows the opposite, significantly), names what differs, shows the figure and the command that would
    test it; the same claim on a run that has the conditions is judged."""
    c = _claim(device="cpu", threads=64, cpu_model="Intel Xeon", tied_versions={"tensorflow": ">=2.0"})
    assert _verdict(c, _values(1.3), XEON).verdict == "replicated"
    cases = {
        "the CPU threads: the paper's 64, this run's 1": {"facts": {"c00": ConfigFacts(device="cpu", threads=1)}},
        "the CPU: the paper's Intel Xeon, this run's AMD EPYC 7763": {"cpu_model": "AMD EPYC 7763"},
        "the tensorflow version: the paper ties its finding to tensorflow >=2.0, this run used 1.15.5":
            {"versions": {"tensorflow": "1.15.5", "pytorch": "2.7.1"}},
        "the data: a synthetic stand-in": {"facts": {"c00": ConfigFacts(device="cpu", threads=64,
                                                                       data="a synthetic stand-in", data_sized=True)}},
        "the protocol: the paper profile runs otherwise than the paper (epochs, steps_per_epoch)":
            {"facts": {"c00": ConfigFacts(device="cpu", threads=64, protocol=("epochs", "steps_per_epoch"))}},
    }
    for words, change in cases.items():
        v = _verdict(c, _values(0.7), dataclasses.replace(XEON, **change))
        assert v.verdict == "not testable" and v.reason.startswith("differs in ") and words in v.reason, v.reason
        assert v.estimate is not None and v.estimate < 1 and v.value_text  # this run's figure, for information
        assert v.would_test == ("`kit run dlbench --profile paper` on a CPU host (Intel Xeon), 64 CPU threads for "
                                "each trial, with tensorflow >=2.0 in the trials' image, about 70 min"), v.would_test
    # a timing that depends only on shapes may be judged on a stand-in of the paper's sizes, never on another size
    shapes = dataclasses.replace(c, data="shapes")
    sized = dataclasses.replace(XEON, facts={"c00": ConfigFacts(device="cpu", threads=64, data="synthetic",
                                                                data_sized=True)})
    assert _verdict(shapes, _values(1.3), sized).verdict == "replicated"
    unsized = dataclasses.replace(XEON, facts={"c00": ConfigFacts(device="cpu", threads=64, data="synthetic")})
    assert _verdict(shapes, _values(1.3), unsized).verdict == "not testable"


def test_every_listed_configuration_must_be_run() -> None:
    """"Across the five models" is not judged from one model (Patel C11 was "replicated" from one): the claim
    names what is missing; a listed configuration left out for its conditions is named too."""
    five = ["cpu_resnet18", "cpu_resnet152", "cpu_vgg16", "cpu_mobilenet_v2", "cpu_efficientnet_b4"]
    c = _claim(where={"case": five}, scope="overall", direction="less")
    v = _verdict(c, _values(0.7, config_id="a"), configs={"a": {"case": "cpu_mobilenet_v2"}})
    assert v.verdict == "not testable" and "runs none with case = cpu_resnet18, case = cpu_resnet152" in v.reason
    two = {"a": {"case": "mnist"}, "b": {"case": "cifar10"}}
    use = pd.concat([_values(1.3, config_id="a"), _values(1.3, config_id="b", seed=1)])
    ctx = dataclasses.replace(CPU, facts={"a": ConfigFacts(device="cpu"), "b": ConfigFacts(device="gpu")})
    listed = _verdict(_claim(device="cpu", where={"case": ["mnist", "cifar10"]}), use, ctx, two)
    assert listed.verdict == "not testable" and "the device: the paper measured this on a CPU" in listed.reason
    unlisted = _verdict(_claim(device="cpu"), use, ctx, two)  # no list: judged where the conditions hold, b named
    assert unlisted.verdict == "replicated" and any("configuration b left out" in d for d in unlisted.differences)


def _two_configs(ratio: float, key: str = "case", a: str = "ddp", b: str = "single", n: int = 12,
                 sd: float = 0.02) -> tuple[pd.DataFrame, dict[str, Any]]:
    """PyTorch only, in two configurations: ``a`` = ratio x ``b`` (different blocks: the kit's blocks hold one)."""
    rng = np.random.default_rng(3)
    rows = [{"arm": "pytorch", "block": i + off, "config_id": cid, "metric": "throughput_ips", "phase": "train",
             "value": float(100 * r * np.exp(rng.normal(0, sd)))}
            for cid, r, off in (("ca", ratio, 0), ("cb", 1.0, 100)) for i in range(n)]
    return pd.DataFrame(rows), {"ca": {key: a}, "cb": {key: b}}


def test_arms_may_name_configurations_of_one_framework_and_a_threshold() -> None:
    """DDP vs DataParallel, DDP's speed-up against 1.8 (near-linear on two GPUs), CPU vs GPU within a framework:
    the claim's arms select configurations, paired on the other keys and judged unpaired."""
    speedup = _claim(metric="throughput_ips", arms=("pytorch@case=ddp", "pytorch@case=single"), threshold=1.8)
    assert "pytorch@case=ddp/(1.8 x pytorch@case=single)" in _verdict(speedup, *_two_configs(1.95)[:1],
                                                                    configs=_two_configs(1.95)[1]).quantity
    use, configs = _two_configs(1.95)
    v = _verdict(speedup, use, configs=configs)
    assert v.verdict == "replicated" and v.per_config[0]["config_id"] == "ca~cb" and not v.per_config[0]["paired"]
    assert 1.02 < v.estimate < 1.15  # A/(1.8 B): 1.95/1.8
    use, configs = _two_configs(1.5)
    assert _verdict(speedup, use, configs=configs).verdict == "contradicted"
    # devices: the qualifier reads where each configuration's trials ran
    use, configs = _two_configs(0.8, key="device", a="cpu", b="gpu")
    ctx = dataclasses.replace(CPU, facts={"ca": ConfigFacts(device="cpu"), "cb": ConfigFacts(device="gpu")})
    dev = _claim(metric="throughput_ips", arms=("pytorch@device=cpu", "pytorch@device=gpu"), direction="less")
    assert _verdict(dev, use, ctx, configs).verdict == "replicated"
    alone = _verdict(dev, use[use["config_id"] == "ca"], ctx, {"ca": configs["ca"]})
    assert alone.verdict == "not testable" and "beside one of" in alone.reason
    assert "on the CPU and on the GPU in one run" in alone.would_test


def test_each_network_judges_every_network_on_its_own() -> None:
    """Dai C1: opposite gaps in two networks are two differences, not a mean of 1; a network without a gap
    keeps the claim from being replicated."""
    def sweep(ratios: dict[str, float]) -> tuple[pd.DataFrame, dict[str, Any], RunContext]:
        parts, configs, facts = [], {}, {}
        for j, (net, r) in enumerate(ratios.items()):
            for i in range(8):
                cid = f"{net}{i}"
                configs[cid] = {"model": net, "case": f"r{i}"}
                facts[cid] = ConfigFacts(device="gpu", network=net)
                parts.append(_values(r * (1 + 0.03 * (i - 3.5)), n=3, config_id=cid, seed=10 * j + i))
        return pd.concat(parts), configs, dataclasses.replace(GPU, facts=facts)

    c = _claim(kind="difference", direction="", scope="each_network", device="gpu")
    use, configs, ctx = sweep({"resnet50": 1.3, "lstm_lm": 0.75})
    v = _verdict(c, use, ctx, configs)
    assert v.verdict == "replicated" and [r["network"] for r in v.per_config] == ["resnet50", "lstm_lm"], v.reason
    assert _verdict(dataclasses.replace(c, scope="overall"), use, ctx, configs).verdict != "replicated"
    use, configs, ctx = sweep({"resnet50": 1.3, "lstm_lm": 1.0})
    assert _verdict(c, use, ctx, configs).verdict in ("inconclusive", "contradicted")


def test_a_gap_whose_cause_the_kit_removed_is_recorded_never_contradicted() -> None:
    c = _claim(metric="accuracy", phase="infer", cause_removed="the authors' PyTorch code left dropout on at test")
    v = _verdict(c, _values(0.8, metric="accuracy", phase="infer"))  # the opposite, significantly
    assert v.verdict == "not testable" and v.reason.startswith("the kit removes the cause of the paper's gap")
    assert v.value_text and v.would_test == BY_DESIGN


def test_not_significant_at_the_papers_n_is_the_runs_test_at_that_n() -> None:
    c = _claim(kind="not_significant", direction="", paper_n=12)
    assert _verdict(c, _values(1.0, sd=0.05, seed=0)).verdict == "replicated"
    assert _verdict(c, _values(1.5, sd=0.02)).verdict == "contradicted"
    assert "paper's design (its first 12 repetitions per arm)" in _verdict(c, _values(1.0)).procedure


@pytest.mark.parametrize(("change", "where"), [
    ({"arms": ["pytorch@case", "pytorch"]}, "claims[0].arms[0]"),
    ({"arms": ["pytorch@device=tpu", "pytorch"]}, "claims[0].arms[0]"),
    ({"tied_versions": {"tensorflow": "two point oh"}}, "claims[0].tied_versions.tensorflow"),
    ({"data": "pixels"}, "claims[0].data"),
    ({"data": "shapes", "metric": "accuracy"}, "claims[0].data"),
    ({"threads": -1}, "claims[0].threads"),
    ({"kind": "not_significant", "direction": ""}, "claims[0].paper_n"),
    ({"kind": "magnitude", "paper_value": 2.0, "tolerance": 0.1, "threshold": 1.8}, "claims[0].threshold"),
    ({"scope": "somewhere"}, "claims[0].scope"),
])
def test_the_new_fields_are_validated_with_their_key_path(change: dict[str, Any], where: str) -> None:
    raw = {"id": "C1", "source": "s", "statement": "x", "kind": "direction", "direction": "less", "metric": "time_s",
           "arms": ["tensorflow", "pytorch"], **change}
    with pytest.raises(SpecError, match=where.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_claims([raw], ["tensorflow", "pytorch"], "manifest.json: spec.claims")


def test_no_quick_profile_runs_a_configuration_of_the_paper_protocol() -> None:
    """The quick profiles exist to test the kit, not the paper: every configuration of every quick (and smoke)
    profile differs from the paper profile's in its protocol or data, so no claim is judged on such a run (the
    rule is the comparison, not the profile's name: the scaling profile's paper configurations are judged)."""
    from _runs import bare_manifest

    from kit.analysis.claim_facts import claim_facts as _claim_facts

    for path in sorted((ROOT / "experiments").glob("*/experiment.toml")):
        for profile in load_spec(path).profiles[1:]:
            configs = {f"c{i:02d}": cfg for i, cfg in enumerate(load_spec(path, profile).configurations())}
            man = bare_manifest(profile=profile, spec_source={"path": str(path), "text": path.read_text()})
            facts, estimate = _claim_facts(man, [], configs)
            same = [configs[c] for c, f in facts.items() if not (f.protocol or f.data)]
            if profile == "scaling":
                assert same == [{"case": "single"}, {"case": "dp"}, {"case": "ddp"}], same
            elif profile == "paper-cpu":  # the paper's own CPU protocol (issue 42): every configuration is the paper's
                assert same == list(configs.values()), (path.parent.name, profile)
            else:
                assert same == [], (path.parent.name, profile, same)
            assert estimate == load_spec(path).profile_estimate_s


def test_the_report_groups_what_is_not_testable_by_reason() -> None:
    from kit.report.claims_view import claim_groups, id_ranges

    claims = [_claim(id=f"C{i}", device="gpu", hardware="GTX 1050") for i in range(1, 11)]
    claims.append(_claim(id="C11", untestable="the paper's KS test"))
    ledger = judge(claims, _values(1.3), ONE, dataclasses.replace(CPU, experiment="florencio2019_lenet",
                                                                 paper_estimate_s=4200), 0.05).to_json()
    groups = claim_groups(ledger["rows"])
    assert groups["judged"] == [] and [g["ids_text"] for g in groups["untested"]] == ["C1-C10", "C11"]
    first = groups["untested"][0]
    assert first["command"] == "kit run florencio2019_lenet --profile paper"
    assert first["host"] == "on a host with one NVIDIA GPU, about 70 min" and not first["by_design"]
    assert groups["untested"][1]["by_design"] and id_ranges(["C1", "C3", "C4", "C5", "C5b"]) == "C1, C3-C5, C5b"
    again = Ledger.from_json(ledger, "analysis.json")  # the new keys round-trip; a ledger without them still reads
    assert again.to_json() == Ledger.from_json(ledger, "x").to_json()
    old = {**ledger, "rows": [{k: v for k, v in r.items() if k not in ("would_test", "reading", "p", "p_adjusted",
                                                                      "family_size", "estimator", "networks_needed")}
                              for r in ledger["rows"]]}
    assert Ledger.from_json(old, "analysis.json").rows[0].would_test == ""


def test_a_paper_profile_whose_own_data_are_a_stand_in_blocks_claims_on_the_data_values() -> None:
    """The stand-in rule compares a run with the paper profile; where the paper profile itself runs synthetic data
    for a dataset the paper measured, a claim on the data's values (accuracy) is not the paper's either, while a
    claim on shapes may use a stand-in of the paper's sizes."""
    from _runs import bare_manifest

    from kit.analysis.claim_facts import claim_facts as _claim_facts

    path = ROOT / "experiments" / "elshawi_dlbench" / "experiment.toml"
    text = path.read_text().replace('dataset = { name = "cifar10", source = "python" }',
                                    'dataset = { name = "cifar10", source = "synthetic" }', 1)
    assert 'name = "cifar10", source = "synthetic"' in text
    configs = {"c00": next(c for c in load_spec(path).configurations() if c.get("case") == "cifar10")}
    man = bare_manifest(profile="paper", spec_source={"path": str(path), "text": text})
    facts, _ = _claim_facts(man, [], configs)
    assert facts["c00"].data == "a synthetic stand-in for cifar10, in the paper profile too"
    assert facts["c00"].data_sized and facts["c00"].protocol == ()
    untouched, _ = _claim_facts(bare_manifest(profile="paper", spec_source={"path": str(path),
                                                                           "text": path.read_text()}), [], configs)
    assert untouched["c00"].data == "" and untouched["c00"].protocol == ()
    ctx = dataclasses.replace(CPU, facts=facts)
    acc = _claim(metric="accuracy", kind="direction", direction="greater")
    got = _verdict(acc, _values(1.3, metric="accuracy"), ctx=ctx)
    assert got.verdict == "not testable" and "the data: a synthetic stand-in for cifar10" in got.reason
    shapes = _claim(data="shapes")
    assert "the data" not in _verdict(shapes, _values(1.3), ctx=ctx).reason


def test_a_not_significant_claim_from_a_design_that_cannot_reject_gets_no_verdict() -> None:
    """DLBench's Wilcoxon signed-rank over 5 runs: the smallest exact two-sided p is 2/2^5 = 0.0625, so its "not
    significant" held whatever the data. A true ratio of 3 must not be "replicated" by the same design, and five
    tied differences (where the normal approximation gives p < 0.05) must not "contradict" it."""
    from kit.analysis.claim_trends import attainable_p

    assert attainable_p(5, paired=True) == 0.0625 and attainable_p(5, paired=False) == pytest.approx(2 / 252)
    c = _claim(kind="not_significant", direction="", paper_n=5)
    for ratio in (1.0, 3.0):
        v = _verdict(c, _values(ratio, sd=0.02))
        assert v.verdict == "inconclusive" and "smallest two-sided p is 0.0625" in v.reason, v.reason
    base = np.array([1.0, 2.0, 3.0, 4.0, 5.0] * 2)
    tied = pd.DataFrame({"config_id": "c00", "metric": "time_s", "phase": "train",
                         "arm": ["tensorflow"] * 5 + ["pytorch"] * 5, "block": list(range(5)) * 2,
                         "value": np.concatenate([base[:5] + 3.0, base[:5]])})
    assert _verdict(c, tied).verdict == "inconclusive"
    # at the paper's n = 12 the same test can reject: a real gap contradicts, none replicates, power stated
    c12 = _claim(kind="not_significant", direction="", paper_n=12)
    assert _verdict(c12, _values(3.0, sd=0.02)).verdict == "contradicted"
    kept = _verdict(c12, _values(1.0, sd=0.05, seed=0))
    assert kept.verdict == "replicated" and "with power 80 %" in kept.reason


def test_a_device_claim_on_a_run_that_recorded_no_device_is_not_judged() -> None:
    unknown = dataclasses.replace(CPU, device_kinds=())
    v = _verdict(_claim(device="cpu"), _values(1.3), ctx=unknown)
    assert v.verdict == "not testable" and "this run recorded no device" in v.reason


def test_holm_across_claims_turns_a_verdict_that_does_not_survive_it_into_inconclusive() -> None:
    """Two claims each at p just under alpha: alone each stands; as one family of two, Holm's first step needs
    p < alpha/2, so neither survives, and the ledger says why."""
    from kit.analysis.claim_family import holm_claims

    got = holm_claims(["replicated", "contradicted", "not testable"], [0.03, 0.04, 0.001], 0.05)
    assert [g.verdict for g in got] == ["inconclusive", "inconclusive", "not testable"]
    assert got[0].family_size == 2 and got[0].p_adjusted == pytest.approx(0.06) and "Holm over the 2" in got[0].note
    strong = holm_claims(["replicated", "replicated"], [0.001, 0.04], 0.05)
    assert [g.verdict for g in strong] == ["replicated", "replicated"]  # 0.002 < 0.05, then 0.04 < 0.05
    both = judge([_claim(id="C1"), _claim(id="C2", metric="time_s")], _values(1.3), ONE, CPU, 0.05)
    assert all(r.family_size == 2 and r.p_adjusted is not None and r.p_adjusted >= (r.p or 0) for r in both.rows)


@pytest.mark.parametrize(("field", "value"), [("p", 7.5), ("p_adjusted", -3.0), ("family_size", -2), ("n", True),
                                              ("networks_needed", -9), ("n_needed", 10**12)])
def test_a_crafted_ledger_number_is_refused_with_its_key(field: str, value: Any) -> None:
    from kit.errors import AnalysisError

    ledger = judge([_claim()], _values(1.3), ONE, CPU, 0.05).to_json()
    ledger["rows"][0][field] = value
    with pytest.raises(AnalysisError, match=rf"claims\.rows\[0\]\.{field}"):
        Ledger.from_json(ledger, "analysis.json")


@pytest.mark.parametrize(("change", "where"), [
    ({"kind": "not_significant", "direction": "", "paper_n": 12, "scope": "overall"}, "claims[0].scope"),
    ({"kind": "trend", "direction": "", "factor": "batch_size", "trend": "increasing", "scope": "each_network",
      "arms": ["tensorflow"]}, "claims[0].scope"),
])
def test_scopes_a_kind_does_not_implement_are_refused(change: dict[str, Any], where: str) -> None:
    raw = {"id": "C1", "source": "s", "statement": "x", "kind": "direction", "direction": "less", "metric": "time_s",
           "arms": ["tensorflow", "pytorch"], **change}
    with pytest.raises(SpecError, match=where.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_claims([raw], ["tensorflow", "pytorch"], "manifest.json: spec.claims")
