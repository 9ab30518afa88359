"""Issue 22's and issue 37's attacks against a kit checkout, for a before/after record (one line per attack).

    git worktree add /tmp/kit-old e376af3
    .venv/bin/python benchmarks/hostile_before_after.py --kit /tmp/kit-old   # before
    .venv/bin/python benchmarks/hostile_before_after.py                      # this checkout
    .venv/bin/python benchmarks/hostile_before_after.py --only 37            # issue 37's attacks alone

Issue 37's attacks (resumed runs, reproduce-all state, caches, the seal key, study hooks, the report, trials
that kill or stop their reaper, kit tune's state, recorded numbers) leave processes behind on a kit that does
not defend against them; each is found by a token in its command line and killed when its line is printed.

Each attack is crafted with this checkout's test helpers (tests/_crafted.py) on copies of the golden run
and performed by running `python -m kit ...` of the checkout under test in a fresh process, with a time
limit (a hang is reported as such) and a private config directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def kit(checkout: Path, env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int | str, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "kit", *args], cwd=checkout, env=env, capture_output=True,
                           text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return "hung", "", time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kit", type=Path, default=ROOT, help="checkout whose kit is attacked")
    ap.add_argument("--only", choices=("22", "37"), help="only this issue's attacks")
    args = ap.parse_args()
    if args.only != "22":
        with tempfile.TemporaryDirectory() as tmp:
            issue37(args.kit, Path(tmp))
    if args.only == "37":
        return
    from _crafted import golden_copy, marker_code, plant_study

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(args.kit), "KIT_CONFIG_DIR": str(t / "config"),
               "KIT_HISTORY_CACHE": str(t / "hcache")}
        print(f"kit under attack: {args.kit} ({subprocess.run(['git', '-C', str(args.kit), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()})")

        run = golden_copy(t / "runs" / "planted")
        marker = t / "marker"
        plant_study(run, marker_code(marker))
        for cmd in (["report", str(run)], ["compare", str(golden_copy(t / "base")), str(run)],
                    ["history", str(t / "runs"), "--no-cache"], ["pack", str(run), "--out", str(t / "b1")]):
            marker.unlink(missing_ok=True)
            Path(f"{marker}.report").unlink(missing_ok=True)
            (run / "analysis.json").unlink(missing_ok=True)
            code, out, _ = kit(args.kit, env, *cmd)
            ran = marker.exists() or Path(f"{marker}.report").exists()
            print(f"planted study/analysis.py, kit {cmd[0]}: exit {code}; the run's code ran: {'YES' if ran else 'no'}"
                  f"; notice printed: {'yes' if 'study code not run' in out else 'no'}")

        a, b = golden_copy(t / "fa"), golden_copy(t / "fb")
        for r in (a, b):
            kit(args.kit, env, "report", str(r))
        forged = json.loads((b / "analysis.json").read_text())
        for v in forged["values"]:
            if v["metric"] == "time_s" and v["value"] is not None:
                v["value"] *= 3.0
        (b / "analysis.json").write_text(json.dumps(forged))
        code, out, _ = kit(args.kit, env, "compare", str(a), str(b), "--metric", "time_s")
        print(f"forged analysis.json (identical raw data, times x3), kit compare: exit {code}; "
              f"'regression' rows: {out.count('regression')}")

        fifo = golden_copy(t / "fifo")
        (fifo / "manifest.json").unlink()
        os.mkfifo(fifo / "manifest.json")
        code, out, secs = kit(args.kit, env, "report", str(fifo), timeout=20)
        print(f"manifest.json is a FIFO, kit report: {code} after {secs:.1f} s; traceback: "
              f"{'yes' if 'Traceback' in out else 'no'}")

        mark = golden_copy(t / "markup")
        man = json.loads((mark / "manifest.json").read_text())
        man["spec"]["design"]["alpha"] = "[/x]"
        (mark / "manifest.json").write_text(json.dumps(man))
        code, out, _ = kit(args.kit, env, "report", str(mark))
        print(f"'[/x]' in a manifest value, kit report: exit {code}; traceback: {'yes' if 'Traceback' in out else 'no'}"
              f"; internal error: {'yes' if 'internal error' in out else 'no'}")

        hist = t / "hist"
        for i in range(3):
            r = golden_copy(hist / f"r{i}")
            m = json.loads((r / "manifest.json").read_text())
            m.update(label=f"v{i}", started=1000.0 + i)
            (r / "manifest.json").write_text(json.dumps(m))
        for p in (hist / "r2" / "trials").glob("*-pytorch.json"):
            rec = json.loads(p.read_text())
            rec["results"]["train_time_s"] *= 15
            rec["wall_s"] *= 15
            p.write_text(json.dumps(rec))
        code, out, _ = kit(args.kit, env, "history", str(hist), "--arm", "pytorch", "--no-cache")
        print(f"15x slower training in the newest of 3 runs, kit history: exit {code}; step found: "
              f"{'yes' if 'regression between' in out else 'no'}")

        code, out, _ = kit(args.kit, env, "compare", str(a), str(a), "--threshold", "nan")
        print(f"kit compare --threshold nan: exit {code}; {'internal error' if 'internal error' in out else 'clean'}")

        wrong = golden_copy(t / "parquet")
        import pandas as pd

        pd.DataFrame({"a": [1.0]}).to_parquet(wrong / "samples" / "r000-c00-pytorch.parquet")
        code, out, _ = kit(args.kit, env, "report", str(wrong))
        print(f"telemetry Parquet with other columns, kit report: exit {code}; "
              f"{'names the file' if 'r000-c00-pytorch.parquet' in out else 'silent'}")


# -- issue 37 --------------------------------------------------------------------------------------------------------

def _alive(token: str) -> list[int]:
    """PIDs of live processes whose command line holds ``token``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmd and state not in (b"Z", b"X"):
            out.append(int(name))
    return out


