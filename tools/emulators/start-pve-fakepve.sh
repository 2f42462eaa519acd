#!/usr/bin/env bash
# Fake Proxmox VE API: `fakepve` 0.5.0 (PyPI, AGPL-3.0, a test tool), HTTPS on
# 127.0.0.1, run through our fakepve_harness.py which adds API tokens, extra
# nodes and a plain-HTTP control port for fault injection.
#
#   PVE_PORT (8006)  PVE_CTL_PORT (8016)  PVE_USER (root@pam)  PVE_PASS (secret)
#   PVE_TOKEN_ID (root@pam!qfence)  PVE_TOKEN_SECRET (11111111-2222-3333-4444-555555555555)
#   PVE_TIME_SCALE (0.1 real s per PVE s; 0 = tasks finish instantly)
#   PVE_SCENARIO (path to a scenario JSON; default: nodes pve1-pve3, VMs 100-103)
#
# Name: pve-fakepve. Second instance: other PVE_PORT, PVE_CTL_PORT and QFENCE_EMU_RUN.
source "$(dirname "$0")/_lib.sh"

NAME=pve-fakepve
PORT=${PVE_PORT:-8006}
CTL=${PVE_CTL_PORT:-8016}
USER_=${PVE_USER:-root@pam}
PASS_=${PVE_PASS:-secret}
TOKID=${PVE_TOKEN_ID:-root@pam!qfence}
TOKSEC=${PVE_TOKEN_SECRET:-11111111-2222-3333-4444-555555555555}
DIR=$QFENCE_EMU_RUN/fakepve

if already_running $NAME "$PORT"; then exit 0; fi

apt_install openssl python3-venv
need_free_ports $NAME tcp "$PORT" "$CTL"
venv_install fakepve
tls_cert "$DIR"

SCEN=${PVE_SCENARIO:-$DIR/scenario.json}
if [ -z "${PVE_SCENARIO:-}" ]; then
cat > "$SCEN" <<EOF
{"cluster_name": "qfence",
 "nodes": {"pve1": true, "pve2": true, "pve3": true},
 "tokens": {"$TOKID": "$TOKSEC"},
 "guests": [
  {"vmid": 100, "name": "db1", "node": "pve1", "status": "running",
   "config": {"memory": 2048, "cores": 2, "scsi0": "local-lvm:vm-100-disk-0,size=8G",
              "net0": "virtio=52:54:00:00:01:00,bridge=vmbr0"}},
  {"vmid": 101, "name": "db2", "node": "pve2", "status": "running", "config": {"memory": 2048}},
  {"vmid": 102, "name": "app1", "node": "pve2", "status": "running", "ha_state": "started", "config": {}},
  {"vmid": 103, "name": "spare", "node": "pve3", "status": "stopped", "config": {}}
 ]}
EOF
fi

start_bg $NAME "$PORT" "$(venv_dir fakepve)/bin/python" "$EMU_DIR/fakepve_harness.py" \
    --scenario "$SCEN" --host 127.0.0.1 --port "$PORT" --ctl-port "$CTL" \
    --user "$USER_" --password "$PASS_" --cert "$DIR/cert.pem" --key "$DIR/key.pem" \
    --time-scale "${PVE_TIME_SCALE:-0.1}"
{ wait_tcp "$PORT" 30 $NAME && wait_tcp "$CTL" 10 $NAME; } || fail_with_log $NAME

emit $NAME "PVE_URL=https://127.0.0.1:$PORT/api2/json" "PVE_PORT=$PORT" \
    "PVE_USER=$USER_" "PVE_PASS=$PASS_" "PVE_TOKEN=PVEAPIToken=$TOKID=$TOKSEC" \
    "PVE_CACERT=$DIR/ca.pem" "PVE_CONTROL=http://127.0.0.1:$CTL" \
    "PIDFILE=$QFENCE_EMU_RUN/$NAME.pid" "LOG=$QFENCE_EMU_RUN/$NAME.log"
