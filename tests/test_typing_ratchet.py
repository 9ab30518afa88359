"""A ratchet, not a wish (issue 40): records are the currency between stages, and the count of untyped
``dict[str, Any]`` in kit/ and experiments/ may only go down.

* :data:`CEILING` is the count this kit reached (the issue's own command line: lines matching
  ``dict\\[str, ?Any\\]`` in kit/ and experiments/ ``*.py``). Lower it when you remove more; raising it needs a
  reason in review.
* No stage function takes or returns trials, an analysis or comparison rows as dicts: a parameter named for one of
  them must not be annotated with a dict or a Mapping, and the stage functions listed below must not return one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CEILING = 263  # the figure issue 40 ended at (683 before it); lower it as you type more
PATTERN = re.compile(r"dict\[str, ?Any\]")

# parameter names that carry a stage's records between stages
RECORD_PARAMS = {"trials", "trial", "analysis", "an", "comparison", "compare_rows", "hypotheses", "threats",
                 "values_rows", "records", "attempts"}
# functions whose result is a stage's record
STAGE_FUNCTIONS = {"compute_analysis", "analyze_run", "current_analysis", "compare_runs", "compare_arms", "judge",
                   "history", "collect", "detect_steps", "build_context", "write_report", "trial_records",
                   "checked_attempts", "run_bisect"}
UNTYPED = re.compile(r"\b(dict|Dict|Mapping|MutableMapping)\[")


def untyped_lines(roots: list[Path]) -> list[str]:
    """The issue's count: lines of *.py under ``roots`` that contain ``dict[str, Any]``."""
    out = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PATTERN.search(line):
                    out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{i}")
    return out


def dict_contracts(roots: list[Path]) -> list[str]:
    """Stage boundaries that pass trials, analyses or comparison rows as dicts."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                where = f"{path.name}:{node.lineno} {node.name}"
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                for a in args:
                    if a.arg in RECORD_PARAMS and a.annotation is not None \
                            and UNTYPED.search(ast.unparse(a.annotation)):
                        found.append(f"{where}({a.arg}: {ast.unparse(a.annotation)})")
                if node.name in STAGE_FUNCTIONS and node.returns is not None \
                        and UNTYPED.search(ast.unparse(node.returns)):
                    found.append(f"{where} -> {ast.unparse(node.returns)}")
    return found


def test_untyped_dicts_stay_under_the_ceiling() -> None:
    lines = untyped_lines([ROOT / "kit", ROOT / "experiments"])
    assert len(lines) <= CEILING, (f"{len(lines)} lines with dict[str, Any] in kit/ and experiments/, the ceiling is "
                                   f"{CEILING}: type the new ones (a frozen dataclass, a TypedDict at a JSON edge)")


def test_no_stage_passes_trials_analyses_or_comparison_rows_as_dicts() -> None:
    found = dict_contracts([ROOT / "kit", ROOT / "experiments"])
    assert not found, "stage functions with dict contracts:\n" + "\n".join(found)


def test_the_ratchet_can_fail(tmp_path: Path) -> None:
    """Both checks see a planted offender (they are not vacuous)."""
    (tmp_path / "planted.py").write_text(
        "from typing import Any\n\n"
        "def compute_analysis(trials: list[dict[str, Any]]) -> dict[str, Any]:\n"
        "    return {}\n\n"
        "def fine(obj: dict[str, Any]) -> int:\n"
        "    return 0\n", encoding="utf-8")
    assert len(untyped_lines([tmp_path])) == 2
    found = dict_contracts([tmp_path])
    assert len(found) == 2 and "compute_analysis" in found[0] and "trials" in found[0]
