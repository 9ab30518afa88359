#!/usr/bin/env bash
# What the model-zoo studies need beyond the Python packages: torch.compile's Inductor
# backend generates and compiles C++ on a CPU (g++ and the Python headers). Idempotent; as root.
# Sourced by .ci/run. (The quick profile uses the aot_eager backend; the Inductor path is what
# users get with execution = "compiled" on a CPU.)
set -euo pipefail
missing=()
command -v g++ >/dev/null || missing+=(g++)
python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
if (( ${#missing[@]} )); then
    echo "zoo.sh: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
