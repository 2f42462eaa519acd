#!/usr/bin/env bash
# Smoke test of the emulators: start each one, drive it with the Debian fence
# agent (or client) that targets it, check exit codes, start a second instance
# of each on other ports in another run dir, stop everything. About 30 s.
# Runs install.sh first (a no-op when all is installed). Uses fresh temporary
# run dirs, so it does not disturb emulators running in /tmp/qfence-emu.
# Last line: "N passed, M failed"; exit status 0 only if nothing failed.
#
# Ports used: 8000 8100 (Redfish), 8006 8016 8106 8116 (PVE), UDP 6230 6231
# (IPMI) + 9002 9003, UDP 7410 7510 (kdump), 5433 5434 5533 5534 (PostgreSQL).
H=$(cd "$(dirname "$0")" && pwd)
"$H/install.sh" || { echo "0 passed, 1 failed"; exit 1; }
RUN1=$(mktemp -d /tmp/qfence-smoke1.XXXXXX)
RUN2=$(mktemp -d /tmp/qfence-smoke2.XXXXXX)
export QFENCE_EMU_RUN=$RUN1
source "$H/_lib.sh"
set +e
T0=$(now_ms)

pass=0 fail=0
check() {  # check NAME EXPECTED_RC CMD...
    local name=$1 want=$2; shift 2
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ "$rc" = "$want" ]; then
        pass=$((pass + 1))
        echo "ok   $name (rc=$rc) $(echo "$out" | grep -v -e Deprecation -e 'from pipes' -e '^$' | tail -1 | cut -c1-100)"
    else
        fail=$((fail + 1)); echo "FAIL $name (rc=$rc, want $want)"; echo "$out" | tail -5 | sed 's/^/     /'
    fi
}
in2() { env QFENCE_EMU_RUN="$RUN2" "$@"; }   # run in the second instance's run dir
cleanup() {
    "$H/stop.sh" >/dev/null 2>&1
    in2 "$H/stop.sh" >/dev/null 2>&1
    rm -rf "$RUN1" "$RUN2"
}
trap cleanup EXIT
started() {  # started NAME CMD... : start an emulator, count a failure if it does not come up
    local name=$1 t; shift
    t=$(now_ms)
    if "$@" >/dev/null; then pass=$((pass + 1)); echo "ok   start $name ($(( $(now_ms) - t )) ms)"
    else fail=$((fail + 1)); echo "FAIL start $name"; return 1; fi
}

# --- Redfish (sushy-tools) -------------------------------------------------
N1=/redfish/v1/Systems/11111111-1111-4111-8111-111111111111
if started redfish env REDFISH_POWER_DELAY=0-1 "$H/start-redfish-sushy.sh"; then
    R=(fence_redfish --ip=127.0.0.1 --ipport=8000 -l admin -p password --ssl-insecure --systems-uri=$N1)
    check "redfish status on"  0 "${R[@]}" -o status
    check "redfish off"        0 "${R[@]}" -o off
    check "redfish status=2"   2 "${R[@]}" -o status
    check "redfish on"         0 "${R[@]}" -o on
    check "redfish monitor"    0 "${R[@]}" -o monitor
    check "redfish bad pw"     1 fence_redfish --ip=127.0.0.1 --ipport=8000 -l admin -p wrong --ssl-insecure \
          --systems-uri=$N1 -o status
    check "redfish TLS verified with ca.pem" 0 curl -sf --cacert "$RUN1/sushy/ca.pem" -u admin:password \
          https://127.0.0.1:8000$N1
    check "redfish no auth -> 401" 0 bash -c "curl -s -o /dev/null -w '%{http_code}' --cacert $RUN1/sushy/ca.pem \
          https://127.0.0.1:8000/redfish/v1/Systems | grep -qx 401"
    check "redfish second start is a no-op" 0 "$H/start-redfish-sushy.sh"
    check "redfish same run dir, other port -> refused" 3 env REDFISH_PORT=8100 "$H/start-redfish-sushy.sh"
    if started "redfish #2 (:8100)" in2 env REDFISH_PORT=8100 REDFISH_POWER_DELAY=0 "$H/start-redfish-sushy.sh"; then
        R2=(fence_redfish --ip=127.0.0.1 --ipport=8100 -l admin -p password --ssl-insecure --systems-uri=$N1)
        check "redfish #2 off"               0 "${R2[@]}" -o off
        check "redfish #2 status=2"          2 "${R2[@]}" -o status
        check "redfish #1 unaffected (on)"   0 "${R[@]}" -o status
    fi
fi

# --- Proxmox VE (fakepve) --------------------------------------------------
TOKEN='Authorization: PVEAPIToken=root@pam!qfence=11111111-2222-3333-4444-555555555555'
if started pve "$H/start-pve-fakepve.sh"; then
    P=(fence_pve --ip=127.0.0.1 -l root@pam -p secret --ssl-insecure)
    check "pve status on"      0 "${P[@]}" -n 100 --pve-node=pve1 -o status
    check "pve off"            0 "${P[@]}" -n 100 --pve-node=pve1 -o off
    check "pve status=2"       2 "${P[@]}" -n 100 --pve-node=pve1 -o status
    check "pve on (auto node)" 0 "${P[@]}" -n 100 --pve-node-auto -o on
    check "pve list (known fence-agents 4.12 bug)" 1 "${P[@]}" --pve-node-auto -o list
    curl -s -X POST http://127.0.0.1:8016/node/pve2/offline >/dev/null
    check "pve node offline -> error" 1 "${P[@]}" -n 101 --pve-node=pve2 -o status
    curl -s -X POST http://127.0.0.1:8016/node/pve2/online >/dev/null
    check "pve node back online" 0 "${P[@]}" -n 101 --pve-node=pve2 -o status
    check "pve token auth, TLS verified" 0 curl -sf --cacert "$RUN1/fakepve/ca.pem" -H "$TOKEN" \
          https://127.0.0.1:8006/api2/json/cluster/status
    if started "pve #2 (:8106)" in2 env PVE_PORT=8106 PVE_CTL_PORT=8116 "$H/start-pve-fakepve.sh"; then
        curl -s -X POST http://127.0.0.1:8116/node/pve1/offline >/dev/null
        check "pve #2 node offline -> error" 1 fence_pve --ip=127.0.0.1 --ipport=8106 -l root@pam -p secret \
              --ssl-insecure -n 100 --pve-node=pve1 -o status
        check "pve #1 unaffected"  0 "${P[@]}" -n 100 --pve-node=pve1 -o status
    fi
