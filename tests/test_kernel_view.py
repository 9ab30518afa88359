"""The Dai et al. study's host side of the kernel view: a profile trial's tables are untrusted input.

Real tables (tests/data/kernel_profiles/names.json, captured from both profilers) pass; each attack a crafted
result.json can make (oversized, garbage, impossible numbers, lying op types, markup and path-like names) is
performed and refused or neutralised; the analysis keeps profile configurations out of the factorial; the
report section renders with the wording the view needs.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kit.workloads import kernel_profile as kp
from tests._studies import study_module, study_sections

DATA = Path(__file__).resolve().parent / "data" / "kernel_profiles"
NAMES = json.loads((DATA / "names.json").read_text(encoding="utf-8"))
kernels = study_module("dai_single_gpu_factors", "kernels")
analysis = study_module("dai_single_gpu_factors", "analysis")
report = study_module("dai_single_gpu_factors", "report")


def _results(key: str) -> dict[str, Any]:
    return {"model": key.split("/")[1], "kernel_profile": copy.deepcopy(NAMES[key])}


@dataclass
class _Trial:
    trial_id: str
    arm: str
    config_id: str
    repetition: int
    status: str
    results: dict[str, Any]


@dataclass
class _Run:
    arms: tuple[str, ...]
    trials: list[_Trial] = field(default_factory=list)

    def finished(self, arm: str | None = None, config: str | None = None) -> list[_Trial]:
        return [t for t in self.trials if (arm is None or t.arm == arm) and (config is None or t.config_id == config)]


def _run(tf: dict[str, Any] | None = None, pt: dict[str, Any] | None = None) -> _Run:
    return _Run(("tensorflow", "pytorch"), [
        _Trial("r000-c16-tensorflow", "tensorflow", "c16", 0, "ok", tf or _results("tensorflow/resnet18/default")),
        _Trial("r001-c16-tensorflow", "tensorflow", "c16", 1, "skipped", {}),
        _Trial("r000-c16-pytorch", "pytorch", "c16", 0, "ok", pt or _results("pytorch/resnet18/default"))])


def test_real_tables_pass_and_match_by_op_type() -> None:
    for key in NAMES:
        tabs = kernels.read_profile(_results(key), key)
        assert set(tabs) == {"cpu"} and tabs["cpu"].rows
    (view,) = kernels.kernel_view(_run(), {"c16": {"model": "resnet18"}})
    assert view["problems"] == [] and view["domain"] == "cpu"
    assert view["arms"]["tensorflow"]["trial_id"] == "r000-c16-tensorflow"
    by = {r["op_type"]: r for r in view["by_type"]["rows"]}
    tf, pt = (kernels.read_profile(_results(f"{fw}/resnet18/default"), "t")["cpu"] for fw in ("tensorflow", "pytorch"))
    conv = by["conv_bwd"]
    assert conv["tensorflow_s_per_step"] == pytest.approx(tf.by_type_s["conv_bwd"] / tf.steps)
    assert conv["diff_s_per_step"] == pytest.approx(tf.by_type_s["conv_bwd"] / tf.steps - pt.by_type_s["conv_bwd"]
                                                    / pt.steps)  # TF - PT: the direction of the TF/PT ratio
    diffs = [abs(r["diff_s_per_step"]) for r in view["by_type"]["rows"]]
    assert diffs == sorted(diffs, reverse=True)


def _attack(mutate: Any) -> dict[str, Any]:
    res = _results("tensorflow/resnet18/default")
    mutate(res["kernel_profile"])
    return res


def _rows(p: dict[str, Any]) -> list[dict[str, Any]]:
    return p["tables"][0]["rows"]


ATTACKS = {
    "not a table": lambda p: p.update(tables=["x"]),
    "too many tables": lambda p: p.update(tables=p["tables"] * 3),
    "two cpu tables": lambda p: p.update(tables=p["tables"] * 2),
    "oversized rows": lambda p: p["tables"][0].update(rows=[{**_rows(p)[0], "name": f"op{i}"} for i in range(201)]),
    "unknown key": lambda p: p["tables"][0].update(evil=1),
    "unknown row key": lambda p: _rows(p)[0].update(href="javascript:alert(1)"),
    "wrong schema": lambda p: p.update(schema=99),
    "nan time": lambda p: _rows(p)[0].update(self_s=float("nan")),
    "infinite total": lambda p: p["tables"][0].update(total_s=float("inf")),
    "negative time": lambda p: _rows(p)[0].update(self_s=-1.0),
    "bool calls": lambda p: _rows(p)[0].update(calls=True),
    "huge calls": lambda p: _rows(p)[0].update(calls=10**12),
    "string steps": lambda p: p["tables"][0].update(steps="3"),
    "zero steps": lambda p: p["tables"][0].update(steps=0),
    "newline name": lambda p: _rows(p)[0].update(name="a\nb"),
    "huge name": lambda p: _rows(p)[0].update(name="x" * 10_000),
    "duplicate row": lambda p: _rows(p).append(dict(_rows(p)[0])),
    "rows over total": lambda p: p["tables"][0].update(total_s=1e-9),
    "unknown op type": lambda p: p["tables"][0]["by_type_s"].update(gpu_magic=1.0),
    "types not summing": lambda p: p["tables"][0]["by_type_s"].update(other=p["tables"][0]["by_type_s"]["other"] + 5),
    "domain": lambda p: p["tables"][0].update(domain="../../etc"),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_hostile_tables_are_refused(name: str) -> None:
    with pytest.raises(kernels.KernelTableError):
        kernels.read_profile(_attack(ATTACKS[name]), "r000-c16-tensorflow")


def test_a_refused_arm_is_reported_and_the_other_stands() -> None:
    bad = _attack(ATTACKS["nan time"])
    (view,) = kernels.kernel_view(_run(tf=bad), {"c16": {"model": "resnet18"}})
    assert len(view["problems"]) == 1 and view["problems"][0].startswith("tensorflow: refused:")
    assert "table" in view["arms"]["pytorch"] and "by_type" not in view
    gpu = _results("pytorch/resnet18/default")
    gpu["kernel_profile"]["tables"].append({**copy.deepcopy(gpu["kernel_profile"]["tables"][0]), "domain": "gpu"})
    (view,) = kernels.kernel_view(_run(pt=gpu), {"c16": {"model": "resnet18"}})
    assert view["domain"] == "cpu" and view["problems"] == [
        "GPU kernels only for pytorch: the frameworks are compared on their CPU ops"] and "by_type" in view
    (view,) = kernels.kernel_view(_Run(("tensorflow", "pytorch")), {"c16": {"model": "resnet18"}})
    assert view["problems"] == ["tensorflow: no profile (no trial)", "pytorch: no profile (no trial)"]


def test_lying_op_types_and_shares_are_recomputed_and_names_stay_text(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    evil = "../../../../tmp/pwned <script>alert(1)</script>"

    def lie(p: dict[str, Any]) -> None:
        _rows(p)[0].update(op_type="matmul", share=0.99)  # _MklNativeConv2DBackpropFilter
        row = next(r for r in _rows(p) if r["name"] == "ReadVariableOp")  # an "other" row keeps its type's total
        row["name"] = evil

    monkeypatch.chdir(tmp_path)
    tab = kernels.read_profile(_attack(lie), "t")["cpu"]
    first = tab.rows[0]
    assert first.op_type == "conv_bwd" and first.share == pytest.approx(first.self_s / tab.total_s) != 0.99
    assert any(r.name == evil and r.op_type == "other" for r in tab.rows)
    assert list(tmp_path.iterdir()) == []  # a name is never a path: nothing was created or opened

    def move(p: dict[str, Any]) -> None:  # a renamed row whose time its new type's total does not hold
        _rows(p)[0]["name"] = "aten::copy_"

    with pytest.raises(kernels.KernelTableError, match="op type layout"):
        kernels.read_profile(_attack(move), "t")


def _analysis_d() -> dict[str, Any]:
    (view,) = kernels.kernel_view(_run(), {"c16": {"model": "resnet18"}})
    gap = {"factors": [{"factor": "layout", "label": "data layout NHWC vs NCHW", "low": "nchw", "high": "nhwc",
                        "status": "estimated", "share": 0.42, "ratio_multiplier": 1.3, "p": 0.01},
                       {"factor": "cudnn_autotune", "label": "cuDNN autotuning", "low": "off", "high": "on",
                        "status": "not varied", "level": "off"}], "n": 4}
    return {"arms": ["tensorflow", "pytorch"], "kernels": [view], "gap_effects": gap}


def test_kernel_section_renders_beside_the_effect_shares() -> None:
    kr = study_module("dai_single_gpu_factors", "kernel_report")
    (sec,) = [s.to_json() for s in kr.kernel_sections(_analysis_d())]
    text = " ".join(sec["paragraphs"])
    for words in ("ONE configuration per network", "SEPARATE trials", "No timed trial is profiled", "one sample",
                  "CPU ops", "not GPU kernels", "tensorflow − pytorch"):
        assert words in text, words
    shares, top, types = sec["tables"]
    assert shares["rows"][0][:3] == ["data layout NHWC vs NCHW", "42.0 %", "1.300"]
    assert "layout conversion" in shares["rows"][0][3] and shares["rows"][1][1] == "not varied"
    assert top["columns"][:5] == ["#", "tensorflow name", "type", "ms/step", "share"] and len(top["rows"]) == 10
    assert top["rows"][0][1] == "_MklNativeConv2DBackpropFilter" and top["rows"][0][5] == "aten::convolution_backward"
    assert types["columns"][-1] == "tensorflow − pytorch ms/step"
    assert {r[0] for r in types["rows"]} >= {kp.OP_TYPES["conv_bwd"], kp.OP_TYPES["optimizer"]}
    assert kr.kernel_sections({"arms": ["a", "b"], "kernels": []}) == []


def test_profile_configurations_stay_out_of_the_factorial_and_the_section_is_in_the_report() -> None:
    from kit.plan import make_plan
    from kit.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "experiments" / "dai_single_gpu_factors" / "experiment.toml")
    plan = make_plan(spec)
    man = {"spec": spec.to_dict(), "plan": {"configs": plan.configs}}
    facs, profs = analysis.factor_configs(man), analysis.profile_configs(man)
    assert len(facs) == 16 * 7 and len(profs) == 7 and not set(facs) & set(profs)
    assert sorted(p["model"] for p in profs.values()) == sorted(spec.grid["model"])
    d = {**_analysis_d(), "failed_cells": [], "framework_effects": {}, "rows": [], "per_model": [],
         "factors": {f: list(v) for f, v in analysis.FACTORS.items()}}
    d["gap_effects"] = {**d["gap_effects"], "residual_share": 0.1}
    ids = [s["id"] for s in study_sections(report, {"dai_factors": d})]
    assert ids[-1] == "dai-kernels" and "dai-gap" in ids


def test_a_gpu_run_compares_kernels_and_says_so() -> None:
    """Where every framework recorded device kernels (a GPU host: not exercised here, tables built from the
    captured CPU ones relabelled), the view compares the gpu tables and the wording says GPU kernels."""
    def with_gpu(key: str) -> dict[str, Any]:
        res = _results(key)
        cpu = res["kernel_profile"]["tables"][0]
        res["kernel_profile"]["tables"].append({**copy.deepcopy(cpu), "domain": "gpu", "total_s": cpu["total_s"] / 2,
                                                "other_s": cpu["other_s"] / 2,
                                                "rows": [{**r, "self_s": r["self_s"] / 2} for r in cpu["rows"]],
                                                "by_type_s": {k: v / 2 for k, v in cpu["by_type_s"].items()}})
        return res

    (view,) = kernels.kernel_view(_run(tf=with_gpu("tensorflow/resnet18/default"),
                                       pt=with_gpu("pytorch/resnet18/default")), {"c16": {"model": "resnet18"}})
    assert view["domain"] == "gpu" and not view["problems"]
    tot = view["by_type"]["totals_s_per_step"]
    cpu_tf = NAMES["tensorflow/resnet18/default"]["tables"][0]
    assert tot["tensorflow"] == pytest.approx(cpu_tf["total_s"] / 2 / cpu_tf["steps"])
    kr = study_module("dai_single_gpu_factors", "kernel_report")
    (sec,) = [s.to_json() for s in kr.kernel_sections({**_analysis_d(), "kernels": [view]})]
    text = " ".join(sec["paragraphs"])
    assert "GPU kernels (self device time" in text and "On a CPU host" not in text
