"""Markdown for pull requests and issues (issue 41, item 4): `kit compare --markdown` and `kit history --markdown`
print the answer sentence, then one table with the verdict first (ratio and interval, p, MDE, medians, the versions
compared), `--only-changes` keeps what a reviewer acts on, labels a run controls cannot break the table or inject
HTML or links, and examples/github-actions-gate.yml is a workflow whose kit commands and options exist."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from kit.cli import app
from kit.compare import compare_runs
from kit.compare_records import Comparison, ProvenanceDiff
from kit.errors import ExitCode, UsageError
from kit.history import HistoryPoint, HistorySeries, detect_steps
from kit.markdown import compare_markdown, history_markdown, md_text
from tests._crafted import edit_manifest, golden_copy

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "github-actions-gate.yml"
CRAFTED = ("a|b", "`x`", "<img src=x>", "[x](javascript:alert(1))", "line\nbreak", "http://evil.example",
           "www.evil.example", "*bold* _it_ $x$ &lt;")
runner = CliRunner()


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One analysed copy of the stored golden run; copies of it reuse its analysis (fast)."""
    run = golden_copy(tmp_path_factory.mktemp("md") / "golden")
    compare_runs(run, run)
    return run


@pytest.fixture(scope="module")
def comparison(golden: Path) -> Comparison:
    return compare_runs(golden, golden)


def _inline_types(md: str) -> set[str]:
    """The kinds of inline content the Markdown renders to (text only: no link, image, HTML, emphasis, code)."""
    return {c.type for t in MarkdownIt("commonmark").enable("table").parse(md) if t.type == "inline"
            for c in t.children or ()}


