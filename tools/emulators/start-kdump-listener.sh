#!/usr/bin/env bash
# fence_kdump message capture: our kdump_listener.py on UDP 127.0.0.1:7410,
# one JSON line per datagram in $QFENCE_EMU_RUN/kdump-listener.log (the first
# line, {"listening": "127.0.0.1:PORT"}, says it is bound).
# (Do not run it while Debian's fence_kdump listens on the same port.)
#
#   KDUMP_PORT (7410)
# Name: kdump-listener. Second instance: another KDUMP_PORT and QFENCE_EMU_RUN.
# Send a message:  /usr/libexec/fence-agents/fence_kdump_send -c 1 127.0.0.1
source "$(dirname "$0")/_lib.sh"

NAME=kdump-listener
PORT=${KDUMP_PORT:-7410}
if already_running $NAME "$PORT"; then exit 0; fi

apt_install fence-agents python3
need_free_ports $NAME udp "$PORT"
start_bg $NAME "$PORT" /usr/bin/python3 -u "$EMU_DIR/kdump_listener.py" --host 127.0.0.1 --port "$PORT"
# ready once the listener has logged {"listening": ...} (bound); give up if it died
ok=0
for _ in $(seq 1 100); do
    is_running $NAME || break
    if grep -q '^{"listening"' "$QFENCE_EMU_RUN/$NAME.log" 2>/dev/null; then ok=1; break; fi
    sleep 0.05
done
[ $ok = 1 ] || fail_with_log $NAME

log "send: /usr/libexec/fence-agents/fence_kdump_send -c 1 -p $PORT 127.0.0.1"
emit $NAME "KDUMP_LISTEN=127.0.0.1:$PORT" "KDUMP_PORT=$PORT" \
    "KDUMP_SEND=/usr/libexec/fence-agents/fence_kdump_send" \
    "PIDFILE=$QFENCE_EMU_RUN/$NAME.pid" "LOG=$QFENCE_EMU_RUN/$NAME.log"
