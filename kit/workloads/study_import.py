"""Import a module of a study folder (stdlib only: used by the harness inside images and by the host).

A study folder is imported as a package of its own (default name ``kit_study``)
whose search path is the folder alone: its modules import each other as
``from kit_study import helpers`` or ``from . import helpers``, and import the
kit's shared model code (``kit.workloads.*``) like any workload. Nothing is
added to ``sys.path``, so a study module cannot shadow a kit or library module.

Only ``.py`` source is ever imported from the folder, compiled from the bytes
read at import time: never a ``__pycache__`` file, a ``.pyc`` beside the
source or an extension module. A study's digest covers its sources; bytecode
(which Python would otherwise prefer, and which a crafted run can plant with
a header that is never checked against the source) could run code nobody
read. No bytecode is written into the folder either.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import CodeType, ModuleType

PACKAGE = "kit_study"
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compile the module from its source every time: bytecode is neither read nor written."""

    def get_code(self, fullname: str) -> CodeType:
        return compile(self.get_data(self.path), self.path, "exec", dont_inherit=True)


class _StudyFinder(importlib.abc.MetaPathFinder):
    """Finds ``package.a.b`` as ROOT/a/b.py or ROOT/a/b/__init__.py (regular files only), nothing else."""

    def __init__(self, package: str, root: Path) -> None:
        self.package, self.root = package, root

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.package + "."):
            return None
        parts = fullname.split(".")[1:]
        if all(MODULE_NAME.match(p) for p in parts):
            base = self.root.joinpath(*parts)
            for file, is_pkg in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
                if file.is_file() and not file.is_symlink():
                    loader = SourceOnlyLoader(fullname, str(file))
                    return importlib.util.spec_from_file_location(
                        fullname, file, loader=loader, submodule_search_locations=[str(base)] if is_pkg else None)
        # never left to the default finders, which would take a .pyc or an extension module from the folder
        raise ModuleNotFoundError(f"No module named {fullname!r} (a study imports only the .py files of its folder)",
                                  name=fullname)


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
        sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _StudyFinder) and f.package == package)]
        sys.meta_path.insert(0, _StudyFinder(package, Path(root)))
        spec = importlib.util.spec_from_loader(package, loader=None, is_package=True)
        assert spec is not None
        spec.submodule_search_locations = [str(root)]
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[package] = pkg
    return importlib.import_module(f"{package}.{module}")
