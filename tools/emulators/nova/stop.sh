#!/usr/bin/env bash
# Stop the real Nova test peer by its pid files in $NOVA_RUN ($QFENCE_EMU_RUN/nova).
#   stop.sh                     stop everything, clients first, databases last
#   stop.sh nova-compute-compute-2 ...   stop only those (names = pid file names)
# State (databases, keys, images) stays in $NOVA_RUN: the next start.sh reuses it;
# NOVA_FRESH=1 start.sh wipes it.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

[ -d "$NOVA_RUN" ] || exit 0

stop_one() {
    local name=$1 pid
    if [ "$name" = postgres ] && is_running postgres; then
        # SIGINT = PostgreSQL "fast" shutdown (SIGTERM would wait for clients).
        pid=$(cat "$NOVA_RUN/postgres.pid")
        kill -INT "$pid" 2>/dev/null || true
    fi
    stop_pid "$name"
}

if [ $# -gt 0 ]; then
    for n in "$@"; do stop_one "$n"; done
    exit 0
fi

# API services and nova daemons first, all at once; then the bus; the database last.
first=()
for f in "$NOVA_RUN"/nova-compute-*.pid; do [ -e "$f" ] && first+=("$(basename "$f" .pid)"); done
first+=(nova-api nova-scheduler nova-conductor glance placement keystone neutron)
for n in "${first[@]}"; do stop_one "$n" & done
wait
for n in rabbitmq epmd postgres; do stop_one "$n"; done
# Anything else with a pid file here (should be nothing).
for f in "$NOVA_RUN"/*.pid; do [ -e "$f" ] && stop_one "$(basename "$f" .pid)"; done
exit 0
