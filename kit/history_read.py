"""One run's sealed analysis.json as `kit history` needs it: the seal checked on the bytes, then only a few members.

A LeNet run's analysis.json is 300-500 kB, of which `kit history` needs the arms, the trials' environment and the
~20 value rows of one (metric, phase) among ~800: parsing all of it, and typing what it parsed, was most of a
first call over 1,000 runs (5-7 ms a run of its ~10). A text-form seal (:func:`kit.freshness.sealed_text`)
signs the file's bytes, and the kit writes those bytes with ``json.dumps(..., indent=1)``
(:func:`kit.freshness.analysis_bytes`). So once the seal holds, the layout is known:

- the seal is the last member, ``,\\n "seal": {compact JSON}\\n}\\n`` (no newline inside it), and the seal check
  (:func:`kit.freshness.seal_holds` on those bytes) needs nothing else of the file;
- a top-level member starts exactly at ``,\\n "KEY": `` (one space of indent: nested lines have two or more,
  and a JSON string never holds a raw newline);
- a row of the top-level list ``values`` starts at ``{`` and ends at ``}`` on lines of two spaces of indent,
  rows being separated by exactly ``},\\n  {``, and its own keys sit on lines of three.

Only the members :data:`MEMBERS` and the value rows whose text names the metric and the phase (as
``json.dumps`` encodes them) are parsed; each such row is then checked on its parsed fields by
:meth:`kit.analysis_record.Analysis.from_json`. Nothing of the file is used before its seal holds, and
anything not laid out as above gives None: the caller then reads the file in full
(:func:`kit.freshness.stored_analysis`), so this path can only be slower, never give another answer
(tests/test_history_speed_read.py holds both to the same records).
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.analysis_record import Analysis
from kit.errors import StoreError
from kit.freshness import FILES_KEY, SEAL_KEY, SEAL_VERSION, seal_holds
from kit.safeio import read_capped
from kit.store import ANALYSIS, MAX_ANALYSIS_BYTES

SEAL_MARK = b',\n "' + SEAL_KEY.encode() + b'": '
END = b"\n}\n"
# What Analysis.from_json checks or `kit history` reads, besides the value rows (all small).
MEMBERS = ("schema_version", "kit_version", "experiment", "title", "profile", "profile_description", "alpha", "arms",
           "configs", "run", "trial_env")
ROWS_HEAD, ROWS_TAIL = b"[\n  {", b"}\n ]"


def _parse(raw: bytes) -> object:
    """JSON of a piece of a file whose seal held; ValueError for anything else (the caller falls back)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("too deep") from None


def split_members(body: bytes, names: tuple[str, ...]) -> dict[str, bytes] | None:
    """The raw JSON of the top-level members ``names`` of ``body`` (bytes ``json.dumps(obj, indent=1)`` wrote,
    ending in a newline), the last one of a repeated name as ``json.loads`` keeps; None when ``body`` is not
    laid out so. One pass of ``bytes.find`` from member to member: only the members asked for are copied."""
    sep, head = b',\n "', b'{\n "'
    if not (body.startswith(head) and body.endswith(END)):
        return None
    wanted = {n.encode() + b'": ': n for n in names}
    out: dict[str, bytes] = {}
    pos, stop = len(head), len(body) - len(END)
    while pos <= stop:
        nxt = body.find(sep, pos, stop)
        end = stop if nxt < 0 else nxt
        cut = body.find(b'": ', pos, end)
        if cut < 0:
            return None
        name = wanted.get(body[pos:cut + 3])
        if name is not None:
            out[name] = body[cut + 3:end]
        pos = end + len(sep)
    return out


def select_rows(raw: bytes, metric: str, phase: str | None = None) -> list[object] | None:
    """The rows of the list ``raw`` (``json.dumps(rows, indent=1)`` at the top level of a document) whose text
    names ``metric`` (and ``phase``, if given) as row keys, parsed: a superset of the rows that hold them (the
    caller checks the parsed fields). None when ``raw`` is not laid out so.

    A row of that list starts at a line ``  {`` and ends at a line ``  }`` (two spaces: nothing else in the list
    sits at that indent), and its own keys sit on lines of three spaces; so each place the key ``metric`` holds
    ``json.dumps(metric)`` (then ``,`` or the row's end) is found with ``bytes.find``, and only those rows whose
    text also has ``phase`` so are parsed: ~20 of ~800 for a LeNet run."""
    if raw == b"[]":
        return []
    if not (raw.startswith(ROWS_HEAD) and raw.endswith(ROWS_TAIL)):
        return None
    needle = _key_line("metric", metric)
    also = None if phase is None else _key_line("phase", phase)
    out: list[object] = []
    at = raw.find(needle)
    while at >= 0:
        if raw[at + len(needle):at + len(needle) + 2] in (b",\n", b"\n "):
            first = raw.rfind(b"\n  {", 0, at)
            last = raw.find(b"\n  }", at)
            if first < 0 or last < 0:
                return None
            row = raw[first + 3:last + 4]
            if also is None or also + b",\n" in row or also + b"\n " in row:
                out.append(_parse(row))
        at = raw.find(needle, at + len(needle))
    return out


def _key_line(key: str, value: str) -> bytes:
    """How a row's key holding ``value`` starts its line in the kit's layout (ensure_ascii, as json.dumps)."""
    return b'\n   "' + key.encode() + b'": ' + json.dumps(value).encode()


def sealed_series(run_dir: Path, metric: str, phase: str, verify_all: bool = False) -> Analysis | None:
    """The run's analysis with only the value rows of ``metric`` in ``phase`` (as
    ``stored_analysis(run_dir, need_study=False, series=(metric, phase))`` types it, less the members history
    never reads), when its analysis.json carries a text-form seal that holds; None otherwise: not sealed that way,
    not laid out as the kit writes it, or a seal that does not hold (the caller reads the file in full)."""
    path = Path(run_dir) / ANALYSIS
    try:
        text = read_capped(path, MAX_ANALYSIS_BYTES, "analysis.json", missing_ok=True)
    except StoreError:  # a planted link, a FIFO, too large: the full read says why
        return None
    at = text.rfind(SEAL_MARK) if text is not None else -1
    if text is None or at < 0 or not text.endswith(END):
        return None
    try:
        s = _parse(text[at + len(SEAL_MARK):-len(END)])
    except ValueError:
        return None
    if not (isinstance(s, dict) and s.get("version") == SEAL_VERSION and s.get("form") == "text"
            and isinstance(s.get(FILES_KEY), list)):
        return None
    if not seal_holds({SEAL_KEY: s}, Path(run_dir), None, verify_all=verify_all, text=text):
        return None
    members = split_members(text[:at] + END, (*MEMBERS, "values"))
    if members is None or "values" not in members:
        return None
    try:
        obj = {k: _parse(v) for k, v in members.items() if k != "values"}
        rows = select_rows(members["values"], metric, phase)
    except ValueError:
        return None
    if rows is None:
        return None
    obj["values"] = rows
    return Analysis.from_json(obj, str(path), (metric, phase))
