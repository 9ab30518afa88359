"""`kit compare --markdown` and `kit history --markdown`: the answer as GitHub-flavoured Markdown for a pull request,
an issue or a CI job summary ($GITHUB_STEP_SUMMARY).

TorchBench's bot and asv's users want the same thing from a benchmark run: a short message that a reviewer reads in
the pull request, not a report to open. So the answer sentence comes first (the one `kit compare` prints,
:func:`kit.report.answer.compare_answer`), then one compact table with the verdict in the first column, and a footer
with the threshold and alpha the verdicts rest on. ``only_changes`` keeps the rows a reviewer must act on
(regression, improvement, suspect) and counts the rest, so a comparison of 40 metrics that found nothing is one
line, not 40 rows.

Everything a run controls (labels, arm and configuration names, versions, units, run paths) is escaped for a
Markdown table cell (:func:`md_text`): a run is data from someone else, and a crafted label such as
``a|b`` or ``<img src=x>`` or ``[x](javascript:...)`` must neither break the table nor put HTML or a link into the
page that renders it. Pure functions: records in, a ``str`` out; nothing is printed or read here.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from kit.compare import conclusive_advice
from kit.compare_records import CompareRow, Comparison, ProvenanceDiff
from kit.fmt import fmt_p
from kit.history import HistoryPoint, HistorySeries, HistoryStep
from kit.report.answer import compare_answer, human_value

# The verdict words with a marker that survives a plain-text view (the word is always there beside it).
MARKERS = {"regression": "🔴", "improvement": "🟢", "suspect": "🟣", "inconclusive": "🟡", "no change": "⚪",
           "not tested": "⚫"}
CHANGES = ("regression", "improvement", "suspect")  # what --only-changes keeps
# Rows in the order a reviewer acts on them: what changed first, what could not be decided next.
ORDER = {v: i for i, v in enumerate(("regression", "improvement", "suspect", "inconclusive", "not tested",
                                     "no change"))}
RUNS_SHOWN = 20  # `kit history --markdown`: the last runs listed (the rest counted)
CELL_CHARS = 200  # a run-controlled value longer than this is cut (a crafted label cannot flood a job summary)

# Characters with a meaning in GitHub-flavoured inline Markdown: backslash-escaped (CommonMark lets any ASCII
# punctuation be escaped). ":" and "@" break autolinks (http://, javascript:, mailto:, user@host); "$" math.
_PUNCT = frozenset("\\`*_{}[]()#+!|~:@$")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
_WWW = re.compile(r"(?i)(?<=www)\.")  # GitHub autolinks "www.host" without a scheme


def md_text(value: object, limit: int = CELL_CHARS) -> str:
    """``value`` as literal text in a Markdown table cell or paragraph: line breaks and other control or format
    characters become spaces, ``&``, ``<``, ``>`` and ``"`` entities (no HTML), inline punctuation is
    backslash-escaped (no emphasis, code span, link, image, autolink, math or cell break); cut at ``limit``."""
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in str(value))
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    out = "".join(_ENTITIES.get(c) or (f"\\{c}" if c in _PUNCT else c) for c in text)
    return _WWW.sub(r"\\.", out)


def verdict_cell(verdict: str) -> str:
    """"🔴 regression": the marker and the word."""
    marker = MARKERS.get(verdict)
    return f"{marker} {md_text(verdict)}" if marker else md_text(verdict)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub table; the cells are already escaped (or the kit's own numbers and words)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def _ratio(est: float | None, low: float | None, high: float | None) -> str:
    if est is None:
        return "–"
    ci = "" if low is None or high is None else f" ({low:.3f}–{high:.3f})"
    return f"{est:.3f}{ci}"


def mde_text(row: CompareRow) -> str:
    """The minimum detectable change as the terminal table says it."""
    if row.decidable is False:
        return "none (n too small)"
    return "unknown" if row.mde is None else f"{row.mde:.1%}"


# Provenance keys that name the version each side ran, most telling first. Two arms of one run: the arm's own
# keys (kit.compare._arm_provenance); two runs: per arm ("inside.ARM.framework_version", "image.ARM.tag").
_ARM_VERSION_KEYS = ("inside.framework_version", "image.reports.framework_version", "image.row", "image.tag")


def versions_text(res: Comparison, row: CompareRow) -> str:
    """The versions compared in ``row``, "A → B", from the comparison's provenance differences (every key that
    differs is there); for two arms of one run the arm names (image rows) when no version differs; for two runs
    "no difference recorded" when neither the framework version nor the image differs."""
    diffs: dict[str, ProvenanceDiff] = {d.key: d for d in res.provenance_differences}
    keys = _ARM_VERSION_KEYS if res.arms is not None else (f"inside.{row.arm}.framework_version",
                                                           f"image.{row.arm}.tag")
    for key in keys:
        d = diffs.get(key)
        if d is not None:
            return f"{md_text(d.a if d.a is not None else '–', 80)} → {md_text(d.b if d.b is not None else '–', 80)}"
    if res.arms is not None:
        return f"{md_text(res.arms[0], 80)} → {md_text(res.arms[1], 80)}"
    return "no difference recorded"


def _sorted(rows: Sequence[CompareRow]) -> list[CompareRow]:
    return sorted(rows, key=lambda r: ORDER.get(r.verdict, len(ORDER)))


def _left_out(rows: Sequence[CompareRow]) -> str:
    """"12 rows without a change not shown (10 no change, 2 inconclusive)"."""
    by: dict[str, int] = {}
    for r in rows:
        by[r.verdict] = by.get(r.verdict, 0) + 1
    parts = ", ".join(f"{n} {md_text(v)}" for v, n in sorted(by.items(), key=lambda kv: ORDER.get(kv[0], 99)))
    return f"{len(rows)} row{'s' if len(rows) != 1 else ''} without a change not shown ({parts})."


def compare_markdown(res: Comparison, *, only_changes: bool = False) -> str:
    """A comparison as Markdown: the answer sentence, a table (verdict, metric, phase, arm, config, ratio B/A with
    its 95 % interval, p after Holm, MDE, medians, versions), the notes on suspect rows and rows measured under
    load, and a footer with the threshold and alpha. ``only_changes``: regression, improvement and suspect rows
    only, the others counted."""
    said = compare_answer(res)
    out = [f"**kit compare:** {md_text(said['headline'], 2000)}", ""]
    shown = [r for r in _sorted(res.rows) if not only_changes or r.verdict in CHANGES]
    hidden = [r for r in res.rows if only_changes and r.verdict not in CHANGES]
    if shown:
        out += _table(("verdict", "metric", "phase", "arm", "config", "B/A (95 % CI)", "p (Holm)", "MDE",
                       "median A", "median B", "versions A → B"),
                      [(verdict_cell(r.verdict), md_text(r.metric), md_text(r.phase), md_text(r.arm),
                        md_text(r.config), _ratio(r.ratio, r.ratio_low, r.ratio_high), fmt_p(r.p_adj),
                        mde_text(r), md_text(human_value(r.median_a, r.unit)),
                        md_text(human_value(r.median_b, r.unit)), versions_text(res, r)) for r in shown])
        out.append("")
    if only_changes and not shown:
        out += [f"No regression, improvement or suspect change: {_left_out(hidden)}", ""]
    elif hidden:
        out += [_left_out(hidden), ""]
    notes = []
    for r in res.rows:
        what = f"{md_text(r.arm)} · {md_text(r.metric)} · {md_text(r.phase)} · {md_text(r.config)}"
        if r.verdict == "suspect":
            notes.append(f"- {MARKERS['suspect']} suspect: {what} (would be {md_text(r.was or '–')}): "
                         f"{md_text(r.suspect_cause or 'the load its sides ran under could explain it', 1000)}")
        elif r.load_note and (r.verdict in CHANGES or not only_changes):
            notes.append(f"- under load: {what} ({md_text(r.verdict)} stands): {md_text(r.load_note, 1000)}")
    advice = conclusive_advice(res)
    if advice:
        notes.append(f"- {MARKERS['inconclusive']} {md_text(advice, 2000)}")
    if notes:
        out += [*notes, ""]
    out.append(_footer(res))
    return "\n".join(out) + "\n"


def _footer(res: Comparison) -> str:
    sides = f"A = {md_text(res.run_a or 'A', 300)}, B = {md_text(res.run_b or 'B', 300)}"
    return (f"Threshold ±{res.threshold:.0%} (a change must be at least this large), α = {res.alpha:g} after "
            f"Holm's correction over {len(res.rows)} comparison{'s' if len(res.rows) != 1 else ''}; MDE: the "
            "smallest change each comparison could detect with power 80 %. "
            f"{sides}. Made by `kit compare --markdown`.")


def _run_label(p: HistoryPoint) -> str:
    """A run's label, with its arm's version when the label is something else (`kit run --label`)."""
    if p.version and p.version != p.label:
        return f"{md_text(p.label, 100)} ({md_text(p.version, 100)})"
    return md_text(p.label, 100)


def _step_row(res: HistorySeries, s: HistoryStep) -> tuple[str, ...]:
    before = res.runs[s.index - 1] if 0 < s.index <= len(res.runs) else None
    after = res.runs[s.index] if 0 <= s.index < len(res.runs) else None
    frm = _run_label(before) if before is not None else md_text(s.from_label, 100)
    to = _run_label(after) if after is not None else md_text(s.to_label, 100)
    return (verdict_cell(s.verdict), frm, to, _ratio(s.ratio, s.ratio_low, s.ratio_high), fmt_p(s.p_adj),
            f"{s.runs_before} / {s.runs_after}")


def history_markdown(res: HistorySeries, *, only_changes: bool = False, experiment: str | None = None) -> str:
    """A history as Markdown: the series (experiment, metric, phase, arm, runs), one row per step (verdict, from
    and to, ratio after/before with its 95 % interval, p after Holm) and, unless ``only_changes``, the last
    ``RUNS_SHOWN`` runs (label, median, IQR) with how many earlier ones were left out. ``experiment``: the study
    the runs belong to (the series record does not carry it; the command line knows it)."""
    unit = f" ({md_text(res.unit)})" if res.unit not in ("", "1", "fraction") else ""
    study = f"{md_text(experiment)}: " if experiment else ""
    counts = {v: sum(1 for s in res.steps if s.verdict == v) for v in ("regression", "improvement")}
    found = ", ".join(f"{n} {v}{'s' if n != 1 else ''}" for v, n in counts.items() if n)
    head = (f"**kit history:** {study}{md_text(res.metric)} ({md_text(res.phase)}, arm {md_text(res.arm)}) across "
            f"{len(res.runs)} run{'s' if len(res.runs) != 1 else ''}: ")
    head += (f"{len(res.steps)} step{'s' if len(res.steps) != 1 else ''} ({found})." if res.steps else
             f"no step: no significant change larger than ±{res.threshold:.0%}.")
    out = [head, ""]
    if res.steps:
        out += _table(("verdict", "from", "to", "after/before (95 % CI)", "p (Holm)", "runs before / after"),
                      [_step_row(res, s) for s in res.steps])
        out.append("")
    if not only_changes and res.runs:
        last = res.runs[-RUNS_SHOWN:]
        first = len(res.runs) - len(last)
        out += _table(("#", "run", "n", f"median{unit}", "IQR"),
                      [(str(first + i), _run_label(p), str(p.n), f"{p.median:.4g}", f"{p.q1:.4g}–{p.q3:.4g}")
                       for i, p in enumerate(last)])
        out.append("")
        if first:
            out += [f"The last {len(last)} runs are listed; {first} earlier run{'s' if first != 1 else ''} not "
                    "shown.", ""]
    out += [f"- note: {md_text(c, 1000)}" for c in res.caveats]
    if res.caveats:
        out.append("")
    out.append(f"Threshold ±{res.threshold:.0%}, α = {res.alpha:g} after Holm's correction over the candidate "
               f"steps; runs under {md_text(res.runs_dir, 300)}. Made by `kit history --markdown`.")
    return "\n".join(out) + "\n"