def _kill(token: str) -> None:
    import signal

    for pid in _alive(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _reseal(run: Path) -> None:
    from _crafted import edit_manifest

    from kit.studies import digest_of, study_files

    files = study_files(run / "study")
    edit_manifest(run, lambda m: m["study"].update(digest=digest_of(files), files=[r for r, _ in files]))


def _plant(run: Path, marker: Path) -> None:
    wl = run / "study" / "wl.py"
    wl.chmod(0o644)
    wl.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n" + wl.read_text())
    _reseal(run)


def _study(folder: Path, name: str, workload: str | None = None, files: dict[str, str] | None = None,
           timeout_s: float | None = None) -> Path:
    from _crafted import calibrated_study

    calibrated_study(folder, reps=2, name=name, extra_files=files)
    if workload is not None:
        (folder / "wl.py").write_text(workload)
    if timeout_s is not None:
        toml = folder / "experiment.toml"
        toml.write_text(toml.read_text().replace("timeout_s = 120\n", f"timeout_s = {timeout_s}\n", 1))
    return folder


def _only_run(runs: Path) -> Path:
    return next(d for d in runs.iterdir() if (d / "manifest.json").exists())


REAPER_ATTACK = """
import os, signal, subprocess, sys
from kit.workloads.calibrated import run as calibrated_run

def run(req, data_dir, markers):
    if os.fork() == 0:  # a daemon in its own session
        os.setsid()
        subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)", {token!r}],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os._exit(0)
    os.wait()
    os.kill(os.getppid(), signal.{sig})  # the harness's parent: the reaper
    return calibrated_run(req, data_dir, markers)
"""

HOOK_ATTACK = """
import os, time
from pathlib import Path

def sections(manifest, analysis):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "3600", {token!r}])
        os._exit(0)
    os.wait()
    hog = []
    while True:  # memory-hungry (up to 1 GiB here, so an unguarded kit does not take the machine) and endless
        if len(hog) < 32:
            hog.append(bytearray(32 << 20))
        time.sleep(0.1)
"""

SCRIPT_REPORT = """
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="alert(1)">'
       '<script>alert(2)</script><style>table{{display:none}}</style>'
       '<foreignObject><div xmlns="http://www.w3.org/1999/xhtml">ALL CLAIMS REPRODUCED</div></foreignObject>'
       '<path d="M0 0L10 10"/></svg>')

def sections(manifest, analysis):
    return [{{"id": "x", "title": "Planted", "paragraphs": ["<b>All claims reproduced</b><script>alert(3)</script>"],
             "tables": [], "figures": [{{"id": "f", "title": "planted", "svg": SVG}}]}}]
"""


def _mdes(path: Path) -> list[float]:
    """Every MDE figure an analysis.json holds (any key naming an MDE), in order."""
    found: list[float] = []

    def walk(o: object, key: str = "") -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, str(k))
        elif isinstance(o, list):
            for v in o:
                walk(v, key)
        elif "mde" in key.lower() and isinstance(o, int | float) and not isinstance(o, bool):
            found.append(round(float(o), 6))

    walk(json.loads(path.read_text()))
    return found


