#!/bin/bash
# fenio/tns-csi's calls replayed (csireplay.py tns): string request ids
# over wss:// with an API key; volumes with their tns-csi:* user
# properties, ControllerExpandVolume seen by an attached iSCSI session,
# snapshots whose bookkeeping is in user properties (pool.snapshot.update,
# read back with extra.user_properties), select: ["id"], a restore by
# clone, DeleteSnapshot {defer: true} while the clone exists and the
# clone's DeleteVolume taking the snapshot along, a session that is not
# authenticated logging in again. The snapshot part again on an RBD pool;
# and a deferred destroy across a restart of the daemon and a rename
# (file and RBD).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/csi-lib.sh"

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

csi_setup
csi_replay tns demo

ceph_start
csi_rbd_pool rp
csi_replay tns rp --snapshots-only

# Deferred across a restart: the mark is kept, and the snapshot goes when
# its last clone does, after the restart.
for p in demo rp; do
    blockctl call pool.dataset.create "{\"name\":\"$p/r1\",\"type\":\"VOLUME\",\"volsize\":4194304}" >/dev/null
    blockctl call pool.snapshot.create "{\"dataset\":\"$p/r1\",\"name\":\"s\",\"properties\":{\"tns-csi:k\":\"v\"}}" >/dev/null
    blockctl call pool.snapshot.clone "{\"snapshot\":\"$p/r1@s\",\"dataset_dst\":\"$p/r2\"}" >/dev/null
    blockctl call pool.snapshot.delete "[\"$p/r1@s\",{\"defer\":true}]" >/dev/null || fail "deferred delete on $p"
done
blockd_stop
csi_start
for p in demo rp; do
    row=$(blockctl call pool.snapshot.get_instance "[\"$p/r1@s\"]") || fail "$p/r1@s gone after the restart"
    [ "$(jget "$row" 'j["properties"]["defer_destroy"]["value"]')" = on ] || fail "mark lost on $p: $row"
    [ "$(jget "$row" 'j["properties"]["tns-csi:k"]["value"]')" = v ] || fail "user property lost on $p: $row"
    # a rename carries the mark and the user properties
    blockctl call pool.snapshot.rename "[\"$p/r1@s\",{\"new_name\":\"$p/r1@t\"}]" >/dev/null ||
        fail "rename on $p"
    row=$(blockctl call pool.snapshot.get_instance "[\"$p/r1@t\"]") || fail "$p/r1@t missing"
    [ "$(jget "$row" 'j["properties"]["defer_destroy"]["value"]+j["properties"]["tns-csi:k"]["value"]')" = onv ] ||
        fail "the rename lost the mark or the property on $p: $row"
    blockctl call pool.dataset.delete "[\"$p/r2\"]" >/dev/null || fail "clone delete on $p"
    out=$(blockctl call pool.snapshot.query "[[[\"id\",\"=\",\"$p/r1@t\"]]]")
    [ "$(jget "$out" 'len(j)')" = 0 ] || fail "deferred snapshot stayed on $p: $out"
    blockctl call pool.dataset.delete "[\"$p/r1\"]" >/dev/null || fail "volume delete on $p"
done
blockd_stop
pass
