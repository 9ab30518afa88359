"""`kit pack RUN --share`: a small bundle of one host's results that anyone can share (issue 42, part 3).

A full bundle (:mod:`kit.pack`) is for an evaluator who re-runs the study; it carries the packer's hostname,
user name, home paths and environment in its provenance, logs and file names. A share bundle is for the
replication map (``kit map``): the raw data, the analysis, the claims and the *host class* (CPU and GPU class,
memory, OS, versions), and nothing that names the host or the people on it. It keeps the full bundle's layout
for what it keeps (``run/``, ``claims.json``, ``spec/``, ``README.md``, ``SHA256SUMS``) plus ``share.json``, the
marker that says what was redacted.

How the run is redacted (an allow-list: a file of the run not named here is not bundled):

* JSON (manifest, trials, attempts, nodes, events): every string goes through :meth:`Redactor.text`: the
  run's hostnames and Slurm node names (in any case) become stable pseudonyms (``host-1``...: a multi-host run
  keeps its hosts apart), Slurm partitions ``partition-N`` (by field: partitions are called ``gpu``), user names
  ``<user>``, absolute paths outside the system trees (``/sys``, ``/proc``, ``/usr``...) ``<redacted>`` (each part
  of a ``:``-joined list on its own), GPU and
  boot UUIDs stable pseudonymous UUIDs (the analysis matches a trial's GPU to the host's by UUID), and
  ``NAME=value`` assignments in logs ``NAME=<redacted>``. The recorded environment (``host.env`` of the
  manifest and of each node) is dropped, so are ``boot_id`` and ``pid_start`` of events. The trials' stderr and
  traceback tails are kept, redacted the same way.
* Parquet samples: every string column is redacted value by value (through pyarrow; numbers untouched).
* File names: a hostname in a name (``_baseline-<host>-chunk0.parquet``, ``nodes/<host>.json``) is replaced too.
* Dropped: ``report/`` (derived, full of paths), the kit source snapshot, ``images/``, anything else.
* ``study/`` (the study folder's files, covered by the manifest's digest) and the spec's text are kept verbatim,
  so the run stays analysable; a user name or home path found in them stops the pack (they are the packer's
  to edit), since rewriting them would break the digest.

The analysis is then recomputed from the redacted run (what ``kit verify`` recomputes) and redacted; claims.json
and README.md are written from that redacted analysis and manifest, so what verify recomputes is what is stored.
Pack refuses when the redacted claims differ from the original run's, redacted alike (a redaction must never change
a result), or when redacting the analysis changes what verify compares. Names are redacted everywhere rather than
only in host-like fields (a log line may name the host anywhere: leaking nothing comes first); a host called like a
word of the data (``cpu``) therefore changes the data, and pack says so and what to do instead of packing. Its seal (:mod:`kit.freshness`, a per-user HMAC) is
dropped: a sealed analysis of a redacted copy would only verify for the packer, every other reader recomputes,
and ``kit verify`` checks the bundled analysis and claims against the bundled raw data in any case.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from kit.analysis_record import SEAL_KEY, Analysis
from kit.errors import KitError, StoreError
from kit.manifest import Manifest
from kit.records import JsonTable, JsonValue, TrialRecord
from kit.safeio import read_capped
from kit.store import (
    ANALYSIS,
    MAX_EVENTS_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_NODE_BYTES,
    MAX_TRIAL_BYTES,
    RunDir,
    atomic_write_json,
)

if TYPE_CHECKING:
    from kit.pack import BundleClaim, PaperClaim
    from kit.trust import StudyTrust

SHARE_FILE = "share.json"
SHARE_SCHEMA = 1
PLACEHOLDER = "<redacted>"
UUID_PREFIX = "00000000-0000-4000-8000-"  # a pseudonymous UUID (Redactor._uuid)
USER_PLACEHOLDER = "<user>"
# System accounts and trees name no person: "root" is the user of every container, /usr/lib is on every host.
SYSTEM_USERS = frozenset({"root", "nobody", "user", "kit"})
SYSTEM_TREES = ("/sys/", "/proc/", "/dev/", "/usr/", "/etc/", "/lib/", "/lib64/", "/bin/", "/sbin/")
_PATH = re.compile(r"(?<![\w.~:/-])/(?:[^\s'\"`,;()\[\]{}<>|]+)")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HOME = re.compile(r"/(?:home|Users)/[^/\s'\"`,;:\\]+")
_ASSIGN = re.compile(r"\b([A-Z][A-Z0-9_]{1,63})=(?!<redacted>)[^\s'\"`,;]+")
# What a run directory holds that a share bundle keeps, each redacted as said in the module docstring.
JSON_DIRS = ("trials", "attempts", "nodes")
PARQUET_DIRS = ("samples", "attempts")
EVENTS = "events.jsonl"
MANIFEST = "manifest.json"
STUDY = "study"
DROPPED = ("host.env of the manifest and env of each node: the recorded environment variables",
           "boot_id and pid_start of events: identify the machine's boot and processes")


def _without(v: JsonValue, *keys: str) -> JsonValue:
    """A table without ``keys`` (anything else as it is)."""
    return {k: x for k, x in v.items() if k not in keys} if isinstance(v, dict) else v


class GpuClass(TypedDict):
    name: str | None
    compute_capability: str | None
    memory_total_bytes: int | None


class HostFacts(TypedDict):
    """What a share bundle keeps about its host: the facts a finding may depend on, none that names the host.
    (``kit map`` draws its comparable host class from these same facts: kit.replication.hostclass.)"""

    experiment: str
    profile: str | None
    backend: str | None
    kit_version: str | None
    machine: str | None
    os: str | None
    kernel: str | None
    python: str | None
    cpu_vendor: str | None
    cpu_model_name: str | None
    cpu_family: int | None
    cpu_model: int | None
    cpu_isa: list[str]
    cpu_logical: int | None
    cpu_physical: int | None
    memory_total_bytes: int | None
    gpus: list[GpuClass]
    driver_version: str | None
    cuda: str | None  # as the trials reported it from inside the framework (None on a CPU run)
    frameworks: dict[str, str]  # arm -> framework version the trials reported


class ShareMarker(TypedDict):
    """``share.json``: the bundle is a share bundle, and what was removed from the run."""

    schema_version: int
    share: Literal[True]
    packed_by: str
    packed: float
    redacted: list[str]
    dropped: list[str]
    analysis: str
    host: HostFacts


@dataclass(frozen=True)
class Identity:
    """What names the packer's host and people in a run: hostnames, user names, home directories."""

    hostnames: tuple[str, ...]  # lower case: a host name is matched whatever its case
    users: tuple[str, ...]
    homes: tuple[str, ...]
    partitions: tuple[str, ...] = ()  # Slurm partitions: pseudonymised where a record names one (``partition``)

    @classmethod
    def of_run(cls, rd: RunDir, man: Manifest) -> Identity:
        """The run's hosts (manifest, nodes, trials, events) and this process's host, user and home."""
        import socket

        hosts = {str(man.host.get("hostname") or ""), socket.gethostname(), *rd.nodes()}
        partitions: set[str] = set()
        texts = [json.dumps(man.to_json())]
        for rec in rd.trial_records():
            hosts.add(rec.host or "")
            job = rec.to_json().get("executor")  # a Slurm node is a host; its partition names the site
            if isinstance(job, dict):
                hosts.add(str(job.get("node") or ""))
                partitions.add(str(job.get("partition") or ""))
            texts.append(json.dumps(rec.to_json(), default=str))
        for line in _lines(rd.path / EVENTS):
            for key in ("host", "node"):
                if isinstance(line.get(key), str):
                    hosts.add(str(line[key]))
            if isinstance(line.get("partition"), str):
                partitions.add(str(line["partition"]))
        hosts = {h.lower() for h in hosts}
        hosts |= {h.split(".", 1)[0] for h in hosts}
        users = {getpass.getuser(), os.environ.get("USER", ""), os.environ.get("LOGNAME", "")}
        homes = {str(Path.home()), os.environ.get("HOME", "")}
        for text in texts:  # the run's maker may not be the packer: their home directories name them too
            homes |= {m.group(0) for m in _HOME.finditer(text)}
        for h in list(homes):
            if h.startswith(("/home/", "/Users/")):
                users.add(h.split("/")[2])
        return cls(hostnames=tuple(sorted(h for h in hosts if h and h != "localhost")),
                   users=tuple(sorted(u for u in users if len(u) > 1 and u not in SYSTEM_USERS)),
                   homes=tuple(sorted(h for h in homes if len(h) > 1)),
                   partitions=tuple(sorted(p for p in partitions if p)))

    def with_more(self, hostnames: Iterable[str] = (), users: Iterable[str] = (),
                  homes: Iterable[str] = ()) -> Identity:
        """This identity and more names to redact (tests; a user who wants another name gone)."""
        return Identity(tuple(sorted({*self.hostnames, *(h.lower() for h in hostnames)})),
                        tuple(sorted({*self.users, *(u for u in users if u not in SYSTEM_USERS)})),
                        tuple(sorted({*self.homes, *homes})), self.partitions)


