# Shared settings and helpers of the real Nova test peer. Source it; do not run it.
# Every knob is an environment variable; the defaults are below. The project-wide helpers
# (venv_dir, tls_cert, QFENCE_EMU_HOME/QFENCE_EMU_RUN) come from ../_lib.sh.

source "$(dirname "${BASH_SOURCE[0]}")/../_lib.sh"
NOVA_EMU_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NOVA_VENV=${NOVA_VENV:-$(venv_dir nova)}          # the venv (keyed by requirements/nova.txt)
NOVA_RUN=${NOVA_RUN:-$QFENCE_EMU_RUN/nova}        # state, config, logs, pids

NOVA_COMPUTES=${NOVA_COMPUTES:-3}                 # fake compute hosts compute-1..N
NOVA_PG_PORT=${NOVA_PG_PORT:-5440}                # PostgreSQL 15 (all databases)
NOVA_RABBIT_PORT=${NOVA_RABBIT_PORT:-5673}        # RabbitMQ AMQP
NOVA_RABBIT_DIST_PORT=${NOVA_RABBIT_DIST_PORT:-25673}  # Erlang distribution
NOVA_EPMD_PORT=${NOVA_EPMD_PORT:-4371}            # our own epmd
KEYSTONE_PORT=${KEYSTONE_PORT:-5000}              # Keystone v3 (HTTPS)
NOVA_API_PORT=${NOVA_API_PORT:-8774}              # Nova os-compute API (HTTPS)
PLACEMENT_PORT=${PLACEMENT_PORT:-8778}            # Placement API
GLANCE_PORT=${GLANCE_PORT:-9292}                  # Glance v2
NEUTRON_PORT=${NEUTRON_PORT:-9696}                # fake_neutron.py
NOVA_REPORT_INTERVAL=${NOVA_REPORT_INTERVAL:-2}   # [DEFAULT] report_interval, s
NOVA_SERVICE_DOWN_TIME=${NOVA_SERVICE_DOWN_TIME:-10}  # [DEFAULT] service_down_time, s
NOVA_ADMIN_PASSWORD=${NOVA_ADMIN_PASSWORD:-secret}    # Keystone user admin
NOVA_SERVICE_PASSWORD=${NOVA_SERVICE_PASSWORD:-service-secret}  # nova, placement, glance users
NOVA_MEMBER_PASSWORD=${NOVA_MEMBER_PASSWORD:-demo-secret}  # user demo, role member in project demo
NOVA_DEBUG=${NOVA_DEBUG:-false}                   # oslo.log debug for every service

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
DB_URL_BASE="postgresql+psycopg2://openstack:openstack@127.0.0.1:$NOVA_PG_PORT"
ETC=$NOVA_RUN/etc
TLS=$NOVA_RUN/tls                                 # ca.pem, cert.pem, key.pem (Keystone, nova-api)
CA=$TLS/ca.pem

log() { echo "[nova-emu $(date +%H:%M:%S)] $*" >&2; }

# is_running NAME : $NOVA_RUN/NAME.pid names a live process.
is_running() {
    local pidfile=$NOVA_RUN/$1.pid
    [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# start_bg NAME CMD... : CMD in the background in its own session; NAME.log, NAME.pid.
start_bg() {
    local name=$1; shift
    setsid "$@" >"$NOVA_RUN/$name.log" 2>&1 </dev/null &
    echo $! >"$NOVA_RUN/$name.pid"
}

# wait_tcp PORT SECONDS : until 127.0.0.1:PORT accepts a connection.
wait_tcp() {
    local port=$1 end=$((SECONDS + ${2:-30}))
    while [ $SECONDS -lt $end ]; do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# wait_http URL SECONDS [NAME] : until URL answers HTTP below 500; gives up early when the
# process NAME has died. HTTPS URLs are checked against the peer's own CA.
wait_http() {
    local url=$1 end=$((SECONDS + ${2:-60})) name=${3:-} code
    while [ $SECONDS -lt $end ]; do
        code=$(curl -s --cacert "$CA" -o /dev/null -m 3 -w '%{http_code}' "$url" || true)
        if [ -n "$code" ] && [ "$code" != 000 ] && [ "$code" -lt 500 ]; then return 0; fi
        if [ -n "$name" ] && ! is_running "$name"; then return 1; fi
        sleep 0.25
    done
    return 1
}

# fail NAME : show the end of NAME.log and stop.
fail() {
    log "$1 failed to start; end of $NOVA_RUN/$1.log:"
    tail -n 40 "$NOVA_RUN/$1.log" >&2 || true
    exit 1
}

# stop_pid NAME : TERM the process in NAME.pid, KILL after 10 s; remove the pid file.
stop_pid() {
    local name=$1 pidfile=$NOVA_RUN/$1.pid pid i
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            log "$name: pid $pid killed (did not stop within 10 s)"
        else
            log "$name: stopped pid $pid"
        fi
    fi
    rm -f "$pidfile"
}

compute_hosts() { local i; for ((i = 1; i <= NOVA_COMPUTES; i++)); do echo "compute-$i"; done; }
