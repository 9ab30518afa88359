"""Reading a spec: the file (refused unless a small regular file), the TOML, the profiles deep-merged over the base
and each validated like the base, and the claims checked against the paper protocol's configurations. Every fault
is a :class:`kit.errors.SpecError` raised before anything is written."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from kit.claim_spec import Claim, check_claims
from kit.errors import SpecError
from kit.records import JsonValue
from kit.spec.convert import build_section, deep_merge, got_text
from kit.spec.limits import MAX_ESTIMATE_S, MAX_SPEC_BYTES, PROFILE_KEYS
from kit.spec.model import SECTIONS, SPEC_LOADER_FIELDS, Spec
from kit.spec.workload import PARSE_WORKLOADS, known_workloads
from kit.spec_invalid import Invalid
from kit.workloads import WORKLOADS


def load_spec(path: str | Path, profile: str | None = None) -> Spec:
    """Load, merge the profile (if any) and validate; raise SpecError on any fault."""
    import os
    import stat

    from kit.studies import STUDY_FILE, check_modules, study_dir_of, study_files

    path = Path(path)
    folder = study_dir_of(path)
    if folder is not None:
        path = folder / STUDY_FILE
    try:
        # Opened without blocking and checked on the open descriptor: a FIFO or device named as a spec
        # must be refused, not read (a FIFO would hang the kit), and a huge file not read into memory.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SpecError("the spec is not a regular file (a FIFO, device or directory)", where=str(path),
                                fix="give the path of an experiment TOML file (see `kit list`)")
            if st.st_size > MAX_SPEC_BYTES:
                raise SpecError(f"the spec is {st.st_size} bytes, more than the limit of {MAX_SPEC_BYTES}",
                                where=str(path), fix="give the path of an experiment TOML file (a few kilobytes)")
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_SPEC_BYTES + 1)
        finally:
            os.close(fd)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise SpecError("spec file not found", where=str(path), fix="give the path of an experiment TOML (see `kit list`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the spec ({exc})", where=str(path), fix="check the file's permissions and encoding") from None
    spec = parse_spec(text, str(path), profile)
    if folder is None:
        return spec
    check_modules(folder, spec.study)
    study_files(folder)  # links, special files and sizes refused at load, before anything runs
    return dataclasses.replace(spec, study_dir=str(folder.resolve()))


# What readers of a run take from its recorded spec (manifest.json's ``spec``) and check against the ranges the loader
# enforces: the design's numbers (alpha, repetitions, disturbance threshold), the sampling numbers, and the keys every
# workload has. Names and lists (collectors, the workload's name and own keys) are not re-checked: a run made by
def parse_spec(text: str, path: str, profile: str | None = None) -> Spec:
    """Validate spec ``text`` (``path`` labels errors); used on resume with the manifest's copy."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML ({exc})", where=path, fix="correct the TOML syntax at the line shown") from None

    study, info = None, None
    if "study" in raw:  # a study folder's own workload: known to the checks below (this parse only)
        from kit.studies import study_workload

        study, info = study_workload(raw.pop("study"), path)
    token = PARSE_WORKLOADS.set({**WORKLOADS, info.name: info} if info is not None else None)
    try:
        return _parse(raw, path, profile, study)
    finally:
        PARSE_WORKLOADS.reset(token)


