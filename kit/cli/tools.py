"""`kit new study` and `kit bench overhead`: a working study folder from the template, and the kit's own
collector overhead measured."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kit.cli.options import JsonFile
from kit.cli.output import Output, esc, old_json_form, print_json
from kit.fmt import kit_cmd

new_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Start something new from a working template.")


@new_app.command("study")
def new_study_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The study's name (also its workload's and experiment's).")],
    directory: Annotated[Path, typer.Option("--dir", help="Where the study folder is created (missing parents are created).")] = Path("."),
) -> None:
    """Write a working study folder (an MLP on MNIST in both frameworks) that `kit run` executes at once."""
    from kit.scaffold import new_study

    io = Output.of(ctx)
    dest = new_study(name, directory)
    io.out.print(f"study folder {esc(dest)}: experiment.toml, model.py, workload_torch.py, workload_keras.py, "
              "analysis.py, report.py, README.md")
    io.out.print(f"run it: {esc(kit_cmd(f'run {dest} --profile quick'))}   (guide: docs/writing-a-study.md)")


bench_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Benchmarks of the kit itself (collector overhead).")


@bench_app.command("overhead")
def bench_overhead(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="Experiment whose workload is timed.")] = Path("experiments/florencio2019_lenet/experiment.toml"),
    profile: Annotated[str | None, typer.Option("--profile", "-p")] = "quick",
    framework: Annotated[str, typer.Option(help="Framework of the timed trials.")] = "pytorch",
    pairs: Annotated[int, typer.Option(help="Off/on pairs (after one discarded warm-up pair).")] = 15,
    period_s: Annotated[float, typer.Option(help="Sampling period of the collectors.")] = 0.1,
    collectors: Annotated[str, typer.Option(help="Comma-separated collectors to switch on.")] = "cpu,memory,hwmon,nvml,rapl",
    seed: Annotated[int, typer.Option()] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result (raw times included) as JSON on stdout.")] = False,
    json_file: JsonFile = None,
) -> None:
    """Collectors off vs on, interleaved, real harness trials: ratio of median timed-phase durations with a CI."""
    io = Output.of(ctx)
    old_json_form(json_out, spec)
    if json_out:
        io.to_stderr()
    from kit.bench import harness_trial, overhead

    names = [c.strip() for c in collectors.split(",") if c.strip()]
    run_trial = harness_trial(spec, profile, framework, names, period_s)
    done = {"n": 0}
    total = 2 * (pairs + 1)

    def counted(on: bool) -> float:
        t = run_trial(on)
        done["n"] += 1
        io.err.print(f"[dim]trial {done['n']}/{total} collectors {'on ' if on else 'off'} {t:.4f} s[/]", highlight=False)
        return t

    res = overhead(counted, pairs, seed)
    io.out.print(f"collector overhead at {period_s * 1000:g} ms ({', '.join(names)}), {pairs} pairs, {framework}: "
              f"ratio of medians on/off = {res.ratio:.4f} ({res.overhead_pct:+.2f} %), "
              f"{res.confidence:.0%} CI [{res.ci_low:.4f}, {res.ci_high:.4f}] ({res.ci_method})")
    if json_out or json_file:
        print_json(io, res.as_dict(), "bench-overhead", json_file, stdout=json_out)
