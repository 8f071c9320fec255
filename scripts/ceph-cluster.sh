#!/usr/bin/env bash
# A throwaway single-node Ceph cluster for tests and benchmarks: one monitor,
# one OSD on the in-memory object store (memstore), optionally a manager, no
# authentication, everything on 127.0.0.1 and in one directory.
#
#   scripts/ceph-cluster.sh start DIR [--mgr]   start; prints CEPH_CONF=DIR/ceph.conf
#   scripts/ceph-cluster.sh stop DIR            stop what runs on DIR/ceph.conf
#   scripts/ceph-cluster.sh status DIR          exit 0 when rbd works
#
# Environment: CEPH_STORE (memstore, the default, or bluestore: a block
# file of CEPH_BLOCK_BYTES (default 16 GiB, sparse) in CEPH_BLOCK_DIR
# (default DIR; not a tmpfs: bluestore opens it with O_DIRECT), for data
# that memstore could not hold in RAM), CEPH_MEM_BYTES (memstore capacity,
# default 4 GiB),
# CEPH_POOL (created and initialised for rbd, default "rbd"),
# CEPH_READ_LEASE_RATIO (osd_pool_default_read_lease_ratio: a placement
# group's read lease is this x osd_heartbeat_grace (20 s); default Ceph's 0.8).
# Only processes whose command line names DIR/ceph.conf are ever signalled,
# so several clusters may run side by side (each picks free ports).
set -euo pipefail

die() { echo "ceph-cluster: $*" >&2; exit 1; }

need() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install ceph-mon ceph-osd ceph-mgr ceph-common)"
    done
}

FREE_PORT_BIN=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/free-port
free_port() { "$FREE_PORT_BIN"; }

pids_of() { # processes started with this cluster's config file
    pgrep -f -- "-c $1/ceph.conf( |$)" || true
}

# The [osd] lines of the object store CEPH_STORE names.
store_conf() {
    case ${CEPH_STORE:-memstore} in
    memstore)
        printf 'osd objectstore = memstore\nmemstore device bytes = %s\nmemstore page set = true\n' \
            "${CEPH_MEM_BYTES:-4294967296}"
        ;;
    bluestore)
        local bdir=${CEPH_BLOCK_DIR:-$1}
        mkdir -p "$bdir"
        rm -f "$bdir/bluestore.block"
        printf 'osd objectstore = bluestore\nbluestore block create = true\nbluestore block size = %s\nbluestore block path = %s\n' \
            "${CEPH_BLOCK_BYTES:-17179869184}" "$(cd "$bdir" && pwd)/bluestore.block"
        ;;
    *) die "CEPH_STORE: memstore or bluestore, not ${CEPH_STORE}" ;;
    esac
}

cmd_start() {
    local dir=$1 mgr=${2:-}
    need ceph-mon ceph-osd ceph monmaptool rbd uuidgen python3
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ -z "$(pids_of "$dir")" ] || die "a cluster already runs on $dir/ceph.conf"
    rm -rf "$dir/mon" "$dir/osd" "$dir/mgr" "$dir/run" "$dir/log"
    mkdir -p "$dir/mon" "$dir/osd" "$dir/mgr" "$dir/run" "$dir/log"
    local fsid p1 p2
    fsid=$(uuidgen)
    p1=$(free_port)
    p2=$(free_port)
    cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
run dir = $dir/run
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
admin socket = $dir/run/\$name.\$pid.asok
keyring = /dev/null
mon warn on pool no redundancy = false
mon data avail crit = 0
ms async op threads = 1
rbd default clone format = 2
[mon]
mon data = $dir/mon
mon allow pool delete = true
paxos propose interval = 0.1
[mgr]
mgr data = $dir/mgr
[osd]
osd data = $dir/osd
$(store_conf "$dir")
osd memory target = 939524096
osd op num shards = 2
osd op num threads per shard = 1
osd class load list = *
osd class default list = *
osd crush update on start = false
osd pool default read lease ratio = ${CEPH_READ_LEASE_RATIO:-0.8}
EOF
    export CEPH_CONF=$dir/ceph.conf
    local c="-c $dir/ceph.conf"
    monmaptool --create --clobber --fsid "$fsid" --addv a "[v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]" \
        "$dir/monmap" >/dev/null
    ceph-mon $c -i a --mkfs --monmap "$dir/monmap" --keyring /dev/null >/dev/null 2>&1 ||
        die "ceph-mon --mkfs failed (see $dir/log)"
    # Inherited descriptors closed: a caller piping our output must not
    # wait for the daemons.
    ceph-mon $c -i a 3>&- </dev/null >/dev/null 2>&1 || die "ceph-mon did not start (see $dir/log)"
    if [ "$mgr" = --mgr ]; then
        ceph-mgr $c -i x 3>&- </dev/null >/dev/null 2>&1 || die "ceph-mgr did not start"
    fi
    local id
    id=$(timeout 30 ceph $c osd create) || die "ceph osd create failed (monitor not answering)"
    timeout 30 ceph $c osd crush add "osd.$id" 1 root=default >/dev/null 2>&1
    timeout 30 ceph $c osd pool create "${CEPH_POOL:-rbd}" 32 32 >/dev/null 2>&1
    ceph-osd $c -i "$id" --mkfs >/dev/null 2>&1 || die "ceph-osd --mkfs failed (see $dir/log)"
    [ "$(cat "$dir/osd/type" 2>/dev/null)" = "${CEPH_STORE:-memstore}" ] ||
        die "the OSD is not on ${CEPH_STORE:-memstore}"
    ceph-osd $c -i "$id" 3>&- </dev/null >/dev/null 2>&1 || die "ceph-osd did not start"
    timeout 60 rbd $c pool init "${CEPH_POOL:-rbd}" || die "rbd pool init did not finish in 60 s"
    echo "CEPH_CONF=$dir/ceph.conf"
}

cmd_stop() {
    local dir
    dir=$(cd "$1" 2>/dev/null && pwd) || return 0
    local pids p i
    # OSD and manager first: an OSD whose monitor is gone waits before exiting.
    for p in $(pids_of "$dir"); do
        grep -qa ceph-mon "/proc/$p/cmdline" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
    done
    for i in $(seq 50); do
        pids=""
        for p in $(pids_of "$dir"); do
            grep -qa ceph-mon "/proc/$p/cmdline" 2>/dev/null || pids="$pids $p"
        done
        [ -z "$pids" ] && break
        sleep 0.1
    done
    for p in $(pids_of "$dir"); do kill -TERM "$p" 2>/dev/null || true; done
    for i in $(seq 50); do
        [ -z "$(pids_of "$dir")" ] && return 0
        sleep 0.1
    done
    for p in $(pids_of "$dir"); do kill -KILL "$p" 2>/dev/null || true; done
}

cmd_status() {
    timeout 10 rbd -c "$1/ceph.conf" ls "${CEPH_POOL:-rbd}" >/dev/null 2>&1
}

case "${1:-}" in
start) [ $# -ge 2 ] || die "usage: $0 start DIR [--mgr]"; cmd_start "$2" "${3:-}" ;;
stop) [ $# -ge 2 ] || die "usage: $0 stop DIR"; cmd_stop "$2" ;;
status) [ $# -ge 2 ] || die "usage: $0 status DIR"; cmd_status "$2" ;;
*) die "usage: $0 start|stop|status DIR" ;;
esac
