"""One builder for the records of fake runs: trial records with every field the store's typed record needs,
and the RunView a study's analyse() receives. Tests state only what their case is about."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kit.analysis.metrics import VALUE_COLUMNS
from kit.study_api import RunView


def trial(trial_id: str, arm: str, config_id: str = "c00", *, repetition: int = 0, position: int = 0,
          status: str = "ok", warmup: bool = False, **fields: Any) -> dict[str, Any]:
    """A trial record as the runner writes it (trials/<id>.json), with what the test does not care about filled in."""
    return {"schema_version": 1, "trial_id": trial_id, "arm": arm, "framework": arm.split("@")[0],
            "config_id": config_id, "config": {}, "block": repetition, "repetition": repetition,
            "position": position, "seed": 0, "warmup": warmup, "status": status, "results": {}, "phases": {},
            "env": {}, "gpus": [], **fields}


def completed(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hand-written trial dicts completed to full records (positions in list order)."""
    out = []
    for i, t in enumerate(trials):
        rest = {k: v for k, v in t.items() if k not in ("trial_id", "arm", "config_id", "repetition", "status",
                                                          "warmup")}
        out.append(trial(t["trial_id"], t["arm"], t.get("config_id", "c00"), repetition=int(t.get("repetition", 0)),
                         position=i, status=t.get("status", "ok"), warmup=bool(t.get("warmup", False)), **rest))
    return out


def run_view(manifest: dict[str, Any], trials: list[dict[str, Any]], values: pd.DataFrame | None = None) -> RunView:
    """What ``analyse(run)`` of a study receives, from a manifest and trial dicts (completed as above)."""
    frame = values if values is not None else pd.DataFrame(columns=VALUE_COLUMNS)
    return RunView.build(manifest, completed(trials), frame)
