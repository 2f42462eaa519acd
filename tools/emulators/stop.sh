#!/usr/bin/env bash
# Stop emulators started by the start-*.sh scripts in $QFENCE_EMU_RUN, by their
# pid files (state stays; delete the run dir to forget it).
#   stop.sh                 stop every emulator of this run dir
#   stop.sh NAME...         stop those (redfish-sushy, pve-fakepve, ipmi-sim-N,
#                           kdump-listener, pg-pair)
# A process is sent SIGTERM with its whole process group (ipmi_sim's fake host
# included), then SIGKILL after 5 s. pg-pair is stopped with pg_ctl (fast
# shutdown, immediate if that hangs) for both clusters. Never fails.
source "$(dirname "$0")/_lib.sh"
set +e

alive() { kill -0 "$1" 2>/dev/null; }

stop_pid() {
    local name=$1 pidfile=$QFENCE_EMU_RUN/$1.pid pid i
    if [ ! -s "$pidfile" ]; then log "$name: no pid file"; return 0; fi
    pid=$(cat "$pidfile")
    if alive "$pid"; then
        # start_bg used setsid, so pid leads its own process group
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.05; done
        if alive "$pid"; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; fi
        for ((i = 0; i < 40; i++)); do alive "$pid" || break; sleep 0.05; done
        log "$name: stopped pid $pid"
    else
        log "$name: pid $pid not running"
    fi
    # leftovers of the group (e.g. a fake host that outlived ipmi_sim)
    kill -KILL -- "-$pid" 2>/dev/null
    rm -f "$pidfile" "$QFENCE_EMU_RUN/$name.port" "$QFENCE_EMU_RUN/$name.env"
}

stop_pg() {
    local name=$1 d=$QFENCE_EMU_RUN/pg bin=/usr/lib/postgresql/15/bin c
    for c in replica primary; do
        if [ -f "$d/$c/postmaster.pid" ]; then
            if runuser -u postgres -- timeout 20 "$bin/pg_ctl" -D "$d/$c" -m fast -w stop >/dev/null 2>&1 \
                || runuser -u postgres -- "$bin/pg_ctl" -D "$d/$c" -m immediate -w stop >/dev/null 2>&1; then
                log "$name: stopped $c"
            else
                log "$name: $c stop failed"
            fi
        fi
    done
    rm -f "$QFENCE_EMU_RUN/$name.pid" "$QFENCE_EMU_RUN/$name.port" "$QFENCE_EMU_RUN/$name.env"
}

names=("$@")
# The real Nova peer keeps its pid files in nova/ and stops in its own order.
if [ ${#names[@]} -eq 0 ] && [ -d "$QFENCE_EMU_RUN/nova" ]; then
    bash "$EMU_DIR/nova/stop.sh"
fi
if [ ${#names[@]} -eq 0 ]; then
    for f in "$QFENCE_EMU_RUN"/*.pid; do [ -e "$f" ] && names+=("$(basename "$f" .pid)"); done
    # a pair whose pid file is gone but whose servers still run
    [ -f "$QFENCE_EMU_RUN/pg/primary/postmaster.pid" ] || [ -f "$QFENCE_EMU_RUN/pg/replica/postmaster.pid" ] \
        && [[ " ${names[*]} " != *" pg-pair "* ]] && names+=(pg-pair)
fi
for n in "${names[@]}"; do
    case $n in
        pg-pair) stop_pg "$n" ;;
        *) stop_pid "$n" ;;
    esac
done
exit 0
