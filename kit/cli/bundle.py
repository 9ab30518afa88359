"""`kit pack`, `kit verify` and `kit trust`: a run bundled for artifact evaluation, a bundle checked and re-run,
and the study code a user has read and trusts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kit.cli.options import STUDY_HELP, TRUST_HELP, Backend, JsonFile, complete_run_dirs, need_run_dir
from kit.cli.output import Output, esc, fmt_p, print_json
from kit.cli.report import print_study_notice
from kit.errors import ExitCode, KitError

commands = typer.Typer()



@commands.command("pack")
def pack_cmd(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="The run directory to bundle.", autocompletion=complete_run_dirs)],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Bundle directory (default: RUN_DIR.bundle).")] = None,
    trust_study_code: Annotated[bool, typer.Option("--trust-study-code", help=TRUST_HELP)] = False,
    study: Annotated[Path | None, typer.Option("--study", help=STUDY_HELP)] = None,
    share: Annotated[bool, typer.Option("--share", help=(
        "A small bundle anyone can share, for `kit map` (default RUN_DIR.share): raw data, analysis, claims and "
        "the host class (CPU, GPU, memory, OS, versions). Hostnames become host-N, user names <user>, home "
        "directories and absolute paths <redacted>; the recorded environment variables, the report, the kit "
        "source snapshot and images/ are dropped; trial logs are kept, redacted. share.json and the README say "
        "what was removed; `kit verify` checks it against its raw data (no re-run)."))] = False,
) -> None:
    """Bundle a run for artifact evaluation: raw data, report, recipes, source, claims, SHA256SUMS, README.

    With --share: a small, redacted bundle of this host's results for the replication map (kit map)."""
    io = Output.of(ctx)
    need_run_dir(run_dir)
    from kit.analysis.analyze import current_analysis
    from kit.pack import pack
    from kit.share import pack_share
    from kit.trust import StudyTrust

    trust = StudyTrust(trust_run_copy=trust_study_code, study_dir=study)
    tgz = pack_share(run_dir, out_dir, trust) if share else pack(run_dir, out_dir, trust)
    io.out.print(f"{'share bundle' if share else 'bundle'}: [bold]{esc(tgz)}[/] (and the directory beside it)")
    print_study_notice(io, current_analysis(run_dir, trust=trust)[0].study_code.get("notice"))


