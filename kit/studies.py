"""Study folders: one directory per study, discovered and run without editing the kit.

A study folder holds ``experiment.toml`` (the experiment file), optionally a
``[study]`` table in it declaring the folder's own workload (one module per
framework, its parameters and datasets), ``analysis.py`` (``analyse(run) ->
StudyExtras``: statistics beyond the generic hypotheses, stored under
``analysis["extras"][workload]``), ``report.py`` (``sections(run, analysis) ->
list[Section]``; the typed API 3 of :mod:`kit.study_api`, older folders through
its adapter) and a README. docs/writing-a-study.md is the guide; ``kit new
study NAME`` writes a working one.

A run copies the folder into its run directory (``study/``) before the first
trial and records the copy's digest in the manifest: trials import the copy
(read-only in containers), so the code that ran is the code kept, an edit of
the folder during a run changes nothing, and ``kit pack`` carries it. The folder
is code the user chose to run; what the kit still refuses is a folder it
could not copy faithfully: links (never followed), special files, more than
:data:`MAX_FILES` files, :data:`MAX_TOTAL_BYTES` bytes or :data:`MAX_DEPTH` nested folders.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

from kit.analysis_record import Analysis
from kit.errors import SpecError, StoreError, StudyError
from kit.manifest import Manifest
from kit.records import TrialRecord
from kit.study_api import invoke
from kit.trust import StudyTrust
from kit.workloads import FRAMEWORKS, WORKLOADS, Param, WorkloadInfo
from kit.workloads.study_import import MODULE_NAME, import_study_module

STUDY_FILE = "experiment.toml"
RUN_COPY = "study"  # the copy's directory inside a run directory
MAX_FILES = 256
MAX_FILE_BYTES = 2 << 20
MAX_TOTAL_BYTES = 16 << 20
MAX_DEPTH = 8  # nested folders (a crafted chain of empty folders would otherwise recurse without bound)
SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".ipynb_checkpoints", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")
WORKLOAD_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
PARAM_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
KIT_ROOT = Path(__file__).resolve().parents[1]
BUNDLED = KIT_ROOT / "experiments"


# -- the [study] table ----------------------------------------------------------------------------------------------

def _bad(key: str, expected: str, got: Any, path: str) -> SpecError:
    return SpecError(f"expected {expected} (got {got!r})", where=f"{path}: study.{key}",
                     fix=f"set study.{key} as described (docs/writing-a-study.md)")


def study_workload(raw: Any, path: str) -> tuple[dict[str, Any], WorkloadInfo]:
    """Validate a ``[study]`` table; its plain copy (for the manifest) and the workload it declares."""
    if not isinstance(raw, dict):
        raise _bad("", "a table", raw, path)
    known = {"workload", "description", "modules", "datasets", "optimizers", "params"}
    for key in raw:
        if key not in known:
            raise _bad(key, f"one of the keys {', '.join(sorted(known))}; unknown key", key, path)
    name = raw.get("workload")
    if not isinstance(name, str) or not WORKLOAD_NAME.match(name):
        raise _bad("workload", "the workload's name: lower-case letters, digits and _ (at most 64)", name, path)
    if name in WORKLOADS and not WORKLOADS[name].folder:
        raise _bad("workload", f"a name that is not one of the kit's workloads ({', '.join(sorted(WORKLOADS))})",
                   name, path)
    modules = raw.get("modules")
    if not isinstance(modules, dict) or not modules:
        raise _bad("modules", f"a table framework = module file without .py ({', '.join(FRAMEWORKS)})", modules, path)
    for fw, mod in modules.items():
        if fw not in FRAMEWORKS:
            raise _bad(f"modules.{fw}", f"a framework ({', '.join(FRAMEWORKS)})", fw, path)
        if not isinstance(mod, str) or not MODULE_NAME.match(mod):
            raise _bad(f"modules.{fw}", "a module of the folder: letters, digits and _ (no path, no .py)", mod, path)
    desc = raw.get("description", "")
    if not isinstance(desc, str):
        raise _bad("description", "a string", desc, path)
    lists = {}
    for key, default in (("datasets", []), ("optimizers", ["sgd"])):
        val = raw.get(key, default)
        if not isinstance(val, list) or not all(isinstance(v, str) and v for v in val):
            raise _bad(key, "a list of names", val, path)
        lists[key] = val
    params_raw = raw.get("params", {})
    if not isinstance(params_raw, dict):
        raise _bad("params", "a table of [study.params.KEY] tables", params_raw, path)
    params = {pname: _param(pname, p, path) for pname, p in params_raw.items()}
    plain = {"workload": name, "description": desc, "modules": dict(modules), **lists,
             "params": {k: dict(v) for k, v in params_raw.items()}}
    info = WorkloadInfo(name=name, modules=dict(modules), datasets=tuple(lists["datasets"]), params=params,
                        description=desc, optimizers=tuple(lists["optimizers"]), folder=True)
    return plain, info


def _param(name: str, raw: Any, path: str) -> Param:
    where = f"params.{name}"
    if not MODULE_NAME.match(name):
        raise _bad(where, "a key name: letters, digits and _", name, path)
    if not isinstance(raw, dict):
        raise _bad(where, "a table with type, default and help", raw, path)
    unknown = set(raw) - {"type", "default", "help", "choices", "minimum"}
    if unknown:
        raise _bad(f"{where}.{sorted(unknown)[0]}", "one of type, default, help, choices, minimum; unknown key",
                   sorted(unknown)[0], path)
    tname = raw.get("type")
    if tname not in PARAM_TYPES:
        raise _bad(f"{where}.type", f"one of {', '.join(PARAM_TYPES)}", tname, path)
    tp = PARAM_TYPES[tname]
    default = raw.get("default")
    ok = isinstance(default, tp) and not (tp in (int, float) and isinstance(default, bool))
    if tp is float and isinstance(default, int) and not isinstance(default, bool):
        default, ok = float(default), True
    if not ok:
        raise _bad(f"{where}.default", f"a value of type {tname}", default, path)
    choices = raw.get("choices", [])
    if not isinstance(choices, list) or (choices and default not in choices):
        raise _bad(f"{where}.choices", "a list of allowed values that holds the default", choices, path)
    minimum = raw.get("minimum")
    if minimum is not None and (isinstance(minimum, bool) or not isinstance(minimum, (int, float))):
        raise _bad(f"{where}.minimum", "a number", minimum, path)
    # ok above: a numeric tp means default is an int or float (never None or bool) here
    if minimum is not None and tp in (int, float) and isinstance(default, (int, float)) and default < minimum:
        raise _bad(f"{where}.default", f"at least the minimum {minimum}", default, path)
    return Param(tp, default, str(raw.get("help", "")), tuple(choices), minimum)


# -- the folder's files ---------------------------------------------------------------------------------------------

def study_dir_of(path: Path) -> Path | None:
    """The study folder ``path`` names (the folder, or its experiment.toml); None for a plain TOML file."""
    if path.is_dir() and not path.is_symlink():
        return path
    if path.name == STUDY_FILE and path.parent.is_dir():
        return path.parent
    return None


def study_files(root: Path) -> list[tuple[str, bytes]]:
    """Every file of the folder as (relative path, bytes), sorted; links and special files refused."""
    out: list[tuple[str, bytes]] = []
    total = 0
    root_st = os.lstat(root)
    if not stat.S_ISDIR(root_st.st_mode):
        raise StudyError("the study folder is not a directory (or is a link)", where=str(root),
                         fix="give the folder itself, not a link to it")

    def walk(d: Path, rel: str) -> None:
        nonlocal total
        if rel.count("/") >= MAX_DEPTH:
            raise StudyError(f"the study folder nests folders more than {MAX_DEPTH} deep", where=str(d),
                             fix="keep the study's code in the folder and a few sub-folders")
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            r = f"{rel}{e.name}"
            st = os.lstat(e.path)
            if stat.S_ISLNK(st.st_mode):
                raise StudyError("the study folder holds a symbolic link (the kit copies a study, never follows "
                                 "a link out of it)", where=str(Path(e.path)),
                                 fix="replace the link with the file it points to, or remove it")
            if stat.S_ISDIR(st.st_mode):
                if e.name not in SKIPPED_DIRS:
                    walk(Path(e.path), r + "/")
                continue
            if not stat.S_ISREG(st.st_mode):
                raise StudyError("the study folder holds a special file (FIFO, socket or device)",
                                 where=str(Path(e.path)), fix="remove it from the folder")
            if e.name.endswith(SKIPPED_SUFFIXES):
                continue
            if st.st_size > MAX_FILE_BYTES:
                raise StudyError(f"a study file of {st.st_size} bytes exceeds the limit of {MAX_FILE_BYTES}",
                                 where=str(Path(e.path)), fix="keep data out of the study folder (datasets come "
                                 "from the kit's dataset cache)")
            if len(out) >= MAX_FILES:
                raise StudyError(f"the study folder holds more than {MAX_FILES} files", where=str(root),
                                 fix="keep only the study's code, experiment.toml and README in it")
            fd = os.open(e.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
            total += len(data)
            if len(data) > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                raise StudyError(f"the study folder exceeds {MAX_TOTAL_BYTES} bytes (or a file grew while read)",
                                 where=str(Path(e.path)), fix="keep only the study's code and text in it")
            out.append((r, data))

    walk(root, "")
    return out


def digest_of(files: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


class StudyEntry(TypedDict):
    """The manifest's ``study`` entry (its JSON shape is what kit.manifest and older runs read)."""

    source: str
    files: list[str]
    digest: str
    analysis: bool
    report: bool


