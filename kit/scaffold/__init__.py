"""`kit new study NAME`: a working study folder (an MLP on MNIST in both frameworks) to start from.

The templates are the files of ``study/`` with ``.tmpl`` appended (package
data, so a pip-installed kit writes them too); ``__NAME__`` becomes the study's
name and ``__DIR__`` the folder's path as the user gave it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kit.errors import KitError
from kit.studies import STUDY_FILE, WORKLOAD_NAME

TEMPLATES = Path(__file__).resolve().parent / "study"


def new_study(name: str, parent: Path) -> Path:
    """Write the study folder ``parent/name``; refuses a name that is not a workload name or a folder that exists."""
    from kit.workloads import WORKLOADS

    if not WORKLOAD_NAME.match(name):
        raise KitError(f"{name!r} is not a study name", where="NAME",
                       fix="use lower-case letters, digits and _ , starting with a letter (at most 64)")
    if name in WORKLOADS and not WORKLOADS[name].folder:
        raise KitError(f"{name!r} is the name of one of the kit's workloads", where="NAME", fix="choose another name")
    dest = parent / name
    if os.path.lexists(dest):
        raise KitError("the folder exists already", where=str(dest), fix="choose another name or --dir, or remove it")
    if not parent.is_dir():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise KitError(f"cannot create the parent directory ({exc.strerror or exc})", where=str(parent),
                           fix="give a writable --dir") from exc
    files = sorted(TEMPLATES.glob("*.tmpl"))
    if not any(f.name == STUDY_FILE + ".tmpl" for f in files):
        raise KitError("the kit's study templates are missing", where=str(TEMPLATES), fix="reinstall the kit")
    tmp = parent / f".{name}.partial"
    tmp.mkdir()
    try:
        for f in files:
            text = f.read_text(encoding="utf-8").replace("__NAME__", name).replace("__DIR__", str(dest))
            (tmp / f.name.removesuffix(".tmpl")).write_text(text, encoding="utf-8")
        os.rename(tmp, dest)  # all or nothing
    except BaseException:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
        raise
    return dest
