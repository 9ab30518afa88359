"""The "did you mean" of a usage error (kit.errors.did_you_mean): a part of the name, or a typo of it."""

from __future__ import annotations

from kit.errors import ExitCode, UsageError, did_you_mean, suggestion

IDS = ["dai_single_gpu_factors", "elshawi_dlbench", "florencio2019_lenet", "germino_mnist_energy",
       "patel_distributed", "patel_models_sweep"]


def test_a_part_or_a_typo_finds_the_name() -> None:
    assert did_you_mean("lenet", IDS) == ["florencio2019_lenet"]
    assert did_you_mean("florencio2019_lenat", IDS) == ["florencio2019_lenet"]
    assert did_you_mean("patel", IDS) == ["patel_distributed", "patel_models_sweep"]
    assert did_you_mean("quik", ["paper", "quick", "smoke"]) == ["quick"]
    assert did_you_mean("zzz", IDS) == [] and suggestion("zzz", IDS) == ""
    assert suggestion("PATEL_models", IDS) == "did you mean 'patel_models_sweep'? "


def test_a_usage_error_exits_2() -> None:
    err = UsageError("no experiment 'x'", where="x", fix=suggestion("lenet", IDS) + "see kit list")
    assert err.exit_code == ExitCode.USAGE == 2
    assert err.one_line() == "x: no experiment 'x'. Fix: did you mean 'florencio2019_lenet'? see kit list."
