#!/usr/bin/env bash
# Run CMD against a throwaway single-node Ceph cluster (scripts/ceph-cluster.sh):
#
#   scripts/with-ceph.sh CMD [ARG...]
#
# Starts a cluster in a fresh temporary directory, runs CMD with CEPH_CONF
# (the cluster's ceph.conf), BLOCKD_CEPH_DIR (its directory) and
# BLOCKD_CEPH_CLUSTER (this ceph-cluster.sh, so that CMD can stop the
# cluster to test a lost one) exported, stops the cluster and removes the
# directory, and exits with CMD's status. A cluster that cannot start is a
# failure (status 1), never a skip: the tests that use this need Ceph.
set -uo pipefail

[ $# -ge 1 ] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/ceph-cluster.sh
dir=$(mktemp -d "${TMPDIR:-/tmp}/blockd-ceph.XXXXXX") || exit 1

cleanup() {
    "$cluster" stop "$dir" >/dev/null 2>&1
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A runner that kills us with SIGKILL (meson on a timeout) leaves no trap
# to run: a watcher stops the cluster once we are gone. Its output goes
# nowhere, so that nobody waits on a pipe it holds.
me=$$
(
    while kill -0 "$me" 2>/dev/null; do sleep 2; done
    cleanup
) </dev/null >/dev/null 2>&1 3>&- &

if ! "$cluster" start "$dir" >"$dir/start.out" 2>&1; then
    echo "with-ceph: the Ceph test cluster did not start:" >&2
    cat "$dir/start.out" >&2
    exit 1
fi
export CEPH_CONF=$dir/ceph.conf BLOCKD_CEPH_DIR=$dir BLOCKD_CEPH_CLUSTER=$cluster
"$@"
rc=$?
exit $rc
