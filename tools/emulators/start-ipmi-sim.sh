#!/usr/bin/env bash
# IPMI-over-LAN BMC simulator: OpenIPMI's ipmi_sim (Debian package openipmi),
# on UDP 127.0.0.1, with a fake host process (ipmi_fake_host.py) whose life
# is the chassis power state, so power control and watchdog expiry are real.
#
#   start-ipmi-sim.sh [N]   instance N (default 1): name ipmi-sim-N,
#                           LAN port 6229+N (6230 for N=1), host link 9001+N
#   IPMI_PORT / IPMI_VM_PORT override the ports; IPMI_USER (admin) IPMI_PASS (password)
#   IPMI_START_ON (1): power the host on when the simulator starts
#
# Second instance: another N (name ipmi-sim-N, default ports move with N), or
# the same N with other IPMI_PORT / IPMI_VM_PORT and another QFENCE_EMU_RUN.
#
# Use cipher suite 3 (-C 3 / --cipher=3): ipmi_sim has no SHA-256 suites and
# does not answer "Get Channel Cipher Suites", so ipmitool's automatic
# choice waits ~10-14 s before falling back.
source "$(dirname "$0")/_lib.sh"

N=${1:-1}
NAME=ipmi-sim-$N
PORT=${IPMI_PORT:-$((6229 + N))}
VMPORT=${IPMI_VM_PORT:-$((9001 + N))}
USER_=${IPMI_USER:-admin}
PASS_=${IPMI_PASS:-password}
DIR=$QFENCE_EMU_RUN/ipmi-sim-$N

if already_running "$NAME" "$PORT"; then exit 0; fi

apt_install openipmi ipmitool python3
need_free_ports "$NAME" udp "$PORT"
need_free_ports "$NAME" tcp "$VMPORT"
mkdir -p "$DIR/state"
STARTNOW=false; [ "${IPMI_START_ON:-1}" = 1 ] && STARTNOW=true

cat > "$DIR/lan.conf" <<EOF
name "qfence-bmc$N"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 $PORT
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid $(printf "a123456789abcdefa1234567%08x" "$PORT")
  endlan
  serial 15 127.0.0.1 $VMPORT codec VM
  startcmd "/usr/bin/python3 $EMU_DIR/ipmi_fake_host.py $VMPORT $DIR/host.log"
  startnow $STARTNOW
  poweroff_wait 2
  kill_wait 2
  user 1 true  ""        "test"    user   10  none md2 md5 straight
  user 2 true  "$USER_"  "$PASS_"  admin  10  none md2 md5 straight
EOF

# The BMC itself (device 0x20) and sensor 0 = the watchdog sensor; without
# that sensor ipmi_sim silently ignores watchdog expiry.
cat > "$DIR/bmc.emu" <<'EOF'
mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 50 0x0a
sensor_add 0x20 0 0 0x23 0x6f
mc_enable 0x20
EOF

rm -f "$DIR/host.log"
start_bg "$NAME" "$PORT" /usr/bin/ipmi_sim -n -c "$DIR/lan.conf" -f "$DIR/bmc.emu" -s "$DIR/state"
# ready when it answers over the LAN (and, if powered on at start, when the
# fake host has connected to the serial link)
ok=0
for _ in $(seq 1 100); do
    is_running "$NAME" || break
    if ipmitool -I lanplus -C 3 -N 1 -R 1 -H 127.0.0.1 -p "$PORT" -U "$USER_" -P "$PASS_" \
            chassis power status >/dev/null 2>&1 \
       && { [ "$STARTNOW" = false ] || grep -q power-on "$DIR/host.log" 2>/dev/null; }; then
        ok=1; break
    fi
    sleep 0.1
done
[ $ok = 1 ] || fail_with_log "$NAME"

log "try: ipmitool -I lanplus -C 3 -H 127.0.0.1 -p $PORT -U $USER_ -P $PASS_ chassis power status"
emit "$NAME" "IPMI_HOST=127.0.0.1" "IPMI_PORT=$PORT" "IPMI_USER=$USER_" "IPMI_PASS=$PASS_" \
    "IPMI_CIPHER=3" "IPMI_VM_PORT=$VMPORT" "HOST_EVENTS=$DIR/host.log" \
    "PIDFILE=$QFENCE_EMU_RUN/$NAME.pid" "LOG=$QFENCE_EMU_RUN/$NAME.log"