def _tables(md: str) -> list[list[list[str]]]:
    """Every table of the rendered Markdown as rows of cell texts as a reader sees them (header row first)."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    tables: list[list[list[str]]] = []
    row: list[str] = []
    for i, t in enumerate(tokens):
        if t.type == "table_open":
            tables.append([])
        elif t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open"):
            inline = tokens[i + 1]
            row.append("".join(c.content for c in inline.children or () if c.type in ("text", "code_inline")))
        elif t.type == "tr_close":
            tables[-1].append(row)
    return tables


def _html(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(md)


def test_the_answer_comes_first_then_a_table_with_the_verdict_first(comparison: Comparison) -> None:
    md = compare_markdown(comparison)
    first = md.splitlines()[0]
    assert first.startswith("**kit compare:** No regression or improvement found between A and B")
    (table,) = _tables(md)
    assert table[0] == ["verdict", "metric", "phase", "arm", "config", "B/A (95 % CI)", "p (Holm)", "MDE",
                        "median A", "median B", "versions A → B"]
    assert len(table) == 1 + len(comparison.rows)
    assert all(r[0] == "⚪ no change" for r in table[1:])
    time_row = next(r for r in table[1:] if r[1] == "time_s")
    assert re.fullmatch(r"1\.000 \(0\.\d{3}–1\.\d{3}\)", time_row[5]) and time_row[7].endswith("%")
    assert time_row[8].endswith(" s") and time_row[10] == "no difference recorded"
    assert "Threshold ±5%" in md and "α = 0.05" in md  # the footer


def test_only_changes_keeps_changed_rows_and_counts_the_rest(comparison: Comparison) -> None:
    rows = list(comparison.rows)
    rows[-1] = replace(rows[-1], verdict="regression", ratio=1.2, ratio_low=1.1, ratio_high=1.3)
    changed = replace(comparison, rows=tuple(rows))
    full = _tables(compare_markdown(changed))[0]
    assert full[1][0] == "🔴 regression" and len(full) == 1 + len(rows)  # what changed sorted first
    md = compare_markdown(changed, only_changes=True)
    (table,) = _tables(md)
    assert [r[0] for r in table[1:]] == ["🔴 regression"] and "1.200 (1.100–1.300)" in table[1]
    assert f"{len(rows) - 1} rows without a change not shown ({len(rows) - 1} no change)." in md
    assert md.splitlines()[0].endswith("regression")  # the headline names it
    nothing = compare_markdown(comparison, only_changes=True)
    assert not _tables(nothing)
    assert f"No regression, improvement or suspect change: {len(rows)} rows without a change not shown" in nothing


def test_suspect_and_load_notes_mde_words_and_versions(comparison: Comparison) -> None:
    rows = list(comparison.rows)
    rows[0] = replace(rows[0], verdict="suspect", was="regression", suspect_cause="B ran under load")
    rows[1] = replace(rows[1], verdict="improvement", ratio=0.8, load_note="measured under 2 foreign CPUs")
    assert rows[2].detect is not None
    rows[2] = replace(rows[2], detect=replace(rows[2].detect, mde=float("inf")))
    rows[3] = replace(rows[3], detect=None)
    diffs = (ProvenanceDiff(f"inside.{rows[4].arm}.framework_version", "2.20.0", "2.21.0", "versions"),)
    md = compare_markdown(replace(comparison, rows=tuple(rows), provenance_differences=diffs))
    table = _tables(md)[0]
    by_verdict = {r[0]: r for r in table[1:]}
    assert "🟣 suspect" in by_verdict and "🟢 improvement" in by_verdict
    assert "- 🟣 suspect:" in md and "(would be regression): B ran under load" in md
    assert "- under load:" in md and "(improvement stands): measured under 2 foreign CPUs" in md
    mdes = [r[7] for r in table[1:]]
    assert "none (n too small)" in mdes and "unknown" in mdes
    assert any(r[10] == "2.20.0 → 2.21.0" for r in table[1:] if r[3] == rows[4].arm)
    arms = replace(comparison, arms=("tensorflow@2.20-cpu", "tensorflow@2.21-cpu"), provenance_differences=())
    assert {r[10] for r in _tables(compare_markdown(arms))[0][1:]} == {"tensorflow@2.20-cpu → tensorflow@2.21-cpu"}


@pytest.mark.parametrize("label", CRAFTED)
def test_a_crafted_label_neither_breaks_the_table_nor_injects_html_or_links(comparison: Comparison,
                                                                          label: str) -> None:
    rows = [replace(r, arm=label, config=label) for r in comparison.rows]
    rows[0] = replace(rows[0], verdict="suspect", was="regression", suspect_cause=label)
    crafted = replace(comparison, rows=tuple(rows), run_a=label, run_b=label, arms=(label, label),
                      provenance_differences=(ProvenanceDiff("inside.framework_version", label, label, None),))
    md = compare_markdown(crafted)
    (table,) = _tables(md)
    assert len(table) == 1 + len(rows) and all(len(r) == 11 for r in table)
    html = _html(md)
    assert "<img" not in html and "<a " not in html and "<em>" not in html and "<code>x" not in html
    assert _inline_types(md) <= {"text", "strong_open", "strong_close", "code_inline"}  # **kit compare:**, `kit`
    assert table[1][3] == " ".join(label.split())  # the reader sees the label as written (a newline: a space)
    assert "http://" not in md and "www." not in md  # nothing a GitHub autolink would turn into a link
    assert "\n" not in md_text(label) and md_text("a|b") == "a\\|b" and md_text("<b>") == "&lt;b&gt;"


def _series(labels: list[str], medians: list[float]) -> HistorySeries:
    rng = np.random.default_rng(0)
    runs = [HistoryPoint.of(f"runs/r{i}", float(i), label, "pytorch", f"pytorch 2.{i}",
                            list(m * (1 + 0.01 * rng.standard_normal(8))))
            for i, (label, m) in enumerate(zip(labels, medians, strict=True))]
    return HistorySeries(runs_dir="runs", metric="time_s", unit="s", phase="train", arm="pytorch", threshold=0.05,
                         alpha=0.05, runs=tuple(runs), steps=tuple(detect_steps(runs)), caveats=("a caveat",),
                         method="binary segmentation")


def test_history_markdown_steps_and_the_last_runs() -> None:
    res = _series([f"v{i}" for i in range(30)], [1.0] * 15 + [1.2] * 15)
    md = history_markdown(res, experiment="florencio2019_lenet")
    assert md.splitlines()[0] == ("**kit history:** florencio2019\\_lenet: time\\_s (train, arm pytorch) across 30 "
                                  "runs: 1 step (1 regression).")
    steps, runs = _tables(md)
    assert steps[0][:3] == ["verdict", "from", "to"]
    assert steps[1][:3] == ["🔴 regression", "v14 (pytorch 2.14)", "v15 (pytorch 2.15)"]
    assert re.fullmatch(r"1\.\d{3} \(1\.\d{3}–1\.\d{3}\)", steps[1][3])
    assert [r[0] for r in runs[1:]] == [str(i) for i in range(10, 30)]  # the last 20
    assert "10 earlier runs not shown" in md and "- note: a caveat" in md
    only = history_markdown(res, only_changes=True)
    assert len(_tables(only)) == 1 and "earlier runs" not in only
    flat = _series(["a", "b", "c"], [1.0, 1.0, 1.0])
    assert "no step: no significant change larger than ±5%" in history_markdown(flat, only_changes=True)
    assert not _tables(history_markdown(flat, only_changes=True))


def test_history_markdown_escapes_crafted_labels() -> None:
    res = _series([*CRAFTED[:4], "after"], [1.0, 1.0, 1.0, 1.0, 1.3])
    md = history_markdown(res, experiment="<b>x</b>")
    for table in _tables(md):
        assert all(len(r) == len(table[0]) for r in table)
    html = _html(md)
    assert "<img" not in html and "<a " not in html and "<b>" not in html


def test_cli_compare_markdown_on_stdout_and_the_gate_still_exits(golden: Path, tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(golden, b)
    res = runner.invoke(app, ["compare", str(golden), str(b), "--markdown", "--fail-on", "regression"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("**kit compare:**") and "Provenance" not in res.stdout  # the tables: stderr
    assert "B vs A" in res.stderr
    (table,) = _tables(res.stdout)
    assert table[0][0] == "verdict" and len(table) > 2
    arms = runner.invoke(app, ["compare", str(b), "--arms", "tensorflow,pytorch", "--markdown", "--only-changes",
                               "--fail-on", "regression"])
    assert arms.exit_code == 3, arms.output  # inconclusive: the gate's exit code, unchanged by --markdown
    assert arms.stdout.startswith("**kit compare:**")
    assert "rows without a change not shown" in arms.stdout and "could not have seen one" in arms.stderr


def test_cli_markdown_with_json_or_only_changes_alone_is_refused(golden: Path) -> None:
    for cmd in (["compare", str(golden), str(golden)], ["history", str(golden.parent)]):
        both = runner.invoke(app, [*cmd, "--markdown", "--json"])  # kit.cli.main prints it and exits 2
        assert isinstance(both.exception, UsageError) and both.exception.exit_code == ExitCode.USAGE
        assert both.exception.fix and "--json-file" in both.exception.fix and not both.stdout
        alone = runner.invoke(app, [*cmd, "--only-changes"])
        assert isinstance(alone.exception, UsageError) and alone.exception.fix == "add --markdown"


def test_cli_history_markdown(golden: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i in range(2):
        shutil.copytree(golden, runs / f"r{i}")
        edit_manifest(runs / f"r{i}", lambda m, i=i: m.update(label=f"2.{i}|<x>"))
    res = runner.invoke(app, ["history", str(runs), "--arm", "pytorch", "--markdown", "--no-cache"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("**kit history:** golden: time\\_s (train, arm pytorch) across 2 runs: no step")
    (table,) = _tables(res.stdout)
    assert [r[1] for r in table[1:]] == ["2.0|<x> (pytorch calibrated)", "2.1|<x> (pytorch calibrated)"]


# ----- examples/github-actions-gate.yml -----------------------------------------------------------------------------


def _scalar(text: str) -> object:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return int(text) if text.isdigit() else text


def tiny_yaml(text: str) -> object:
    """The block-style YAML subset a workflow is written in (mappings, lists, `|` literal blocks, plain and quoted
    scalars, comments): enough to check the example's structure where PyYAML is not installed."""
    lines = [(len(raw) - len(raw.lstrip(" ")), raw.rstrip("\n")) for raw in text.splitlines()]
    pos = 0

    def meaningful(i: int) -> bool:
        s = lines[i][1].strip()
        return bool(s) and not s.startswith("#")

    def block(indent: int) -> object:
        nonlocal pos
        while pos < len(lines) and not meaningful(pos):
            pos += 1
        if pos >= len(lines) or lines[pos][0] < indent:
            return None
        if lines[pos][1].strip().startswith("- "):
            return seq(lines[pos][0])
        return mapping(lines[pos][0])

    def literal(indent: int) -> str:
        nonlocal pos
        out = []
        while pos < len(lines) and (not lines[pos][1].strip() or lines[pos][0] > indent):
            out.append(lines[pos][1][indent + 2:] if lines[pos][1].strip() else "")
            pos += 1
        return "\n".join(out).strip("\n") + "\n"

    def value(rest: str, indent: int) -> object:
        nonlocal pos
        rest = re.sub(r"\s+#.*$", "", rest)
        if rest == "|":
            return literal(indent)
        if rest:
            return _scalar(rest)
        return block(indent + 1)

    def mapping(indent: int) -> dict[str, object]:
        nonlocal pos
        out: dict[str, object] = {}
        while pos < len(lines):
            if not meaningful(pos):
                pos += 1
                continue
            ind, raw = lines[pos]
            if ind < indent or raw.strip().startswith("- "):
                break
            assert ind == indent, f"line {pos + 1}: indentation {ind}, expected {indent}: {raw!r}"
            key, sep, rest = raw.strip().partition(":")
            assert sep, f"line {pos + 1}: not a key: value line: {raw!r}"
            pos += 1
            out[key.strip()] = value(rest.strip(), indent)
        return out

    def seq(indent: int) -> list[object]:
        nonlocal pos
        out: list[object] = []
        while pos < len(lines):
            if not meaningful(pos):
                pos += 1
                continue
            ind, raw = lines[pos]
            if ind != indent or not raw.strip().startswith("- "):
                break
            item = raw.strip()[2:]
            if ":" in item and not item.startswith(("'", '"')):  # a mapping that starts on the dash's line
                lines[pos] = (indent + 2, " " * (indent + 2) + item)
                out.append(mapping(indent + 2))
            else:
                pos += 1
                out.append(_scalar(item))
        return out

    doc = block(0)
    assert pos >= len(lines) or not any(meaningful(i) for i in range(pos, len(lines))), f"unparsed from line {pos + 1}"
    return doc


