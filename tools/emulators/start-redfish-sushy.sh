#!/usr/bin/env bash
# Redfish BMC emulator: OpenStack sushy-tools 2.2.0 (PyPI), fake driver (no
# libvirt), HTTPS (TLS 1.2) + HTTP basic auth on 127.0.0.1.
#
#   REDFISH_PORT (8000)  REDFISH_USER (admin)  REDFISH_PASS (password)
#   REDFISH_TLS (1; 0 = plain HTTP, which fence_redfish cannot use)
#   REDFISH_RESET_STATE (0; 1 = forget persisted power states)
#   REDFISH_POWER_DELAY (unset = sushy's 1..11 s; "N" or "A-B" seconds, 0 = next read)
#
# Systems (fake driver): node1 / node2, both powered On at first start.
# Power states persist across restarts in $QFENCE_EMU_RUN/sushy/state.
# Name: redfish-sushy. Second instance: another REDFISH_PORT and QFENCE_EMU_RUN.
source "$(dirname "$0")/_lib.sh"

NAME=redfish-sushy
PORT=${REDFISH_PORT:-8000}
USER_=${REDFISH_USER:-admin}
PASS_=${REDFISH_PASS:-password}
TLS=${REDFISH_TLS:-1}
DIR=$QFENCE_EMU_RUN/sushy

if already_running $NAME "$PORT"; then exit 0; fi

apt_install openssl python3-venv
need_free_ports $NAME tcp "$PORT"
venv_install sushy
PY=$(venv_dir sushy)/bin/python

mkdir -p "$DIR/state"
[ "${REDFISH_RESET_STATE:-0}" = 1 ] && rm -f "$DIR"/state/*
# bcrypt htpasswd (the only digest sushy's basic-auth middleware accepts)
"$PY" - "$USER_" "$PASS_" > "$DIR/htpasswd" <<'EOF'
import sys, bcrypt
print(sys.argv[1] + ':' + bcrypt.hashpw(sys.argv[2].encode(), bcrypt.gensalt(rounds=4)).decode())
EOF

SCHEME=http
TLS_CONF=""
if [ "$TLS" = 1 ]; then
    tls_cert "$DIR"
    SCHEME=https
    TLS_CONF="SUSHY_EMULATOR_SSL_CERT = '$DIR/cert.pem'
SUSHY_EMULATOR_SSL_KEY = '$DIR/key.pem'"
fi

cat > "$DIR/emulator.conf" <<EOF
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = $PORT
SUSHY_EMULATOR_AUTH_FILE = '$DIR/htpasswd'
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_STATE_DIR = '$DIR/state'
SUSHY_EMULATOR_FEATURE_SET = 'full'
$TLS_CONF
SUSHY_EMULATOR_FAKE_SYSTEMS = [
    {'uuid': '11111111-1111-4111-8111-111111111111', 'name': 'node1', 'power_state': 'On',
     'external_notifier': False, 'nics': [{'mac': '52:54:00:00:00:01', 'ip': '127.0.0.11'}]},
    {'uuid': '22222222-2222-4222-8222-222222222222', 'name': 'node2', 'power_state': 'On',
     'external_notifier': False, 'nics': [{'mac': '52:54:00:00:00:02', 'ip': '127.0.0.12'}]},
]
EOF

start_bg $NAME "$PORT" "$PY" "$EMU_DIR/sushy_launcher.py" \
    --config "$DIR/emulator.conf"
wait_tcp "$PORT" 30 $NAME || fail_with_log $NAME

lines=("REDFISH_URL=$SCHEME://127.0.0.1:$PORT/redfish/v1" "REDFISH_PORT=$PORT"
       "REDFISH_USER=$USER_" "REDFISH_PASS=$PASS_")
[ "$TLS" = 1 ] && lines+=("REDFISH_CACERT=$DIR/ca.pem")
lines+=("REDFISH_SYSTEM_NODE1=/redfish/v1/Systems/11111111-1111-4111-8111-111111111111"
        "REDFISH_SYSTEM_NODE2=/redfish/v1/Systems/22222222-2222-4222-8222-222222222222"
        "PIDFILE=$QFENCE_EMU_RUN/$NAME.pid" "LOG=$QFENCE_EMU_RUN/$NAME.log")
emit $NAME "${lines[@]}"