def describe(root: Path, files: list[tuple[str, bytes]]) -> StudyEntry:
    """The manifest's ``study`` entry: where it came from, its files and their digest."""
    return {"source": str(root.resolve()), "files": [r for r, _ in files], "digest": digest_of(files),
            "analysis": any(r == "analysis.py" for r, _ in files), "report": any(r == "report.py" for r, _ in files)}


def write_copy(files: list[tuple[str, bytes]], dest: Path) -> None:
    """The run's copy of the folder, read-only (the trials import it)."""
    for rel, data in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o444)


def checked_copy(run_dir: Path, manifest: Manifest) -> Path | None:
    """The run's copy of its study folder, checked against the manifest's digest; None for a non-folder study."""
    meta = manifest.study
    if meta is None:
        return None
    copy = run_dir / RUN_COPY
    try:
        files = study_files(copy)
    except (StudyError, OSError) as exc:
        raise StoreError(f"the run's copy of its study folder cannot be read ({exc})", where=str(copy),
                         fix="restore study/ from the run's bundle or start a new run") from None
    if digest_of(files) != meta.get("digest"):
        raise StoreError("the run's copy of its study folder was changed after the run started (its digest is not "
                         "the manifest's study.digest)", where=str(copy),
                         fix="restore study/ as the run left it, or start a new run from the folder")
    return copy


