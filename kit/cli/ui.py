"""Rich progress for long runs (the library reports through RunEvents only).

The time left is kit.plan.eta's (the profile's estimate, then the measured trials and their re-runs); this module
only shows it: in the bar on a terminal, and as a plain line after each trial where the output is a file or a
pipe (a CI log), where rich draws no live bar.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from kit.disturbance import is_disturbed
from kit.fmt import in_user_terms
from kit.plan import EtaClock, Plan, Trial
from kit.records import TrialRecord
from kit.run.options import RunEvents
from kit.store import RunDir

_STATUS_STYLE = {"ok": "green", "oom": "yellow", "skipped": "blue", "timeout": "red", "error": "red"}
# lines the user should see (a re-run, a busy host, re-runs stopped, a wait), not details
_WARN = (" disturbed ", "host busy", "re-runs stopped", "quiet window", "load is gone")
WAIT_LINE_S = 30.0  # without a terminal, a countdown line at most this often


class _EtaColumn(ProgressColumn):
    """The time left as kit.plan.eta computes it, redrawn with the bar (it counts down within a trial)."""

    def __init__(self, events: RichEvents) -> None:
        super().__init__()
        self.events = events

    def render(self, task: Task) -> Text:
        return Text(f"eta {self.events.eta_text()}", style="progress.remaining")


class RichEvents(RunEvents):
    """A progress bar over the plan and one line per finished trial."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), _EtaColumn(self), console=console, transient=False,
        )
        self.task: Any = None
        self.clock: EtaClock | None = None
        self._last_wait_line = -WAIT_LINE_S
        self.current = "trials"  # what the bar's description names when no wait is shown

    def __enter__(self) -> RichEvents:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) must not replace the run's own outcome
            self.progress.stop()

    def run_started(self, rd: RunDir, plan: Plan, done: int) -> None:
        self.console.print(f"run directory [bold]{escape(str(rd.path))}[/] · {len(plan.trials)} trials · plan {plan.digest()}"
                           + (f" · {done} already finished" if done else ""))
        self.task = self.progress.add_task("trials", total=len(plan.trials), completed=done)
        estimate = rd.manifest().spec.get("profile_estimate_s")
        known = float(estimate) if isinstance(estimate, (int, float)) and not isinstance(estimate, bool) else None
        self.clock = EtaClock(len(plan.trials), done, known)

    def eta_text(self) -> str:
        return self.clock.eta(time.monotonic()).text() if self.clock is not None else "-"

    def message(self, text: str) -> None:
        style = "yellow" if any(w in text for w in _WARN) else "dim"
        self.console.print(f"[{style}]{escape(in_user_terms(text))}[/]")
        if self.task is not None:  # a wait's countdown ends with a message: the bar names the trial again
            self.progress.update(self.task, description=self.current)

    def waiting(self, what: str, left_s: float, foreign_cpu: float | None) -> None:
        busy = "" if foreign_cpu is None else f", other work {foreign_cpu:.1f} CPUs"
        line = f"waiting for a quiet host: {int(left_s) // 60}:{int(left_s) % 60:02d} left{busy}"
        if self.console.is_terminal and self.task is not None:
            self.progress.update(self.task, description=escape(line))
        elif time.monotonic() - self._last_wait_line >= WAIT_LINE_S:
            self._last_wait_line = time.monotonic()
            self.console.print(f"[dim]{escape(line)}[/]", highlight=False)

    def trial_started(self, trial: Trial, index: int, total: int) -> None:
        if self.clock is not None:
            self.clock.started(time.monotonic())
        self.current = escape(str(trial.trial_id))
        if self.task is not None:
            self.progress.update(self.task, description=self.current)

    def trial_finished(self, trial: Trial, record: TrialRecord) -> None:
        status = record.status
        res = record.results
        # what the trial reported is the trial's: numbers only when they are numbers, text never as markup
        times = " ".join(f"{k}={res[k]:.3f}s" for k in ("train_time_s", "infer_time_s")
                         if isinstance(res.get(k), (int, float)) and not isinstance(res.get(k), bool))
        note = "" if status == "ok" else f" {str(record.error or record.stderr_tail or '')[-160:]!r}"
        warm = " (warm-up)" if trial.warmup else ""
        shaken = " [yellow]disturbed (kept, flagged)[/]" if status == "ok" and is_disturbed(record) and not trial.warmup \
            else ""
        self.console.print(f"[{_STATUS_STYLE.get(str(status), 'white')}]{escape(f'{status!s:7}')}[/] "
                           f"{escape(trial.trial_id)}{warm} {times}{escape(note)}{shaken}", highlight=False)
        if self.clock is not None:
            self.clock.finished_one(time.monotonic())
        if self.task is not None:
            self.progress.advance(self.task)
        if not self.console.is_terminal and self.clock is not None:  # no live bar in a log: say where the run is
            self.console.print(f"[dim]progress {self.clock.finished}/{self.clock.total} trials · eta "
                               f"{escape(self.eta_text())}[/]", highlight=False)
