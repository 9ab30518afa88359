"""The layers of kit/, written down and checked over the real import graph (every import, also those inside
functions; ``if TYPE_CHECKING:`` blocks excepted, since they never run).

The contract:
  * each module belongs to one layer below; a module imports only its own layer or lower ones;
  * there is no import circle anywhere in kit/ (an import inside a function closes a circle as surely as one
    at the top: it only postpones it to the first call);
  * the container side (the harness and the workloads, which run inside the images) imports nothing else of
    the kit;
  * kit/ never imports the study folders of experiments/ (they are data the kit loads, not code it depends on).

``python -m tests.test_layers`` prints the contract with the counts it checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "kit"

# Lowest first. A prefix names a package or module and everything under it; "kit" alone is the package's
# __init__ (its version), which everything may import.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("container side", ("kit.harness", "kit.workloads")),
    ("base", ("kit", "kit.errors", "kit.fmt", "kit.safeio", "kit.nvml", "kit.metric_catalog", "kit.dataset_types",
              "kit.disturbance", "kit.disturbance_cpus", "kit.slow_phase", "kit.spec_invalid", "kit.claim_spec",
              "kit.records", "kit.analysis_rows", "kit.analysis_record",
              "kit.manifest", "kit.study_api", "kit.private_files", "kit.proctree", "kit.build_id")),
    ("statistics", ("kit.stats",)),
    ("configuration", ("kit.dataset_registry", "kit.synthetic", "kit.synthetic_voc", "kit.datasets", "kit.dataset_fetch",
                       "kit.trust",
                       "kit.spec", "kit.plan", "kit.studies", "kit.study_child", "kit.run_code")),
    ("host", ("kit.collectors", "kit.gpus", "kit.provenance", "kit.engine", "kit.images", "kit.backends", "kit.pinning",
              "kit.tune",
              "kit.selftest", "kit.doctor")),
    ("store", ("kit.store", "kit.freshness")),
    ("run", ("kit.run", "kit.executors")),
    ("analysis", ("kit.analysis",)),
    ("report", ("kit.report",)),
    ("tools", ("kit.compare", "kit.compare_records", "kit.history", "kit.history_cache", "kit.history_read", "kit.history_pages", "kit.history_site", "kit.bisect", "kit.pack", "kit.share", "kit.verify",
               "kit.bench", "kit.catalog", "kit.scaffold", "kit.sequential_run", "kit.reproduce",
               "kit.markdown", "kit.replication")),
    ("command line", ("kit.cli", "kit.__main__")),
)


def modules() -> dict[str, Path]:
    out = {}
    for path in KIT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of every import that can run: ``if TYPE_CHECKING:`` bodies are left out."""
    found: list[tuple[str, tuple[str, ...]]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, ()) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, tuple(a.name for a in child.names)))
            elif isinstance(child, ast.ImportFrom):
                raise AssertionError("relative import: the kit imports absolutely (kit.x)")
            visit(child)

    visit(tree)
    return found


def edges(mods: dict[str, Path]) -> tuple[set[tuple[str, str]], list[str]]:
    """Internal import edges (importer, imported) and every import of the study folders."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out: set[tuple[str, str]] = set()
    studies: list[str] = []
    for mod, path in mods.items():
        for target, names in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target == "experiments" or target.startswith("experiments."):
                studies.append(f"{mod} imports {target}")
            if target != "kit" and not target.startswith("kit."):
                continue
            hits = [resolve(f"{target}.{n}") for n in names if f"{target}.{n}" in mods] or [resolve(target)]
            out |= {(mod, t) for t in hits if t is not None and t != mod}
    return out, studies


def layer_of(mod: str) -> int:
    best = (-1, -1)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            hit = mod == p or (p != "kit" and mod.startswith(p + "."))
            if hit and len(p) > best[1]:
                best = (i, len(p))
    assert best[0] >= 0, f"{mod} is in no layer: add it to LAYERS in tests/test_layers.py"
    return best[0]


def cycles(nodes: set[str], graph: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in graph:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_circles() -> None:
    mods = modules()
    graph, _ = edges(mods)
    assert cycles(set(mods), graph) == []


def test_cycle_finder_finds_a_planted_circle() -> None:
    graph = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}
    assert cycles({"a", "b", "c", "d"}, graph) == [["a", "b", "c"]]


def test_each_module_imports_only_its_layer_or_lower() -> None:
    mods = modules()
    graph, _ = edges(mods)
    upward = sorted(f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
                    for a, b in graph if layer_of(a) < layer_of(b))
    assert upward == []


def test_container_side_imports_nothing_of_the_host_side() -> None:
    mods = modules()
    graph, _ = edges(mods)
    inside = {m for m in mods if layer_of(m) == 0}
    assert sorted(f"{a} imports {b}" for a, b in graph if a in inside and b not in inside) == []


def test_kit_never_imports_the_study_folders() -> None:
    _, studies = edges(modules())
    assert studies == []


def main() -> None:
    mods = modules()
    graph, studies = edges(mods)
    print(f"kit/: {len(mods)} modules, {len(graph)} internal import edges (inside functions too)")
    for i, (name, prefixes) in enumerate(LAYERS):
        n = sum(1 for m in mods if layer_of(m) == i)
        print(f"  layer {i} {name}: {n} modules ({', '.join(prefixes)})")
    upward = [(a, b) for a, b in graph if layer_of(a) < layer_of(b)]
    print(f"imports of a higher layer: {len(upward)}; import circles: {len(cycles(set(mods), graph))}; "
          f"imports of experiments/: {len(studies)}")


if __name__ == "__main__":
    main()
