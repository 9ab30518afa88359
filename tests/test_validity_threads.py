"""The cpu_threads rule: framework threads on every core of a CPU host compete with the kit's collectors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kit.analysis.validity import Ctx, _cpu_count, cpu_threads
from tests._runs import bare_manifest


def _ctx(threads: dict[str, int | None], cores: int = 2, device: str = "cpu", backend: str = "local",
         cpuset: str = "") -> Ctx:
    manifest = {"host": {"cpu_logical": cores}, "backend": {"backend": backend},
                "spec": {"container": {"cpuset": cpuset}}}
    env = [{"arm": a, "device_name": device, "threads": t} for a, t in threads.items()]
    return Ctx(bare_manifest(**manifest), [], pd.DataFrame(), {"trial_env": env})


def test_every_core_taken_is_a_threat_with_the_numbers() -> None:
    (t,) = cpu_threads(_ctx({"tensorflow": 2, "pytorch": 2}))
    assert t.status == "threat" and t.category == "internal" and t.severity == "medium"
    assert t.numbers == {"cores": 2, "threads": {"tensorflow": 2, "pytorch": 2}}
    assert "pytorch: 2 threads on 2 logical CPUs" in t.evidence and "threads below the core count" in t.mitigation


def test_one_arm_crowding_is_enough() -> None:
    (t,) = cpu_threads(_ctx({"tensorflow": 1, "pytorch": 2}))
    assert t.status == "threat"


def test_a_core_left_over_is_mitigated() -> None:
    (t,) = cpu_threads(_ctx({"tensorflow": 1, "pytorch": 1}))
    assert t.status == "mitigated" and t.severity == "info"


def test_gpu_trials_and_unknown_threads_are_not_judged() -> None:
    assert cpu_threads(_ctx({"pytorch": 64}, device="NVIDIA H100 80GB HBM3")) == []
    assert cpu_threads(_ctx({"pytorch": None})) == []


def test_a_pinned_container_counts_its_cpuset() -> None:
    assert _cpu_count(bare_manifest(**{"host": {"cpu_logical": 64}, "backend": {"backend": "docker"},
                       "spec": {"container": {"cpuset": "0-3,8"}}})) == 5
    assert _cpu_count(bare_manifest(**{"host": {"cpu_logical": 64}, "backend": {"backend": "local"},
                       "spec": {"container": {"cpuset": "0-3"}}})) == 64  # the local backend does not pin
    (t,) = cpu_threads(_ctx({"pytorch": 4}, cores=64, backend="docker", cpuset="0-3"))
    assert t.status == "threat" and t.numbers["cores"] == 4



def test_a_malformed_cpuset_is_refused_at_spec_load(tmp_path: Path) -> None:
    from kit.errors import KitError
    from kit.spec import cpuset_size, load_spec

    assert cpuset_size("0-3,8") == 5
    spec = tmp_path / "bad.toml"
    spec.write_text((Path(__file__).parent / "data" / "calibrated.toml").read_text() + '\n[container]\ncpuset = "3-1"\n')
    with pytest.raises(KitError) as e:
        load_spec(spec)
    assert "container.cpuset" in str(e.value) and "'0-3,8'" in str(e.value) and "bad.toml" in str(e.value)
