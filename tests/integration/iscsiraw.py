"""A minimal raw iSCSI initiator for tests that must see the exact SCSI
status and sense data of one command (libiscsi's tools hide them, and
qemu retries or translates them). lib.sh puts this directory on PYTHONPATH.

    s = Session(port, target_iqn)          # login, one connection, LUN 0
    s.login_keys["TargetPortalGroupTag"]   # the target's login keys
    s.clear_unit_attention()               # the new session's UNIT ATTENTION
    st, sense, data = s.cmd(cdb, data_out=b"", data_in_len=0)
    itt = s.send_cmd(cdb); s.send_tmf(1, rtt=itt); s.recv_pdu()  # no waiting
    s.close()

st is the SCSI status byte (0 GOOD, 2 CHECK CONDITION, 8 BUSY); sense is
the raw fixed-format sense data (b"" when none). Immediate data only: the
caller keeps data_out within FirstBurstLength (64 KiB by default).
Helpers: sense_key(sense), asc_ascq(sense), sense_info(sense).
"""
import socket
import struct


def _recvn(s, n):
    b = bytearray()
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            raise EOFError("the target closed the connection")
        b += d
    return bytes(b)


def _pad(n):
    return (4 - n % 4) % 4


class Session:
    def __init__(self, port, target, host="127.0.0.1", timeout=120,
                 initiator="iqn.2026-12.org.blockd.test:raw"):
        self.s = socket.create_connection((host, port), timeout=timeout)
        keys = ("InitiatorName=%s\0SessionType=Normal\0TargetName=%s\0HeaderDigest=None\0"
                "DataDigest=None\0ImmediateData=Yes\0InitialR2T=No\0"
                "MaxRecvDataSegmentLength=262144\0" % (initiator, target)).encode()
        b = bytearray(48)
        b[0], b[1] = 0x43, 0x87  # login request, immediate; T, CSG=1, NSG=3
        b[5:8] = len(keys).to_bytes(3, "big")
        b[8:14] = b"\x40\0\0\0\0\x07"
        struct.pack_into(">I", b, 24, 1)
        self.s.sendall(bytes(b) + keys + bytes(_pad(len(keys))))
        bhs, data = self._recv()
        if bhs[0] & 0x3F != 0x23 or bhs[36] != 0:
            raise RuntimeError("login failed: class %d detail %d" % (bhs[36], bhs[37]))
        # the target's login keys (TargetPortalGroupTag, ...)
        self.login_keys = dict(kv.split("=", 1) for kv in data.decode().split("\0") if "=" in kv)
        self.exp_stat_sn = struct.unpack(">I", bhs[24:28])[0] + 1
        self.cmd_sn = 1
        self.itt = 0

    def _recv(self):
        bhs = _recvn(self.s, 48)
        dsl = int.from_bytes(bhs[5:8], "big")
        return bhs, _recvn(self.s, dsl + _pad(dsl))[:dsl] if dsl else b""

    def send_cmd(self, cdb, data_out=b"", data_in_len=0):
        """Send one command without waiting for its response: its ITT
        (the caller then reads the PDUs with recv_pdu)."""
        self.itt += 1
        b = self._cmd_pdu(cdb, data_out, data_in_len)
        self.s.sendall(b + data_out + bytes(_pad(len(data_out))))
        return self.itt

    def send_tmf(self, function, rtt=0xFFFFFFFF, lun=0):
        """Send a task management function request (immediate): its ITT.
        rtt: the Referenced Task Tag (ABORT TASK). The response is a PDU
        of opcode 0x22 with the response code in byte 2 (recv_pdu)."""
        self.itt += 1
        b = bytearray(48)
        b[0], b[1] = 0x40 | 0x02, 0x80 | (function & 0x7F)
        b[8:10] = struct.pack(">H", lun)
        # RefCmdSN: the CmdSN the aborted task was sent with (the last one)
        struct.pack_into(">IIIII", b, 16, self.itt, rtt, self.cmd_sn, self.exp_stat_sn,
                         self.cmd_sn - 1)
        self.s.sendall(bytes(b))
        return self.itt

    def recv_pdu(self):
        """The next PDU from the target: (opcode, bhs, data)."""
        bhs, data = self._recv()
        if bhs[0] & 0x3F in (0x21, 0x22, 0x25) and (bhs[0] & 0x3F != 0x25 or bhs[1] & 0x01):
            self.exp_stat_sn = struct.unpack(">I", bhs[24:28])[0] + 1
        return bhs[0] & 0x3F, bhs, data

    def _cmd_pdu(self, cdb, data_out, data_in_len):
        b = bytearray(48)
        flags = 0x80 | 0x01  # final, simple task
        if data_out:
            flags |= 0x20
        if data_in_len:
            flags |= 0x40
        b[0], b[1] = 0x01, flags
        b[5:8] = len(data_out).to_bytes(3, "big")
        xfer = len(data_out) if data_out else data_in_len
        struct.pack_into(">IIII", b, 16, self.itt, xfer, self.cmd_sn, self.exp_stat_sn)
        b[32:32 + len(cdb)] = cdb
        self.cmd_sn += 1
        return bytes(b)

    def cmd(self, cdb, data_out=b"", data_in_len=0):
        """One command, waited for: (status, sense, data_in)."""
        self.itt += 1
        b = self._cmd_pdu(cdb, data_out, data_in_len)
        self.s.sendall(b + data_out + bytes(_pad(len(data_out))))
        data_in = bytearray()
        while True:
            bhs, data = self._recv()
            op = bhs[0] & 0x3F
            if op == 0x25:  # Data-In
                data_in += data
                if bhs[1] & 0x01:  # S: status in this PDU
                    self.exp_stat_sn = struct.unpack(">I", bhs[24:28])[0] + 1
                    return bhs[3], b"", bytes(data_in)
                continue
            if op == 0x21:  # SCSI response
                self.exp_stat_sn = struct.unpack(">I", bhs[24:28])[0] + 1
                sense = b""
                if bhs[3] == 2 and len(data) >= 2:
                    n = int.from_bytes(data[0:2], "big")
                    sense = data[2:2 + n]
                return bhs[3], sense, bytes(data_in)
            if op == 0x20:  # NOP-In from the target: answer pings, ignore the rest
                ttt = struct.unpack(">I", bhs[20:24])[0]
                if ttt != 0xFFFFFFFF:
                    r = bytearray(48)
                    r[0], r[1] = 0x40, 0x80
                    struct.pack_into(">IIII", r, 16, 0xFFFFFFFF, ttt, self.cmd_sn,
                                     self.exp_stat_sn)
                    self.s.sendall(bytes(r))
                continue
            if op == 0x32:  # asynchronous message: ignore
                continue
            raise RuntimeError("unexpected PDU opcode 0x%02x" % op)

    def clear_unit_attention(self, tries=5):
        """TEST UNIT READY until it stops reporting UNIT ATTENTION (a new
        session's power-on/reset condition): the next command then gets
        its own status."""
        for _ in range(tries):
            st, sense, _ = self.cmd(bytes(6))
            if not (st == 2 and sense_key(sense) == 6):
                return st, sense
        return st, sense

    def close(self):
        self.s.close()


def read16(lba, n):
    return struct.pack(">BBQIBB", 0x88, 0, lba, n, 0, 0)


def write16(lba, n, fua=False):
    return struct.pack(">BBQIBB", 0x8A, 0x08 if fua else 0, lba, n, 0, 0)


def write_same16(lba, n):
    """WRITE SAME (16) of the one block of data-out over n blocks (0: to
    the end of the LU)."""
    return struct.pack(">BBQIBB", 0x93, 0, lba, n, 0, 0)


def compare_and_write(lba, n):
    return struct.pack(">BBQBBBBBB", 0x89, 0, lba, 0, 0, 0, n, 0, 0)


def sync_cache10():
    return bytes([0x35] + [0] * 9)


def sense_key(sense):
    return sense[2] & 0x0F if len(sense) > 2 else None


def asc_ascq(sense):
    return (sense[12], sense[13]) if len(sense) > 13 else None


def sense_info(sense):
    """The INFORMATION field when VALID is set, else None."""
    if len(sense) > 6 and sense[0] & 0x80:
        return struct.unpack(">I", sense[3:7])[0]
    return None
