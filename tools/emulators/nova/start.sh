#!/usr/bin/env bash
# Start a real OpenStack Nova 34 with N fake compute hosts, all on 127.0.0.1:
# PostgreSQL, RabbitMQ, Keystone, Placement, Glance, a fake Neutron, nova-api,
# nova-conductor, nova-scheduler and one nova-compute (fake.FakeDriver) per host.
# Keystone and nova-api serve HTTPS with a certificate of the run dir's own CA
# ($NOVA_RUN/tls/ca.pem), as a real cloud's public endpoints do; the services
# inside the cloud trust that CA.
#
#   start.sh                    start what is not running; print the endpoints (KEY=VALUE)
#   NOVA_COMPUTES=5 start.sh    five fake hosts compute-1..compute-5
#   NOVA_FRESH=1 start.sh       stop everything, wipe $NOVA_RUN, start anew
#   start.sh computes [HOST...] only start again the nova-compute processes that are not
#                               running (a host a test killed), of every host or of those
#                               named; needs a full start first
#
# Knobs (ports, timings, passwords): see _common.sh. Logs and pid files:
# $NOVA_RUN/<name>.log and <name>.pid ($QFENCE_EMU_RUN/nova). Needs
# tools/emulators/install.sh first (the venv, RabbitMQ). Stop with stop.sh.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"


[ -f "$NOVA_VENV/.qfence-installed" ] || { log "no venv at $NOVA_VENV: run tools/emulators/install.sh"; exit 1; }
[ -x "$PG_BIN/postgres" ] || { log "no PostgreSQL binaries: run install.sh"; exit 1; }
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || { log "no RabbitMQ: run install.sh"; exit 1; }

