"""kit.replication's pure parts: DerSimonian-Laird against a closed-form calculation, the prediction interval by
hand, host classes from redacted provenance, and hostile provenance strings escaped and capped in HTML and LaTeX."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm, t

from kit.analysis_record import Analysis
from kit.errors import KitError
from kit.replication.build import Cell, ClaimRow, ClassColumn, MapResult, NeverTested, Pooled
from kit.replication.hostclass import MAX_TEXT, HostClass, host_class
from kit.replication.inputs import Refused
from kit.replication.meta import LogEffect, fixed_effect, random_effects, se_from_interval
from kit.replication.render import render_html, render_tex
from tests._runs import bare_analysis, bare_manifest

Y = [0.10, 0.30, -0.20, 0.05, 0.12]
V = [0.010, 0.020, 0.015, 0.010, 0.030]


def test_dersimonian_laird_equals_the_closed_form_and_the_prediction_interval_is_higgins() -> None:
    w = [1 / v for v in V]
    fe = sum(a * b for a, b in zip(w, Y, strict=True)) / sum(w)
    q = sum(a * (b - fe) ** 2 for a, b in zip(w, Y, strict=True))
    tau2 = max(0.0, (q - 4) / (sum(w) - sum(a * a for a in w) / sum(w)))
    wr = [1 / (v + tau2) for v in V]
    mu = sum(a * b for a, b in zip(wr, Y, strict=True)) / sum(wr)
    se = math.sqrt(1 / sum(wr))
    re = random_effects([LogEffect(y, math.sqrt(v)) for y, v in zip(Y, V, strict=True)])
    assert abs(re.log_ratio - mu) < 1e-6 and abs(re.tau2 - tau2) < 1e-6 and abs(re.se - se) < 1e-6
    assert abs(re.q - q) < 1e-6 and abs(re.i2 - (q - 4) / q) < 1e-6 and tau2 > 0
    half = t.ppf(0.975, 3) * math.sqrt(tau2 + se * se)  # k - 2 = 3 degrees of freedom
    assert abs(re.pi_low - (mu - half)) < 1e-6 and abs(re.pi_high - (mu + half)) < 1e-6
    assert abs(re.ci_high - (mu + norm.ppf(0.975) * se)) < 1e-6


def test_homogeneous_classes_have_no_between_host_variance_and_two_classes_are_refused() -> None:
    re = random_effects([LogEffect(0.1, 0.1), LogEffect(0.11, 0.1), LogEffect(0.09, 0.1)])
    assert re.tau2 == 0.0 and re.i2 == 0.0
    with pytest.raises(KitError, match="at least 3"):
        random_effects([LogEffect(0.1, 0.1), LogEffect(0.2, 0.1)])


def test_fixed_effect_and_the_standard_error_of_an_interval() -> None:
    fe = fixed_effect([LogEffect(0.0, 0.1), LogEffect(0.3, 0.2)])
    assert abs(fe.log_ratio - (0.0 / 0.01 + 0.3 / 0.04) / (1 / 0.01 + 1 / 0.04)) < 1e-12
    assert abs(se_from_interval(math.exp(-0.196), math.exp(0.196)) - 0.196 / norm.ppf(0.975)) < 1e-12
    with pytest.raises(KitError):
        se_from_interval(0.0, 1.0)


def _host(**kw: object) -> HostClass:
    base: dict[str, object] = dict(arch="x86-64", cpu_vendor="Intel", cpu_model="Xeon", cpu_family_model="6/106",
                                   isa=("avx2", "avx512f"), threads=1, device="cpu", gpu="", gpu_cc="", driver="",
                                   versions=(("pytorch", "2.14.1"), ("tensorflow", "2.21.0")), backend="local",
                                   profile="paper")
    base.update(kw)
    return HostClass(**base)  # type: ignore[arg-type]


def test_a_host_class_from_redacted_provenance_is_the_same_class_and_labelled() -> None:
    host = {"machine": "x86_64", "cpu_model": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "cpu_logical": 1,
            "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 106, "isa": ["avx2", "avx512f", "sse4_2"]}}
    env = ({"arm": "pytorch", "framework": "pytorch", "framework_version": "2.14.1", "device": "cpu"},
           {"arm": "tensorflow", "framework": "tensorflow", "framework_version": "2.21.0", "device": "cpu"})
    an: Analysis = bare_analysis(trial_env=list(env), profile="paper")
    full = host_class(bare_manifest(host={**host, "hostname": "alice-laptop", "env": {"HOME": "/home/alice"}},
                                    backend={"backend": "local"}), an)
    shared = host_class(bare_manifest(host=host, backend={"backend": "local"}), an)
    assert full == shared and full.key == shared.key and len(full.key) == 10
    assert full.label == "x86-64 Intel Xeon Platinum 8375C (AVX-512) · 1 core · torch 2.14 / tf 2.21 · local"


HOSTILE = "<script>alert(1)</script>\\input{/etc/passwd}" + "x" * (10 << 20)


def test_hostile_provenance_is_escaped_and_capped_in_html_and_latex() -> None:
    from kit.replication.hostclass import cap

    bad = cap(HOSTILE)
    assert len(bad) == MAX_TEXT
    host = _host(cpu_model=bad, gpu=cap("<img src=x onerror=alert(1)>"))
    cell = Cell(host.key, "replicated", ("replicated",), 1.0, 0.9, 1.1, 0.95, 12, 1, (cap(HOSTILE, 200),), False)
    pooled = Pooled(3, 1.0, 0.9, 1.1, 0.5, 2.0, 0.0, 0.05, 0.01, 0.5, 4.0, 0.95)
    m = MapResult(experiment=cap(HOSTILE), profile="paper", classes=(ClassColumn(host, (cap(HOSTILE, 200),)),),
                  claims=(ClaimRow(cap(HOSTILE, 40), "s", cap(HOSTILE, 300), "q", "e", (cell,), pooled, "a"),),
                  never_tested=(NeverTested("P9", "st", cap(HOSTILE, 300), cap(HOSTILE, 300)),),
                  refused=(Refused(cap(HOSTILE, 200), cap(HOSTILE, 400)),), duplicates=(), runs=1, reused=1)
    html = render_html(m)
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert len(html) < 100_000
    tex = render_tex(m)
    assert "\\input{" not in tex and r"\textbackslash{}input\{/etc/" in tex and len(tex) < 50_000
