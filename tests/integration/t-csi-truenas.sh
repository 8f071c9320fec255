#!/bin/bash
# truenas/truenas-csi's calls replayed (csireplay.py truenas): numeric
# request ids over wss:// with an API key; CreateVolume (plain, from a
# snapshot, from a volume), ControllerExpandVolume seen by an attached
# iSCSI session, CreateSnapshot/ListSnapshots (used/referenced as
# integers), DeleteSnapshot while a clone exists (deferred) and the
# clone's DeleteVolume taking it along, ControllerPublish/Unpublish with
# CHAP (a real libiscsi login reads the data; a wrong secret does not),
# and the error paths the driver matches (does not exist, already exists,
# has dependent clones). The snapshot part again on an RBD pool.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/csi-lib.sh"

csi_setup
csi_replay truenas demo

ceph_start
csi_rbd_pool rp
csi_replay truenas rp --snapshots-only
blockd_stop
pass
