"""Import a module of a study folder (stdlib only: used by the harness inside images and by the host).

A study folder is imported as a package of its own (default name ``kit_study``)
whose search path is the folder alone: its modules import each other as
``from kit_study import helpers`` or ``from . import helpers``, and import the
kit's shared model code (``kit.workloads.*``) like any workload. Nothing is
added to ``sys.path``, so a study module cannot shadow a kit or library module.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "kit_study"
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def import_study_module(root: Path, module: str, package: str = PACKAGE) -> ModuleType:
    """``package.module`` from the folder ``root`` (ValueError for a name that is not one module)."""
    if not MODULE_NAME.match(module) or not MODULE_NAME.match(package):
        raise ValueError(f"not a module name: {module!r}")
    if (root / module).with_suffix(".py").is_symlink() or not (root / f"{module}.py").is_file():
        raise ValueError(f"study module {module}.py is not a regular file in {root}")
    current = sys.modules.get(package)
    if current is None or list(getattr(current, "__path__", [])) != [str(root)]:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]  # another folder was imported under this name before
        spec = importlib.util.spec_from_loader(package, loader=None, is_package=True)
        assert spec is not None
        spec.submodule_search_locations = [str(root)]
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[package] = pkg
    return importlib.import_module(f"{package}.{module}")
