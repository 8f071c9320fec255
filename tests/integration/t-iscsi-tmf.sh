#!/bin/bash
# Task management functions that meet on one executing task (RFC 7143
# §11.5): an initiator whose command is slow sends ABORT TASK, repeats it
# (its first one timed out on its side), then escalates to ABORT TASK SET,
# as Linux's and VMware's error handlers do. Each function's response waits
# until the task has finished, and every one of them is answered: no
# response may be lost because another TMF took the task over (the target
# used to keep only the last ABORT TASK's wait, and the first one's
# response never came). The aborted command gets no SCSI response, and the
# session serves the next commands. Raw iSCSI (tests/integration/iscsiraw.py).
. "$(dirname "$0")/lib.sh"
need python3 timeout

blockd_start
# 256 MiB written by one WRITE SAME: long enough (0.1-1 s) for the TMFs,
# sent right behind it, to find it executing
blockctl volume create demo/tmf --size 256M >/dev/null || fail "volume create"
blockctl share iscsi create demo/tmf >/dev/null || fail "share iscsi create"
BASE=$(blockctl call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')

timeout 90 python3 - "$ISCSI_PORT" "$BASE:demo:tmf" <<'PY' >"$TMP/tmf.out" 2>&1 || fail "TMF client: $(cat "$TMP/tmf.out")"
import socket, struct, sys
import iscsiraw as R

s = R.Session(int(sys.argv[1]), sys.argv[2], timeout=30)
st, sense = s.clear_unit_attention()
assert st == 0, "TEST UNIT READY: status %d sense %s" % (st, sense.hex())
st, _, cap = s.cmd(bytes([0x9E, 0x10]) + bytes(8) + struct.pack(">I", 32) + bytes(2),
                   data_in_len=32)
assert st == 0, "READ CAPACITY (16): status %d" % st
bs = struct.unpack(">I", cap[8:12])[0]

ws = s.send_cmd(R.write_same16(0, 0), data_out=bytes([0x5A]) * bs)
names = {s.send_tmf(1, rtt=ws): "ABORT TASK", s.send_tmf(1, rtt=ws): "ABORT TASK (again)",
         s.send_tmf(2): "ABORT TASK SET"}
answered = {}
while len(answered) < len(names):
    try:
        op, bhs, data = s.recv_pdu()
    except socket.timeout:
        missing = [n for i, n in names.items() if i not in answered]
        sys.exit("no response in 30 s to: %s (answered: %s)" % (", ".join(missing), answered))
    itt = struct.unpack(">I", bhs[16:20])[0]
    if op == 0x21 and itt == ws:
        sys.exit("the aborted WRITE SAME got a SCSI response (status %d): it was not "
                 "executing when the TMFs came; make the volume larger" % bhs[3])
    if op == 0x22:
        assert itt in names, "a TMF response for ITT %d, which is none of ours" % itt
        answered[itt] = bhs[2]
        print("%s: response %d" % (names[itt], bhs[2]))
for itt, rsp in answered.items():
    assert rsp == 0, "%s answered %d, not 0 (function complete)" % (names[itt], rsp)

st, sense = s.clear_unit_attention()
assert st == 0, "TEST UNIT READY after the TMFs: status %d sense %s" % (st, sense.hex())
st, _, data = s.cmd(R.read16(0, 1), data_in_len=bs)
assert st == 0 and len(data) == bs, "READ (16) after the TMFs: status %d, %d bytes" % (st, len(data))
print("the session serves after the TMFs")
PY
cat "$TMP/tmf.out"
grep -c "task management function" "$BLOCKD_LOG" | grep -qx 3 ||
    fail "not three TMF log lines: $(grep "task management" "$BLOCKD_LOG")"
pass "ABORT TASK twice and ABORT TASK SET on one executing WRITE SAME: all three answered (function complete), the command's response dropped, the session serves on"
