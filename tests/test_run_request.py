"""kit.run.request: which `kit run` flags go together, checked before anything runs (no terminal needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kit.errors import KitError
from kit.run.request import image_overrides, run_request
from tests.conftest import SPEC


def _req(tmp_path: Path, **kw: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = {"spec": SPEC, "profile": "smoke", "resume": None, "backend": "local",
                               "runs_dir": tmp_path}
    return run_request(**{**base, **kw})  # type: ignore[arg-type]


def test_a_new_run_loads_its_spec_and_options(tmp_path: Path) -> None:
    req = _req(tmp_path, seed=7, label="v1", slurm={"partition": "gpu"})
    assert req.spec is not None and req.spec.profile == "smoke" and req.resume is None
    assert req.opts.seed == 7 and req.opts.label == "v1" and req.opts.slurm == {"partition": "gpu"}
    assert req.opts.retry == ()


@pytest.mark.parametrize(("kw", "says"), [
    ({"resume": Path("runs/x")}, "either a spec or --resume"),
    ({"spec": None}, "no experiment given"),
    ({"retry_failed": True}, "re-run trials of an existing run"),
    ({"image": ["pytorch=a"], "images": "a,b"}, "either --image"),
    ({"spec": None, "resume": Path("runs/x"), "images": "a,b"}, "applies to a new run"),
    ({"image": ["pytorch"]}, "is not FRAMEWORK=ROW"),
])
def test_flags_that_do_not_go_together_are_refused(tmp_path: Path, kw: dict[str, object], says: str) -> None:
    with pytest.raises(KitError, match=says):
        _req(tmp_path, **kw)


def test_resume_keeps_the_retry_statuses(tmp_path: Path) -> None:
    req = _req(tmp_path, spec=None, resume=tmp_path / "run", retry_failed=True, retry_oom=True)
    assert req.spec is None and req.opts.retry == ("error", "timeout", "oom")


def test_image_overrides() -> None:
    assert image_overrides(["pytorch = pytorch-2.14-cu130", "tensorflow=tf"]) == {
        "pytorch": "pytorch-2.14-cu130", "tensorflow": "tf"}


def test_an_unknown_executor_is_refused_not_run_here(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="unknown executor 'Slurm'"):
        _req(tmp_path, spec=None, resume=tmp_path / "run", executor="Slurm")


def _rec(d: dict[str, Any]) -> Any:
    from kit.manifest import ExecutorRecord

    return ExecutorRecord(d["name"], d)


@pytest.mark.parametrize("chunks", [[[1e400]], [[float("nan")]], [[True]], [["0"]], "x", [[1.5]]])
def test_a_crafted_executor_record_is_a_store_error(chunks: object) -> None:
    from kit.errors import StoreError
    from kit.executors import from_record

    with pytest.raises(StoreError, match="Slurm executor record"):
        from_record(_rec({"name": "slurm", "options": {}, "chunks": chunks}), "manifest.json")


def test_a_crafted_executor_record_cannot_put_commands_into_the_job_script(tmp_path: Path) -> None:
    """The Slurm options of a resumed run come from its manifest: a newline cannot add a command to the job
    script, an environment option is not passed on, and the jobs run this kit's interpreter, not a recorded one."""
    import sys

    from kit.errors import ExecutorError, StoreError
    from kit.executors import from_record
    from kit.executors.slurm import job_script

    base = {"name": "slurm", "backend": "local", "chunks": [[0]],
            "options": {"partition": "debug", "time_limit": "00:10:00", "python": "/tmp/evil-python",
                        "sbatch_options": ["--qos=normal", "--constraint=a100|h100"]}}
    ex = from_record(_rec(base), "manifest.json")
    script = job_script(tmp_path, ex.options, ex.backend, "lenet")  # type: ignore[attr-defined]
    assert "/tmp/evil-python" not in script and sys.executable in script and "--constraint=a100|h100" in script
    for key, value in (("partition", "debug\ntouch /tmp/pwned"), ("time_limit", "1:00 --wrap=id"),
                       ("account", "a;id")):
        bad = from_record(_rec({**base, "options": {**base["options"], key: value}}), "manifest.json")
        with pytest.raises(ExecutorError, match="sbatch script line"):
            job_script(tmp_path, bad.options, "local", "lenet")  # type: ignore[attr-defined]
    with pytest.raises(ExecutorError, match="sbatch script line"):
        job_script(tmp_path, ex.options, "local", "lenet\nid")  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="--export=LD_PRELOAD"):
        from_record(_rec({**base, "options": {**base["options"], "sbatch_options": ["--export=LD_PRELOAD=/x.so"]}}), "m")
