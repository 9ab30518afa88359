"""The typed analysis record (kit.analysis_record.Analysis, rows in kit.analysis_rows): analysis.json's content is
produced from the record in one place (``to_json``), reads back to the same record, and an older analysis.json
(before the design check, the claims, the disturbance table) still reads."""

from __future__ import annotations

import json
from pathlib import Path

from kit.analysis_record import Analysis
from kit.analysis_rows import Descriptive, Disturbance, HypothesisResult, Measured, RunSummary, ThreatRow, ValueRow

DATA = Path(__file__).parent / "data"
GOLDENS = (DATA / "golden" / "analysis.json", DATA / "golden_lenet" / "expected" / "analysis.json")


def test_a_stored_analysis_reads_as_typed_rows_and_writes_the_same_content() -> None:
    for path in GOLDENS:
        stored = json.loads(path.read_text(encoding="utf-8"))
        an = Analysis.from_json(stored, str(path))
        assert isinstance(an.run, RunSummary) and isinstance(an.disturbance, Disturbance)
        assert all(isinstance(v, ValueRow) for v in an.values) and an.values
        assert all(isinstance(h, HypothesisResult) for h in an.hypotheses) and an.hypotheses
        assert all(isinstance(t, ThreatRow) for t in an.validity) and an.validity
        assert all(isinstance(d, Descriptive) for d in an.descriptives)
        assert all(isinstance(m, Measured) for m in an.measured)
        assert an.design is not None and an.design.rows
        written = json.loads(json.dumps(an.to_json()))
        if "kit_version" not in stored:  # the LeNet golden drops it (it changes with every release)
            assert written.pop("kit_version") is None
        assert written == stored, path  # key for key, value for value
        assert Analysis.from_json(written, str(path)) == an


def test_typed_rows_answer_what_readers_ask() -> None:
    an = Analysis.from_json(json.loads(GOLDENS[0].read_text(encoding="utf-8")), "golden")
    counted = an.counted_values()
    assert counted and all(v.counts and v.value is not None for v in counted)
    h = an.hypotheses[0]
    assert h.tested_metric == (h.metric_tested or h.metric) and h.blocks and h.p_adjust["method"] == "holm"
    assert an.run.finished == an.run.planned - an.run.missing
    assert an.telemetry is None  # not stored: the report computes it from the run directory


def test_an_older_analysis_without_the_newer_tables_still_reads() -> None:
    stored = json.loads(GOLDENS[0].read_text(encoding="utf-8"))
    for key in ("design", "claims", "disturbance", "measured", "descriptives", "run", "raw_digest"):
        stored.pop(key, None)
    an = Analysis.from_json(stored, "old analysis.json")
    assert an.design is None and an.claims is None and an.disturbance == Disturbance()
    assert an.measured == () and an.descriptives == () and an.run.planned == 0 and an.raw_digest is None
    assert "design" not in an.to_json() and "claims" not in an.to_json()
