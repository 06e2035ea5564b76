#!/usr/bin/env bash
# podman as it runs on hosts like this repository's build machine: the vfs storage
# driver (no overlay mounts inside the sandbox), runc with cgroupfs (crun refuses the
# host's cgroups, and there is no systemd) and containers.conf beside this script (no
# default rlimits).  Every podman command of build.sh and smoke_test.py goes through it.
# PODMAN_FLAGS replaces the global flags on hosts where podman's defaults work (set it
# to an empty string there).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
default_flags="--storage-driver vfs --runtime runc --cgroup-manager cgroupfs"
read -r -a flags <<<"${PODMAN_FLAGS-$default_flags}"
exec podman "${flags[@]}" "$@"
