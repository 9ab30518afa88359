"""Crafted run directories and study folders for the hostile-input tests (one builder, reused).

``golden_copy`` copies the stored golden run (a real quick run of the calibrated workload);
``plant_study`` gives a run a ``study/`` copy holding code of the test's choosing and re-seals the
manifest's study digest the way its author could; ``calibrated_study`` writes a real study folder
whose workload is the calibrated busy-wait (no framework), optionally leaving a busy process behind.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

from kit.studies import digest_of, study_files

GOLDEN_RUN = Path(__file__).parent / "data" / "golden" / "run"
CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def golden_copy(dest: Path) -> Path:
    shutil.copytree(GOLDEN_RUN, dest)
    return dest


def edit_manifest(run: Path, fn: Any) -> None:
    man = json.loads((run / "manifest.json").read_text())
    fn(man)
    (run / "manifest.json").write_text(json.dumps(man))


def marker_code(marker: Path, extra: str = "") -> dict[str, str]:
    """analysis.py and report.py that leave ``marker`` (and ``marker``.report) when imported or called."""
    analysis = textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("analysis.py ran")
        """) + textwrap.dedent(extra) + textwrap.dedent("""

        def analyse(manifest, trials, values):
            return {"planted": len(trials)}
        """)
    report = textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker) + '.report'!r}).write_text("report.py ran")

        def sections(manifest, analysis):
            return [{{"id": "planted", "title": "Planted study section", "paragraphs": ["from report.py"]}}]
        """)
    return {"analysis.py": analysis, "report.py": report}


def plant_study(run: Path, files: dict[str, str]) -> str:
    """Put ``files`` into RUN/study/ and re-seal manifest.study as the run's author can; the digest."""
    copy = run / "study"
    copy.mkdir(exist_ok=True)
    for name, text in files.items():
        (copy / name).write_text(text)
    listed = study_files(copy)
    digest = digest_of(listed)
    edit_manifest(run, lambda m: m.update(study={"source": "/elsewhere", "files": [r for r, _ in listed],
                                                 "digest": digest, "analysis": "analysis.py" in files,
                                                 "report": "report.py" in files}))
    return digest


WORKLOAD = textwrap.dedent('''
    """A study workload: the calibrated busy-wait, optionally leaving a busy process behind (a daemon)."""
    import os
    import subprocess
    import sys

    from kit.workloads.calibrated import is_oom  # noqa: F401
    from kit.workloads.calibrated import run as calibrated_run


    def run(req, data_dir, markers):
        token = str(req["workload"].get("leave_token", ""))
        if token:
            pid = os.fork()
            if pid == 0:  # a double fork out of the trial's session: the child is a daemon
                os.setsid()
                subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: pass", token],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                os._exit(0)
            os.waitpid(pid, 0)
        return calibrated_run(req, data_dir, markers)
    ''')


def calibrated_study(folder: Path, reps: int = 3, leave_token: str = "", extra_files: dict[str, str] | None = None,
                     name: str = "cal_study") -> Path:
    """A real study folder (its own workload module and params) that runs in seconds without a framework."""
    folder.mkdir(parents=True)
    toml = CALIBRATED.read_text().replace('id = "calibrated"', f'id = "{name}"')
    toml = toml.replace('name = "calibrated"', f'name = "{name}"').replace("repetitions = 12", f"repetitions = {reps}")
    toml = toml.replace("jitter_frac = 0.01", f'jitter_frac = 0.01\nleave_token = "{leave_token}"')
    toml += textwrap.dedent(f"""
        [study]
        workload = "{name}"
        description = "calibrated busy-wait phases"
        [study.modules]
        pytorch = "wl"
        tensorflow = "wl"
        [study.params.train_s]
        type = "float"
        default = 0.15
        [study.params.infer_s]
        type = "float"
        default = 0.05
        [study.params.jitter_frac]
        type = "float"
        default = 0.0
        [study.params.leave_token]
        type = "str"
        default = ""
        """)
    (folder / "experiment.toml").write_text(toml)
    (folder / "wl.py").write_text(WORKLOAD)
    for fname, text in (extra_files or {}).items():
        (folder / fname).write_text(text)
    return folder
