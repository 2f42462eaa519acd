#!/usr/bin/env bash
# A minimal Debian 12 root for the package test (`crates/qfence/tests/package.rs`): installs
# the .deb into a copy of it and runs `systemd-analyze verify` there. Made once per machine
# with debootstrap (about 2 minutes) and kept, like the emulator venvs, in
# $QFENCE_EMU_HOME/debroot-<hash>, named after what it holds; prints its path.
#
#   tools/emulators/debian-root.sh           make it if missing (as root), print its path
#   tools/emulators/debian-root.sh --check   print its path if it is ready, else exit 3
#
# The mirror is the one this machine's apt uses (QFENCE_DEBIAN_MIRROR overrides it).
source "$(dirname "$0")/_lib.sh"

SUITE=bookworm
# systemd for systemd-analyze, adduser for the package's postinst, man-db so that
# systemd-analyze can check the unit's Documentation= man pages.
INCLUDE=systemd,adduser,man-db
KEY=$(printf '%s\n' "$SUITE" minbase "$INCLUDE" | sha256sum | cut -c1-12)
ROOT=$QFENCE_EMU_HOME/debroot-$KEY

ready() { [ -f "$ROOT/.qfence-installed" ] && [ -x "$ROOT/usr/bin/systemd-analyze" ]; }

if [ "${1:-}" = --check ]; then
    ready && { echo "$ROOT"; exit 0; }
    exit 3
fi

mirror() {
    if [ -n "${QFENCE_DEBIAN_MIRROR:-}" ]; then echo "$QFENCE_DEBIAN_MIRROR"; return; fi
    # deb822 sources (Debian 12's default), then the one-line format.
    { grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
      grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
    } | grep -v security | head -n 1
}

if ! ready; then
    as_root
    apt_install debootstrap
    (
        flock 9
        ready && exit 0
        rm -rf "$ROOT"
        log "debootstrap $SUITE into $ROOT (minbase + $INCLUDE)"
        t=$(now_ms)
        # shellcheck disable=SC2046
        debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$ROOT" $(mirror) \
            > "$ROOT.log" 2>&1 || { tail -n 20 "$ROOT.log" >&2; rm -rf "$ROOT"; exit 1; }
        # Nothing in the root ever runs a service or reaches the network.
        rm -f "$ROOT/etc/resolv.conf"
        date -u +%FT%TZ > "$ROOT/.qfence-installed"
        log "debootstrap done in $(( ($(now_ms) - t) / 1000 )) s"
    ) 9>"$ROOT.lock"
fi
echo "$ROOT"