def check_modules(root: Path, plain: dict[str, Any] | None) -> None:
    """Every module the [study] table names is a file of the folder (at load, before any trial)."""
    for fw, mod in (plain or {}).get("modules", {}).items():
        f = root / f"{mod}.py"
        if f.is_symlink() or not f.is_file():
            raise SpecError(f"the study's {fw} module {mod}.py is not a file of the folder", where=str(root / STUDY_FILE)
                            + f": study.modules.{fw}", fix=f"create {f} (see docs/writing-a-study.md) or fix the name")


# -- the study's own analysis and report: whose code runs, and where ------------------------------------------------

# A study's analyse()/sections() that is not the kit's own runs in a boxed child process: its time, memory and
# output limits are kit.study_child.HookLimits (environment KIT_HOOK_TIMEOUT_S, KIT_HOOK_MEMORY_MB,
# KIT_HOOK_OUTPUT_MB, or kit.study_child.hook_limits around a command).


@dataclass(frozen=True)
class Hooks:
    """Where a run's study hooks come from, as the reader decided (:func:`resolve_hooks`).

    ``kind``: ``bundled`` (the kit's own folder of that experiment: kit code, imported in this process),
    ``copy`` (the run's copy, trusted by the user), ``folder`` (a folder the user named), ``none``
    (no study code, or code that was not trusted: the generic analysis only). Code that is not the
    kit's own never runs in the kit's process: ``call`` runs it in a child process (JSON out).
    """

    kind: str
    root: Path | None = None
    digest: str | None = None
    notice: str | None = None  # one line: which sections were left out and how to include them

    @property
    def in_process(self) -> bool:
        return self.kind == "bundled"

    def has(self, module: str) -> bool:
        return self.root is not None and (self.root / f"{module}.py").is_file() and \
            not (self.root / f"{module}.py").is_symlink()

    def state(self) -> str:
        """What an analysis made with these hooks depends on (part of its seal)."""
        return f"{self.kind}:{self.digest or '-'}"

    def as_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind, "digest": self.digest, "root": str(self.root) if self.root else None,
                "notice": self.notice}


