"""The room's temperature per trial (kit.collectors.ambient) and its threat (kit.analysis.ambient)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _sysfs import hwmon_chip

from kit.analysis.ambient import TrialAmbient, ambient_temperature
from kit.analysis.threats import Ctx
from kit.collectors import ambient
from kit.collectors.ambient import AmbientReader
from kit.errors import StoreError
from kit.records import TrialRecord
from kit.spec import Telemetry
from kit.spec_invalid import Invalid
from tests._runs import records_of


def _host(root: Path, label: str = "Ambient", mdeg: int = 23500) -> None:
    hwmon_chip(root, 0, "coretemp", {1: ("Package id 0", 61000)})  # the CPU: never the room
    hwmon_chip(root, 1, "ipmi_bmc", {1: (label, mdeg), 2: ("CPU1 Temp", 58000)})


@pytest.mark.parametrize("label", ["Ambient", "Inlet Temp", "Front Panel Intake", "SYSTIN", "room"])
def test_auto_finds_the_ambient_input_and_reads_it(tmp_path: Path, label: str) -> None:
    _host(tmp_path, label)
    r = AmbientReader("auto", 22.0, tmp_path).read()
    assert r.sensor_c == 23.5 and r.sensor == f"ipmi_bmc:{label}" and r.stated_c == 22.0 and r.note == ""


def test_a_cpu_or_gpu_sensor_is_never_taken_for_the_room(tmp_path: Path) -> None:
    hwmon_chip(tmp_path, 0, "coretemp", {1: ("Package id 0", 61000)})
    hwmon_chip(tmp_path, 1, "nct6775", {1: ("CPUTIN", 45000), 2: ("AUXTIN0", 30000)})
    r = AmbientReader("auto", None, tmp_path).read()
    assert r.sensor_c is None and r.sensor is None and "no hwmon input labelled" in r.note


def test_a_named_sensor_and_off(tmp_path: Path) -> None:
    hwmon_chip(tmp_path, 1, "nct6775", {2: ("AUXTIN0", 24250)})
    assert AmbientReader("nct6775:AUXTIN0", None, tmp_path).read().sensor_c == 24.25
    missing = AmbientReader("nct6775:AUXTIN9", None, tmp_path).read()
    assert missing.sensor_c is None and "'nct6775:AUXTIN9'" in missing.note
    off = AmbientReader("off", 21.0, tmp_path).read()
    assert off.sensor_c is None and off.stated_c == 21.0 and "off" in off.note


def test_an_implausible_reading_is_recorded_as_missing_with_the_reason(tmp_path: Path) -> None:
    _host(tmp_path, "Ambient", 127000)  # a BMC's "no reading" sentinel, read as 127 °C
    r = AmbientReader("auto", None, tmp_path).read()
    assert r.sensor_c is None and r.sensor == "ipmi_bmc:Ambient" and "127" in r.note


def test_the_default_root_is_the_module_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path)
    monkeypatch.setattr(ambient, "SYSFS_ROOT", tmp_path)
    assert AmbientReader().read().sensor_c == 23.5


@pytest.mark.parametrize(("key", "value"), [("ambient_c", 95.0), ("ambient_c", -60.0),
                                            ("ambient_sensor", "../../etc/passwd"), ("ambient_sensor", "")])
def test_spec_values_are_validated_with_their_key(key: str, value: Any) -> None:
    with pytest.raises(Invalid, match=f"telemetry.{key}"):
        Telemetry(**{key: value}).check("telemetry")


def _trial(arm: str, amb: Any, i: int = 0) -> TrialRecord:
    (rec,) = records_of([{"trial_id": f"{arm}-{i}", "arm": arm, "status": "ok", "warmup": False, "ambient": amb}])
    return rec


def _ctx(trials: list[TrialRecord]) -> Ctx:
    return Ctx(manifest=None, trials=trials, values=pd.DataFrame(), analysis={})  # type: ignore[arg-type]


def _reading(c: float | None, stated: float | None = None, note: str = "") -> dict[str, Any]:
    return {"sensor_c": c, "sensor": "ipmi_bmc:Ambient" if c is not None else None, "stated_c": stated, "note": note}


def test_rooms_of_different_temperature_are_a_threat() -> None:
    # the paper's situation: TensorFlow at 22 °C, PyTorch at 24-26 °C
    trials = [_trial("tensorflow", _reading(22.0), i) for i in range(3)]
    trials += [_trial("pytorch", _reading(t), i) for i, t in enumerate((24.0, 25.0, 26.0))]
    (t,) = ambient_temperature(_ctx(trials))
    assert t.severity == "high" and t.status == "threat" and t.numbers["gap_c"] == 3.0
    assert "tensorflow 22.0 °C" in t.evidence and "pytorch 25.0 °C (24.0-26.0, n=3)" in t.evidence


def test_one_room_is_mitigated() -> None:
    trials = [_trial(a, _reading(22.0 + 0.1 * i), i) for a in ("tensorflow", "pytorch") for i in range(3)]
    (t,) = ambient_temperature(_ctx(trials))
    assert t.status == "mitigated" and t.numbers["gap_c"] == 0.0


def test_absent_is_said_with_the_reason_and_the_fix() -> None:
    note = "no hwmon input labelled as ambient, inlet, intake, room or SYSTIN on this host"
    (t,) = ambient_temperature(_ctx([_trial("tensorflow", _reading(None, note=note))]))
    assert t.title == "Ambient temperature not recorded" and note in t.evidence and "ambient_c" in t.mitigation
    (old,) = ambient_temperature(_ctx([_trial("tensorflow", None)]))
    assert "made before the kit recorded it" in old.evidence
    (stated,) = ambient_temperature(_ctx([_trial("pytorch", _reading(None, 22.5, note))]))
    assert stated.title == "Ambient temperature stated, not measured" and "22.5 °C" in stated.evidence


@pytest.mark.parametrize("crafted", [{"sensor_c": 1e308}, {"sensor_c": float("nan")}, {"sensor_c": "22"},
                                     {"sensor_c": True}, {"sensor_c": -500.0}, "not a table"])
def test_crafted_values_are_not_counted(crafted: Any) -> None:
    if not isinstance(crafted, dict):  # refused where the trial file is read (kit.records), before any rule sees it
        with pytest.raises(StoreError, match="ambient"):
            _trial("tensorflow", crafted)
        return
    rec = _trial("tensorflow", crafted)
    a = TrialAmbient.from_record(rec)
    assert a is None or a.sensor_c is None
    (t,) = ambient_temperature(_ctx([rec, _trial("pytorch", _reading(22.0))]))
    assert "tensorflow" not in t.numbers.get("median_c", {})


def test_a_crafted_note_is_capped() -> None:
    a = TrialAmbient.from_record(_trial("tensorflow", {"sensor_c": None, "note": "x" * 100_000}))
    assert a is not None and len(a.note) == 200


def test_doctor_names_the_sensor_or_says_how_to_state_the_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.doctor.checks import check_ambient

    monkeypatch.setattr(ambient, "SYSFS_ROOT", tmp_path)
    none = check_ambient()
    assert not none["ok"] and "ambient_c" in none["fix"]
    _host(tmp_path)
    found = check_ambient()
    assert found["ok"] and "ipmi_bmc:Ambient: 23.5 °C" in found["detail"]
