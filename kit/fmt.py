"""The one number formatter of the kit: HTML and LaTeX reports, the study folders' report sections, the terminal.

Two ``fmt_num`` used to exist (the report's, 4 significant digits, and the figures', ``.3g``), so one value
could read 0.1235 in a table and 0.123 beside it. Here there is one rule: a missing or NaN value is a dash,
a bool is its word, an integer gets thousands separators, a float gets ``digits`` significant digits
(scientific outside [1e-3, 1e6)); a caller that needs a fixed layout (a ratio to three decimals, a
percentage) passes a ``format`` spec instead, applied to ``x * scale``.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

DASH = "–"


def fmt_num(x: Any, digits: int = 4, fmt: str | None = None, scale: float = 1.0) -> str:
    """``x`` for a reader: see the module docstring for the rule."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    if isinstance(x, bool):
        return str(x)
    if fmt is not None:
        return format(x * scale, fmt)
    if scale != 1.0 and isinstance(x, int | float):
        x = float(x) * scale
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}"
    return str(x)


def fmt_p(p: Any) -> str:
    """A p-value: three significant digits; an underflow to 0 reads "< 1e-300", not 0."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return DASH
    return "< 1e-300" if p == 0 else f"{p:.3g}"


def fmt_bytes(n: Any) -> str:
    """A byte count in binary units: 1.268e+09 reads "1.18 GiB"."""
    if n is None or (isinstance(n, float) and math.isnan(n)) or isinstance(n, bool):
        return DASH
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.3g} {unit}"
        x /= 1024
    return DASH  # unreachable


def fmt_value(x: Any, unit: str | None = None, digits: int = 4) -> str:
    """A measured value in its unit's reading: bytes in KiB/MiB/GiB, anything else as :func:`fmt_num`."""
    if unit == "B" and isinstance(x, int | float) and not isinstance(x, bool):
        return fmt_bytes(x)
    return fmt_num(x, digits)


def fmt_counts(by_arm: Any) -> str:
    """Per-arm lists of counts for a reader ({"tensorflow": [61706], "pytorch": [61706]} reads
    "61,706 in both arms"; different ones "tensorflow 61,706, pytorch 61,802")."""
    if not isinstance(by_arm, dict) or not by_arm:
        return DASH
    def one(v: Any) -> str:
        vals = sorted({int(n) for n in v}) if isinstance(v, list | tuple | set) else [v]
        return " or ".join(f"{n:,}" if isinstance(n, int) else str(n) for n in vals) or DASH
    shown = {arm: one(v) for arm, v in by_arm.items()}
    if len(set(shown.values())) == 1 and len(shown) > 1:
        return f"{next(iter(shown.values()))} in every arm"
    return ", ".join(f"{arm} {v}" for arm, v in shown.items())


# -- the kit's own command, as the user can type it here ----------------------------------------------------------

# Words that follow "kit" in a command the kit suggests (its subcommands): "kit run --resume RUN" is a command,
# "the kit runs" is prose. kit.cli's test checks this list against the app's commands.
KIT_COMMANDS = ("bench", "bisect", "compare", "datasets", "doctor", "history", "images", "list", "map", "new", "pack",
                "report", "reproduce-all", "run", "selftest", "show", "status", "trust", "tune", "verify")
_KIT_WORD = re.compile(r"(?<![\w./-])(?<!the )(?<!The )(?<!a )(?<!-m )kit(?= (?:" + "|".join(map(re.escape, KIT_COMMANDS))
                       + r")\b)")


def kit_prefix(cwd: str | None = None, path_env: str | None = None) -> str:
    """How to call this kit from where the user stands: ``kit`` when the ``kit`` on PATH is this kit's script;
    else the script beside this interpreter (``.venv/bin/kit``), relative to the working directory when it lies
    under it, absolute otherwise; ``python -m kit`` with this interpreter when there is no script at all.

    Why: `make setup` installs into .venv without touching PATH, so a hint that says ``kit run --resume RUN``
    answers "command not found" to a user who never activated the venv; the same hint with ``.venv/bin/kit``
    works as printed."""
    import shutil

    script = Path(sys.executable).parent / "kit"
    if not script.is_file():
        if sys.argv and Path(sys.argv[0]).name == "kit" and Path(sys.argv[0]).is_file():
            script = Path(sys.argv[0])
        else:
            return f"{shlex.quote(sys.executable)} -m kit"
    on_path = shutil.which("kit", path=path_env if path_env is not None else os.environ.get("PATH", os.defpath))
    if on_path and os.path.realpath(on_path) == os.path.realpath(script):
        return "kit"
    return from_here(script, cwd)


def from_here(path: str | Path, cwd: str | None = None) -> str:
    """``path`` as the user can type it here (shell-quoted): relative to the working directory when it lies below it
    (``.venv/bin/kit``), absolute otherwise."""
    here = cwd if cwd is not None else os.getcwd()
    absolute = os.path.abspath(path)
    rel = os.path.relpath(absolute, here)
    return shlex.quote(rel if not rel.startswith("..") and os.sep in rel else absolute)


def kit_cmd(args: str = "", cwd: str | None = None) -> str:
    """``kit ARGS`` as a command that runs from here (see :func:`kit_prefix`): every hint the kit prints."""
    prefix = kit_prefix(cwd)
    return f"{prefix} {args}" if args else prefix


def in_user_terms(text: str, prefix: str | None = None) -> str:
    """A message whose hints name ``kit SUBCOMMAND`` with the command that runs here (``.venv/bin/kit run …``
    unless ``kit`` on PATH is this kit). Applied where messages reach the terminal (kit.cli), so the fix of an
    error raised deep in the library works as printed without each module knowing where the user stands."""
    prefix = kit_prefix() if prefix is None else prefix
    if prefix == "kit" or "kit " not in text:
        return text
    return _KIT_WORD.sub(lambda m: prefix, text)
