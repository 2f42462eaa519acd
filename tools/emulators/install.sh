#!/usr/bin/env bash
# Install everything the qfence test emulators need, on Debian 12 as root.
# Idempotent: when all is in place it only checks (well under a second).
#
#   Debian: fence-agents openipmi ipmitool postgresql-15 openssl python3-venv curl
#           busybox-static (the Docker tests build their image FROM scratch with it)
#           chromium chromium-driver (the web console's browser tests)
#           (apt-get update once, only if something is missing)
#           rabbitmq-server (the real Nova's message bus; its own broker is kept from starting)
#   PyPI:   venvs $QFENCE_EMU_HOME/sushy-<hash>, fakepve-<hash> and nova-<hash> (Nova 34,
#           Keystone 30, Placement, Glance, openstacksdk), pinned in requirements/*.txt
#
#   QFENCE_EMU_HOME (/opt/qfence-emu)  QFENCE_EMU_PYTHON (/usr/bin/python3)
# Called by .ci/run before the tests; see README.md.
source "$(dirname "$0")/_lib.sh"

T0=$(now_ms)
step() { echo "install: $*"; }

DEBS=(fence-agents openipmi ipmitool postgresql-15 postgresql-client-15 openssl
      python3 python3-venv curl util-linux busybox-static
      chromium chromium-driver rabbitmq-server)
missing=$(apt_missing "${DEBS[@]}")
if [ -n "$missing" ]; then
    step "apt: installing $(echo $missing)"
    # Debian's rabbitmq-server starts a broker on 0.0.0.0:5672 when installed unless
    # policy-rc.d forbids it; the Nova tests run private brokers on loopback instead.
    made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    t=$(now_ms); apt_install "${DEBS[@]}"; step "apt: done in $(( ($(now_ms) - t) / 1000 )) s"
    [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
else
    step "apt: all present"
fi

for v in sushy fakepve nova; do
    if venv_ready $v; then
        step "venv $v: present ($(venv_dir $v))"
    else
        t=$(now_ms); venv_install $v; step "venv $v: installed in $(( ($(now_ms) - t) / 1000 )) s"
    fi
done

# --- Operators' surfaces (issue 18) -------------------------------------------------------
# promtool (from Debian's prometheus package, unpacked: nothing is installed as a service)
# for the metrics and alerting-rule tests; debootstrap and a cached Debian 12 root for the
# package test (tools/emulators/debian-root.sh); the FortiOS client venv (fortiosapi) that
# drives the FortiOS simulator.
PROMTOOL=$QFENCE_EMU_HOME/prometheus-deb/usr/bin/promtool
if [ -x "$PROMTOOL" ]; then
    step "promtool: present ($PROMTOOL)"
else
    t=$(now_ms)
    as_root
    dl=$(mktemp -d)
    (cd "$dl" && { apt-get -o DPkg::Lock::Timeout=300 download -qq prometheus 2>/dev/null ||
        { apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null &&
          apt-get -o DPkg::Lock::Timeout=300 download -qq prometheus; }; })
    rm -rf "$QFENCE_EMU_HOME/prometheus-deb"
    dpkg-deb -x "$dl"/prometheus_*.deb "$QFENCE_EMU_HOME/prometheus-deb"
    rm -rf "$dl"
    step "promtool: unpacked in $(( ($(now_ms) - t) / 1000 )) s"
fi
t=$(now_ms)
debroot=$(bash "$EMU_DIR/debian-root.sh")
step "Debian root: $debroot ($(( ($(now_ms) - t) / 1000 )) s)"
if venv_ready fortios; then
    step "venv fortios: present ($(venv_dir fortios))"
else
    t=$(now_ms); venv_install fortios; step "venv fortios: installed in $(( ($(now_ms) - t) / 1000 )) s"
fi
"$PROMTOOL" --version >/dev/null 2>&1 || { step "FAILED: $PROMTOOL --version"; exit 1; }
"$(venv_dir fortios)/bin/python" -c 'import fortiosapi' 2>/dev/null ||
    { step "FAILED: import fortiosapi"; exit 1; }
# --- end of issue 18's block --------------------------------------------------------------

# quick sanity: each tool the emulators run can be found and imports work
check() { "$@" >/dev/null 2>&1 || { step "FAILED: $*"; exit 1; }; }
check test -x /usr/bin/ipmi_sim
check command -v ipmitool
check command -v fence_redfish
check command -v chromium
check command -v chromedriver
check command -v fence_pve
check command -v fence_ipmilan
check test -x /usr/libexec/fence-agents/fence_kdump_send
check test -x /usr/lib/postgresql/15/bin/initdb
check "$(venv_dir sushy)/bin/python" -c 'import sushy_tools.emulator.main, bcrypt'
check "$(venv_dir fakepve)/bin/python" -c 'import fakepve, aiohttp'
check test -x /usr/lib/rabbitmq/bin/rabbitmq-server
check "$(venv_dir nova)/bin/python" -c 'import nova, keystone, placement, glance, openstack, psycopg2'
ms=$(( $(now_ms) - T0 ))
step "ready in $((ms / 1000)).$((ms % 1000 / 100)) s (venvs in $QFENCE_EMU_HOME)"