def _workflow() -> dict[str, object]:
    text = WORKFLOW.read_text(encoding="utf-8")
    doc = tiny_yaml(text)
    assert isinstance(doc, dict)
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        return doc
    loaded = yaml.safe_load(text)
    loaded["on"] = loaded.pop(True, loaded.get("on"))  # YAML 1.1 reads the key `on` as true
    assert json.loads(json.dumps(loaded)) == json.loads(json.dumps(doc))
    return doc


def _kit_commands(script: str) -> list[list[str]]:
    """The `kit ...` command lines of a shell script, continuation lines joined, as words."""
    import shlex

    joined = script.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("kit "):
            words = shlex.split(line.split(" >>")[0].split(" || ")[0], comments=True)
            out.append(words[1:])
    return out


def test_the_example_workflow_parses_and_gates_a_pull_request() -> None:
    doc = _workflow()
    assert "pull_request" in (doc["on"] if isinstance(doc["on"], dict) else {})
    jobs = doc["jobs"]
    assert isinstance(jobs, dict)
    (job,) = jobs.values()
    assert isinstance(job, dict)
    steps = job["steps"]
    assert isinstance(steps, list) and all(isinstance(s, dict) for s in steps)
    uses = [s.get("uses") for s in steps]
    assert "actions/checkout@v4" in uses and "actions/upload-artifact@v4" in uses
    upload = next(s for s in steps if s.get("uses") == "actions/upload-artifact@v4")
    assert upload.get("if") == "always()"  # the run directory is kept when the gate fails
    gate = next(str(s["run"]) for s in steps if "kit compare" in str(s.get("run", "")))
    assert "--markdown" in gate and '"$GITHUB_STEP_SUMMARY"' in gate and "--fail-on regression" in gate
    assert "status=$?" in gate and 'exit "$status"' in gate  # the summary is written, then the gate's exit code


def test_every_kit_command_and_option_in_the_example_workflow_exists() -> None:
    import typer

    doc = _workflow()
    jobs = doc["jobs"]
    assert isinstance(jobs, dict)
    scripts = [str(s["run"]) for job in jobs.values() if isinstance(job, dict)
               for s in job["steps"] if isinstance(s, dict) and "run" in s]
    commands = [c for s in scripts for c in _kit_commands(s)]
    assert {c[0] for c in commands} >= {"images", "run", "compare"}
    group = typer.main.get_command(app)  # typer's own click: commands and their params, duck-typed
    for words in commands:
        cmd = group
        path = []
        for w in words:
            sub = getattr(cmd, "commands", {}).get(w)
            if sub is not None:
                cmd = sub
                path.append(w)
        assert path, f"no such kit command: kit {' '.join(words)}"
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, res.output
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        used = {w.split("=")[0] for w in words if w.startswith("--")}
        assert used <= known, f"kit {' '.join(path)}: no option {sorted(used - known)}"