@commands.command("verify")
def verify_cmd(
    ctx: typer.Context,
    bundle: Annotated[Path, typer.Argument(help="A bundle made by `kit pack` (.tar.gz or directory).")],
    profile: Annotated[str | None, typer.Option("--profile", "-p", help="Re-run this profile (default: the bundle's).")] = None,
    tolerance: Annotated[float | None, typer.Option(help="Allowed relative change of each ratio (default: the bundle's).")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where the re-run goes (default: beside the bundle).")] = None,
    backend_: Annotated[Backend, typer.Option("--backend", help="Backend of the re-run: auto (containers when the bundle "
                                                           "carries study code, else local), docker, apptainer or local.")] = Backend.auto,
    trust_bundle_code: Annotated[bool, typer.Option("--trust-bundle-code", help=(
        "The bundle's study code may run unsandboxed on this host (the local backend) and its analysis/report "
        "hooks may run (in a child process). Read run/study/ first."))] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Dataset directory for the re-run.")] = None,
    integrity_only: Annotated[bool, typer.Option("--integrity-only", help="Stop after the integrity check (every file "
                                                 "matches SHA256SUMS, no link): nothing is analysed or re-run; exit 0 "
                                                 "when it passes.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the verification as JSON on stdout; the tables go to stderr.")] = False,
    json_file: JsonFile = None,
) -> None:
    """Check a bundle's integrity, re-run it, and say whether its claims reproduce (exit 1 if one changed)."""
    io = Output.of(ctx)
    if not bundle.exists():
        raise KitError("bundle not found", where=str(bundle), fix="give a bundle made by `kit pack` (.tar.gz or directory)")
    if json_out:
        io.to_stderr()
    from kit.cli.ui import RichEvents
    from kit.verify import INTEGRITY_MEANS, VerifyOptions, verify

    def integrity_ok(n_files: int) -> None:  # said first, before the re-run starts
        io.out.print(esc(f"integrity: ok ({n_files} files match SHA256SUMS: {INTEGRITY_MEANS})"))

    opts = VerifyOptions(profile=profile, tolerance=tolerance, runs_root=runs_dir, backend=backend_.value,
                         data_dir=data_dir, trust_bundle_code=trust_bundle_code, integrity_only=integrity_only)
    if integrity_only:
        res = verify(bundle, opts, None, integrity_ok)
        if json_out or json_file:
            print_json(io, res, "verify", json_file, stdout=json_out)
        return
    with RichEvents(io.err) as events:
        res = verify(bundle, opts, events, integrity_ok)
    if res.get("share"):  # kit.share: checked against its own raw data, not re-run
        io.out.print(esc(f"share bundle: claims consistent with its raw data ({res['claims_tested']} of "
                         f"{len(res['claims'])} tested); {res['note']}"))
        io.out.print(esc(f"redacted: {'; '.join(res['redacted'])}"))
        if json_out or json_file:
            print_json(io, res, "verify", json_file, stdout=json_out)
        return
    io.out.print(esc(f"re-run: {res['rerun_dir']} ({res['rerun_status']}, profile {res['profile_rerun']}); "
                   f"{res['code_ran']}"))
    table = Table(title=f"Claims (tolerance ±{res['tolerance']:.0%})")
    for col in ("id", "phase", "decision (original)", "decision (re-run)", "ratio (original)", "ratio (re-run)", "reproduced"):
        table.add_column(col, overflow="fold")
    for c in res["claims"]:
        dec = "rejected" if c["rejected"] else ("not rejected" if c["tested"] else (c.get("decision") or "not tested"))
        new = "rejected" if c.get("new_rejected") else ("not rejected" if c.get("new_tested", True) else "not tested")
        table.add_row(esc(c["id"]), esc(c["phase"]), esc(dec), new, fmt_p(c["ratio"]), fmt_p(c.get("new_ratio")),
                      "[green]yes[/]" if c["reproduced"] else f"[red]no[/] {esc(c['why'])}")
    io.out.print(table)
    if res.get("paper_claims"):
        paper = Table(title=f"The paper's findings, re-judged on the re-run: {res.get('paper_headline') or ''}")
        for col in ("claim", "the paper found", "verdict (bundle)", "verdict (re-run)", "changed"):
            paper.add_column(col, overflow="fold")
        for p in res["paper_claims"]:
            paper.add_row(esc(p["id"]), esc(p["statement"]), esc(f"{p['verdict_original']} {p['value_original']}"),
                          esc(f"{p['verdict_rerun']} {p['value_rerun']}"),
                          "[yellow]changed[/]" if p["changed"] else "same")
        io.out.print(paper)
    if res["note"]:
        io.out.print(f"[yellow]note:[/] {esc(res['note'])}")
    if res.get("study_code_notice"):
        io.out.print(f"[yellow]note:[/] {esc(res['study_code_notice'])}")
    badges = ", ".join(f"{k.replace('_', ' ')}: {'yes' if v else 'no'}" for k, v in res["badges"].items())
    io.out.print(f"badges: {badges}")
    changed = res["claims_changed"]
    io.out.print(f"[red]claims changed[/]: {esc(', '.join(changed))}" if changed else
              "claims: none changed" + ("" if res["claims_tested"] else
                                        " (none was tested, in the bundle or here: nothing to reproduce, no badge)"))
    if json_out or json_file:
        print_json(io, res, "verify", json_file, stdout=json_out)
    if changed:
        raise typer.Exit(ExitCode.FAILED)


@commands.command("trust", short_help="Trust a run's study code (its digest), so that report and pack run its hooks.")
def trust_cmd(
    ctx: typer.Context,
    run_dir: Annotated[Path | None, typer.Argument(help="A run directory (or a bundle's run/) whose study code you "
                                                        "have read and trust.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the trusted study digests.")] = False,
    remove: Annotated[str | None, typer.Option("--remove", help="Stop trusting this digest.")] = None,
) -> None:
    """Trust a run's study code (its digest, computed here), so that report/pack run its analysis and report
    hooks; the allow-list lives in your config directory, never in a run directory."""
    from kit import trust as trustmod

    io = Output.of(ctx)
    if remove is not None:
        found = trustmod.untrust(remove)
        io.out.print(f"{'removed' if found else 'not in the list'}: {esc(remove)}")
        return
    if list_ or run_dir is None:
        entries = trustmod.trusted()
        table = Table(title=f"trusted study code ({esc(trustmod.config_dir() / trustmod.TRUST_FILE)})")
        for col in ("digest", "source", "files"):
            table.add_column(col, overflow="fold")
        for digest, e in sorted(entries.items()):
            table.add_row(digest, esc(e.get("source", "")), esc(", ".join(map(str, e.get("files", [])))))
        io.out.print(table)
        return
    from kit.store import RunDir
    from kit.studies import RUN_COPY, checked_copy, digest_of, study_files

    rd = RunDir.open(run_dir)
    copy = checked_copy(rd.path, rd.manifest())
    if copy is None:
        raise KitError("the run has no study folder copy: it runs only the kit's own code", where=str(run_dir),
                       fix="nothing to trust")
    files = study_files(copy)
    digest = digest_of(files)
    trustmod.trust(digest, str(rd.path / RUN_COPY), [r for r, _ in files])
    io.out.print(f"trusted study code {digest} ({len(files)} files: {esc(', '.join(r for r, _ in files))})")