def _poison(cache: Path) -> int:
    """Replace every power-cache entry by the same array times 3 (the attacker has no key: a bogus MAC line when
    the entry has one); how many were replaced."""
    import io

    import numpy as np

    n = 0
    for f in sorted(p for p in cache.rglob("*") if p.is_file()):
        raw = f.read_bytes()
        head = b""
        if raw.startswith(b"KITMAC1 "):
            cut = raw.index(b"\n") + 1
            head, raw = b"KITMAC1 " + b"0" * 64 + b"\n", raw[cut:]
        try:
            arr = np.load(io.BytesIO(raw), allow_pickle=False)
        except ValueError:
            continue
        buf = io.BytesIO()
        np.save(buf, arr * 3.0, allow_pickle=False)
        f.write_bytes(head + buf.getvalue())
        n += 1
    return n


def issue37(checkout: Path, t: Path) -> None:
    from _crafted import edit_manifest, golden_copy

    token = f"kit-i37-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, "PYTHONPATH": str(checkout), "KIT_CONFIG_DIR": str(t / "config"),
           "KIT_HISTORY_CACHE": str(t / "hcache"), "KIT_POWER_CACHE": str(t / "power"), "COLUMNS": "250"}
    sha = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    print(f"issue 37, kit under attack: {checkout} ({sha})")

    # 1. the seal key left world-readable: another local user reads it and seals a forged analysis
    env4 = {**env, "KIT_CONFIG_DIR": str(t / "config4"), "KIT_POWER_CACHE": str(t / "power4")}  # its own
    a, b = golden_copy(t / "ka"), golden_copy(t / "kb")
    for r in (a, b):
        kit(checkout, env4, "report", str(r))
    key = t / "config4" / "analysis-seal.key"
    key.chmod(0o644)
    thief = t / "thief-config"
    thief.mkdir(mode=0o700)
    (thief / "analysis-seal.key").write_bytes(key.read_bytes())  # readable by anyone: so by the thief
    (thief / "analysis-seal.key").chmod(0o600)
    forge = ("import json, sys\nfrom kit.freshness import seal\np = sys.argv[1]\nd = json.load(open(p))\n"
             "for v in d['values']:\n    if v['metric'] == 'time_s' and v['value'] is not None: v['value'] *= 3.0\n"
             "s = d.pop('seal')\nd['seal'] = seal(d, s['inputs'], s['hooks'])\njson.dump(d, open(p, 'w'))\n")
    subprocess.run([sys.executable, "-c", forge, str(b / "analysis.json")], env={**env4, "KIT_CONFIG_DIR": str(thief)},
                   cwd=checkout, check=True, capture_output=True)  # sealed the way the kit under attack seals
    code, out, _ = kit(checkout, env4, "compare", str(a), str(b), "--metric", "time_s")
    answer = next((line for line in out.splitlines() if line.startswith("Answer:")), "(no answer line)")
    print(f"seal key world-readable, analysis forged (times x3) and sealed with it by another user, kit compare: "
          f"exit {code}; {answer[:90]!r}; key mode now {oct(key.stat().st_mode & 0o777)}")

    # 2. a planted edit in a resumed run's study code, the manifest's digest re-sealed
    runs = t / "r1"
    kit(checkout, env, "run", str(_study(t / "s1", "cal_one")), "--max-trials", "1", "--no-report", "--runs-dir",
        str(runs))
    run = _only_run(runs)
    marker = t / "planted-ran"
    _plant(run, marker)
    code, out, _ = kit(checkout, env, "run", "--resume", str(run), "--no-report", "--max-trials", "1")
    print(f"planted edit in a resumed run's study code (digest re-sealed), kit run --resume: exit {code}; the planted "
          f"code ran: {'YES' if marker.exists() else 'no'}")

    # 3. reproduce-all's state maps study cal_a to cal_b's run, then names a run whose code was planted
    exps, runs = t / "exps", t / "r2"
    for name in ("cal_a", "cal_b"):
        kit(checkout, env, "run", str(_study(exps / name, name)), "--max-trials", "1", "--no-report", "--runs-dir",
            str(runs))
    by = {d.name.rsplit("-", 1)[-1]: d.name for d in runs.iterdir() if d.is_dir()}
    state = runs / "reproduce-all" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"schema_version": 1, "studies": {
        "cal_a": {"profile": "paper", "run_dir": by["cal_b"], "status": "running"}}}))
    code, out, _ = kit(checkout, env, "reproduce-all", "--experiments", str(exps), "--runs-dir", str(runs),
                       "--profile", "paper", "--dry-run")
    accepted = f"resume {by['cal_b']}" in out.replace("\n", " ")
    print(f"state.json maps cal_a to cal_b's run, kit reproduce-all --dry-run: exit {code}; plans to resume cal_b's "
          f"run as cal_a: {'YES' if accepted else 'no'}")
    marker2 = t / "planted-ran-2"
    _plant(runs / by["cal_a"], marker2)
    state.write_text(json.dumps({"schema_version": 1, "studies": {
        "cal_a": {"profile": "paper", "run_dir": by["cal_a"], "status": "running"}}}))
    code, out, _ = kit(checkout, env, "reproduce-all", "--experiments", str(exps), "--runs-dir", str(runs),
                       "--profile", "paper", "--only", "cal_a", timeout=180)
    print(f"state.json names a run whose study code was planted, kit reproduce-all: exit {code}; the planted code "
          f"ran: {'YES' if marker2.exists() else 'no'}")

    # 4. the power cache: a FIFO at every entry, then every entry poisoned (values x 3, no valid MAC)
    clean = golden_copy(t / "pc")
    kit(checkout, env, "report", str(clean))
    mdes = _mdes(clean / "analysis.json")
    cache = t / "power"
    entries = [p for p in cache.rglob("*") if p.is_file()]
    saved = {p: p.read_bytes() for p in entries}
    for p in entries:
        p.unlink()
        os.mkfifo(p)
    (clean / "analysis.json").unlink()
    code, out, secs = kit(checkout, env, "report", str(clean), timeout=60)
    print(f"power cache entries are FIFOs ({len(entries)}), kit report: {code} after {secs:.1f} s")
    for p, data in saved.items():
        p.unlink()
        p.write_bytes(data)
    n = _poison(cache)
    (clean / "analysis.json").unlink(missing_ok=True)
    code, out, _ = kit(checkout, env, "report", str(clean))
    after = _mdes(clean / "analysis.json") if (clean / "analysis.json").exists() else []
    print(f"power cache entries poisoned ({n}: same shape, values x 3), kit report: exit {code}; printed MDEs "
          f"changed: {'YES' if after != mdes else 'no'} ({len(mdes)} MDE figures compared)")

    # 5. a trusted study hook that forks a daemon, eats memory and loops, under kit report stopped by SIGTERM
    hook = t / "hook"
    hook.mkdir()
    (hook / "experiment.toml").write_text((ROOT / "tests" / "data" / "golden" / "golden.toml").read_text())
    (hook / "report.py").write_text(HOOK_ATTACK.format(token=token))
    before_tmp = set(Path(tempfile.gettempdir()).glob("kit-study-*"))
    children_before = set(_alive("kit.study_child"))
    proc = subprocess.Popen([sys.executable, "-m", "kit", "report", str(golden_copy(t / "hk")), "--study", str(hook)],
                            cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not _alive(token) and time.monotonic() < deadline:  # until the hook has started its daemon
        time.sleep(0.5)
    time.sleep(3)
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=30)
        ended = f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        ended = "did not end within 30 s of SIGTERM"
    time.sleep(3)
    hook_children = [p for p in _alive("kit.study_child") if p not in children_before]
    left = _alive(token) + hook_children
    temps = set(Path(tempfile.gettempdir()).glob("kit-study-*")) - before_tmp
    print(f"looping, memory-hungry, daemon-forking report.py under kit report, SIGTERM once its daemon ran: kit "
          f"{ended}; processes of the hook alive 3 s later: {len(left)}; temporary directories left: {len(temps)}")
    _kill(token)
    for pid in hook_children:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    for d in temps:
        shutil.rmtree(d, ignore_errors=True)

    # 6. a trusted report.py returning <script>-bearing SVG and markup
    scr = t / "scr"
    scr.mkdir()
    (scr / "experiment.toml").write_text((ROOT / "tests" / "data" / "golden" / "golden.toml").read_text())
    (scr / "report.py").write_text(SCRIPT_REPORT.format())
    run = golden_copy(t / "sr")
    code, out, _ = kit(checkout, env, "report", str(run), "--study", str(scr))
    page = (run / "report" / "index.html").read_text() if (run / "report" / "index.html").exists() else ""
    print(f"report.py returns <script>-bearing SVG and markup, kit report: exit {code}; live <script> in the page: "
          f"{'YES' if '<script' in page.lower() else 'no'}; onload= in the page: "
          f"{'YES' if 'onload=' in page.lower() else 'no'}; raw <b> banner: {'YES' if '<b>All claims' in page else 'no'}"
          f"; Content-Security-Policy: {'yes' if 'Content-Security-Policy' in page else 'NO'}")

    # 7. trials that kill or stop their own reaper after starting a daemon
    for sig in ("SIGKILL", "SIGSTOP"):
        tok = f"{token}-{sig}"
        folder = _study(t / f"reap-{sig}", f"reap_{sig.lower()}", REAPER_ATTACK.format(token=tok, sig=sig),
                        timeout_s=60)
        runs = t / f"rr-{sig}"
        code, out, secs = kit(checkout, env, "run", str(folder), "--max-trials", "1", "--no-report", "--runs-dir",
                              str(runs), timeout=300)
        time.sleep(1)
        left = _alive(tok)
        recs = [json.loads(p.read_text()) for p in (_only_run(runs) / "trials").glob("*.json")] if runs.exists() else []
        note = "; ".join(f"{r.get('status')}: {(r.get('backend') or {}).get('note') or (r.get('backend') or {}).get('reaper') or '-'}"
                         for r in recs)
        print(f"a trial {sig}s its reaper after starting a daemon, kit run: exit {code} after {secs:.0f} s; daemons "
              f"alive after the run: {len(left)}; trial record: {note[:160]}")
        _kill(tok)

    # 8. kit tune's state directory redirected to a directory where a link waits at the temporary name
    fake = t / "sys" / "devices" / "system" / "cpu" / "cpufreq" / "policy0"
    fake.mkdir(parents=True)
    (fake / "scaling_governor").write_text("powersave\n")
    (fake / "scaling_available_governors").write_text("performance powersave\n")
    attacker = t / "attacker"
    attacker.mkdir()
    victim = t / "victim-file"
    victim.write_text("precious\n")
    (attacker / "tune-state.json.tmp").symlink_to(victim)
    (attacker / ".tune-state.json.tmp").symlink_to(victim)
    (t / "run-kit").symlink_to(attacker)
    code, out, _ = kit(checkout, env, "tune", "--sys-root", str(t / "sys"), "--state",
                       str(t / "run-kit" / "tune-state.json"))
    overwritten = victim.read_text() != "precious\n"
    print(f"kit tune with its state directory redirected (a link planted at the temporary name): exit {code}; "
          f"file behind the link overwritten: {'YES' if overwritten else 'no'}")

    # 9. an out-of-range number recorded for the sequential rule
    seq = golden_copy(t / "seq")
    edit_manifest(seq, lambda m: m.update(sequential={"first": 10, "step": 10, "max_repetitions": 10, "alpha": 0.05,
                                                      "margin": 0.99, "budget_s": None}))
    code, out, _ = kit(checkout, env, "report", str(seq))
    used = (seq / "analysis.json").exists() and \
        json.loads((seq / "analysis.json").read_text()).get("sequential", {}).get("schedule", {}).get("margin") == 0.99
    print(f"sequential.margin = 0.99 recorded, kit report: exit {code}; margin used in the analysis: "
          f"{'YES' if used else 'no'}; key path named: {'yes' if 'sequential.margin' in out else 'no'}")


if __name__ == "__main__":
    main()
