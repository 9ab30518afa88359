"""Caches, keys and state files the kit keeps for itself are regular files it can trust (issue 37).

Each attack is performed for real: a FIFO and a poisoned entry in the power cache, links planted at a cache
entry or in place of a cache directory, a forged `kit history` cache, a seal key left world-readable that
"another local user" (uid 65534 when the tests run as root) reads and uses to seal a forged analysis, and
`kit tune`'s state directory redirected or a link planted at its state file's name. Every call that could
block runs in a daemon thread with a time limit: a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from typer.testing import CliRunner

from kit import history_cache, trust
from kit import tune as tuning
from kit.analysis import power_cache as pw
from kit.errors import KitError
from kit.private_files import mac, mac_holds, sealed_blob
from kit.stats import power as sp

GOLDEN = Path(__file__).parent / "data" / "golden" / "run"
LIMIT_S = 30.0
N, LEVEL = 12, 0.05  # a size the kit simulates (n <= SIM_MAX_N): its figures come from the power cache
T = TypeVar("T")


def bounded(fn: Callable[[], T], limit_s: float = LIMIT_S) -> T:
    """``fn()`` in a daemon thread; the test fails (instead of hanging) when it has not returned in time."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test's thread
            box["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit_s)
    assert not th.is_alive(), f"still blocked after {limit_s} s (a FIFO was opened for reading?)"
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


@pytest.fixture
def private_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """This test's own config directory (its seal key) and power cache, both fresh."""
    config, cache = tmp_path / "config", tmp_path / "power"
    monkeypatch.setenv(trust.CONFIG_ENV, str(config))
    monkeypatch.setenv(pw.ENV_CACHE, str(cache))
    sp._paired_thresholds.cache_clear()
    yield config, cache
    sp._paired_thresholds.cache_clear()


def _critical() -> int:
    return sp.signed_rank_critical(N, LEVEL, True)


def _clean(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float, np.ndarray]:
    """MDE, power at 1 SD and the order statistics, simulated in memory (no disk cache at all)."""
    with monkeypatch.context() as m:
        m.setenv(pw.ENV_CACHE, "off")
        sp._paired_thresholds.cache_clear()
        out = (pw.mde_paired_sd(N, LEVEL), pw.power_paired(1.0, N, LEVEL), sp._simulate_paired(N, (_critical(),)))
    sp._paired_thresholds.cache_clear()
    return out


def _figures() -> tuple[float, float]:
    """What an analysis prints, from a cold process (lru cleared): the MDE and the power at 1 SD."""
    sp._paired_thresholds.cache_clear()
    return bounded(lambda: (pw.mde_paired_sd(N, LEVEL), pw.power_paired(1.0, N, LEVEL)))


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _context(args: tuple[int, ...], shape: tuple[int, ...]) -> str:
    version = pw._sim_version()
    assert version is not None
    return pw._context("paired", args, (shape[0], shape[1]), version)


# -- the power cache ------------------------------------------------------------------------------------------------

def test_a_fifo_at_a_power_cache_entry_neither_hangs_nor_changes_the_figures(
        private_env: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    mde, power, want = _clean(monkeypatch)
    entry = pw.entry_path("paired", (N, _critical()))
    assert entry is not None
    entry.parent.mkdir(mode=0o700)
    os.mkfifo(entry)  # the old `open(path, "rb")` waited here for a writer that never comes
    assert _figures() == (mde, power)
    assert stat.S_ISREG(os.lstat(entry).st_mode)  # the FIFO was replaced by the recomputed entry, by name
    believed = pw.cached_entry("paired", (N, _critical()), want.shape)
    assert believed is not None and np.array_equal(believed, want)


@pytest.mark.parametrize("poison", ["plain-npy", "wrong-key", "other-domain", "other-entry"])
def test_a_poisoned_power_cache_entry_is_recomputed_never_believed(
        poison: str, private_env: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    mde, power, want = _clean(monkeypatch)
    args = (N, _critical())
    entry = pw.entry_path("paired", args)
    assert entry is not None
    fake = want * 0.5  # right shape, finite float64: what the old cache believed
    forged_mde = float(np.quantile(np.sort(-fake[:, 0]), sp.POWER))
    assert forged_mde != pytest.approx(mde)  # believed, it would change the printed figure
    key = trust.seal_key()
    assert key is not None
    if poison == "plain-npy":
        blob = _npy(fake)
    elif poison == "wrong-key":  # signed, but not with this user's key
        blob = sealed_blob(os.urandom(32), "power-cache", _context(args, fake.shape), _npy(fake))
    elif poison == "other-domain":  # this user's key, but a MAC made for the history cache
        blob = sealed_blob(key, "history-cache", _context(args, fake.shape), _npy(fake))
    else:  # a genuine entry of this user's, for other arguments, copied under this entry's name
        other = (N, _critical() + 1)
        blob = sealed_blob(key, "power-cache", _context(other, fake.shape), _npy(fake))
    entry.parent.mkdir(mode=0o700)
    entry.write_bytes(blob)
    os.chmod(entry, 0o600)
    assert _figures() == (mde, power)
    assert entry.read_bytes() != blob  # rewritten
    believed = pw.cached_entry("paired", args, want.shape)
    assert believed is not None and np.array_equal(believed, want)
    # the control: the same numbers with this user's MAC for this entry are believed, so the MAC is the defence
    entry.write_bytes(sealed_blob(key, "power-cache", _context(args, fake.shape), _npy(fake)))
    assert _figures()[0] == pytest.approx(forged_mde)


def test_a_link_at_a_power_cache_entry_is_never_followed(private_env: tuple[Path, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    mde, power, _ = _clean(monkeypatch)
    key = trust.seal_key()
    assert key is not None
    entry = pw.entry_path("paired", (N, _critical()))
    assert entry is not None
    # the link's target is a precious file, and it even holds an entry this user's key signed, with other numbers:
    # read through the link it would be believed; written through it, the file would be lost
    victim = tmp_path / "victim.kpow"
    fake = sp._simulate_paired(N, (_critical(),)) * 0.5
    victim.write_bytes(sealed_blob(key, "power-cache", _context((N, _critical()), fake.shape), _npy(fake)))
    before = victim.read_bytes()
    entry.parent.mkdir(mode=0o700)
    entry.symlink_to(victim)
    assert _figures() == (mde, power)
    assert victim.read_bytes() == before
    assert stat.S_ISREG(os.lstat(entry).st_mode)  # the link itself was replaced


@pytest.mark.parametrize("how", ["link", "group-writable"])
def test_a_power_cache_directory_others_control_is_not_used(how: str, private_env: tuple[Path, Path],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, cache = private_env
    mde, power, want = _clean(monkeypatch)
    key = trust.seal_key()
    assert key is not None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if how == "link":
        cache.symlink_to(elsewhere)
        planted_dir = elsewhere
    else:
        cache.mkdir()
        os.chmod(cache, 0o777)
        planted_dir = cache
    # an entry with this user's valid MAC and other numbers: if the directory were read at all, it would be believed
    entry = planted_dir / pw._entry_name("paired", (N, _critical()), pw._sim_version() or "")
    fake = want * 0.5
    entry.write_bytes(sealed_blob(key, "power-cache", _context((N, _critical()), fake.shape), _npy(fake)))
    os.chmod(entry, 0o600)
    listing = sorted(os.listdir(planted_dir))
    assert _figures() == (mde, power)
    assert sorted(os.listdir(planted_dir)) == listing  # nothing written there (not through the link either)
    assert how != "link" or cache.is_symlink()


def test_macs_of_one_purpose_never_pass_for_another() -> None:
    key = os.urandom(32)
    tag = mac(key, "power-cache", "a", "b")
    assert mac_holds(key, "power-cache", tag, "a", "b")
    assert not mac_holds(key, "analysis-seal", tag, "a", "b") and not mac_holds(key, "history-cache", tag, "a", "b")
    assert not mac_holds(key, "power-cache", tag, "ab") and not mac_holds(key, "power-cache", tag, "a", "b", "")
    assert not mac_holds(os.urandom(32), "power-cache", tag, "a", "b") and not mac_holds(key, "power-cache", 7, "a")


# -- the history cache ------------------------------------------------------------------------------------------------

QUERY = "time_s|train|pytorch"


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two copies of the golden run, analysed once for the module (analysis.json written and sealed under a key
    of this fixture's own, in the config directory returned with them): copies of them are cheap to read again."""
    from kit.analysis.analyze import analyze_run

    root = tmp_path_factory.mktemp("analysed")
    runs = root / "runs"
    shutil.copytree(GOLDEN, runs / "r0")
    with pytest.MonkeyPatch.context() as m:
        m.setenv(trust.CONFIG_ENV, str(root / "config"))
        analyze_run(runs / "r0")
    shutil.copytree(runs / "r0", runs / "r1")  # the same inputs: its copy of the seal holds too
    return runs, root / "config"


def _values(runs: Path) -> list[list[float]]:
    """What `kit history` plots per run (the values of time_s in the train phase of the pytorch arm)."""
    from kit.history import collect

    return bounded(lambda: [list(r.values) for r in collect(runs, "time_s", "train", "pytorch", None)])


@pytest.fixture
def history_runs(analysed: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[Path, Path, list[list[float]], bytes]:
    """A copy of the analysed runs and their history cache (written by a first call): runs, cache file, values,
    and the document a forger starts from (the real cache's JSON with every value tripled)."""
    monkeypatch.setenv(trust.CONFIG_ENV, str(analysed[1]))  # the key the analyses were sealed with
    monkeypatch.setenv(history_cache.ENV, str(tmp_path / "hcache"))
    monkeypatch.setattr(history_cache, "RACY_S", 0.0)
    runs = tmp_path / "runs"
    shutil.copytree(analysed[0], runs)
    real = _values(runs)
    path = history_cache.cache_path(runs, QUERY)
    entries = history_cache.load(path)
    assert sorted(entries) == ["r0", "r1"] and [list(entries[k].values) for k in ("r0", "r1")] == real
    forged = {k: {**e.to_json(), "values": [3 * v for v in e.values]} for k, e in entries.items()}
    doc = json.dumps({"version": history_cache.VERSION, "runs": forged}).encode()
    return runs, path, real, doc


@pytest.mark.parametrize("forgery", ["unsigned", "old-format", "wrong-key", "other-query"])
def test_a_forged_history_cache_is_ignored(forgery: str, history_runs: tuple[Path, Path, list[list[float]], bytes]
                                           ) -> None:
    runs, path, real, doc = history_runs
    key = trust.seal_key()
    assert key is not None
    if forgery == "unsigned":
        blob = doc
    elif forgery == "old-format":  # version 1, as every cache was before: plain JSON
        blob = doc.replace(f'"version": {history_cache.VERSION}'.encode(), b'"version": 1')
    elif forgery == "wrong-key":
        blob = sealed_blob(os.urandom(32), "history-cache", path.name, doc)
    else:  # this user's genuine MAC, made for another runs directory's or query's cache file
        blob = sealed_blob(key, "history-cache", history_cache.cache_path(runs, "time_s|eval|pytorch").name, doc)
    path.write_bytes(blob)
    assert _values(runs) == real
    assert [list(e.values) for _, e in sorted(history_cache.load(path).items())] == real  # rebuilt
    # the control: the same document with this user's MAC for this file is believed (the MAC is what refuses it)
    path.write_bytes(sealed_blob(key, "history-cache", path.name, doc))
    assert _values(runs) == [[3 * v for v in vals] for vals in real]


def test_a_fifo_or_a_link_at_the_history_cache_is_refused(history_runs: tuple[Path, Path, list[list[float]], bytes],
                                                          tmp_path: Path) -> None:
    runs, path, real, doc = history_runs
    key = trust.seal_key()
    assert key is not None
    path.unlink()
    os.mkfifo(path)
    assert _values(runs) == real
    assert stat.S_ISREG(os.lstat(path).st_mode)  # replaced by name
    victim = tmp_path / "victim.json"  # even a document this user's key signed is not read through a link
    victim.write_bytes(sealed_blob(key, "history-cache", path.name, doc))
    before = victim.read_bytes()
    path.unlink()
    path.symlink_to(victim)
    assert _values(runs) == real
    assert victim.read_bytes() == before and not path.is_symlink()


# -- the seal key -----------------------------------------------------------------------------------------------------

@pytest.fixture
def victim_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A config directory outside pytest's private temp tree, so that another user can reach it once it is opened."""
    config = Path(tempfile.mkdtemp(prefix="kit-victim-config-"))
    monkeypatch.setenv(trust.CONFIG_ENV, str(config))
    try:
        yield config
    finally:
        shutil.rmtree(config, ignore_errors=True)


def _as_another_user(path: Path) -> subprocess.CompletedProcess[str]:
    """``cat path`` as another local user: uid 65534 when the tests run as root; else (no second user to be) as
    this user, which reads what the key's mode allows anyone to."""
    if os.geteuid() == 0:
        return subprocess.run(["cat", str(path)], user=65534, group=65534, extra_groups=[], capture_output=True,
                              text=True, timeout=LIMIT_S, check=False)
    return subprocess.run(["cat", str(path)], capture_output=True, text=True, timeout=LIMIT_S, check=False)


def _doctor_key_finding() -> tuple[int, dict[str, Any], str]:
    from kit.cli import app

    res = CliRunner().invoke(app, ["doctor", "--strict", "--json"], terminal_width=200)
    doc = json.loads(res.output)
    (finding,) = [f for f in doc["findings"] if f["check"] == "analysis seal key"]
    return res.exit_code, finding, res.output


def _time_s(analysis: dict[str, Any]) -> list[float]:
    return [v["value"] for v in analysis["values"] if v["metric"] == "time_s" and v["value"] is not None]


def _steal_and_forge(config: Path, analysed: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[Path, Path, bytes, dict[str, Any]]:
    """The attack: the user's key left world-readable, read by another local user, who seals a forged analysis
    of run b with it. (a, b, the old key's bytes, the forged analysis)."""
    from kit.freshness import seal, seal_holds

    monkeypatch.setenv(pw.ENV_CACHE, "off")  # this test's key differs from the session's: no shared entries
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(analysed[0] / "r0", a)
    shutil.copytree(analysed[0] / "r0", b)
    assert trust.seal_key() is not None  # the user's key: 0600 in a 0700 directory
    key_path = config / trust.KEY_FILE
    old_key = key_path.read_bytes()
    assert _as_another_user(key_path).returncode != 0 or os.geteuid() != 0  # private: another user cannot read it
    # the slip: the key and its directory opened to everyone (a restored backup, a shared dotfiles checkout)
    os.chmod(config, 0o755)
    os.chmod(key_path, 0o644)
    stolen = _as_another_user(key_path)
    assert stolen.returncode == 0 and stolen.stdout.encode() == old_key, stolen.stderr
    stolen_key = bytes.fromhex(stolen.stdout.strip())
    # identical raw data, times x3, sealed with the stolen key: the seal's inputs digest and study-code state are
    # the run's own (anyone can compute them), only the key is secret
    forged = json.loads((b / "analysis.json").read_text())
    for v in forged["values"]:
        if v["metric"] == "time_s" and v["value"] is not None:
            v["value"] *= 3.0
    forged["seal"] = seal(forged, forged["seal"]["inputs"], forged["seal"]["hooks"], key=stolen_key)
    (b / "analysis.json").write_text(json.dumps(forged))
    with monkeypatch.context() as m:  # the control: had the kit kept using that key, the forgery would be trusted
        m.setattr(trust, "seal_key", lambda create=True: stolen_key)
        assert seal_holds(forged, b, None)
    return a, b, old_key, forged


def _key_was_replaced(config: Path, old_key: bytes, forged: dict[str, Any], b: Path) -> None:
    from kit.freshness import seal_holds

    key_path = config / trust.KEY_FILE
    assert key_path.read_bytes() != old_key
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600 and stat.S_IMODE(os.stat(config).st_mode) == 0o700
    assert _as_another_user(key_path).returncode != 0 or os.geteuid() != 0
    assert not seal_holds(forged, b, None)


def test_a_world_readable_key_is_replaced_and_a_seal_forged_with_it_is_not_trusted(
        victim_config: Path, analysed: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `kit compare`, `history` and `pack` read a run's analysis through (current_analysis) recomputes it;
    `kit doctor --strict` fails naming the replaced key until the user acknowledges it."""
    from kit.analysis.analyze import current_analysis

    a, b, old_key, forged = _steal_and_forge(victim_config, analysed, tmp_path, monkeypatch)
    got, recomputed = bounded(lambda: current_analysis(b, need_study=False))
    assert recomputed
    truth = json.loads((a / "analysis.json").read_text())
    assert _time_s({"values": got.value_rows()}) == _time_s(truth) != _time_s(forged)
    assert _time_s(json.loads((b / "analysis.json").read_text())) == _time_s(truth)  # written back, recomputed
    _key_was_replaced(victim_config, old_key, forged, b)
    code, finding, output = _doctor_key_finding()
    assert code == 1 and not finding["ok"] and not finding["optional"], output
    key_path = victim_config / trust.KEY_FILE
    assert "REPLACED" in finding["detail"] and str(key_path) in finding["detail"]
    assert "mode 0755" in finding["detail"] and "mode 0644" in finding["detail"]  # the directory's and the key's
    assert "recomputed" in finding["fix"] and f"rm {victim_config / trust.KEY_NOTE}" in finding["fix"]
    (victim_config / trust.KEY_NOTE).unlink()  # acknowledged
    assert _doctor_key_finding()[1]["ok"]


@pytest.mark.slow
def test_kit_compare_prints_no_figure_from_a_seal_forged_with_a_stolen_key(
        victim_config: Path, analysed: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.cli import app

    a, b, old_key, forged = _steal_and_forge(victim_config, analysed, tmp_path, monkeypatch)
    out_json = tmp_path / "cmp.json"
    res = bounded(lambda: CliRunner().invoke(app, ["compare", str(a), str(b), "--metric", "time_s", "--json-file",
                                                   str(out_json)], terminal_width=200))
    assert res.exit_code == 0, res.output
    rows = json.loads(out_json.read_text())["rows"]
    assert rows and all(r["verdict"] == "no change" for r in rows), rows
    assert all(abs(r["ratio"] - 1.0) < 1e-9 for r in rows)  # recomputed from the raw data: no forged figure
    assert "No regression or improvement found" in res.output and "3.00" not in res.output
    _key_was_replaced(victim_config, old_key, forged, b)


@pytest.mark.parametrize("how", ["group-readable-dir", "fifo", "link"])
def test_a_key_others_could_reach_or_swap_is_replaced(how: str, victim_config: Path, tmp_path: Path) -> None:
    first = trust.seal_key()
    assert first is not None and trust.seal_key_status().state == "ok"
    key_path = victim_config / trust.KEY_FILE
    if how == "group-readable-dir":
        os.chmod(victim_config, 0o750)
    elif how == "fifo":
        key_path.unlink()
        os.mkfifo(key_path)
    else:
        planted = tmp_path / "planted.key"  # a key someone else chose, linked in
        planted.write_bytes(os.urandom(32).hex().encode())
        os.chmod(planted, 0o600)
        key_path.unlink()
        key_path.symlink_to(planted)
    got = bounded(trust.seal_key)
    assert got is not None and got != first
    assert stat.S_ISREG(os.lstat(key_path).st_mode) and stat.S_IMODE(os.lstat(key_path).st_mode) == 0o600
    status = trust.seal_key_status()
    assert status.state == "replaced" and status.path == key_path


def test_a_fresh_open_config_directory_is_made_private_without_a_replacement(victim_config: Path) -> None:
    os.chmod(victim_config, 0o755)  # `mkdir DIR; export KIT_CONFIG_DIR=DIR`: no key in it yet, nothing exposed
    assert trust.seal_key() is not None
    assert stat.S_IMODE(os.stat(victim_config).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(victim_config / trust.KEY_FILE).st_mode) == 0o600
    assert trust.seal_key_status().state == "ok"


@pytest.mark.parametrize("how", ["link", "another-users"])
def test_a_config_directory_the_kit_cannot_make_private_gives_no_key(how: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    config = tmp_path / "config"
    if how == "link":
        config.symlink_to(real)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a directory to another user")
        config.mkdir(mode=0o700)
        os.chown(config, 65534, 65534)
    monkeypatch.setenv(trust.CONFIG_ENV, str(config))
    assert trust.seal_key() is None and trust.trusted() == {}
    assert os.listdir(real) == []  # no key made through the link
    status = trust.seal_key_status()
    assert status.state == "unusable" and ("symbolic link" in status.reason or "uid 65534" in status.reason)
    with pytest.raises(KitError):  # `kit trust` says why instead of writing through it
        trust.trust("a" * 64, "test", [])
    from kit.doctor.checks import check_seal_key

    (finding,) = check_seal_key()
    assert not finding["ok"] and not finding["optional"] and "UNUSABLE" in finding["detail"]


def test_a_fifo_or_foreign_allow_list_trusts_nothing_and_never_blocks(victim_config: Path) -> None:
    trust.trust("b" * 64, "test", [])
    assert trust.is_trusted("b" * 64)
    listed = victim_config / trust.TRUST_FILE
    os.chmod(listed, 0o666)  # writable by others: anyone could have added a digest
    assert not trust.is_trusted("b" * 64)
    listed.unlink()
    os.mkfifo(listed)
    assert bounded(trust.trusted) == {}


# -- kit tune's state file --------------------------------------------------------------------------------------------

def _fake_sysfs(root: Path) -> Path:
    policy = root / "devices" / "system" / "cpu" / "cpufreq" / "policy0"
    policy.mkdir(parents=True)
    (policy / "scaling_governor").write_text("powersave\n")
    (policy / "scaling_available_governors").write_text("performance powersave\n")
    return policy / "scaling_governor"


def _record(gov: Path) -> str:
    """A state record that, believed, puts the governor back to powersave."""
    return json.dumps({"schema": 1, "changed": [{"name": "governor policy0", "path": str(gov), "before": "powersave",
                                                 "after": "performance"}], "gpus": []})


def test_a_redirected_tune_state_directory_is_refused(tmp_path: Path) -> None:
    gov = _fake_sysfs(tmp_path / "sys")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "kit").symlink_to(elsewhere)
    state = tmp_path / "run" / "kit" / "tune-state.json"
    with pytest.raises(KitError) as err:
        tuning.tune(tmp_path / "sys", state, as_root=True, gpus=list)
    assert err.value.where == str(state.parent) and "symbolic link" in err.value.cause and err.value.fix
    assert os.listdir(elsewhere) == [] and gov.read_text() == "powersave\n"  # nothing written, nothing changed
    gov.write_text("performance\n")
    (elsewhere / "tune-state.json").write_text(_record(gov))  # a state someone left where the link points
    with pytest.raises(KitError, match="symbolic link"):
        tuning.reset(tmp_path / "sys", state, as_root=True, gpus=lambda rows: [])
    assert gov.read_text() == "performance\n" and (elsewhere / "tune-state.json").exists()


def test_a_link_planted_at_the_tune_state_name_is_refused(tmp_path: Path) -> None:
    gov = _fake_sysfs(tmp_path / "sys")
    state_dir = tmp_path / "run"
    state_dir.mkdir()
    state = state_dir / "tune-state.json"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    state.symlink_to(victim)
    with pytest.raises(KitError) as err:
        tuning.tune(tmp_path / "sys", state, as_root=True, gpus=list)
    assert err.value.where == str(state) and "symbolic link" in err.value.cause and f"rm {state}" in (err.value.fix or "")
    assert victim.read_text() == "keep\n" and gov.read_text() == "powersave\n" and state.is_symlink()
    gov.write_text("performance\n")
    victim.write_text(_record(gov))  # a record that would restore a value: not read through the link
    with pytest.raises(KitError, match="symbolic link"):
        tuning.reset(tmp_path / "sys", state, as_root=True, gpus=lambda rows: [])
    assert gov.read_text() == "performance\n" and victim.read_text() == _record(gov) and state.is_symlink()


def test_a_fifo_as_the_tune_state_does_not_hang_reset(tmp_path: Path) -> None:
    _fake_sysfs(tmp_path / "sys")
    state = tmp_path / "run" / "tune-state.json"
    state.parent.mkdir()
    os.mkfifo(state)
    with pytest.raises(KitError, match="FIFO"):
        bounded(lambda: tuning.reset(tmp_path / "sys", state, as_root=True, gpus=lambda rows: []))
    with pytest.raises(KitError, match="FIFO"):
        bounded(lambda: tuning.tune(tmp_path / "sys", state, as_root=True, gpus=list))


def test_a_tune_state_others_could_write_is_refused(tmp_path: Path) -> None:
    gov = _fake_sysfs(tmp_path / "sys")
    state = tmp_path / "run" / "tune-state.json"
    state.parent.mkdir()
    os.chmod(state.parent, 0o777)  # anyone can plant a state here
    with pytest.raises(KitError, match="0777"):
        tuning.tune(tmp_path / "sys", state, as_root=True, gpus=list)
    assert not state.exists() and gov.read_text() == "powersave\n"
    os.chmod(state.parent, 0o755)
    state.write_text(_record(gov))
    gov.write_text("performance\n")
    os.chmod(state, 0o666)
    with pytest.raises(KitError, match="0666"):
        tuning.reset(tmp_path / "sys", state, as_root=True, gpus=lambda rows: [])
    assert gov.read_text() == "performance\n"
    os.chmod(state, 0o644)  # the control: the same record, root's and not writable by others, is restored
    assert tuning.reset(tmp_path / "sys", state, as_root=True, gpus=lambda rows: [])["restored"]
    assert gov.read_text() == "powersave\n" and not state.exists()