def _lines(path: Path) -> list[dict[str, JsonValue]]:
    data = read_capped(path, MAX_EVENTS_BYTES, EVENTS, missing_ok=True)
    out = []
    for raw in (data or b"").decode("utf-8", errors="replace").splitlines():
        try:
            v = json.loads(raw)
        except ValueError:
            continue
        if isinstance(v, dict):
            out.append(v)
    return out


def _word(s: str, any_case: bool = False) -> re.Pattern[str]:
    """``s`` where it is not part of a longer name (``vm`` in ``_baseline-vm-chunk0``, not in ``kvm``); host names
    ``any_case`` (DNS names are case-insensitive: ``Secret-Host`` in a log is the host ``secret-host``)."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])", re.IGNORECASE if any_case else 0)


def _path(m: re.Match[str]) -> str:
    """An absolute path, or a ``:``-joined list of them (``PATH``), each part outside the system trees redacted
    (``/usr/bin:/scratch/alice/x`` keeps ``/usr/bin``); a part that climbs out of a system tree (``..``) too."""
    parts = m.group(0).split(":")
    return ":".join(p if not p.startswith("/") or (f"{p}/".startswith(SYSTEM_TREES) and ".." not in p.split("/"))
                    else PLACEHOLDER for p in parts)


@dataclass(frozen=True)
class Redactor:
    """Replaces what :class:`Identity` names, absolute paths, UUIDs and assignments in text (module docstring)."""

    identity: Identity

    def host_alias(self, name: str) -> str:
        hosts = self.identity.hostnames
        return f"host-{hosts.index(name.lower()) + 1}" if name.lower() in hosts else name

    def partition_alias(self, name: str) -> str:
        parts = self.identity.partitions
        return f"partition-{parts.index(name) + 1}" if name in parts else name

    def _uuid(self, m: re.Match[str]) -> str:
        import hashlib

        if m.group(0).startswith(UUID_PREFIX):  # already a pseudonym: redacting twice gives the same text
            return m.group(0)
        tail = hashlib.sha256(("kit-share" + m.group(0).lower()).encode()).hexdigest()[:12]
        return f"{UUID_PREFIX}{tail}"

    def text(self, s: str) -> str:
        s = _PATH.sub(_path, s)
        for home in sorted(self.identity.homes, key=len, reverse=True):  # where no path pattern finds it
            s = s.replace(home, PLACEHOLDER)
        for host in sorted(self.identity.hostnames, key=len, reverse=True):
            s = _word(host, any_case=True).sub(self.host_alias(host), s)
        for user in sorted(self.identity.users, key=len, reverse=True):
            s = _word(user).sub(USER_PLACEHOLDER, s)
        s = _UUID.sub(self._uuid, s)
        return _ASSIGN.sub(lambda m: f"{m.group(1)}={PLACEHOLDER}", s)

    def value(self, v: JsonValue, key: str = "") -> JsonValue:
        """A JSON value with every string (and key) redacted; a Slurm ``partition`` value becomes its pseudonym
        (by field, not as a word: partitions are called ``gpu`` or ``cpu``, words the data use)."""
        if isinstance(v, str):
            return self.partition_alias(v) if key == "partition" else self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.text(k): self.value(x, k) for k, x in v.items()}
        return v

    def leaks(self, s: str) -> list[str]:
        """The home directories, user names and host names ``s`` names (text kept verbatim must name none)."""
        return ([h for h in self.identity.homes if h in s] + [u for u in self.identity.users if _word(u).search(s)]
                + [h for h in self.identity.hostnames if _word(h, any_case=True).search(s)])

    def common_words(self, text: str) -> list[str]:
        """The host and user names that ``text`` (the run's spec, claims and collectors) uses as words of its own."""
        return [w for w in (*self.identity.hostnames, *self.identity.users)
                if _word(w, any_case=w in self.identity.hostnames).search(text)]


def host_facts(man: Manifest, trials: Iterable[TrialRecord]) -> HostFacts:
    """The host class of a run: from the manifest's host and backend, and the versions its trials reported."""
    h = man.host
    raw_cpu = h.get("cpu")
    cpu: Mapping[str, object] = raw_cpu if isinstance(raw_cpu, dict) else {}
    gpus = [g for g in h.get("gpus") or [] if isinstance(g, dict)]
    frameworks: dict[str, str] = {}
    cuda = None
    for t in trials:
        env = t.env
        ver = env.get("framework_version")
        if isinstance(ver, str):
            frameworks.setdefault(t.arm, ver)
        if cuda is None and isinstance(env.get("cuda"), str):
            cuda = str(env["cuda"])

    def s(v: object) -> str | None:
        return v if isinstance(v, str) else None

    def i(v: object) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return {"experiment": man.experiment, "profile": man.profile, "backend": s(man.backend.get("backend")),
            "kit_version": s(man.kit.get("version")), "machine": s(h.get("machine")), "os": s(h.get("os")),
            "kernel": s(h.get("kernel")), "python": s(h.get("python")), "cpu_vendor": s(cpu.get("vendor")),
            "cpu_model_name": s(h.get("cpu_model")), "cpu_family": i(cpu.get("family")), "cpu_model": i(cpu.get("model")),
            "cpu_isa": [x for x in isa if isinstance(x, str)] if isinstance(isa := cpu.get("isa"), list) else [], "cpu_logical": i(h.get("cpu_logical")),
            "cpu_physical": i(h.get("cpu_physical")), "memory_total_bytes": i(h.get("memory_total_bytes")),
            "gpus": [{"name": s(g.get("name")), "compute_capability": s(g.get("compute_capability")),
                      "memory_total_bytes": i(g.get("memory_total_bytes"))} for g in gpus],
            "driver_version": next((d for g in gpus if (d := s(g.get("driver_version")))), None),
            "cuda": cuda, "frameworks": frameworks}


def _read_json(path: Path, limit: int, what: str) -> JsonValue:
    data = read_capped(path, limit, what)
    assert data is not None
    try:
        return json.loads(data)
    except ValueError as exc:
        raise StoreError(f"{what} is not JSON ({exc})", where=str(path), fix="remove or repair the file") from None


def _redact_parquet(red: Redactor, src: Path, dest: Path) -> bool:
    """Copy a samples file with its string columns redacted; True when a value changed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(src)
    changed = False
    cols = []
    for col in table.columns:
        t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            values = col.to_pylist()
            new = [red.text(v) if isinstance(v, str) else v for v in values]
            if new != values:
                changed = True
                col = pa.chunked_array([pa.array(new, type=t)])
        cols.append(col)
    if not changed:
        shutil.copyfile(src, dest)
        return False
    pq.write_table(pa.table(cols, names=[red.text(n) for n in table.column_names]), dest)
    return True


def redact_run(rd: RunDir, files: list[Path], red: Redactor, dest: Path) -> tuple[list[str], list[str]]:
    """Write the redacted copy of the run's ``files`` under ``dest``; (what was redacted, what was dropped)."""
    redacted = ["hostnames -> host-N pseudonyms (manifest, trials, attempts, nodes, events, samples, file names)",
                "user names -> <user>", "home directories and absolute paths outside /sys, /proc, /usr... -> <redacted>",
                "GPU and boot UUIDs -> stable pseudonymous UUIDs", "NAME=value assignments in logs -> NAME=<redacted>",
                "trials' stderr and traceback tails: kept, redacted as above",
                "Slurm node names (executor.node of trials, node of events) -> host-N pseudonyms, as hostnames",
                "Slurm partitions -> partition-N pseudonyms; Slurm job, array job and task ids: kept (numbers that "
                "tell a run's cluster jobs apart; without node and partition names they name no site)"]
    dropped = list(DROPPED)
    parquet = 0
    for src in files:
        rel = src.relative_to(rd.path)
        top = rel.parts[0]
        target = dest / Path(*[red.text(red.host_alias(p)) for p in rel.parts])
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.as_posix() == MANIFEST:
            man = _read_json(src, MAX_MANIFEST_BYTES, MANIFEST)
            assert isinstance(man, dict)
            source = man.get("spec_source")
            out = red.value({k: _without(v, "env") if k == "host" else v for k, v in man.items()
                             if k != "spec_source"})
            assert isinstance(out, dict)
            if isinstance(source, dict):  # the spec's text is kept verbatim (checked for leaks), its path is not
                out["spec_source"] = {**source, "path": PLACEHOLDER if source.get("path") else source.get("path")}
            atomic_write_json(target, out)
        elif top == STUDY:
            shutil.copyfile(src, target)
        elif rel.as_posix() == EVENTS:
            lines = [json.dumps(red.value(_without(e, "boot_id", "pid_start"))) for e in _lines(src)]
            target.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        elif len(rel.parts) == 2 and top in JSON_DIRS and src.suffix == ".json":
            limit = MAX_NODE_BYTES if top == "nodes" else MAX_TRIAL_BYTES
            rec = _read_json(src, limit, rel.as_posix())
            atomic_write_json(target, red.value(_without(rec, "env") if top == "nodes" else rec))
        elif len(rel.parts) == 2 and top in PARQUET_DIRS and src.suffix == ".parquet":
            parquet += _redact_parquet(red, src, target)
        elif rel.as_posix() != ANALYSIS:  # the analysis is recomputed from the redacted run (fill_share)
            name = f"run/{top}/" if len(rel.parts) > 1 else f"run/{top}"
            if name not in dropped:
                dropped.append(name)
    if parquet:
        redacted.append(f"string columns of {parquet} samples file(s), value by value")
    return redacted, dropped


def _common_word_fix(word: str) -> str:
    return (f"if {word!r} is a host's name that is also a common word the study uses (a host called 'cpu' or "
            "'gpu'), a share bundle cannot tell the two apart: pack on (or copy the run to) a host with a "
            "distinctive name, or share a full bundle (kit pack without --share) with people you trust")


def check_verbatim(rd: RunDir, man: Manifest, red: Redactor) -> None:
    """The study copy and the spec's text are kept verbatim: refuse when they name a user, home directory or host
    (rewriting them would break the study's digest; the packer edits them)."""
    texts = [("manifest spec_source.text", man.spec_source.text if man.spec_source else "")]
    study = rd.path / STUDY
    if study.is_dir() and not study.is_symlink():
        for p in sorted(study.rglob("*")):
            if p.is_file() and not p.is_symlink():
                texts.append((str(p), p.read_bytes().decode("utf-8", errors="replace")))
    for where, text in texts:
        found = red.leaks(text)
        if found:
            hosts = [f for f in found if f in red.identity.hostnames]
            raise StoreError(f"kept verbatim in a share bundle, this file names {', '.join(map(repr, found[:3]))} "
                             "(a user name, home directory or host name)", where=where,
                             fix="remove the name from the study folder and re-run, or share a full bundle (kit "
                                 "pack without --share) with people you trust"
                                 + (f"; {_common_word_fix(hosts[0])}" if hosts else ""))


# What `kit verify` compares of a paper claim (kit.verify._paper_difference); every field of a BundleClaim is compared.
VERIFIED_PAPER_KEYS = ("id", "verdict", "estimate", "low", "high")


def _claims_text(x: Analysis, profile: str, red: Redactor | None = None, verified_only: bool = False) -> str:
    """An analysis's claims as JSON (the same numbers give the same text: exact, NaN included), redacted by
    ``red``; ``verified_only``: only the fields `kit verify` compares."""
    from kit.pack import claims_of, paper_claims_of

    paper = [{k: v for k, v in c.items() if k in VERIFIED_PAPER_KEYS or not verified_only} for c in paper_claims_of(x)]
    value: JsonValue = json.loads(json.dumps([claims_of(x, profile), paper], default=str))
    return json.dumps(red.value(value) if red else value, sort_keys=True)


def _redaction_changed(what: str, rd: RunDir, man: Manifest, analysis: Analysis, red: Redactor) -> StoreError:
    """The error when redacting changes the run's claims: a host or user name that is also a word the run's data
    use (its cause and fix), else a kit bug."""
    profile = man.profile or "paper"
    data = json.dumps([man.to_json().get("spec"), [c.get("name") for c in man.collectors if isinstance(c, dict)],
                       _claims_text(analysis, profile)], default=str)
    words = red.common_words(data)
    if words:
        return StoreError(f"{what}: {words[0]!r}, a host or user name to redact, is also a word of the run's own "
                          "data (its spec, metric, device or collector names), and redacting it everywhere changes "
                          "them", where=str(rd.path), fix=_common_word_fix(words[0]))
    return StoreError(f"{what}", where=str(rd.path),
                      fix="pack a full bundle (kit pack without --share); please report this as a kit bug")


def fill_share(rd: RunDir, man: Manifest, analysis: Analysis, files: list[Path], out: Path,
               trust: StudyTrust | None, identity: Identity | None = None) -> ShareMarker:
    """Fill the share bundle directory ``out`` (module docstring); returns what share.json says."""
    from kit import __version__
    from kit.analysis.analyze import analyze_run
    from kit.pack import claims_of, paper_claims_of, write_sums

    red = Redactor(identity or Identity.of_run(rd, man))
    check_verbatim(rd, man, red)
    redacted, dropped = redact_run(rd, files, red, out / "run")
    dropped += ["the kit source snapshot (kit-src.tar.gz)",
                "images/ (recipes and locks)", "the analysis seal (per-user)"]
    try:
        shared_run = RunDir.open(out / "run")
        shared_man = shared_run.manifest()  # redacted: its experiment and profile are what verify reads
        fresh = analyze_run(out / "run", trust=trust, write=False)  # what `kit verify` recomputes
    except KitError as exc:
        raise _redaction_changed(f"the redacted run cannot be analysed ({exc.cause})", rd, man, analysis,
                                 red) from None
    content = red.value({k: v for k, v in fresh.to_json().items() if k != SEAL_KEY})
    assert isinstance(content, dict)
    stored = Analysis.from_json(content, "the share analysis")  # redacted: the analysis bundled, and its claims
    profile = shared_man.profile or "paper"
    if _claims_text(stored, profile) != _claims_text(analysis, man.profile or "paper", red):
        raise _redaction_changed("the redacted run does not give the original run's claims", rd, man, analysis, red)
    if _claims_text(stored, profile, verified_only=True) != _claims_text(fresh, profile, verified_only=True):
        raise _redaction_changed("redacting the analysis changes claims that `kit verify` recomputes", rd, man,
                                 analysis, red)
    atomic_write_json(out / "run" / ANALYSIS, stored.to_json())
    spec_name = "experiment.toml"
    (out / "spec").mkdir()
    (out / "spec" / spec_name).write_text(man.spec_source.text if man.spec_source else "", encoding="utf-8")
    claims: list[BundleClaim] = claims_of(stored, profile)
    meta = red.value({"experiment": shared_man.experiment, "profile": shared_man.profile, "spec": f"spec/{spec_name}",
                      "tolerance": 0.10, "claims": json.loads(json.dumps(claims)),
                      "paper_claims": json.loads(json.dumps(paper_claims_of(stored))), "packed": time.time(),
                      "run_duration_s": (man.ended - man.started) if man.started and man.ended else None,
                      "share": True})
    atomic_write_json(out / "claims.json", meta)
    marker: ShareMarker = {
        "schema_version": SHARE_SCHEMA, "share": True, "packed_by": f"kit pack --share (kit {__version__})",
        "packed": time.time(), "redacted": redacted, "dropped": dropped,
        "analysis": ("recomputed by kit pack --share from the redacted run (claims checked equal to the original "
                     "run's), then redacted; unsealed: readers recompute it, kit verify checks it against the raw data"),
        "host": host_facts(shared_man, shared_run.trial_records())}
    atomic_write_json(out / SHARE_FILE, marker)
    (out / "README.md").write_text(share_readme(shared_man, marker, stored, red), encoding="utf-8")
    write_sums(out)
    return marker


def share_readme(man: Manifest, marker: ShareMarker, analysis: Analysis, red: Redactor) -> str:
    """The bundle's README; every value taken from the run goes through ``red`` (the lists of what was redacted
    are the kit's own text, which would not survive it: ``/sys, /proc``)."""
    hc = marker["host"]
    gpus = red.text(", ".join(g["name"] or "?" for g in hc["gpus"]) or "no GPU")
    removed = "\n".join(f"- {r}" for r in marker["redacted"])
    dropped = "\n".join(f"- {d}" for d in marker["dropped"])
    title = red.text(man.title or man.experiment)
    headline = red.text(str((analysis.claims or {}).get("headline") or "no claims recorded"))
    return f"""# Shared results: {title}

**Did the paper's findings hold on this host?** {headline}.

A *share bundle* made by `{marker["packed_by"]}` for the replication map (`kit map`): the raw data
(trials, samples), the analysis, the claims and the host class ({red.text(hc["cpu_model_name"] or "?")},
{hc["cpu_logical"] or "?"} logical CPUs, {gpus}; profile `{red.text(man.profile or "paper")}`), without anything that names the
host or the people on it. `share.json` lists the host class and what was removed.

## What was redacted

{removed}

## What was dropped

{dropped}

## Checking it

`kit verify BUNDLE`: every file matches SHA256SUMS, and the claims and analysis are what the bundled raw data
give (re-analysed by the verifier's kit). A share bundle is not re-run: it carries no source snapshot or images
(a full bundle, `kit pack` without `--share`, does). SHA256SUMS proves that the files are unchanged since
packing, not who packed them.
"""


class ShareVerification(TypedDict):
    """``kit verify`` of a share bundle (``--json``): integrity, and the claims are what the raw data give."""

    bundle: str
    files_verified: int
    integrity: str
    integrity_means: str
    integrity_only: bool
    share: Literal[True]
    redacted: list[str]
    host: HostFacts
    claims: list[BundleClaim]
    claims_tested: int
    claims_changed: list[str]
    paper_claims: list[PaperClaim]
    paper_headline: str | None
    badges: dict[str, bool]
    note: str


def check_marker(m: JsonTable, where: str) -> ShareMarker:
    """share.json, checked: this kit's schema, ``share: true`` and the lists and host class it must hold."""
    lists = all(isinstance(v := m.get(k), list) and all(isinstance(x, str) for x in v) for k in ("redacted", "dropped"))
    if m.get("schema_version") != SHARE_SCHEMA or m.get("share") is not True or not lists \
            or not isinstance(m.get("host"), dict):
        raise StoreError(f"{SHARE_FILE} is not a share marker this kit reads (schema_version {SHARE_SCHEMA}, "
                         "share: true, redacted, dropped, host)", where=where,
                         fix="obtain an unmodified bundle made by `kit pack --share`")
    return m  # type: ignore[return-value]  # its shape checked above


def check_share_run(man: Manifest, trials: Iterable[TrialRecord], marker: ShareMarker, where: str) -> None:
    """A share bundle's run is what its marker says: no recorded environment, and the marker's host class."""
    fix = "obtain an unmodified bundle made by `kit pack --share`"
    if "env" in man.host or any("env" in n for n in man.nodes.values()):
        raise StoreError(f"{SHARE_FILE} marks a share bundle, but its run records the host's environment (host.env)",
                         where=where, fix=fix)
    if json.loads(json.dumps(host_facts(man, trials))) != marker["host"]:
        raise StoreError(f"{SHARE_FILE}'s host class is not the bundled run's", where=where, fix=fix)


SHARE_NOTE = ("a share bundle: its claims and analysis are what its raw data give (re-analysed here); it is not "
              "re-run (no source snapshot or images); `kit map` pools it with other hosts")


def pack_share(run_dir: Path, out: Path | None = None, trust: StudyTrust | None = None) -> Path:
    """`kit pack RUN --share`: the share bundle directory (default ``RUN_DIR.share``) and its .tar.gz (returned),
    built and put in place as :func:`kit.pack.pack` builds a full bundle."""
    from kit.pack import pack

    def fill(rd: RunDir, man: Manifest, analysis: Analysis, files: list[Path], stage: Path) -> None:
        fill_share(rd, man, analysis, files, stage, trust)

    return pack(run_dir, out, trust, filler=fill, suffix="share")