# start_computes [HOST...] : one nova-compute per fake host (every host without arguments),
# through fake_compute.py (stable node UUID)
start_computes() {
    local h
    [ $# -gt 0 ] || set -- $(compute_hosts)
    for h in "$@"; do
        is_running "nova-compute-$h" ||
            start_bg "nova-compute-$h" env QFENCE_FAKE_HOST="$h" \
                QFENCE_FAKE_STATE_PATH="$NOVA_RUN/state/$h" "$NOVA_VENV/bin/python" \
                "$NOVA_EMU_DIR/fake_compute.py" \
                --config-file "$ETC/nova-compute.conf" --config-file "$ETC/$h.conf"
    done
}
if [ "${1:-}" = computes ]; then
    [ -f "$ETC/nova-compute.conf" ] || { log "no configuration in $ETC: start the whole peer first"; exit 1; }
    shift
    for h in "$@"; do
        [ -f "$ETC/$h.conf" ] || { log "no fake host $h (hosts: $(compute_hosts | tr '\n' ' '))"; exit 1; }
    done
    start_computes "$@"
    exit 0
fi

if [ "${NOVA_FRESH:-0}" = 1 ]; then
    "$NOVA_EMU_DIR/stop.sh"
    rm -rf "$NOVA_RUN"
fi
T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
mkdir -p "$NOVA_RUN" "$ETC"
chmod 755 "$NOVA_RUN" "$QFENCE_EMU_RUN"
tls_cert "$TLS"
export NOVA_RUN NOVA_COMPUTES KEYSTONE_PORT NOVA_API_PORT PLACEMENT_PORT GLANCE_PORT NEUTRON_PORT \
    NOVA_ADMIN_PASSWORD NOVA_SERVICE_PASSWORD NOVA_MEMBER_PASSWORD CA
PY=$NOVA_VENV/bin/python
BIN=$NOVA_VENV/bin
# gunicorn: one worker process, a few threads; quick graceful stop.
# Keystone parses sys.argv as its own options, so each app is loaded through a
# two-line wrapper module that empties sys.argv first (written below).
GUNI=("$BIN/gunicorn" --workers 1 --worker-class gthread --threads 4 --timeout 120
      --graceful-timeout 5 --access-logfile - --no-control-socket --pythonpath "$ETC")
GUNI_TLS=(--certfile "$TLS/cert.pem" --keyfile "$TLS/key.pem")
wsgi_wrapper() {  # wsgi_wrapper NAME MODULE : $ETC/qfence_wsgi_NAME.py
    printf 'import sys\nsys.argv[1:] = []\nfrom %s import application  # noqa\n' "$2" \
        >"$ETC/qfence_wsgi_$1.py"
}
wsgi_wrapper keystone keystone.wsgi.api
wsgi_wrapper placement placement.wsgi.api
wsgi_wrapper glance glance.wsgi.api
wsgi_wrapper nova nova.wsgi.osapi_compute

done_step() { [ -f "$NOVA_RUN/.done-$1" ]; }
mark_step() { touch "$NOVA_RUN/.done-$1"; }

# ---------------------------------------------------------------- PostgreSQL
PGDATA=$NOVA_RUN/pg
if [ ! -f "$PGDATA/PG_VERSION" ]; then
    rm -rf "$PGDATA"; install -d -o postgres -g postgres -m 700 "$PGDATA"
    echo postgres >"$NOVA_RUN/.pgpw"; chown postgres "$NOVA_RUN/.pgpw"
    setpriv --reuid postgres --regid postgres --init-groups -- \
        "$PG_BIN/initdb" -D "$PGDATA" -U postgres --auth-local=trust \
        --auth-host=scram-sha-256 --pwfile="$NOVA_RUN/.pgpw" -E UTF8 --locale=C.UTF-8 \
        >"$NOVA_RUN/initdb.log" 2>&1 || { log "initdb failed"; cat "$NOVA_RUN/initdb.log"; exit 1; }
    rm -f "$NOVA_RUN/.pgpw"
fi
if ! is_running postgres; then
    start_bg postgres setpriv --reuid postgres --regid postgres --init-groups -- \
        "$PG_BIN/postgres" -D "$PGDATA" -p "$NOVA_PG_PORT" -k "$PGDATA" \
        -c listen_addresses=127.0.0.1 -c max_connections=300 -c shared_buffers=64MB \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off
    wait_tcp "$NOVA_PG_PORT" 30 || fail postgres
    for ((i = 0; i < 50; i++)); do
        "$PG_BIN/pg_isready" -q -h "$PGDATA" -p "$NOVA_PG_PORT" && break; sleep 0.2
    done
fi
psql_pg() { setpriv --reuid postgres --regid postgres --init-groups -- \
    "$PG_BIN/psql" -h "$PGDATA" -p "$NOVA_PG_PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
if ! done_step databases; then
    psql_pg -c "CREATE ROLE openstack LOGIN PASSWORD 'openstack'" 2>/dev/null || true
    for db in keystone placement glance nova_api nova nova_cell0; do
        psql_pg -c "CREATE DATABASE $db OWNER openstack" 2>/dev/null || true
    done
    mark_step databases
fi
log "postgres up on 127.0.0.1:$NOVA_PG_PORT ($(elapsed) s)"

# ---------------------------------------------------------------- RabbitMQ
RMQ=$NOVA_RUN/rabbitmq
mkdir -p "$RMQ"
cat >"$RMQ/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$NOVA_RABBIT_PORT
log.console = true
log.console.level = warning
log.file = false
EOF
echo '[].' >"$RMQ/enabled_plugins"
: >"$RMQ/rabbitmq-env.conf"
rmq_env=(HOME="$RMQ" RABBITMQ_NODENAME=qfence-nova@localhost
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$NOVA_RABBIT_PORT"
    RABBITMQ_DIST_PORT="$NOVA_RABBIT_DIST_PORT" ERL_EPMD_ADDRESS=127.0.0.1
    ERL_EPMD_PORT="$NOVA_EPMD_PORT" RABBITMQ_MNESIA_BASE="$RMQ/mnesia"
    RABBITMQ_LOG_BASE="$RMQ/log" RABBITMQ_CONFIG_FILE="$RMQ/rabbitmq"
    RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ/enabled_plugins"
    RABBITMQ_CONF_ENV_FILE="$RMQ/rabbitmq-env.conf"
    RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ/advanced.config" RUNNING_UNDER_SYSTEMD=true
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none")
if ! is_running epmd; then
    start_bg epmd epmd -address 127.0.0.1 -port "$NOVA_EPMD_PORT"
    wait_tcp "$NOVA_EPMD_PORT" 10 || fail epmd
fi
if ! is_running rabbitmq; then
    start_bg rabbitmq env "${rmq_env[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server
fi

# ---------------------------------------------------------------- fake Neutron
if ! is_running neutron; then
    start_bg neutron "$PY" -u "$NOVA_EMU_DIR/fake_neutron.py" --port "$NEUTRON_PORT"
fi

# ---------------------------------------------------------------- Keystone
KSD=$NOVA_RUN/keystone
mkdir -p "$KSD"
cat >"$ETC/keystone.conf" <<EOF
[DEFAULT]
debug = $NOVA_DEBUG
[database]
connection = $DB_URL_BASE/keystone
[token]
provider = fernet
expiration = 86400
[fernet_tokens]
key_repository = $KSD/fernet-keys
[fernet_receipts]
key_repository = $KSD/fernet-keys
[credential]
key_repository = $KSD/credential-keys
[identity]
password_hash_rounds = 4
EOF
KM=("$BIN/keystone-manage" --config-file "$ETC/keystone.conf")
if ! done_step keystone-db; then
    "${KM[@]}" db_sync >"$NOVA_RUN/keystone-manage.log" 2>&1
    "${KM[@]}" fernet_setup --keystone-user root --keystone-group root >>"$NOVA_RUN/keystone-manage.log" 2>&1
    "${KM[@]}" credential_setup --keystone-user root --keystone-group root >>"$NOVA_RUN/keystone-manage.log" 2>&1
    "${KM[@]}" bootstrap --bootstrap-password "$NOVA_ADMIN_PASSWORD" \
        --bootstrap-admin-url "https://127.0.0.1:$KEYSTONE_PORT/v3/" \
        --bootstrap-internal-url "https://127.0.0.1:$KEYSTONE_PORT/v3/" \
        --bootstrap-public-url "https://127.0.0.1:$KEYSTONE_PORT/v3/" \
        --bootstrap-region-id RegionOne >>"$NOVA_RUN/keystone-manage.log" 2>&1
    mark_step keystone-db
fi
if ! is_running keystone; then
    start_bg keystone env OS_KEYSTONE_CONFIG_FILES="$ETC/keystone.conf" \
        "${GUNI[@]}" "${GUNI_TLS[@]}" --bind "127.0.0.1:$KEYSTONE_PORT" qfence_wsgi_keystone:application
fi
log "keystone db ready ($(elapsed) s)"

# ---------------------------------------------------------------- config for the others
authtoken() {  # authtoken USER : a [keystone_authtoken]-style block body
    cat <<EOF
www_authenticate_uri = https://127.0.0.1:$KEYSTONE_PORT
auth_url = https://127.0.0.1:$KEYSTONE_PORT
cafile = $CA
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $1
password = $NOVA_SERVICE_PASSWORD
region_name = RegionOne
EOF
}
ksa() {  # ksa USER : keystoneauth options for a service client section
    cat <<EOF
auth_url = https://127.0.0.1:$KEYSTONE_PORT
cafile = $CA
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $1
password = $NOVA_SERVICE_PASSWORD
region_name = RegionOne
valid_interfaces = public
EOF
}

mkdir -p "$NOVA_RUN/placement"
cat >"$ETC/placement.conf" <<EOF
[DEFAULT]
debug = $NOVA_DEBUG
[api]
auth_strategy = keystone
[placement_database]
connection = $DB_URL_BASE/placement
[keystone_authtoken]
$(authtoken placement)
EOF

GL=$NOVA_RUN/glance
mkdir -p "$GL/images" "$GL/staging" "$GL/tasks" "$ETC/glance"
cat >"$ETC/glance/glance-api.conf" <<EOF
[DEFAULT]
debug = $NOVA_DEBUG
enabled_backends = fs:file
bind_host = 127.0.0.1
bind_port = $GLANCE_PORT
worker_self_reference_url = https://127.0.0.1:$GLANCE_PORT
[database]
connection = $DB_URL_BASE/glance
[glance_store]
default_backend = fs
[fs]
filesystem_store_datadir = $GL/images
[os_glance_staging_store]
filesystem_store_datadir = $GL/staging
[os_glance_tasks_store]
filesystem_store_datadir = $GL/tasks
[paste_deploy]
flavor = keystone
config_file = $NOVA_VENV/etc/glance/glance-api-paste.ini
[keystone_authtoken]
$(authtoken glance)
[oslo_concurrency]
lock_path = $GL/locks
EOF

mkdir -p "$NOVA_RUN/state/controller" "$NOVA_RUN/locks"
# nova.conf: api, conductor, scheduler, nova-manage. nova-compute.conf: the same
# without database connections (nova-compute must reach the databases only
# through nova-conductor; with [api_database] set it logs "No DB access allowed").
nova_common() {
    cat <<EOF
[DEFAULT]
debug = $NOVA_DEBUG
host = controller
my_ip = 127.0.0.1
transport_url = rabbit://guest:guest@127.0.0.1:$NOVA_RABBIT_PORT/
compute_driver = fake.FakeDriver
state_path = $NOVA_RUN/state/controller
report_interval = $NOVA_REPORT_INTERVAL
service_down_time = $NOVA_SERVICE_DOWN_TIME
heal_instance_info_cache_interval = -1
graceful_shutdown_timeout = 5
osapi_compute_listen = 127.0.0.1
metadata_listen = 127.0.0.1
[api]
[wsgi]
api_paste_config = $NOVA_VENV/etc/nova/api-paste.ini
[keystone_authtoken]
$(authtoken nova)
[placement]
$(ksa nova)
[neutron]
$(ksa nova)
[glance]
region_name = RegionOne
valid_interfaces = public
cafile = $CA
[cinder]
os_region_name = RegionOne
[service_user]
send_service_user_token = true
$(ksa nova)
[scheduler]
workers = 1
discover_hosts_in_cells_interval = 2
[conductor]
workers = 1
[oslo_concurrency]
lock_path = $NOVA_RUN/locks
[vnc]
enabled = false
[oslo_messaging_notifications]
driver = noop
[quota]
instances = -1
cores = -1
ram = -1
EOF
}
{ nova_common; cat <<EOF
[api_database]
connection = $DB_URL_BASE/nova_api
[database]
connection = $DB_URL_BASE/nova
EOF
} >"$ETC/nova.conf"
nova_common >"$ETC/nova-compute.conf"
for h in $(compute_hosts); do
    mkdir -p "$NOVA_RUN/state/$h/instances" "$NOVA_RUN/state/$h/locks"
    cat >"$ETC/$h.conf" <<EOF
[DEFAULT]
host = $h
state_path = $NOVA_RUN/state/$h
instances_path = $NOVA_RUN/state/$h/instances
[oslo_concurrency]
lock_path = $NOVA_RUN/state/$h/locks
EOF
done

# ---------------------------------------------------------------- schemas (once)
NM=("$BIN/nova-manage" --config-file "$ETC/nova.conf")
db_sync_all() {
    "$BIN/placement-manage" --config-file "$ETC/placement.conf" db sync
    "$BIN/glance-manage" --config-dir "$ETC/glance" db_sync
    "${NM[@]}" api_db sync
    "${NM[@]}" cell_v2 map_cell0 --database_connection "$DB_URL_BASE/nova_cell0"
    "${NM[@]}" cell_v2 list_cells | grep -q ' cell1 ' ||
        "${NM[@]}" cell_v2 create_cell --name cell1
    "${NM[@]}" db sync
}
if ! done_step schemas; then
    log "creating schemas (placement, glance, nova_api, nova, nova_cell0)"
    db_sync_all >"$NOVA_RUN/db-sync.log" 2>&1 || { tail -40 "$NOVA_RUN/db-sync.log"; exit 1; }
    mark_step schemas
fi
log "schemas ready ($(elapsed) s)"

wait_tcp "$NOVA_RABBIT_PORT" 60 || fail rabbitmq
wait_http "https://127.0.0.1:$KEYSTONE_PORT/v3" 60 keystone || fail keystone
wait_http "http://127.0.0.1:$NEUTRON_PORT/" 10 neutron || fail neutron
if ! done_step keystone-entities; then
    "$PY" "$NOVA_EMU_DIR/setup_cloud.py" keystone >"$NOVA_RUN/setup-keystone.log" 2>&1 ||
        { tail -30 "$NOVA_RUN/setup-keystone.log"; exit 1; }
    mark_step keystone-entities
fi
log "rabbitmq, keystone, fake neutron up ($(elapsed) s)"

# ---------------------------------------------------------------- services
if ! is_running placement; then
    start_bg placement env OS_PLACEMENT_CONFIG_DIR="$ETC" \
        "${GUNI[@]}" --bind "127.0.0.1:$PLACEMENT_PORT" qfence_wsgi_placement:application
fi
if ! is_running glance; then
    start_bg glance env OS_GLANCE_CONFIG_DIR="$ETC/glance" \
        "${GUNI[@]}" "${GUNI_TLS[@]}" --bind "127.0.0.1:$GLANCE_PORT" qfence_wsgi_glance:application
fi
is_running nova-conductor || start_bg nova-conductor "$BIN/nova-conductor" --config-file "$ETC/nova.conf"
is_running nova-scheduler || start_bg nova-scheduler "$BIN/nova-scheduler" --config-file "$ETC/nova.conf"
if ! is_running nova-api; then
    start_bg nova-api env OS_NOVA_CONFIG_FILES="$NOVA_VENV/etc/nova/api-paste.ini;$ETC/nova.conf" \
        "${GUNI[@]}" "${GUNI_TLS[@]}" --bind "127.0.0.1:$NOVA_API_PORT" qfence_wsgi_nova:application
fi
start_computes

wait_http "http://127.0.0.1:$PLACEMENT_PORT/" 90 placement || fail placement
wait_http "https://127.0.0.1:$GLANCE_PORT/versions" 90 glance || fail glance
wait_http "https://127.0.0.1:$NOVA_API_PORT/" 90 nova-api || fail nova-api
for n in nova-conductor nova-scheduler; do is_running $n || fail $n; done
log "placement, glance, nova-api up ($(elapsed) s)"

"$PY" "$NOVA_EMU_DIR/setup_cloud.py" wait-computes "$NOVA_COMPUTES" 120 ||
    { for h in $(compute_hosts); do is_running "nova-compute-$h" || fail "nova-compute-$h"; done; exit 1; }
"${NM[@]}" cell_v2 discover_hosts >"$NOVA_RUN/discover-hosts.log" 2>&1 || { cat "$NOVA_RUN/discover-hosts.log"; exit 1; }
"$PY" "$NOVA_EMU_DIR/setup_cloud.py" wait-hypervisors "$NOVA_COMPUTES" 60 || exit 1
IMAGE_ID=$("$PY" "$NOVA_EMU_DIR/setup_cloud.py" flavor-image 2>"$NOVA_RUN/setup-image.log") ||
    { cat "$NOVA_RUN/setup-image.log"; exit 1; }
APPCRED_ID=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$NOVA_RUN/appcred.json")
APPCRED_SECRET=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["secret"])' "$NOVA_RUN/appcred.json")

MEMBER=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["project_id"])' "$NOVA_RUN/member.json")
printf '%s\n' "NOVA_VENV=$NOVA_VENV" "NOVA_RUN=$NOVA_RUN" "NOVA_CACERT=$CA" \
    "OS_CLIENT_CONFIG_FILE=$NOVA_RUN/clouds.yaml" \
    "KEYSTONE_URL=https://127.0.0.1:$KEYSTONE_PORT/v3" "NOVA_URL=https://127.0.0.1:$NOVA_API_PORT/v2.1" \
    "ADMIN_USER=admin" "ADMIN_PASSWORD=$NOVA_ADMIN_PASSWORD" "ADMIN_PROJECT=admin" "ADMIN_DOMAIN=Default" \
    "APPCRED_ID=$APPCRED_ID" "APPCRED_SECRET=$APPCRED_SECRET" \
    "MEMBER_USER=demo" "MEMBER_PASSWORD=$NOVA_MEMBER_PASSWORD" "MEMBER_PROJECT=demo" "MEMBER_PROJECT_ID=$MEMBER" \
    "NOVA_COMPUTE_HOSTS=$(compute_hosts | tr '\n' ' ' | sed 's/ $//')" \
    "NOVA_IMAGE_ID=$IMAGE_ID" "NOVA_FLAVOR_ID=1" "NOVA_REGION=RegionOne" \
    "NOVA_SERVICE_DOWN_TIME=$NOVA_SERVICE_DOWN_TIME" >"$NOVA_RUN/nova.env"
log "all up in $(elapsed) s"
cat "$NOVA_RUN/nova.env"
