#!/usr/bin/env bash
# A local RabbitMQ (Debian package) for the Leveret comparison benchmarks.
#
#   bench/rabbitmq.sh start    # install if missing, start detached (not via systemd),
#                              # wait until 127.0.0.1:5672 answers AMQP; idempotent
#   bench/rabbitmq.sh stop     # stop the node (and epmd); idempotent
#   bench/rabbitmq.sh status   # "running" / "stopped" (exit 0 / 3)
#
# No plugins are enabled (no management UI); default user guest/guest, which
# RabbitMQ only accepts from localhost.  Must run as root (the Debian wrapper
# switches to the rabbitmq user itself).
set -euo pipefail

HOST=127.0.0.1
PORT=${RABBITMQ_BENCH_PORT:-5672}
START_TIMEOUT=${RABBITMQ_START_TIMEOUT:-120}
# Open-files limit for the node.  Debian's systemd unit uses LimitNOFILE=65536; started
# by hand, the node inherits this shell's soft limit (often 1,024, which RabbitMQ turns
# into ~830 sockets: too few for the 1,000-connection `conns` scenario).  Capped at the
# hard limit.
NOFILE=${RABBITMQ_BENCH_NOFILE:-65536}

amqp_ready() {
    # A real AMQP answer (Connection.Start method frame), not just an open port.
    python3 - "$HOST" "$PORT" <<'EOF' 2>/dev/null
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2) as s:
        s.settimeout(2)
        s.sendall(b"AMQP\x00\x00\x09\x01")
        sys.exit(0 if s.recv(1) == b"\x01" else 1)
except OSError:
    sys.exit(1)
EOF
}

beam_pids() { pgrep -u rabbitmq -f 'beam.smp.*rabbit' || true; }

install_if_missing() {
    if command -v rabbitmq-server >/dev/null 2>&1; then
        return
    fi
    echo "rabbitmq-server not installed; installing with apt-get ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    # Do not start it through the init system: we start it ourselves below.
    local prc=/usr/sbin/policy-rc.d created=0
    if [ ! -e "$prc" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$prc" && chmod +x "$prc" && created=1
    fi
    apt-get -o DPkg::Lock::Timeout=600 update -q
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends rabbitmq-server
    if [ "$created" = 1 ]; then rm -f "$prc"; fi
}

start() {
    if amqp_ready; then
        echo "RabbitMQ already answering AMQP on $HOST:$PORT"
        return 0
    fi
    install_if_missing
    local t0 t1
    t0=$(date +%s.%N)
    if [ -z "$(beam_pids)" ]; then
        # Debian wrapper: as root it runs the real script as the rabbitmq user.
        local hard
        hard=$(ulimit -Hn)
        if [ "$hard" != unlimited ] && [ "$hard" -lt "$NOFILE" ]; then NOFILE=$hard; fi
        ulimit -n "$NOFILE" 2>/dev/null || true
        if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
            # The Debian wrapper switches user with `su`, whose pam_limits resets the
            # open-files limit to init's (1,024 here); setpriv keeps ours.
            (cd /var/lib/rabbitmq && setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups \
                env HOME=/var/lib/rabbitmq rabbitmq-server -detached)
        else
            (cd /tmp && rabbitmq-server -detached)
        fi
    else
        echo "a RabbitMQ node is already booting (pid $(beam_pids | tr '\n' ' ')); waiting" >&2
    fi
    local deadline=$(( $(date +%s) + START_TIMEOUT ))
    until amqp_ready; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "RabbitMQ did not answer AMQP on $HOST:$PORT within ${START_TIMEOUT}s;" \
                 "see /var/log/rabbitmq/" >&2
            return 1
        fi
        sleep 0.2
    done
    t1=$(date +%s.%N)
    printf 'RabbitMQ answering AMQP on %s:%s after %.1fs (beam pid %s, max open files %s)\n' \
        "$HOST" "$PORT" "$(echo "$t1 - $t0" | bc)" "$(beam_pids | head -1)" \
        "$(awk '/^Max open files/ {print $4}' "/proc/$(beam_pids | head -1)/limits" 2>/dev/null)"
}

stop() {
    if [ -z "$(beam_pids)" ]; then
        echo "RabbitMQ not running"
    else
        # `rabbitmqctl shutdown` waits for the node's OS process to exit.
        rabbitmqctl shutdown >/dev/null 2>&1 || rabbitmqctl stop >/dev/null 2>&1 || true
        local i
        for i in $(seq 1 50); do
            [ -z "$(beam_pids)" ] && break
            sleep 0.2
        done
        if [ -n "$(beam_pids)" ]; then
            echo "rabbitmqctl did not stop it; sending SIGTERM to $(beam_pids | tr '\n' ' ')" >&2
            kill $(beam_pids) 2>/dev/null || true
            sleep 2
        fi
        echo "RabbitMQ stopped"
    fi
    # epmd (Erlang port mapper) is left behind by the node; stop it too.
    if command -v epmd >/dev/null 2>&1 && pgrep -x epmd >/dev/null 2>&1; then
        epmd -kill >/dev/null 2>&1 || true
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    status)
        if amqp_ready; then echo running; else echo stopped; exit 3; fi ;;
    *)
        echo "usage: $0 {start|stop|restart|status}" >&2
        exit 2 ;;
esac
