# Shared helpers for the qfence emulator scripts. Source it; do not run it.
#
#   QFENCE_EMU_HOME    Python venvs, PG initdb cache        (default /opt/qfence-emu)
#   QFENCE_EMU_RUN     state, certificates, logs, pid files (default /tmp/qfence-emu)
#                      One run dir = one instance of each emulator: give every
#                      parallel test its own QFENCE_EMU_RUN (and its own ports).
#   QFENCE_EMU_PYTHON  interpreter for the venvs (default /usr/bin/python3, Debian's)
#
# Every emulator listens on 127.0.0.1 only. A start script writes
# $QFENCE_EMU_RUN/<name>.pid, <name>.log, <name>.port and <name>.env (the
# KEY=VALUE lines it also prints on stdout); stop.sh stops by pid file.

set -euo pipefail

QFENCE_EMU_HOME=${QFENCE_EMU_HOME:-/opt/qfence-emu}
QFENCE_EMU_RUN=${QFENCE_EMU_RUN:-/tmp/qfence-emu}
EMU_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$QFENCE_EMU_HOME" "$QFENCE_EMU_RUN"
export QFENCE_EMU_HOME QFENCE_EMU_RUN

log() { echo "[$(basename "$0")] $*" >&2; }

as_root() {
    if [ "$(id -u)" -ne 0 ]; then log "must run as root (installs packages)"; exit 1; fi
}

# apt_missing PKG... : print the packages that are not installed.
apt_missing() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

apt_updated=0
# apt_install PKG... : install the Debian packages that are missing (idempotent;
# apt-get update at most once per process, only when something is missing).
apt_install() {
    local missing
    missing=$(apt_missing "$@")
    [ -z "$missing" ] && return 0
    as_root
    # shellcheck disable=SC2086
    set -- $missing
    if [ $apt_updated -eq 0 ]; then
        log "apt-get update"
        apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
        apt_updated=1
    fi
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends "$@" >/dev/null
}

# emu_python : the interpreter the venvs are made with.
emu_python() {
    if [ -n "${QFENCE_EMU_PYTHON:-}" ]; then echo "$QFENCE_EMU_PYTHON"
    elif [ -x /usr/bin/python3 ]; then echo /usr/bin/python3
    else command -v python3; fi
}

# venv_dir NAME : the venv for requirements/NAME.txt, named after a hash of
# that file and the interpreter ($QFENCE_EMU_HOME/NAME-<hash>): a changed pin
# makes a new venv beside the old one, and a venv in use is never rebuilt.
venv_dir() {
    local key
    key=$({ cat "$EMU_DIR/requirements/$1.txt"; emu_python; } | sha256sum | cut -c1-12)
    echo "$QFENCE_EMU_HOME/$1-$key"
}

# venv_ready NAME : true if NAME's venv is complete.
venv_ready() {
    local venv
    venv=$(venv_dir "$1")
    [ -x "$venv/bin/python" ] && [ -f "$venv/.qfence-installed" ]
}

# venv_install NAME : make NAME's venv with the pinned packages of
# requirements/NAME.txt. Idempotent, and safe when several processes call it
# at once (flock); a half-built venv (no stamp) is rebuilt.
venv_install() {
    local name=$1 venv req=$EMU_DIR/requirements/$1.txt
    venv=$(venv_dir "$name")
    venv_ready "$name" && return 0
    (
        flock 9
        venv_ready "$name" && exit 0
        rm -rf "$venv"
        log "creating venv $venv ($(emu_python))"
        "$(emu_python)" -m venv "$venv"
        log "pip install -r requirements/$name.txt"
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
        date -u +%FT%TZ > "$venv/.qfence-installed"
    ) 9>"$venv.lock"
}

