"""kit.run_request: which `kit run` flags go together, checked before anything runs (no terminal needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.errors import KitError
from kit.run_request import image_overrides, run_request
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
