"""Rich progress for long runs (the library reports through RunEvents only)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kit.disturbance import is_disturbed
from kit.plan import Plan, Trial
from kit.runner import RunEvents
from kit.store import RunDir

_STATUS_STYLE = {"ok": "green", "oom": "yellow", "skipped": "blue", "timeout": "red", "error": "red"}


class RichEvents(RunEvents):
    """A progress bar over the plan and one line per finished trial."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False,
        )
        self.task: Any = None

    def __enter__(self) -> RichEvents:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def run_started(self, rd: RunDir, plan: Plan, done: int) -> None:
        self.console.print(f"run directory [bold]{escape(str(rd.path))}[/] · {len(plan.trials)} trials · plan {plan.digest()}"
                           + (f" · {done} already finished" if done else ""))
        self.task = self.progress.add_task("trials", total=len(plan.trials), completed=done)

    def message(self, text: str) -> None:
        style = "yellow" if " disturbed " in text else "dim"  # a re-run the user should see, not a detail
        self.console.print(f"[{style}]{escape(text)}[/]")

    def trial_started(self, trial: Trial, index: int, total: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=escape(str(trial.trial_id)))

    def trial_finished(self, trial: Trial, record: dict[str, Any]) -> None:
        status = record["status"]
        res = record.get("results", {})
        # what the trial reported is the trial's: numbers only when they are numbers, text never as markup
        times = " ".join(f"{k}={res[k]:.3f}s" for k in ("train_time_s", "infer_time_s")
                         if isinstance(res.get(k), (int, float)) and not isinstance(res.get(k), bool))
        note = "" if status == "ok" else f" {str(record.get('error') or record.get('stderr_tail') or '')[-160:]!r}"
        warm = " (warm-up)" if trial.warmup else ""
        shaken = " [yellow]disturbed (kept, flagged)[/]" if status == "ok" and is_disturbed(record) and not trial.warmup \
            else ""
        self.console.print(f"[{_STATUS_STYLE.get(str(status), 'white')}]{escape(f'{status!s:7}')}[/] "
                           f"{escape(trial.trial_id)}{warm} {times}{escape(note)}{shaken}", highlight=False)
        if self.task is not None:
            self.progress.advance(self.task)
