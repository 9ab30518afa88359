"""The paper-claims ledger as the report shows it: judged claims, and the not-testable ones grouped by reason.

Apart from kit.report.context: grouping and compressing the ledger (one line per reason, "C1-C10") is its own
rule set, shared by the report and `kit report`'s terminal summary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NotRequired, TypedDict

from kit.analysis_record import Analysis
from kit.records import JsonTable, JsonValue


class SharedReason(TypedDict):
    """The full reason and differences every row of a group shares."""

    reason: JsonValue
    differences: list[JsonValue]


class ClaimGroup(TypedDict):
    """The not-testable claims of one reason and one way to test them."""

    reason: str  # the reason without what differs per claim (:func:`reason_group`)
    would_test: str
    ids: list[str]
    rows: list[JsonTable]  # the claims' rows (kit.analysis.claim_records.ClaimVerdict's JSON)
    by_design: bool
    command: str
    host: str
    ids_text: str  # the ids compressed: "C1-C10, C12"
    shared: SharedReason | None


class ClaimGroups(TypedDict):
    judged: list[JsonTable]
    untested: list[ClaimGroup]


class ClaimsView(TypedDict):
    """The ledger as the report and `kit report` show it."""

    headline: str
    rows: list[JsonTable]
    counts: dict[str, int]
    conditions: list[str]
    judged: list[JsonTable]
    untested: list[ClaimGroup]
    schema_version: NotRequired[int]


def claims_context(analysis: Analysis, where: str = "analysis.json") -> ClaimsView:
    """The paper-claims ledger the report opens with (kit.analysis.claims), checked; an analysis written
    before claims existed shows that none were recorded. Beside the rows: ``judged`` (the claims this run gave a
    verdict) and ``untested`` (the not-testable ones grouped by reason, one line each, with what would test
    them), so that the ledger of a run that can judge little (a CPU run of a GPU paper) fits on one screen."""
    from kit.analysis.claim_records import Ledger

    raw = analysis.claims
    if raw is None:
        return {"headline": "no claims recorded (an analysis written before the kit judged papers' claims: "
                            "`kit report RUN` recomputes it)", "rows": [], "counts": {}, "conditions": [],
                "judged": [], "untested": []}
    ledger = Ledger.from_json(raw, where)
    rows = [r.to_json() for r in ledger.rows]
    groups = claim_groups(rows)
    return {"schema_version": ledger.schema_version, "headline": ledger.headline, "counts": dict(ledger.counts),
            "conditions": list(ledger.conditions), "rows": rows, "judged": groups["judged"],
            "untested": groups["untested"]}


_COMMAND = re.compile(r"^`([^`]+)`\s*(.*)$")
_DATA = re.compile(r"the data: (?:an? )?(?:(\w+) )?stand-ins? for [^;]*")
_PROTOCOL = re.compile(r"(the protocol: the \S+ profile runs otherwise than the paper) \([^()]*\)")


def reason_group(reason: str) -> str:
    """A not-testable reason without what differs per claim (which datasets are stand-ins, which protocol keys
    differ): the line the report groups claims under. Why: on a CPU run of a GPU paper nearly every claim differs
    in the device, the data and the protocol; naming each claim's datasets and keys in the grouped line would
    give each claim its own line, and the ledger would not fit on a screen. The full reason stays in the row."""
    out = _DATA.sub(lambda m: f"the data: {'a ' + m.group(1) if m.group(1) else 'a'} stand-in for the paper's dataset",
                    reason)
    return _PROTOCOL.sub(r"\1", out)


def claim_groups(rows: Sequence[JsonTable]) -> ClaimGroups:
    """``judged``: the rows with a verdict; ``untested``: the not-testable rows grouped by (reason without the
    per-claim details: :func:`reason_group`, what would test them), in the ledger's order, each group's claim ids
    compressed ("C1-C10"), its command and host apart (the command set as code)."""
    from kit.analysis.claim_records import BY_DESIGN

    judged = [r for r in rows if r["verdict"] != "not testable"]
    groups: dict[tuple[str, str], ClaimGroup] = {}
    for r in rows:
        if r["verdict"] != "not testable":
            continue
        would = str(r.get("would_test") or "")
        general = reason_group(str(r["reason"]))
        g = groups.setdefault((general, would), {"reason": general, "would_test": would, "ids": [], "rows": [],
                                                 "by_design": would == BY_DESIGN, "command": "", "host": "",
                                                 "ids_text": "", "shared": None})
        g["ids"].append(str(r["id"]))
        g["rows"].append(r)
    untested = []
    for g in groups.values():
        m = _COMMAND.match(g["would_test"]) if not g["by_design"] else None
        g["command"], g["host"] = (m.group(1), m.group(2)) if m else ("", "" if g["by_design"] else g["would_test"])
        g["ids_text"] = id_ranges(g["ids"])
        g["shared"] = shared_reason(g["rows"])
        untested.append(g)
    return {"judged": list(judged), "untested": untested}


def _listed(v: JsonValue) -> list[JsonValue]:
    return list(v) if isinstance(v, list) else []


def shared_reason(rows: Sequence[JsonTable]) -> SharedReason | None:
    """The full reason and differences of a group's rows when every row has the same ones (None otherwise). Why:
    ten claims not testable for one reason used to repeat that 8-line reason in ten rows; said once above the
    rows, the list of claims reads in one screen."""
    first = (rows[0].get("reason"), _listed(rows[0].get("differences")))
    if any((r.get("reason"), _listed(r.get("differences"))) != first for r in rows[1:]):
        return None
    return {"reason": first[0], "differences": first[1]}


def id_ranges(ids: list[str]) -> str:
    """"C1-C10, C12" for consecutive numbered ids of one prefix, in the given order."""
    out: list[str] = []
    run: list[tuple[str, int, str]] = []

    def flush() -> None:
        if not run:
            return
        if len(run) >= 3:
            out.append(f"{run[0][2]}-{run[-1][2]}")
        else:
            out.extend(x[2] for x in run)
        run.clear()

    for i in ids:
        m = re.fullmatch(r"([A-Za-z_.-]*)(\d+)", i)
        if m and run and run[-1][0] == m.group(1) and run[-1][1] + 1 == int(m.group(2)):
            run.append((m.group(1), int(m.group(2)), i))
            continue
        flush()
        if m:
            run.append((m.group(1), int(m.group(2)), i))
        else:
            out.append(i)
    flush()
    return ", ".join(out)
