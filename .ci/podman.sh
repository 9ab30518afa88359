#!/usr/bin/env bash
# A container engine for the container-backend tests: podman serving the Docker API.
# Idempotent; as root. Source it (`source .ci/podman.sh`) to get CONTAINERS_CONF and
# DOCKER_HOST exported; tests/conftest.py also sources it when no engine answers.
# Recipe: ../shared/notes/container-engine.md (crun fails on these machines, runc works;
# no registry: the base image is a debootstrapped Debian imported as localhost/kit-base:bookworm).
set -euo pipefail
KIT_PODMAN_DIR=${KIT_PODMAN_DIR:-/tmp/kit-podman}
KIT_BASE_IMAGE=${KIT_BASE_IMAGE:-localhost/kit-base:bookworm}
missing=()
for tool in podman runc debootstrap curl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if (( ${#missing[@]} )); then
    echo "podman.sh: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        podman runc debootstrap curl ca-certificates >/dev/null
fi
mkdir -p "$KIT_PODMAN_DIR"
cat > "$KIT_PODMAN_DIR/containers.conf" <<'CONF'
[containers]
default_ulimits = []      # setrlimit(RLIMIT_NOFILE/NPROC) is refused on these machines
netns = "host"            # builds and containers share the host network unless a run asks for none
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF
export CONTAINERS_CONF="$KIT_PODMAN_DIR/containers.conf"

sock="$KIT_PODMAN_DIR/podman.sock"
if ! curl -sf --max-time 5 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
    rm -f "$sock"
    # From its own directory: on an OOM kill conmon leaves an empty "oom" file in the service's working
    # directory, which would otherwise be wherever this script was sourced (the checkout).
    pushd "$KIT_PODMAN_DIR" >/dev/null
    nohup podman system service --time=0 "unix://$sock" >"$KIT_PODMAN_DIR/service.log" 2>&1 &
    echo $! > "$KIT_PODMAN_DIR/service.pid"
    popd >/dev/null
    for _ in $(seq 1 50); do
        curl -sf --max-time 2 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && break
        sleep 0.2
    done
    curl -sf --max-time 5 --unix-socket "$sock" http://d/_ping >/dev/null \
        || { echo "podman.sh: the API service did not start, see $KIT_PODMAN_DIR/service.log" >&2; return 1 2>/dev/null || exit 1; }
fi
export DOCKER_HOST="unix://$sock"

# A base image without any registry: a minimal Debian bookworm (python3.11) from the apt mirror.
if ! podman image exists "$KIT_BASE_IMAGE"; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    mirror=${mirror:-$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)}
    mirror=${mirror:-http://deb.debian.org/debian}
    rootfs=$(mktemp -d /tmp/kit-rootfs.XXXXXX)
    echo "podman.sh: debootstrap bookworm from $mirror (about 30 s)"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$KIT_PODMAN_DIR/debootstrap.log" 2>&1 \
        || { echo "podman.sh: debootstrap failed, see $KIT_PODMAN_DIR/debootstrap.log" >&2; return 1 2>/dev/null || exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$KIT_BASE_IMAGE" >"$KIT_PODMAN_DIR/import.log" 2>&1
    rm -rf "$rootfs"
fi
export KIT_BASE_IMAGE
echo "podman.sh: $(podman --version) serving the Docker API on $DOCKER_HOST; base image $KIT_BASE_IMAGE"