# tls_cert DIR : DIR/ca.pem (a throw-away CA) and DIR/cert.pem + DIR/key.pem
# (a leaf for IP 127.0.0.1 and localhost, signed by it); kept if present.
# Clients verify with ca.pem. A leaf separate from its CA matters: rustls /
# webpki refuse a self-signed CA:TRUE certificate used as the server's own.
tls_cert() {
    local dir=$1
    mkdir -p "$dir"
    [ -s "$dir/ca.pem" ] && [ -s "$dir/cert.pem" ] && [ -s "$dir/key.pem" ] && return 0
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj '/CN=qfence test CA' -addext 'basicConstraints=critical,CA:TRUE' \
        -addext 'keyUsage=critical,keyCertSign,cRLSign' -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj /CN=127.0.0.1 -keyout "$dir/key.pem" -out "$dir/leaf.csr" 2>/dev/null
    printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature' \
        'extendedKeyUsage=serverAuth' 'subjectAltName=IP:127.0.0.1,DNS:localhost' \
        'subjectKeyIdentifier=hash' 'authorityKeyIdentifier=keyid' > "$dir/leaf.ext"
    openssl x509 -req -in "$dir/leaf.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
        -days 3650 -extfile "$dir/leaf.ext" -out "$dir/cert.pem" 2>/dev/null
    rm -f "$dir/leaf.csr" "$dir/leaf.ext" "$dir/ca.srl"
}

# is_running NAME : true if $QFENCE_EMU_RUN/NAME.pid names a live process.
is_running() {
    local pidfile=$QFENCE_EMU_RUN/$1.pid
    [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# already_running NAME PORT : if NAME runs in this run dir, print its env and
# return 0 (a second start is a no-op); if it runs on another port, fail loudly
# (a second instance needs its own QFENCE_EMU_RUN).
already_running() {
    local name=$1 port=$2 have
    is_running "$name" || return 1
    have=$(cat "$QFENCE_EMU_RUN/$name.port" 2>/dev/null || true)
    if [ -n "$have" ] && [ "$have" != "$port" ]; then
        log "$name already runs in $QFENCE_EMU_RUN on port $have, not $port:" \
            "use a separate QFENCE_EMU_RUN for a second instance"
        exit 3
    fi
    log "$name already running (pid $(cat "$QFENCE_EMU_RUN/$name.pid"))"
    cat "$QFENCE_EMU_RUN/$name.env" 2>/dev/null || true
    return 0
}

# wait_tcp PORT [SECONDS] [NAME] : wait until 127.0.0.1:PORT accepts TCP
# connections (gives up early if NAME's process died).
wait_tcp() {
    local port=$1 secs=${2:-20} name=${3:-} i
    for ((i = 0; i < secs * 20; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        if [ -n "$name" ] && ! is_running "$name"; then return 1; fi
        sleep 0.05
    done
    log "nothing listening on 127.0.0.1:$port after ${secs}s"
    return 1
}

# port_in_use PORT tcp|udp : true if something on this host (this network
# namespace) listens on / is bound to that port, any address.
port_in_use() {
    local hex files
    hex=$(printf ':%04X' "$1")
    if [ "$2" = udp ]; then files=(/proc/net/udp /proc/net/udp6)
        awk -v h="$hex" 'FNR > 1 && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' "${files[@]}" 2>/dev/null
    else files=(/proc/net/tcp /proc/net/tcp6)
        awk -v h="$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' "${files[@]}" 2>/dev/null
    fi
}

# need_free_ports NAME tcp|udp PORT... : exit 4 if one is taken (so a start
# never mistakes another process on that port for its own emulator).
need_free_ports() {
    local name=$1 proto=$2 p; shift 2
    for p in "$@"; do
        if port_in_use "$p" "$proto"; then
            log "$name: $proto port $p on this host is already in use; choose another"
            exit 4
        fi
    done
}

# start_bg NAME PORT CMD... : start CMD in its own session (so stop.sh can
# signal the whole process group); log, pid and port files.
start_bg() {
    local name=$1 port=$2; shift 2
    local logf=$QFENCE_EMU_RUN/$name.log pidfile=$QFENCE_EMU_RUN/$name.pid
    rm -f "$QFENCE_EMU_RUN/$name.env"
    echo "$port" > "$QFENCE_EMU_RUN/$name.port"
    setsid "$@" >"$logf" 2>&1 < /dev/null &
    echo $! > "$pidfile"
}

# emit NAME KEY=VALUE... : print the lines and save them as NAME.env.
emit() {
    local name=$1; shift
    printf '%s\n' "$@" | tee "$QFENCE_EMU_RUN/$name.env"
}

# fail_with_log NAME : print the log of a failed start, stop what is left, exit 1.
fail_with_log() {
    log "$1 failed to start; log follows"
    tail -n 30 "$QFENCE_EMU_RUN/$1.log" >&2 || true
    "$EMU_DIR/stop.sh" "$1" >/dev/null 2>&1 || true
    exit 1
}

# now_ms : milliseconds since the epoch.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
