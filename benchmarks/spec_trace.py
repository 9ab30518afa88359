"""Follow the spec through `kit run`: every kit function that receives it, in call order, with its layer.

Issue 40 asks for the spec resolved once and each trial resolved once, and for fewer calls "back up" the layers.
This runs a real `kit run` of a spec (default: tests/data/calibrated.toml) in-process under ``sys.setprofile`` and
prints, from the calls seen:

* stops: calls of a kit function that receives the spec (the ``Spec`` record) among its arguments;
* modules: the distinct modules those stops are in;
* back up: stops called from a module in a lower layer (tests/test_layers.py) than the stop's own (a call back up
  the layers, through a callback or an object handed down);
* per-trial resolutions: calls that receive the spec AND one planned trial (a ``Trial`` record or a trial's
  table), counted per trial id -- "each trial resolved once" means a maximum of 1.

Usage: ``python benchmarks/spec_trace.py [SPEC] [--trace]`` (``--trace`` prints every stop). Runs a fresh run in a
temporary runs directory; the checkout's runs/ is untouched.
"""

from __future__ import annotations

import collections
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_layers import LAYERS  # noqa: E402


def layer_of(module: str) -> int:
    """Index of the layer a module belongs to (the longest matching prefix), -1 when none matches."""
    best, idx = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, idx = len(p), i
    return idx


def main(argv: list[str]) -> int:
    spec_path = next((a for a in argv if not a.startswith("--")), str(ROOT / "tests" / "data" / "calibrated.toml"))
    show = "--trace" in argv
    from typer.testing import CliRunner

    from kit.cli import app
    from kit.records import Trial
    from kit.spec import Spec

    stops: list[tuple[str, str]] = []
    up: list[str] = []  # calls from a lower layer's module into a higher layer's (through a callback or object)
    loads = 0
    questions: collections.Counter[tuple[str, str]] = collections.Counter()
    per_trial: collections.Counter[str] = collections.Counter()

    def trial_id_of(v: Any) -> str | None:
        if isinstance(v, Trial):
            return v.trial_id
        tid = getattr(v, "trial_id", None)
        if isinstance(tid, str) and not isinstance(v, dict):
            return tid
        if isinstance(v, dict) and isinstance(v.get("trial_id"), str) and "arm" in v:
            return str(v["trial_id"])
        return None

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not isinstance(module, str) or not module.startswith("kit"):
            return
        code = frame.f_code
        if code.co_name == "load_spec":
            nonlocal loads
            loads += 1
        n = code.co_argcount + code.co_kwonlyargcount
        args = [frame.f_locals.get(name) for name in code.co_varnames[:n]]
        if not any(isinstance(a, Spec) for a in args):
            return
        if module.startswith(Spec.__module__.rsplit(".", 1)[0] if "." in Spec.__module__[4:] else Spec.__module__):
            # the spec's own code: a question asked of it when the caller is outside
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
            if isinstance(caller, str) and caller.startswith("kit") and not caller.startswith(module.split(".")[0]
                                                                                               + ".spec"):
                questions[(caller, code.co_name)] += 1
            return
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if isinstance(caller, str) and caller.startswith("kit") and layer_of(module) > layer_of(caller):
            up.append(f"{caller} -> {module}.{code.co_qualname}")
        stops.append((module, code.co_qualname))
        for a in args:
            tid = trial_id_of(a)
            if tid is not None:
                per_trial[tid] += 1
                break

    with tempfile.TemporaryDirectory() as runs:
        sys.setprofile(profile)
        try:
            result = CliRunner().invoke(app, ["run", spec_path, "--runs-dir", runs])
        finally:
            sys.setprofile(None)
    if result.exit_code != 0:
        print(result.output[-2000:])
        print(f"kit run failed (exit {result.exit_code})")
        return 1
    back_up = len(up)
    if show:
        for call in up:
            print(f"  up: {call}")
        for module, fn in stops:
            print(f"  [{LAYERS[layer_of(module)][0] if layer_of(module) >= 0 else '?'}] {module}.{fn}")
    print(f"spec trace of `kit run {Path(spec_path).name}`: {len(stops)} stops in "
          f"{len({m for m, _ in stops})} modules; {back_up} calls back up to a higher layer")
    by_caller: collections.Counter[str] = collections.Counter()
    for (caller, _), k in questions.items():
        by_caller[caller] += k
    print(f"questions asked of the spec from outside it: {sum(questions.values())} "
          f"({', '.join(f'{m}: {k}' for m, k in by_caller.most_common())})")
    if show:
        for (caller, name), k in questions.most_common():
            print(f"  {k:4d} x {caller} -> Spec.{name}")
    print(f"spec loads (load_spec calls): {loads}; "
          f"per-trial resolutions against the spec: max {max(per_trial.values(), default=0)} "
          f"over {len(per_trial)} trials")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
