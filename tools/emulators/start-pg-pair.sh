#!/usr/bin/env bash
# PostgreSQL primary + streaming replica on loopback (Debian postgresql-15),
# run as the non-root user `postgres`, in throw-away directories.
#
#   PG_PRIMARY_PORT (5433)  PG_REPLICA_PORT (5434)   (5432 is left to Debian's own cluster)
#   PG_SUPERPASS (postgres)  PG_REPLPASS (replpass)  PG_SYNC (0; 1 = synchronous replica)
#   PG_FRESH (1 = stop any old pair and rebuild; 0 = keep data dirs, start if stopped)
#   PG_FSYNC (0 = initdb/pg_basebackup --no-sync and fsync=off: throw-away test
#             clusters, several times faster on a busy disk; 1 = durable)
#   PG_SSL (0; 1 = both servers also accept TLS, with a leaf for 127.0.0.1 signed by a
#           throw-away CA: $QFENCE_EMU_RUN/pg/tls/ca.pem, printed as PG_CACERT)
#
# Layout: $QFENCE_EMU_RUN/pg/{primary,replica} (data), *.log, sockets in $QFENCE_EMU_RUN/pg.
# Replica made with pg_basebackup -R -C -S replica1 (physical slot "replica1").
# Name: pg-pair. Second pair: other PG_PRIMARY_PORT / PG_REPLICA_PORT and
# another QFENCE_EMU_RUN (the user postgres must be able to enter it: the
# script adds o+x to QFENCE_EMU_RUN itself, its parents must allow it already;
# the socket path $QFENCE_EMU_RUN/pg/.s.PGSQL.PORT must stay under 108 bytes).
source "$(dirname "$0")/_lib.sh"

NAME=pg-pair
P1=${PG_PRIMARY_PORT:-5433}
P2=${PG_REPLICA_PORT:-5434}
SUPERPASS=${PG_SUPERPASS:-postgres}
REPLPASS=${PG_REPLPASS:-replpass}
D=$QFENCE_EMU_RUN/pg
T0=$(now_ms)

apt_install postgresql-15 postgresql-client-15
BIN=/usr/lib/postgresql/15/bin
PG() { runuser -u postgres -- "$@"; }

# the servers run as postgres: it must reach $D (a 0700 temp dir would hide it)
if ! PG test -x "$QFENCE_EMU_RUN"; then
    chmod o+x "$QFENCE_EMU_RUN"
    PG test -x "$QFENCE_EMU_RUN" || { log "user postgres cannot enter $QFENCE_EMU_RUN (check its parents' modes)"; exit 1; }