def bundled_folder(experiment: Any) -> Path | None:
    """The kit's own study folder of an experiment id (a name, never a path from a manifest)."""
    if isinstance(experiment, str) and WORKLOAD_NAME.match(experiment) and (BUNDLED / experiment / STUDY_FILE).is_file():
        return BUNDLED / experiment
    return None


def copy_digest(run_dir: Path, manifest: Manifest) -> str | None:
    """The digest of the run's study copy as this reader computes it (checked against the manifest's)."""
    copy = checked_copy(run_dir, manifest)
    return digest_of(study_files(copy)) if copy is not None else None


def resolve_hooks(run_dir: Path | None, manifest: Manifest, trust: StudyTrust | None = None) -> Hooks:
    """Decide whose analysis.py/report.py a reader of this run may use (see :mod:`kit.trust`)."""
    from kit import trust as trustmod

    trust = trust or StudyTrust()
    if trust.study_dir is not None:
        folder = study_dir_of(Path(trust.study_dir)) or Path(trust.study_dir)
        try:
            files = study_files(folder)
        except OSError as exc:
            raise StudyError(f"the study folder cannot be read ({exc.strerror or exc})", where=str(folder),
                             fix="give a study folder (the directory holding experiment.toml)") from None
        digest = digest_of(files)
        bundled = bundled_folder(manifest.experiment)
        if bundled is not None and folder.resolve() == bundled.resolve():
            return Hooks("bundled", bundled, digest)
        return Hooks("folder", folder, digest)
    copy = checked_copy(run_dir, manifest) if run_dir is not None else None
    bundled = bundled_folder(manifest.experiment)
    if copy is None or run_dir is None:  # a run without a copy: written before study folders, or a kit experiment
        return Hooks("bundled", bundled, digest_of(study_files(bundled))) if bundled is not None else Hooks("none")
    files = study_files(copy)
    digest = digest_of(files)
    if bundled is not None and digest_of(study_files(bundled)) == digest:
        return Hooks("bundled", bundled, digest)
    if trust.trust_run_copy or (trust.allow_list and trustmod.is_trusted(digest)):
        return Hooks("copy", copy, digest)
    code = [r for r, _ in files if r in ("analysis.py", "report.py")]
    if not code:
        return Hooks("none", None, digest)
    parts = [w for r, w in (("analysis.py", "its own analysis (extras)"), ("report.py", "its report sections"))
             if r in code]
    verb = "is" if parts == ["its own analysis (extras)"] else "are"
    notice = (f"study code not run: {run_dir / RUN_COPY} ({', '.join(code)}, digest {digest[:12]}) is neither this "
              f"kit's bundled study nor code you trusted, so {' and '.join(parts)} {verb} left out; to include them, "
              "read that code, "
              f"then pass --trust-study-code (this command) or run `kit trust {run_dir}` (remembered)")
    return Hooks("none", None, digest, notice)


