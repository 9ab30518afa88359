#!/usr/bin/env python3
"""A stand-in for `apptainer` in tests (Apptainer cannot be installed on the kit's CI machines).

It understands the subset of the command line the kit builds: ``--version``, and
``exec [flags] SIF COMMAND...``. It records each call as a JSON line in
$FAKE_APPTAINER_LOG, then runs COMMAND *on this host* with the bind mounts
mapped back to their sources (``/out`` -> the work directory, ``/kit/kit`` ->
the kit's code), the ``--env`` variables only (like ``--cleanenv``), and
``python3`` replaced by $FAKE_APPTAINER_PYTHON. It isolates nothing: it exists to
exercise the backend's command construction, process handling and outcome
rules, not Apptainer itself. $FAKE_APPTAINER_SIGKILL=1 makes the "container"
die of SIGKILL at once (what the kernel's OOM killer does).
"""

from __future__ import annotations

import json
import os
import signal
import sys

VALUE_FLAGS = {"--bind", "--env", "--pwd", "--network", "--cpuset-cpus", "--memory", "--memory-swap"}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print("apptainer version 1.3.4 (kit test fake)")
        return 0
    if argv[:1] != ["exec"]:
        print(f"fake apptainer: unsupported {argv[:1]}", file=sys.stderr)
        return 255
    binds: list[tuple[str, str]] = []
    env: dict[str, str] = {}
    flags: list[str] = []
    pwd = "/"
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        flag = argv[i]
        if flag in VALUE_FLAGS:
            value = argv[i + 1]
            if flag == "--bind":
                src, dst = value.split(":")[:2]
                binds.append((src, dst))
            elif flag == "--env":
                k, _, v = value.partition("=")
                env[k] = v
            elif flag == "--pwd":
                pwd = value
            flags.append(f"{flag}={value}")
            i += 2
        else:
            flags.append(flag)
            i += 1
    sif, command = argv[i], argv[i + 1:]
    log = os.environ.get("FAKE_APPTAINER_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"sif": sif, "flags": flags, "binds": binds, "env": env, "command": command[:3],
                                 "NVIDIA_VISIBLE_DEVICES": os.environ.get("NVIDIA_VISIBLE_DEVICES")}) + "\n")
    if os.environ.get("FAKE_APPTAINER_SIGKILL") == "1":
        os.kill(os.getpid(), signal.SIGKILL)

    def host(path: str) -> str:
        for src, dst in sorted(binds, key=lambda b: -len(b[1])):
            if path == dst or path.startswith(dst + "/"):
                return src + path[len(dst):]
        if path == "/kit":  # PYTHONPATH: the parent of the bound kit package
            kit = next((src for src, dst in binds if dst == "/kit/kit"), None)
            return os.path.dirname(kit) if kit else path
        return path

    command = [host(a) for a in command]
    if command and command[0] == "python3":
        command[0] = os.environ.get("FAKE_APPTAINER_PYTHON", sys.executable)
    run_env = {k: host(v) if k == "PYTHONPATH" else v for k, v in env.items()}
    run_env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    os.chdir(host(pwd))
    os.execvpe(command[0], command, run_env)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
