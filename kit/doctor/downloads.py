"""The dataset download hosts (does each answer from here?) and each dataset source's row: cached and verified,
fetched on first use, or missing with how to supply it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kit.doctor.findings import Finding, finding
from kit.errors import KitError

# Dataset downloads: a TCP connection to each download host within this time says it answers (no file is fetched).
DOWNLOAD_PROBE_TIMEOUT_S = 3.0
Probe = Callable[[str, int, float], bool]


def reach_host(host: str, port: int, timeout_s: float) -> bool:
    """Does ``host`` accept a TCP connection on ``port`` within ``timeout_s``? (name resolution included)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _url_host(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or url, parts.port or (80 if parts.scheme == "http" else 443)


def download_hosts() -> list[tuple[str, int]]:
    """The hosts the dataset registry downloads from (kit/dataset_registry.py), each once, first URL of each file."""
    from kit.datasets import DATASETS

    hosts: dict[tuple[str, int], None] = {}
    for info in DATASETS.values():
        for files in info.sources.values():
            for f in files:
                urls = info.file(f).urls
                if urls:
                    hosts.setdefault(_url_host(urls[0]))
    return list(hosts)


def probe_hosts(hosts: list[tuple[str, int]], probe: Probe | None = None,
                timeout_s: float = DOWNLOAD_PROBE_TIMEOUT_S) -> dict[str, bool]:
    """host -> answered, probed in parallel: the whole check takes about ``timeout_s`` however many hosts (name
    resolution ignores socket timeouts, so each probe runs in a daemon thread and one still waiting at the deadline
    counts as unreachable, never holds the command or its exit)."""
    import threading
    import time

    fn = probe or reach_host
    got: dict[str, bool] = {}

    def one(host: str, port: int) -> None:
        got[host] = fn(host, port, timeout_s)

    threads = [threading.Thread(target=one, args=hp, daemon=True) for hp in hosts]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s + min(0.5, timeout_s)  # a connection made at the deadline: counted
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {host: bool(got.get(host)) for host, _ in hosts}


def check_downloads(reached: dict[str, bool] | None, download: bool = True) -> list[Finding]:
    """Whether the dataset download hosts answered from here (``reached``: probe_hosts's answer), or "not checked"
    (None): a host without internet must not read as ready for datasets it has not got."""
    if not download:
        return []
    names = ", ".join(h for h, _ in download_hosts())
    if reached is None:
        return [{**finding("dataset downloads", False, f"not checked (kit doctor --no-check-downloads): {names}",
                           "kit doctor (without --no-check-downloads) probes them"), "status": "not checked"}]
    if not reached:
        return []
    down = [h for h, ok in reached.items() if not ok]
    if not down:
        return [finding("dataset downloads", True, f"reachable: {names} (each answered within "
                                                    f"{DOWNLOAD_PROBE_TIMEOUT_S:g} s)")]
    return [finding("dataset downloads", False, f"not reachable from here within {DOWNLOAD_PROBE_TIMEOUT_S:g} s: "
                                                 f"{', '.join(down)}" + (f" (reachable: {', '.join(h for h in reached if reached[h])})"
                                                                         if len(down) < len(reached) else ""),
                     "offline host: fetch the dataset files elsewhere and pass --data-dir or set KIT_DATA_DIR "
                     "(README, Datasets); behind a proxy: set https_proxy")]


def check_datasets(data_dir: Path | None, download: bool = True,
                   reachable: dict[str, bool] | None = None) -> list[Finding]:
    """Each dataset source: here and verified, or fetched on first use (``download``: `kit run` downloads by
    default; ``--no-download`` turns it off) when its host answered (``reachable``; None: not checked), or missing
    with how to supply it."""
    from kit.datasets import DATASETS, SYNTHETIC, resolve

    out = []
    for name, info in DATASETS.items():
        for source in info.sources:
            if source == SYNTHETIC:  # written on first use (kit.synthetic), nothing to check here
                continue
            check = f"dataset {name} ({source})"
            try:
                r = resolve(name, source, data_dir=data_dir, download=False)
                out.append(finding(check, True, f"{r.directory} ({r.origin}), checksums ok"))
                continue
            except KitError as err:
                missing = finding(check, False, err.cause, err.fix or "", optional=True)
            files = [info.file(f) for f in info.sources[source]]
            if download and "not found" in missing["detail"] and all(f.urls for f in files):
                size = sum(f.size or 0 for f in files)
                host = _url_host(files[0].urls[0])[0]
                answered = None if reachable is None else reachable.get(host)
                where = f"{size / 1e6:.0f} MB from {host}"
                missing = {**missing, "status": "on first use" if answered else (
                    "not checked" if answered is None else "unreachable"), "detail": (
                    f"not cached, and {host} did not answer from here (kit run would download {where})"
                    if answered is False else
                    f"not cached yet: kit run downloads it on first use ({where}, checksums verified); downloads "
                    "are on (kit run --no-download turns them off)" + ("; its host was not checked"
                                                                        if answered is None else "")),
                    "fix": f"offline: fetch {', '.join(f.name for f in files)} elsewhere and pass --data-dir or set "
                           "KIT_DATA_DIR"}
            out.append(missing)
    return out