fi
if [ $(( ${#D} + 17 )) -gt 107 ]; then
    log "socket path $D/.s.PGSQL.$P1 is too long for a Unix socket: use a shorter QFENCE_EMU_RUN"; exit 1
fi

if [ "${PG_FRESH:-1}" != 1 ] && [ -f "$D/primary/postmaster.pid" ] \
        && PG "$BIN/pg_ctl" -D "$D/primary" status >/dev/null 2>&1; then
    log "$NAME primary already running (PG_FRESH=0)"
    cat "$QFENCE_EMU_RUN/$NAME.env" 2>/dev/null || true
    exit 0
fi

if [ "${PG_FRESH:-1}" = 1 ] || [ ! -d "$D/primary" ]; then
    for c in replica primary; do
        [ -f "$D/$c/postmaster.pid" ] && PG "$BIN/pg_ctl" -D "$D/$c" -m immediate -w stop >/dev/null 2>&1 || true
    done
    need_free_ports $NAME tcp "$P1" "$P2"
    rm -rf "$D"
    mkdir -p "$D"
    chown postgres:postgres "$D"
    chmod 700 "$D"
    NOSYNC=(); FSYNC=on
    [ "${PG_FSYNC:-0}" = 1 ] || { NOSYNC=(--no-sync); FSYNC=off; }
    # initdb takes ~1.5 s of CPU: the first pair's pristine data dir is kept in
    # $QFENCE_EMU_HOME/pg15-initdb and copied for the next ones
    TPL=$QFENCE_EMU_HOME/pg15-initdb
    if [ -f "$TPL/.ready" ]; then
        cp -a "$TPL/data" "$D/primary"
    else
        PG "$BIN/initdb" -D "$D/primary" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
            -E UTF8 --locale=C.UTF-8 "${NOSYNC[@]}" >/dev/null
        (
            flock 9
            if [ ! -f "$TPL/.ready" ]; then
                rm -rf "$TPL"; mkdir -p "$TPL"; chmod 700 "$TPL"
                cp -a "$D/primary" "$TPL/data" && touch "$TPL/.ready"
            fi
        ) 9>"$QFENCE_EMU_HOME/.pg15-initdb.lock"
    fi
    cat >> "$D/primary/postgresql.conf" <<EOF
# --- qfence harness ---
listen_addresses = '127.0.0.1'
port = $P1
unix_socket_directories = '$D'
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
hot_standby_feedback = on
wal_keep_size = '128MB'
wal_log_hints = on          # lets pg_rewind re-attach an old primary
fsync = $FSYNC                # PG_FSYNC
logging_collector = off
EOF
    if [ "${PG_SSL:-0}" = 1 ]; then
        tls_cert "$D/tls"
        # PostgreSQL refuses a key file that is not its own (or root's with mode 0640).
        chown postgres "$D/tls/key.pem" && chmod 600 "$D/tls/key.pem"
        # The replica is a copy of the primary's data dir: it inherits these lines.
        printf '%s\n' "ssl = on" "ssl_cert_file = '$D/tls/cert.pem'" \
            "ssl_key_file = '$D/tls/key.pem'" >> "$D/primary/postgresql.conf"
    fi
    echo "host replication replicator 127.0.0.1/32 scram-sha-256" >> "$D/primary/pg_hba.conf"
    PG "$BIN/pg_ctl" -D "$D/primary" -l "$D/primary.log" -w start >/dev/null
    PG "$BIN/psql" -h "$D" -p "$P1" -U postgres -qAt -c \
        "ALTER ROLE postgres PASSWORD '$SUPERPASS';" \
        -c "CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '$REPLPASS';" \
        -c "CREATE DATABASE app;" >/dev/null
    PG "$BIN/psql" -h "$D" -p "$P1" -U postgres -d app -qAt -c \
        "CREATE TABLE heartbeat(id int primary key, ts timestamptz); INSERT INTO heartbeat VALUES (1, now());" >/dev/null

    # replica: base backup over TCP as the replication user, -R writes
    # standby.signal + primary_conninfo, -C -S creates the physical slot
    PG env PGPASSWORD="$REPLPASS" "$BIN/pg_basebackup" -h 127.0.0.1 -p "$P1" -U replicator \
        -D "$D/replica" -R -C -S replica1 -X stream -c fast "${NOSYNC[@]}" >/dev/null
    cat >> "$D/replica/postgresql.conf" <<EOF
port = $P2
cluster_name = 'replica1'
EOF
    # give the replica its own application_name (used by synchronous_standby_names)
    sed -i "s/^primary_conninfo = '/primary_conninfo = 'application_name=replica1 /" "$D/replica/postgresql.auto.conf"
    if [ "${PG_SYNC:-0}" = 1 ]; then
        PG "$BIN/psql" -h "$D" -p "$P1" -U postgres -qAt \
            -c "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (replica1)'" -c "SELECT pg_reload_conf()" >/dev/null
    fi
    PG "$BIN/pg_ctl" -D "$D/replica" -l "$D/replica.log" -w start >/dev/null
else
    PG "$BIN/pg_ctl" -D "$D/primary" -l "$D/primary.log" -w start >/dev/null
    [ -d "$D/replica" ] && PG "$BIN/pg_ctl" -D "$D/replica" -l "$D/replica.log" -w start >/dev/null
fi

head -1 "$D/primary/postmaster.pid" > "$QFENCE_EMU_RUN/$NAME.pid"
echo "$P1" > "$QFENCE_EMU_RUN/$NAME.port"

# wait until the replica streams
for _ in $(seq 1 100); do
    st=$(PG "$BIN/psql" -h "$D" -p "$P1" -U postgres -qAt -c \
        "SELECT state FROM pg_stat_replication WHERE application_name='replica1'" 2>/dev/null || true)
    [ "$st" = streaming ] && break
    sleep 0.1
done
[ "$st" = streaming ] || { log "replica not streaming"; tail -20 "$D/replica.log" >&2; exit 1; }
log "pair ready in $(( $(now_ms) - T0 )) ms; psql as postgres: psql -h $D -p $P1 -U postgres app (trust)"

emit $NAME "PG_PRIMARY=postgresql://postgres:$SUPERPASS@127.0.0.1:$P1/app" \
    "PG_REPLICA=postgresql://postgres:$SUPERPASS@127.0.0.1:$P2/app" \
    "PG_PRIMARY_PORT=$P1" "PG_REPLICA_PORT=$P2" "PG_SOCKETS=$D" \
    "PG_REPLUSER=replicator" "PG_REPLPASS=$REPLPASS" "PG_SLOT=replica1" \
    "PG_PRIMARY_DATA=$D/primary" "PG_REPLICA_DATA=$D/replica" "PG_BIN=$BIN" \
    "PIDFILE=$QFENCE_EMU_RUN/$NAME.pid" "LOG=$D/primary.log" \
    $([ "${PG_SSL:-0}" = 1 ] && echo "PG_CACERT=$D/tls/ca.pem")