def _hook(copy: Path, module: str, func: str) -> tuple[ModuleType, Any]:
    try:
        mod = import_study_module(copy, module, package="kit_study_host")
    except Exception as exc:  # the study's own code: any failure is the study's, said as such
        raise StudyError(f"the study's {module}.py cannot be imported ({type(exc).__name__}: {exc})",
                         where=str(copy / f"{module}.py"), fix=f"fix {module}.py in the study folder and "
                         "start a new run (the run keeps the copy it ran)",
                         detail=traceback.format_exc()) from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise StudyError(f"the study's {module}.py defines no function {func}()", where=str(copy / f"{module}.py"),
                         fix=f"define {func}() as docs/writing-a-study.md shows")
    return mod, fn


def call_hook(hooks: Hooks, module: str, func: str, *args: Any) -> Any:
    """``module.func(*args)`` of the study: the kit's own code in this process, any other in a child process
    whose only way back is JSON (it cannot rebind a function of the kit that decides a verdict). An exception
    in the study's code is a StudyError with the traceback as its detail (shown with --debug)."""
    if hooks.root is None:
        raise StudyError(f"no study code to run {module}.{func}()", fix="a kit bug: report it")
    where = str(hooks.root / f"{module}.py")
    if not hooks.in_process:
        import tempfile

        from kit.study_child import interrupt_box, remove_tree, run_in_child

        # the child imports a fresh copy written from exactly the bytes whose digest was trusted (nothing planted
        # beside them, nothing changed since the check)
        files = study_files(hooks.root)
        if hooks.digest is not None and digest_of(files) != hooks.digest:
            raise StudyError("the study's code changed after it was checked (its digest differs)", where=where,
                             fix="run the command again")
        # the kit's SIGTERM/SIGHUP/SIGINT becomes one KeyboardInterrupt, raised only where the copy is sure to be
        # removed after it (never between its creation and the try, never twice during the removal)
        with interrupt_box() as box:
            tmp: Path | None = None
            try:
                with box.held():
                    tmp = Path(tempfile.mkdtemp(prefix="kit-study-code-"))
                write_copy(files, tmp / "study")
                return run_in_child(tmp / "study", module, func, args, where)
            finally:
                with box.held():
                    if tmp is not None:
                        remove_tree(tmp)
    mod, fn = _hook(hooks.root, module, func)
    try:
        return invoke(mod, fn, func, args, where)
    except StudyError:
        raise
    except Exception as exc:
        raise StudyError(f"the study's {func}() raised {type(exc).__name__}: {str(exc)[:300]}", where=where,
                         fix=f"fix {module}.py (re-run with --debug for the traceback)",
                         detail=traceback.format_exc()) from None


def study_extras(hooks: Hooks, manifest: Manifest, trials: Sequence[TrialRecord], values: Any) -> dict[str, Any]:
    """The study folder's ``analysis.analyse`` result, under its workload name ({} without trusted code). The trials
    go to the study as the typed records they are (kit.study_api.invoke hands an API-1 study their JSON)."""
    if not hooks.has("analysis") or hooks.root is None:
        return {}
    out = call_hook(hooks, "analysis", "analyse", manifest.to_json(), trials, values)
    if not isinstance(out, dict):
        raise StudyError("the study's analyse() returned no dict", where=str(hooks.root / "analysis.py"),
                         fix="return a StudyExtras record (STUDY_API = 3: kit.study_api), or plain data under API 2")
    return {manifest.workload: out}


