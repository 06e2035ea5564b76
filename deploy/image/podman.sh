#!/usr/bin/env bash
# podman as it runs on hosts like this repository's build machine: runc with cgroupfs
# (crun refuses the host's cgroups, and there is no systemd), containers.conf beside
# this script (no default rlimits), and the vfs storage driver, which needs nothing of
# the kernel (overlay storage, faster, is a PODMAN_FLAGS away: docs/deploy.md, "Container
# image").  Every podman command of build.sh and smoke_test.py goes through it.
# PODMAN_FLAGS replaces the global flags (an empty string: podman's defaults).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
default_flags="--storage-driver vfs --runtime runc --cgroup-manager cgroupfs"
read -r -a flags <<<"${PODMAN_FLAGS-$default_flags}"
exec podman "${flags[@]}" "$@"