fi

# --- IPMI (ipmi_sim) -------------------------------------------------------
if started ipmi "$H/start-ipmi-sim.sh" 1; then
    I=(fence_ipmilan --ip=127.0.0.1 --ipport=6230 -l admin -p password --lanplus --cipher=3)
    check "ipmi status on"     0 "${I[@]}" -o status
    check "ipmi off"           0 "${I[@]}" -o off
    check "ipmi status=2"      2 "${I[@]}" -o status
    check "ipmi on"            0 "${I[@]}" -o on
    T=(ipmitool -I lanplus -C 3 -H 127.0.0.1 -p 6230 -U admin -P password)
    check "ipmi watchdog set"  0 "${T[@]}" mc watchdog set timeout=2 action=poweroff use=sms
    check "ipmi watchdog arm"  0 "${T[@]}" mc watchdog reset
    sleep 3
    check "ipmi watchdog expired -> off" 2 "${I[@]}" -o status
    check "ipmi host saw POWEROFF" 0 grep -q 'bmc-command POWEROFF' "$RUN1/ipmi-sim-1/host.log"
    if started "ipmi #2 (:6231)" "$H/start-ipmi-sim.sh" 2; then
        check "ipmi #2 status on" 0 fence_ipmilan --ip=127.0.0.1 --ipport=6231 -l admin -p password --lanplus \
              --cipher=3 -o status
    fi
fi

# --- fence_kdump -----------------------------------------------------------
SEND=/usr/libexec/fence-agents/fence_kdump_send
if started kdump "$H/start-kdump-listener.sh"; then
    check "kdump send"         0 "$SEND" -c 1 127.0.0.1
    sleep 0.3
    check "kdump captured 402a301b01000000" 0 grep -q '"hex": "402a301b01000000"' "$RUN1/kdump-listener.log"
    if started "kdump #2 (:7510)" in2 env KDUMP_PORT=7510 "$H/start-kdump-listener.sh"; then
        "$SEND" -c 1 -p 7510 127.0.0.1 >/dev/null 2>&1; sleep 0.3
        check "kdump #2 captured on :7510" 0 grep -q '"valid": true' "$RUN2/kdump-listener.log"
    fi
    "$H/stop.sh" kdump-listener >/dev/null 2>&1
    ( sleep 1; "$SEND" -c 1 127.0.0.1 >/dev/null 2>&1 ) &
    check "fence_kdump off (message within 5 s)" 0 fence_kdump -n 127.0.0.1 -t 5 -o off
    wait
fi

# --- fence_dummy -----------------------------------------------------------
st=$(mktemp); printf off > "$st"
check "fence_dummy status=2"   2 fence_dummy --status-file="$st" -o status
check "fence_dummy on (stdin)" 0 bash -c "printf 'action=on\nstatus_file=$st\n' | fence_dummy"
check "fence_dummy status on"  0 fence_dummy --status-file="$st" -o status
rm -f "$st"

# --- PostgreSQL primary + replica ------------------------------------------
# RUN1 and RUN2 are 0700 temp dirs, as Rust's tempfile makes them
if started pg-pair "$H/start-pg-pair.sh"; then
    check "pg replica streaming" 0 bash -c "PGPASSWORD=postgres psql -h 127.0.0.1 -p 5433 -U postgres app -Atc \
          'SELECT state FROM pg_stat_replication' | grep -qx streaming"
    check "pg promote" 0 bash -c "PGPASSWORD=postgres psql -h 127.0.0.1 -p 5434 -U postgres app -Atc \
          'SELECT pg_promote(true, 60)' | grep -qx t"
    if started "pg-pair #2 (:5533/:5534)" in2 env PG_PRIMARY_PORT=5533 PG_REPLICA_PORT=5534 "$H/start-pg-pair.sh"; then
        check "pg #2 replica in recovery" 0 bash -c "PGPASSWORD=postgres psql -h 127.0.0.1 -p 5534 -U postgres app \
              -Atc 'SELECT pg_is_in_recovery()' | grep -qx t"
    fi
fi

# --- stop ------------------------------------------------------------------
"$H/stop.sh" >/dev/null 2>&1
in2 "$H/stop.sh" >/dev/null 2>&1
check "stop: no pid files left" 0 bash -c "! ls $RUN1/*.pid $RUN2/*.pid 2>/dev/null | grep -q ."
check "stop: ports closed" 1 bash -c "for p in 8000 8100 8006 8016 8106 8116 5433 5434 5533 5534; do
          (exec 3<>/dev/tcp/127.0.0.1/\$p) 2>/dev/null && exit 0; done; exit 1"
check "stop: no emulator process left" 1 pgrep -f "$RUN1|$RUN2"

ms=$(( $(now_ms) - T0 ))
echo "smoke: $((ms / 1000)).$((ms % 1000 / 100)) s"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