def study_sections(hooks: Hooks, manifest: Manifest, analysis: Analysis) -> list[dict[str, Any]]:
    """The study folder's ``report.sections`` ([] without trusted code). The study's code gets analysis.json's
    content (``Analysis.to_json``): it may run in a child process whose only way in is JSON, and its API types
    what it receives (kit.study_api)."""
    if not hooks.has("report") or hooks.root is None:
        return []
    out = call_hook(hooks, "report", "sections", manifest.to_json(), analysis.to_json())
    if not isinstance(out, list) or not all(isinstance(s, dict) and "id" in s and "title" in s for s in out):
        raise StudyError("the study's sections() returned no list of sections", where=str(hooks.root / "report.py"),
                         fix="return a list of kit.study_api.Section (STUDY_API = 3)")
    for sec in out:
        for key in ("paragraphs", "tables", "figures"):
            sec.setdefault(key, [])
    return out


# -- discovery ------------------------------------------------------------------------------------------------------

def experiment_dirs(extra: Iterable[Path] = ()) -> list[Path]:
    """The bundled experiments directory, then KIT_EXPERIMENTS (os.pathsep-separated), then ``extra``."""
    env = [Path(p) for p in os.environ.get("KIT_EXPERIMENTS", "").split(os.pathsep) if p]
    seen: list[Path] = []
    for d in ((BUNDLED,) if BUNDLED.is_dir() else ()) + (*env, *extra):
        if d.resolve() not in [s.resolve() for s in seen]:
            seen.append(d)
    return seen


def experiment_paths(directory: Path) -> list[Path]:
    """A directory's experiments: its *.toml files and its study folders (sub-folders with experiment.toml),
    or the directory itself when it is one study folder."""
    if (directory / STUDY_FILE).is_file():
        return [directory]
    found = [p for p in directory.glob("*.toml") if p.is_file()]
    found += [p for p in directory.iterdir() if p.is_dir() and not p.is_symlink() and (p / STUDY_FILE).is_file()]
    return sorted(found, key=lambda p: p.name)


# -- what a study needs beyond torch: torchvision ---------------------------------------------------------------------

# Workloads whose PyTorch side builds its network with torchvision.models when the configuration's ``model`` is one of
# the zoo's vision models (kit.workloads.zoo.VISION): the kit's zoo and the bundled studies built on it.
TORCHVISION_MODEL_WORKLOADS = ("zoo", "dai_factors", "zoo_distributed")
# (workload, dataset) pairs whose PyTorch side is torchvision's detection model: DLBench's voc2012 case trains
# fasterrcnn_resnet50_fpn (kit.workloads.detect_torch).
TORCHVISION_DATASETS = {("dlbench", "voc2012"): "Faster R-CNN (torchvision.models.detection)"}


def torchvision_need(spec: Any) -> str:
    """Why a spec's profile needs torchvision in its PyTorch arm ("" when it does not): the vision models of the
    model zoo and DLBench's Faster R-CNN import it. A CPU host whose pip offers a CPU torch but no CPU torchvision
    installs torch alone (kit.doctor.torch_cpu.cpu_torch_choice), so the studies that need it must say so before they run
    (kit list, kit show, kit doctor) and `kit reproduce-all` must skip them with the fix, instead of failing on
    their first PyTorch trial.

    ``spec`` is a :class:`kit.spec.Spec` (typed loosely: kit.spec imports this module)."""
    if "pytorch" not in tuple(spec.experiment.frameworks):
        return ""
    from kit.workloads.zoo import VISION

    name = spec.workload.name
    models: list[str] = []
    cases: list[str] = []
    for config in spec.configurations():
        if name in TORCHVISION_MODEL_WORKLOADS:
            model = spec.workload_for(config).flat().get("model")
            if isinstance(model, str) and model in VISION and model not in models:
                models.append(model)
        ds = spec.dataset_for(config)
        what = TORCHVISION_DATASETS.get((name, ds.name if ds is not None else ""))
        if what:
            label = f"case {config['case']}: {what}" if "case" in config else what
            if label not in cases:
                cases.append(label)
    parts = ([f"{', '.join(models)} from torchvision.models"] if models else []) + cases
    return "; ".join(parts)


def torchvision_installed() -> bool:
    """Whether this interpreter can import torchvision (found without importing it: that starts torch)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torchvision") is not None
    except (ImportError, ValueError):
        return False