def _estimate(value: Any, where: str) -> float | None:
    """A profile's expected run time in seconds (None: not stated); where it was measured belongs in a comment."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_ESTIMATE_S:
        raise SpecError(f"expected seconds between 1 and {MAX_ESTIMATE_S} (366 days), got {value!r}", where=where,
                        fix="write the profile's expected run time in seconds, e.g. estimate_s = 240 "
                            "(a comment beside it saying where it was measured)")
    return float(value)


def _parse(raw: dict[str, JsonValue], path: str, profile: str | None, study: dict[str, JsonValue] | None) -> Spec:
    profiles_raw = raw.pop("profiles", {})
    if not isinstance(profiles_raw, dict):
        raise SpecError("expected a table of profiles", where=f"{path}: profiles", fix="write [profiles.NAME] tables")
    descriptions: dict[str, str] = {}
    estimates = {"paper": _estimate(raw.pop("estimate_s", None), f"{path}: estimate_s")}
    profiles: dict[str, dict[str, JsonValue]] = {}  # each profile's table, in the file's order
    for name, prof in profiles_raw.items():
        if not isinstance(prof, dict):
            raise SpecError("expected a table", where=f"{path}: profiles.{name}", fix=f"write [profiles.{name}] as a table")
        profiles[name] = prof
        descriptions[name] = str(prof.get("description", ""))
        estimates[name] = _estimate(prof.get("estimate_s"), f"{path}: profiles.{name}.estimate_s")
    chosen = profile or "paper"
    if chosen != "paper" and chosen not in profiles_raw:
        known = ", ".join(["paper", *profiles_raw])
        raise SpecError(f"unknown profile {chosen!r}", where=f"{path}: profiles", fix=f"use one of: {known}")

    def validate(data: dict[str, JsonValue], label: str) -> Spec:
        try:
            spec = build_section(Spec, data, "", SPEC_LOADER_FIELDS)
        except Invalid as exc:
            prefix = "" if label == "paper" else f"profiles.{label} -> "
            raise SpecError(
                f"expected {exc.expected}{got_text(exc.got)}",
                where=f"{path}: {prefix}{exc.path}",
                fix=exc.fix or f"set {exc.path} as described, or remove it if it is unknown",
            ) from None
        return spec

    base = validate(raw, "paper")
    try:  # against the paper protocol's configurations: a profile that runs fewer leaves a claim not testable
        check_claims(base.claims, base.experiment.frameworks, base.configurations())
    except Invalid as exc:
        raise SpecError(f"expected {exc.expected}{got_text(exc.got)}", where=f"{path}: {exc.path}",
                        fix=exc.fix or f"set {exc.path} as described, or remove it if it is unknown") from None
    for name, prof in profiles.items():  # an invalid profile fails the file, chosen or not
        over = {k: v for k, v in prof.items() if k not in PROFILE_KEYS}
        if "deviations" in over:
            raise SpecError("a profile cannot replace the experiment's deviations from the paper",
                            where=f"{path}: profiles.{name}.deviations",
                            fix="keep [[deviations]] at the top level; say how the profile differs in its description")
        if "claims" in over:
            raise SpecError("a profile cannot replace what the paper claimed",
                            where=f"{path}: profiles.{name}.claims",
                            fix="keep [[claims]] at the top level; a profile's configurations decide which are testable")
        unknown = set(over) - SECTIONS
        if unknown:
            key = sorted(unknown)[0]
            raise SpecError(
                f"unknown key (a profile may override {', '.join(sorted(SECTIONS))})",
                where=f"{path}: profiles.{name}.{key}",
                fix="remove the key or put it under one of those sections",
            )
        validate(deep_merge(raw, over), name)
    if chosen == "paper":
        spec = base
    else:
        over = {k: v for k, v in profiles[chosen].items() if k not in PROFILE_KEYS}
        spec = validate(deep_merge(raw, over), chosen)
    return dataclasses.replace(
        spec,
        path=path,
        profile=chosen,
        profile_description=descriptions.get(chosen, _main_profile_text(spec)),
        profile_estimate_s=estimates.get(chosen),
        profiles=("paper", *profiles_raw),
        study=study,
        info=known_workloads()[spec.workload.name],  # [workload].name, resolved in this parse (the study's, or the kit's)
    )


def _main_profile_text(spec: Spec) -> str:
    """The main (``paper``) profile's description when the file gives none: the published protocol for a study
    that reproduces a paper, the spec as written for a study of one's own (``kit new study``: no citation)."""
    return "the published protocol" if spec.experiment.citation.strip() else "the spec as written (no paper)"


def parse_claims(raw: Any, frameworks: Any, where: str) -> tuple[Claim, ...]:
    """A list of claim tables (a manifest's copy of the spec) validated as at load, except against the paper
    protocol's configurations, which a run of another profile does not record: a filter that matches none of
    the run's configurations leaves the claim not testable."""
    try:
        if not isinstance(raw, list):
            raise Invalid("claims", "a list of claim tables", raw)
        claims = tuple(build_section(Claim, c, f"claims[{i}]") for i, c in enumerate(raw))
        fws = [f for f in frameworks if isinstance(f, str)] if isinstance(frameworks, list | tuple) else []
        check_claims(claims, fws, None)
    except Invalid as exc:
        raise SpecError(f"expected {exc.expected}{got_text(exc.got)}", where=f"{where}: {exc.path}",
                        fix="the run's copy of the spec was edited; re-run the study from its experiment.toml") from None
    return claims
