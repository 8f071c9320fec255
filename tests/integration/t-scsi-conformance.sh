#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# SCSI conformance: libiscsi's iscsi-test-cu over the whole ALL family
# against a blockd LUN (--dataloss, the URL given twice for the multipath
# tests, a second initiator name for the multi-initiator ones,
# --allow-sanitize so the SANITIZE tests run: blockd offers BLOCK ERASE).
#
# iscsi-test-cu prints "[SKIPPED]" and then "passed" for a skipped test, so
# each test is classified here as passed / skipped / failed and compared with
# tests/integration/scsi-conformance.expected:
#   - any failed test fails this script;
#   - a test expected "passed" that is now skipped (a regression) fails it;
#   - a test expected "skipped" that now passes is reported (update the list).
# The extent hides the physical block size (pblocksize=true): with
# LOGICAL BLOCKS PER PHYSICAL BLOCK > 1, GetLBAStatus.UnmapSingle (libiscsi
# 1.19) expects the first descriptor at a physical-block boundary instead of
# the requested LBA, which SBC-3 does not allow.
. "$(dirname "$0")/lib.sh"
blockd_start
CONF_POOL=demo
. "$(dirname "$0")/scsi-conformance.sh"
