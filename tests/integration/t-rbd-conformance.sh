#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# SCSI conformance on an RBD pool: the same iscsi-test-cu ALL run
# and supplementary LUNs as t-scsi-conformance.sh (tests/integration/
# scsi-conformance.sh), with every LUN's volume an RBD image on a throwaway
# Ceph cluster. 0 failures; a test that passes on file volumes and is skipped
# here fails the run, as there.
. "$(dirname "$0")/lib.sh"
ceph_start
blockd_start
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"
CONF_POOL=ceph
. "$(dirname "$0")/scsi-conformance.sh"
