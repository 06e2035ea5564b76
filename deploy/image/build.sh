#!/usr/bin/env bash
# Builds the sidecar's image with podman: `make image`.
#
# Where base images can be pulled, IMAGE_BASE=docker.io/library/python:3.11-slim builds
# on that.  By default the base is made here from Debian's packages (mmdebstrap:
# bookworm with its python3 3.11 and venv), imported with `podman import` and kept as
# BASE_IMAGE, so that a host that reaches only package registries builds the same
# Containerfile.  REBUILD_BASE=1 makes the base again.
#
# Prints the image's name and size last.  REBUILD=1 builds even when the image was
# built from the same inputs (see inputs_digest).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
podman=("$here/podman.sh")

IMAGE="${IMAGE:-localhost/toolchain-sidecar:latest}"
BASE_IMAGE="${BASE_IMAGE:-localhost/sidecar-base:bookworm}"
SUITE="${SUITE:-bookworm}"
# a mirror URI, or a sources file, for mmdebstrap; unset: mmdebstrap's default
# mirror, with the suite's updates and security archives
DEBIAN_MIRROR="${DEBIAN_MIRROR:-}"
OUT="$root/build/image"

say() { printf '==> %s\n' "$*" >&2; }

need_tools() {
    local missing=()
    command -v podman >/dev/null || missing+=(podman)
    command -v runc >/dev/null || missing+=(runc)
    if [[ -z "${IMAGE_BASE:-}" ]]; then
        command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
    fi
    ((${#missing[@]} == 0)) && return
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        say "missing: ${missing[*]}; install them (Debian: apt-get install ${missing[*]})"
        exit 1
    fi
    say "installing ${missing[*]} from Debian's archive"
    # --no-install-recommends: podman's recommends (crun, fuse-overlayfs, slirp4netns)
    # are what does not work on such hosts
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" ||
        { apt-get update && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends "${missing[@]}"; }
}

make_base() {
    if [[ "${REBUILD_BASE:-0}" != 1 ]] && "${podman[@]}" image exists "$BASE_IMAGE"; then
        say "base image $BASE_IMAGE is there (REBUILD_BASE=1 makes it again)"
        return
    fi
    mkdir -p "$OUT"
    local tarball="$OUT/base-$SUITE.tar"
    say "making the base from Debian $SUITE's packages with mmdebstrap (a minute or two)"
    local mirror=()
    [[ -n "$DEBIAN_MIRROR" ]] && mirror=("$DEBIAN_MIRROR")
    # minbase (apt, as in the usual slim images) plus what the Containerfile runs:
    # python3 and its venv module (pip comes from ensurepip), CA certificates for pip,
    # netbase (/etc/protocols, /etc/services).  Documentation, manual pages and
    # translations are left out as slim images do; licences are kept.
    mmdebstrap --variant=minbase \
        --include=python3,python3-venv,ca-certificates,netbase \
        --aptopt='APT::Install-Recommends "false"' \
        --aptopt='Acquire::Languages "none"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$SUITE" "$tarball" "${mirror[@]}"
    # an imported tarball has no configuration: give it what `FROM` users expect
    "${podman[@]}" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        "$tarball" "$BASE_IMAGE" >/dev/null
    say "imported $tarball as $BASE_IMAGE"
}

need_tools
base="${IMAGE_BASE:-}"
if [[ -z "$base" ]]; then
    make_base
    base="$BASE_IMAGE"
elif ! "${podman[@]}" image exists "$base"; then
    # pulled now rather than by the build, so that the inputs' digest names its id
    "${podman[@]}" pull "$base"
fi

# The digest of what the build reads: the files the ignore file lets into the context,
# the Containerfile and the base image.  The image carries it as a label, and a build
# whose inputs are the image's is skipped: with the vfs driver even a build that takes
# every step from podman's cache copies the whole image (minutes).
inputs_digest() {
    local includes
    mapfile -t includes < <(sed -n 's/^!//p' "$here/Containerfile.dockerignore")
    {
        cd "$root"
        find "${includes[@]}" deploy/image/Containerfile -type f \
            ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
        "${podman[@]}" image inspect --format '{{.Id}}' "$base"
    } | sha256sum | cut -d' ' -f1
}
digest=$(inputs_digest)
label=toolchain-sidecar.build-inputs
built=$("${podman[@]}" image inspect --format "{{index .Labels \"$label\"}}" "$IMAGE" \
    2>/dev/null || true)
if [[ "${REBUILD:-0}" != 1 && "$built" == "$digest" ]]; then
    say "$IMAGE is up to date: built from these inputs (REBUILD=1 builds it again)"
    "${podman[@]}" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$IMAGE"
    exit 0
fi

# the CA bundle the host's pip trusts, for the build's pip (a build secret: in no layer)
ca="${PIP_CERT:-${SSL_CERT_FILE:-}}"
secret=()
if [[ -n "$ca" && -s "$ca" ]]; then
    secret=(--secret "id=pip-ca,src=$ca")
fi

say "building $IMAGE on $base"
# --network host: pip reaches the package index from the build (no other network
# mode works here); --format docker keeps the HEALTHCHECK, which OCI images drop
"${podman[@]}" build \
    --network host \
    --format docker \
    "${secret[@]}" \
    --build-arg "BASE=$base" \
    --build-arg "INPUTS=$digest" \
    --ignorefile "$here/Containerfile.dockerignore" \
    --file "$here/Containerfile" \
    --tag "$IMAGE" \
    "$root"

say "built $IMAGE"
"${podman[@]}" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$IMAGE"
