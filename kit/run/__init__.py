"""Where a run lives: `kit run` from the request to the run directory.

- ``options``: how to run (RunOptions) and what the loop tells its watcher (RunEvents);
- ``request``: the command line's flags checked together into a RunRequest;
- ``prepare``: the spec resolved once into a plan of resolved trials, every check before anything is written;
- ``start`` / ``resume``: a new run's manifest, or a run continued from its own;
- ``loop``, ``trial``, ``host``, ``context``: the trial loop with its re-runs and sequential stopping hook, one
  trial and its record, the host's readings around the trials, what the loop carries.

Where the trials run is kit.executors' business (a seam: local, or Slurm jobs that resume chunks of the run).
"""

from kit.run.options import RETRY_FAILED, Interrupted, RunEvents, RunOptions
from kit.run.resume import resume_run
from kit.run.start import start_run

__all__ = ["RETRY_FAILED", "Interrupted", "RunEvents", "RunOptions", "resume_run", "start_run"]
