"""A small NVMe/TCP host (initiator) for the tests, written from the NVMe
over Fabrics 1.1 TCP transport binding and the NVMe 2.0 base specification
(not from blockd's headers): PDUs with optional header and data digests,
Fabrics Connect of an admin queue and I/O queues, properties, Identify,
Get Log Page, features, Read/Write/Flush/Write Zeroes/Dataset Management/
Compare, reservations (Register, Report, Acquire, Release, the
notification log), writes in-capsule or through R2T/H2CData, raw PDUs for
bad input tests, and DH-HMAC-CHAP in-band authentication (NVMe 2.0, 8.13)
with the RFC 7919 groups, unidirectional or bidirectional.

    c = Controller("127.0.0.1", port, "nqn...:sub", hostnqn="nqn...:host")
    c.connect(io_queues=2)          # admin queue + enable + I/O queues
    c.write(1, lba=0, data=b"x" * 4096)
    assert c.read(1, lba=0, nlb=8) == b"x" * 4096
    a = Controller(..., dhchap_key="DHHC-1:01:...:", dhchap_ctrl_key=None).connect()
"""
import hashlib
import hmac
import os
import socket
import struct
import zlib

# PDU types (transport binding, 3.6.1)
ICREQ, ICRESP, H2C_TERM, C2H_TERM, CMD, RSP, H2C_DATA, C2H_DATA, R2T = 0, 1, 2, 3, 4, 5, 6, 7, 9
F_HDGST, F_DDGST, F_LAST, F_SUCCESS = 1, 2, 4, 8
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"

# NVMe status codes as (SCT << 8 | SC)
SC_SUCCESS = 0x000
SC_INVALID_OPCODE = 0x001
SC_INVALID_FIELD = 0x002
SC_INVALID_NS = 0x00B
SC_CMD_SEQ = 0x00C
SC_SGL_LENGTH = 0x00F
SC_HOST_ID_INCONSISTENT = 0x018
SC_WRITE_PROTECTED = 0x020
SC_TRANSIENT = 0x022
SC_LBA_RANGE = 0x080
SC_RESV_CONFLICT = 0x083
SC_AER_LIMIT = 0x105
SC_INVALID_LOG = 0x109
SC_CONNECT_INVALID_PARAM = 0x182
SC_CONNECT_INVALID_HOST = 0x184
SC_AUTH_REQUIRED = 0x191
SC_COMPARE_FAILED = 0x285


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(data, crc=0):
    """CRC32C (Castagnoli), reflected, init and final XOR 0xFFFFFFFF."""
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


class NvmeError(Exception):
    def __init__(self, status, result=0, what=""):
        super().__init__("%s: status 0x%03x result 0x%x" % (what, status, result))
        self.status, self.result = status, result


class TermReq(Exception):
    """The controller sent a C2HTermReq: fes, fei and the header it quoted."""

    def __init__(self, fes, fei, data):
        super().__init__("C2HTermReq FES 0x%02x FEI %d" % (fes, fei))
        self.fes, self.fei, self.data = fes, fei, data


def sgl_inline(length):
    # Data block descriptor, offset subtype: address 0 (ICDOFF 0)
    return struct.pack("<QI3xB", 0, length, 0x01)


def sgl_transport(length):
    # Transport SGL data block descriptor (type 5, subtype A)
    return struct.pack("<QI3xB", 0, length, 0x5A)


def sqe(opc, cid, nsid=0, sgl=None, cdw10=0, cdw11=0, cdw12=0, cdw13=0, cdw14=0, cdw15=0,
        flags=0x40, raw_tail=None):
    """A 64-byte submission queue entry (PSDT 01b: SGLs)."""
    sgl = sgl if sgl is not None else struct.pack("<QI3xB", 0, 0, 0x40)
    head = struct.pack("<BBHI", opc, flags, cid, nsid) + bytes(16) + sgl
    tail = raw_tail if raw_tail is not None else struct.pack(
        "<6I", cdw10, cdw11, cdw12, cdw13, cdw14, cdw15)
    return head + tail


class Queue:
    """One TCP connection: one NVMe queue."""

    def __init__(self, host, port, hdgst=False, ddgst=False, hpda=0, timeout=20):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.hdgst, self.ddgst, self.hpda = hdgst, ddgst, hpda
        self.cid = 0
        self.maxh2cdata = 0
        self.qid = None
        self.pending_rsp = {}  # cid -> (status, result) received while waiting for another
        self.to_send = {}      # cid -> data an R2T may ask for
        self.received = {}     # cid -> C2HData received so far

    # ---- raw I/O ----
    def send(self, b):
        self.sock.sendall(b)

    def recv_exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the controller")
            out += chunk
        return out

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def icreq(self, maxr2t=0, pfv=0):
        dg = (1 if self.hdgst else 0) | (2 if self.ddgst else 0)
        pdu = struct.pack("<BBBBIHBBI", ICREQ, 0, 128, 0, 128, pfv, self.hpda, dg, maxr2t)
        self.send(pdu + bytes(128 - len(pdu)))
        t, flags, hlen, pdo, plen, rest = self.recv_pdu_raw()
        if t == C2H_TERM:
            raise TermReq(*self._term(rest))
        assert t == ICRESP and hlen == 128 and plen == 128, (t, hlen, plen)
        pfv_r, cpda, dgst, maxdata = struct.unpack_from("<HBBI", rest, 0)
        assert pfv_r == 0
        self.cpda, self.maxh2cdata = cpda, maxdata
        assert dgst == dg, "digests not granted as asked: %d" % dgst
        return cpda, dgst, maxdata

    @staticmethod
    def _term(rest):
        fes, fei = struct.unpack_from("<HI", rest, 0)
        return fes, fei, rest[16:]

    def recv_pdu_raw(self):
        """(type, flags, hlen, pdo, plen, everything after the common header)."""
        ch = self.recv_exact(8)
        t, flags, hlen, pdo, plen = struct.unpack("<BBBBI", ch)
        rest = self.recv_exact(plen - 8)
        return t, flags, hlen, pdo, plen, rest

    def recv_pdu(self):
        """A PDU with its digests checked: (type, flags, header, data)."""
        t, flags, hlen, pdo, plen, rest = self.recv_pdu_raw()
        whole = struct.pack("<BBBBI", t, flags, hlen, pdo, plen) + rest
        if t == C2H_TERM:
            raise TermReq(*self._term(rest))
        hdr = whole[:hlen]
        if flags & F_HDGST:
            assert self.hdgst, "header digest the host did not ask for"
            (d,) = struct.unpack_from("<I", whole, hlen)
            assert d == crc32c(hdr), "bad header digest from the controller"
        elif self.hdgst and t != C2H_TERM:
            raise AssertionError("PDU type %d without the header digest" % t)
        data = b""
        if pdo and plen > pdo:
            end = plen - (4 if flags & F_DDGST else 0)
            data = whole[pdo:end]
            if flags & F_DDGST:
                (d,) = struct.unpack_from("<I", whole, end)
                assert d == crc32c(data), "bad data digest from the controller"
        return t, flags, hdr, data

    def pdu(self, ptype, hdr_rest, data=b"", flags=0, hlen=None, bad_hdgst=False,
            bad_ddgst=False):
        """Build a host PDU (digests as negotiated)."""
        hl = hlen if hlen is not None else 8 + len(hdr_rest)
        hd = 4 if self.hdgst else 0
        dd = 4 if (self.ddgst and data) else 0
        f = flags | (F_HDGST if self.hdgst else 0) | (F_DDGST if dd else 0)
        pdo = hl + hd if data else 0
        plen = hl + hd + len(data) + dd
        h = struct.pack("<BBBBI", ptype, f, hl, pdo, plen) + hdr_rest
        out = h
        if hd:
            out += struct.pack("<I", crc32c(h) ^ (1 if bad_hdgst else 0))
        out += data
        if dd:
            out += struct.pack("<I", crc32c(data) ^ (1 if bad_ddgst else 0))
        return out

    # ---- commands ----
    def next_cid(self):
        self.cid = (self.cid + 1) & 0xFFFF
        return self.cid

    def submit(self, entry, data_out=b"", inline=True, bad_ddgst=False):
        """Send a command capsule (data in-capsule when inline)."""
        cid = struct.unpack_from("<H", entry, 2)[0]
        if data_out and not inline:
            self.to_send[cid] = data_out
        self.send(self.pdu(CMD, entry, data_out if inline else b"", bad_ddgst=bad_ddgst))

    def command(self, entry, data_out=b"", inline=True, bad_ddgst=False):
        """Run one command: returns (status, result, data read)."""
        cid = struct.unpack_from("<H", entry, 2)[0]
        self.submit(entry, data_out, inline, bad_ddgst)
        return self.wait(cid)

    def wait(self, cid):
        """Serve R2Ts and collect C2HData (of any command) until cid completes."""
        while True:
            if cid in self.pending_rsp:
                st, res = self.pending_rsp.pop(cid)
                self.to_send.pop(cid, None)
                return st, res, bytes(self.received.pop(cid, b""))
            t, flags, hdr, pdata = self.recv_pdu()
            if t == RSP:
                res, sqhd, sqid, rcid, sf = struct.unpack_from("<QHHHH", hdr, 8)
                self.last_sqhd = sqhd
                st = (sf >> 1) & 0x7FF
                self.pending_rsp[rcid] = (st, res)
            elif t == C2H_DATA:
                rcid, _, off, ln = struct.unpack_from("<HHII", hdr, 8)
                data = self.received.setdefault(rcid, bytearray())
                assert off == len(data) and ln == len(pdata), (off, ln, len(pdata))
                data += pdata
                if flags & F_SUCCESS:
                    assert flags & F_LAST
                    self.pending_rsp[rcid] = (SC_SUCCESS, 0)
            elif t == R2T:
                rcid, ttag, off, ln = struct.unpack_from("<HHII", hdr, 8)
                assert rcid in self.to_send, "R2T for command %d with no data to send" % rcid
                self.h2c_data(rcid, ttag, self.to_send[rcid], off, ln)
            else:
                raise AssertionError("unexpected PDU type %d" % t)

    def h2c_data(self, cid, ttag, data, off, ln, chunk=None):
        chunk = chunk or self.maxh2cdata
        end = off + ln
        while off < end:
            n = min(chunk, end - off)
            last = F_LAST if off + n == end else 0
            self.send(self.pdu(H2C_DATA, struct.pack("<HHII4x", cid, ttag, off, n),
                               data[off:off + n], flags=last))
            off += n


def fabrics(fctype, cid, tail=b"", sgl=None):
    """A Fabrics command SQE: opcode 7Fh, FCTYPE at byte 4."""
    sgl = sgl if sgl is not None else struct.pack("<QI3xB", 0, 0, 0x40)
    e = struct.pack("<BBHB", 0x7F, 0x40, cid, fctype) + bytes(19) + sgl
    return e + tail + bytes(64 - len(e) - len(tail))


def connect_entry(cid, qid, sqsize, kato=0, cattr=0, recfmt=0):
    tail = struct.pack("<HHHBxI", recfmt, qid, sqsize - 1, cattr, kato)
    return fabrics(0x01, cid, tail, sgl=sgl_inline(1024))


def connect_data(hostid, cntlid, subnqn, hostnqn):
    d = bytearray(1024)
    d[0:16] = hostid
    struct.pack_into("<H", d, 16, cntlid)
    d[256:256 + len(subnqn)] = subnqn.encode()
    d[512:512 + len(hostnqn)] = hostnqn.encode()
    return bytes(d)


class Controller:
    """An admin queue and its I/O queues, as a host driver would use them."""

    def __init__(self, host, port, subnqn, hostnqn="nqn.2026-01.org.blockd:host-test",
                 hostid=None, hdgst=False, ddgst=False, kato=0, dhchap_key=None,
                 dhchap_ctrl_key=None, auth_hashes=(1, 2, 3), auth_dhgroups=(0, 1, 2, 3, 4, 5)):
        self.host, self.port, self.subnqn, self.hostnqn = host, port, subnqn, hostnqn
        self.hostid = hostid or os.urandom(16)
        self.hdgst, self.ddgst, self.kato = hdgst, ddgst, kato
        # DH-HMAC-CHAP: each queue authenticates when its Connect says ATR.
        self.dhchap_key, self.dhchap_ctrl_key = dhchap_key, dhchap_ctrl_key
        self.auth_hashes, self.auth_dhgroups = auth_hashes, auth_dhgroups
        self.auth_required = None
        self.auth_chosen = None
        self.admin = None
        self.io = []
        self.cntlid = None

    def _connect_queue(self, qid, sqsize, cntlid):
        q = Queue(self.host, self.port, self.hdgst, self.ddgst)
        q.icreq()
        cid = q.next_cid()
        st, res, _ = q.command(connect_entry(cid, qid, sqsize, self.kato if qid == 0 else 0),
                               connect_data(self.hostid, cntlid, self.subnqn, self.hostnqn))
        if st != SC_SUCCESS:
            q.close()
            raise NvmeError(st, res, "Connect qid %d" % qid)
        q.qid = qid
        self.auth_required = bool(res & AUTHREQ_ATR)
        if self.auth_required and self.dhchap_key:
            try:
                self.auth_chosen = authenticate(q, self.hostnqn, self.subnqn, self.dhchap_key,
                                                self.dhchap_ctrl_key, self.auth_hashes,
                                                self.auth_dhgroups)
            except Exception:
                q.close()
                raise
        return q, res & 0xFFFF

    def connect(self, io_queues=1, sqsize=32, io_sqsize=64):
        self.admin, self.cntlid = self._connect_queue(0, sqsize, 0xFFFF)
        self.prop_set(0x14, (6 << 16) | (4 << 20) | 1)  # CC: IOSQES, IOCQES, EN
        assert self.prop_get(0x1C) & 1, "CSTS.RDY not set after CC.EN"
        for qid in range(1, io_queues + 1):
            q, _ = self._connect_queue(qid, io_sqsize, self.cntlid)
            self.io.append(q)
        return self

    def close(self):
        for q in self.io + ([self.admin] if self.admin else []):
            q.close()

    # ---- admin ----
    def admin_cmd(self, entry, data_out=b"", inline=True, check=True):
        st, res, data = self.admin.command(entry, data_out, inline)
        if check and st != SC_SUCCESS:
            raise NvmeError(st, res, "admin opcode 0x%02x" % entry[0])
        return st, res, data

    def prop_get(self, off, wide=False):
        q = self.admin
        tail = struct.pack("<B3xI", 1 if wide else 0, off)
        st, res, _ = q.command(fabrics(0x04, q.next_cid(), tail))
        if st:
            raise NvmeError(st, res, "Property Get 0x%x" % off)
        return res

    def prop_set(self, off, value):
        q = self.admin
        tail = struct.pack("<B3xIQ", 0, off, value)
        st, res, _ = q.command(fabrics(0x00, q.next_cid(), tail))
        if st:
            raise NvmeError(st, res, "Property Set 0x%x" % off)

    def identify(self, cns, nsid=0, check=True):
        q = self.admin
        e = sqe(0x06, q.next_cid(), nsid, sgl_transport(4096), cdw10=cns)
        st, res, data = self.admin_cmd(e, check=check)
        return data if check else (st, data)

    def get_log_page(self, lid, length, offset=0, check=True):
        q = self.admin
        numd = length // 4 - 1
        e = sqe(0x02, q.next_cid(), 0xFFFFFFFF, sgl_transport(length),
                cdw10=lid | ((numd & 0xFFFF) << 16), cdw11=numd >> 16,
                cdw12=offset & 0xFFFFFFFF, cdw13=offset >> 32)
        st, res, data = self.admin_cmd(e, check=check)
        return data if check else (st, data)

    def set_features(self, fid, cdw11, check=True, nsid=0):
        q = self.admin
        st, res, _ = self.admin_cmd(sqe(0x09, q.next_cid(), nsid, cdw10=fid, cdw11=cdw11),
                                    check=check)
        return res if check else (st, res)

    def get_features(self, fid, nsid=0, cdw11=0, length=0, check=True):
        """Get Features: the result (and the data when length)."""
        q = self.admin
        e = sqe(0x0A, q.next_cid(), nsid, sgl_transport(length) if length else None,
                cdw10=fid, cdw11=cdw11)
        st, res, data = self.admin_cmd(e, check=check)
        if not check:
            return st, res, data
        return (res, data) if length else res

    def keep_alive(self):
        q = self.admin
        self.admin_cmd(sqe(0x18, q.next_cid()))

    def discovery_log(self):
        hdr = self.get_log_page(0x70, 1024)
        genctr, numrec, recfmt = struct.unpack_from("<QQH", hdr, 0)
        full = self.get_log_page(0x70, 1024 + 1024 * numrec) if numrec else hdr
        entries = []
        for i in range(numrec):
            e = full[1024 + 1024 * i:2048 + 1024 * i]
            trtype, adrfam, subtype, treq, portid, cntlid, asqsz = struct.unpack_from(
                "<BBBBHHH", e, 0)
            entries.append(dict(
                trtype=trtype, adrfam=adrfam, subtype=subtype, treq=treq, portid=portid,
                cntlid=cntlid, asqsz=asqsz,
                trsvcid=e[32:64].rstrip(b"\0 ").decode(),
                subnqn=e[256:512].rstrip(b"\0").decode(),
                traddr=e[512:768].rstrip(b"\0 ").decode()))
        return genctr, entries

    # ---- I/O ----
    def ioq(self, n=0):
        return self.io[n % len(self.io)]

    def io_cmd(self, entry, data_out=b"", inline=True, q=None, check=True, bad_ddgst=False):
        q = q or self.ioq()
        st, res, data = q.command(entry, data_out, inline, bad_ddgst)
        if check and st != SC_SUCCESS:
            raise NvmeError(st, res, "I/O opcode 0x%02x" % entry[0])
        return st, data

    def read(self, nsid, lba, nlb, bs=512, q=None, check=True):
        q = q or self.ioq()
        e = sqe(0x02, q.next_cid(), nsid, sgl_transport(nlb * bs),
                cdw10=lba & 0xFFFFFFFF, cdw11=lba >> 32, cdw12=nlb - 1)
        st, data = self.io_cmd(e, q=q, check=check)
        return data if check else (st, data)

    def write(self, nsid, lba, data, bs=512, fua=False, inline=None, q=None, check=True,
              bad_ddgst=False):
        q = q or self.ioq()
        nlb = len(data) // bs
        inline = len(data) <= 8192 if inline is None else inline
        sgl = sgl_inline(len(data)) if inline else sgl_transport(len(data))
        e = sqe(0x01, q.next_cid(), nsid, sgl, cdw10=lba & 0xFFFFFFFF, cdw11=lba >> 32,
                cdw12=(nlb - 1) | ((1 << 30) if fua else 0))
        return self.io_cmd(e, data, inline, q=q, check=check, bad_ddgst=bad_ddgst)[0]

    def compare(self, nsid, lba, data, bs=512, q=None):
        q = q or self.ioq()
        nlb = len(data) // bs
        inline = len(data) <= 8192
        sgl = sgl_inline(len(data)) if inline else sgl_transport(len(data))
        e = sqe(0x05, q.next_cid(), nsid, sgl, cdw10=lba & 0xFFFFFFFF, cdw11=lba >> 32,
                cdw12=nlb - 1)
        return self.io_cmd(e, data, inline, q=q, check=False)[0]

    def flush(self, nsid, q=None):
        q = q or self.ioq()
        return self.io_cmd(sqe(0x00, q.next_cid(), nsid), q=q)[0]

    def write_zeroes(self, nsid, lba, nlb, deac=False, q=None, check=True):
        q = q or self.ioq()
        e = sqe(0x08, q.next_cid(), nsid, cdw10=lba & 0xFFFFFFFF, cdw11=lba >> 32,
                cdw12=(nlb - 1) | ((1 << 25) if deac else 0))
        return self.io_cmd(e, q=q, check=check)[0]

    def deallocate(self, nsid, ranges, q=None, check=True):
        """Dataset Management, attribute deallocate: ranges of (lba, nlb)."""
        q = q or self.ioq()
        data = b"".join(struct.pack("<IIQ", 0, nlb, lba) for lba, nlb in ranges)
        e = sqe(0x09, q.next_cid(), nsid, sgl_inline(len(data)), cdw10=len(ranges) - 1,
                cdw11=1 << 2)
        return self.io_cmd(e, data, True, q=q, check=check)[0]

    # ---- reservations (NVMe 2.0 base 7.x; NVM command set: opcodes 0Dh,
    # 0Eh, 11h, 15h). Types: 1 Write Exclusive, 2 Exclusive Access, 3/4
    # the same for registrants only, 5/6 for all registrants. ----
    def _resv(self, opc, nsid, cdw10, data, q=None):
        q = q or self.ioq()
        e = sqe(opc, q.next_cid(), nsid, sgl_inline(len(data)), cdw10=cdw10)
        return self.io_cmd(e, data, True, q=q, check=False)[0]

    def resv_register(self, nsid, nrkey, crkey=0, action=0, iekey=False, cptpl=0, q=None):
        """action 0 register, 1 unregister, 2 replace; cptpl 2 clears, 3 sets
        Persist Through Power Loss. Returns the status."""
        cdw10 = action | (8 if iekey else 0) | (cptpl << 30)
        return self._resv(0x0D, nsid, cdw10, struct.pack("<QQ", crkey, nrkey), q)

    def resv_acquire(self, nsid, crkey, rtype, action=0, prkey=0, iekey=False, q=None):
        """action 0 acquire, 1 preempt, 2 preempt and abort."""
        cdw10 = action | (8 if iekey else 0) | (rtype << 8)
        return self._resv(0x11, nsid, cdw10, struct.pack("<QQ", crkey, prkey), q)

    def resv_release(self, nsid, crkey, rtype=0, action=0, iekey=False, q=None):
        """action 0 release, 1 clear."""
        cdw10 = action | (8 if iekey else 0) | (rtype << 8)
        return self._resv(0x15, nsid, cdw10, struct.pack("<Q", crkey), q)

    def resv_log(self):
        """Get Log Page 80h (Reservation Notification): dict of count, type
        (0 empty, 1 registration preempted, 2 reservation released, 3
        reservation preempted), available (pages left after it), nsid."""
        d = self.get_log_page(0x80, 64)
        count, = struct.unpack_from("<Q", d, 0)
        return dict(count=count, type=d[8], available=d[9],
                    nsid=struct.unpack_from("<I", d, 12)[0])

    def wait_aen(self, cid, timeout=15):
        """The completion of the Asynchronous Event Request cid: its result."""
        self.admin.sock.settimeout(timeout)
        while True:
            t, flags, hdr, _ = self.admin.recv_pdu()
            res, _, _, rcid, sf = struct.unpack_from("<QHHHH", hdr, 8)
            if t == RSP and rcid == cid:
                return res & 0xFFFFFFFF

    def resv_report(self, nsid, length=4096, eds=True, q=None):
        """Reservation Report: (status, report dict or None). With eds the
        extended data structure (64-byte header and entries, 128-bit host
        identifiers)."""
        q = q or self.ioq()
        e = sqe(0x0E, q.next_cid(), nsid, sgl_transport(length), cdw10=length // 4 - 1,
                cdw11=1 if eds else 0)
        st, data = self.io_cmd(e, q=q, check=False)
        if st != SC_SUCCESS:
            return st, None
        gen, rtype, regctl = struct.unpack_from("<IBH", data, 0)
        rep = dict(gen=gen, rtype=rtype, regctl=regctl, ptpls=data[9], regs=[])
        for i in range(regctl):
            r = data[64 + 64 * i:128 + 64 * i]
            if len(r) < 64:
                break
            cntlid, rcsts = struct.unpack_from("<HB", r, 0)
            rep["regs"].append(dict(cntlid=cntlid, holds=bool(rcsts & 1),
                                    key=struct.unpack_from("<Q", r, 8)[0], hostid=bytes(r[16:32])))
        return st, rep


def nqn_str(b):
    return b.rstrip(b"\0").decode()


def parse_id_ctrl(d):
    return dict(
        sn=d[4:24].decode().strip(), mn=d[24:64].decode().strip(), cmic=d[76], mdts=d[77],
        cntlid=struct.unpack_from("<H", d, 78)[0], ver=struct.unpack_from("<I", d, 80)[0],
        cntrltype=d[111], aerl=d[259], kas=struct.unpack_from("<H", d, 320)[0],
        maxcmd=struct.unpack_from("<H", d, 514)[0], nn=struct.unpack_from("<I", d, 516)[0],
        ctratt=struct.unpack_from("<I", d, 96)[0],
        oncs=struct.unpack_from("<H", d, 520)[0], vwc=d[525],
        sgls=struct.unpack_from("<I", d, 536)[0], subnqn=nqn_str(d[768:1024]),
        ioccsz=struct.unpack_from("<I", d, 1792)[0], iorcsz=struct.unpack_from("<I", d, 1796)[0],
        icdoff=struct.unpack_from("<H", d, 1800)[0], msdbd=d[1803],
        oaes=struct.unpack_from("<I", d, 92)[0], anatt=d[342], anacap=d[343],
        anagrpmax=struct.unpack_from("<I", d, 344)[0],
        nanagrpid=struct.unpack_from("<I", d, 348)[0])


def parse_id_ns(d):
    nsze, ncap, nuse = struct.unpack_from("<QQQ", d, 0)
    flbas = d[26] & 0xF
    lbads = d[128 + 4 * flbas + 2]
    return dict(nsze=nsze, ncap=ncap, nuse=nuse, nmic=d[30], rescap=d[31], nsattr=d[99],
                nguid=d[104:120], eui64=d[120:128], block_size=1 << lbads if lbads else 0,
                anagrpid=struct.unpack_from("<I", d, 92)[0])


# Asymmetric Namespace Access log page (NVMe 2.0 base, Get Log Page 0Ch):
# a 16-byte header (change count u64, number of group descriptors u16),
# then one descriptor per group: group id u32, number of NSIDs u32, change
# count u64, state (low nibble of byte 16), 15 reserved bytes, and the
# NSIDs (u32 each) unless the host asked for groups only (LSP bit 0).
ANA_STATES = {1: "optimized", 2: "non-optimized", 3: "inaccessible", 4: "persistent-loss",
              0xF: "change"}
AEN_ANA_CHANGE = 0x0C0302  # notice (2), ANA change (03h), log page 0Ch
AEC_ANA_CHANGE = 1 << 11


def ana_log(ctrl, length=8192, rgo=False):
    q = ctrl.admin
    numd = length // 4 - 1
    e = sqe(0x02, q.next_cid(), 0xFFFFFFFF, sgl_transport(length),
            cdw10=0x0C | ((1 << 8) if rgo else 0) | ((numd & 0xFFFF) << 16), cdw11=numd >> 16)
    st, res, d = ctrl.admin_cmd(e)
    chgcnt, ngrps = struct.unpack_from("<QH", d, 0)
    off, groups = 16, []
    for _ in range(ngrps):
        grpid, nns, gchg = struct.unpack_from("<IIQ", d, off)
        state = d[off + 16] & 0xF
        nsids = list(struct.unpack_from("<%dI" % nns, d, off + 32)) if nns else []
        groups.append(dict(grpid=grpid, chgcnt=gchg, state=ANA_STATES.get(state, state),
                           nsids=nsids))
        off += 32 + 4 * nns
    return dict(chgcnt=chgcnt, groups=groups)


def ana_state_of(log, nsid):
    """(group id, state) of nsid in a parsed ANA log, or (None, None)."""
    for g in log["groups"]:
        if nsid in g["nsids"]:
            return g["grpid"], g["state"]
    return None, None


# ---- DH-HMAC-CHAP (NVMe base 2.0, 8.13.5; groups of RFC 7919) ----

AUTHREQ_ATR = 1 << 17  # Connect response dword 0
HASH_NAMES = {1: "sha256", 2: "sha384", 3: "sha512"}
DH_BITS = {1: 2048, 2: 3072, 3: 4096, 4: 6144, 5: 8192}
# RFC 7919 A.1-A.5: p = 2^b - 2^(b-64) + {[2^(b-130) e] + X} * 2^64 - 1, g = 2.
_RFC7919_X = {2048: 560316, 3072: 2625351, 4096: 5736041, 6144: 15705020, 8192: 10965728}
# Failure reason code explanations.
R_FAILED, R_NOT_USABLE, R_CONCAT, R_HASH, R_DHGROUP, R_PAYLOAD, R_MESSAGE = range(1, 8)


def _e_scaled(k, guard=64):
    """floor(2^k * e), from the series sum of 1/n!."""
    term, total, n = 1 << (k + guard), 0, 0
    while term:
        total += term
        n += 1
        term //= n
    return total >> guard


_primes = {}


def ffdhe_prime(dhgid):
    b = DH_BITS[dhgid]
    if b not in _primes:
        _primes[b] = 2**b - 2**(b - 64) + (_e_scaled(b - 130) + _RFC7919_X[b]) * 2**64 - 1
    return _primes[b]


def dhchap_secret(text, nqn):
    """A secret "DHHC-1:hh:<base64(secret || CRC-32)>:" after its transformation."""
    import base64
    assert text.startswith("DHHC-1:") and text.endswith(":"), text
    hh, b64 = text[7:9], text[10:-1]
    raw = base64.b64decode(b64, validate=True)
    secret, crc = raw[:-4], raw[-4:]
    assert len(secret) in (32, 48, 64), len(secret)
    assert struct.pack("<I", zlib.crc32(secret)) == crc, "CRC-32 of the secret"
    t = int(hh, 16)
    if t == 0:
        return secret
    return hmac.new(secret, nqn.encode() + b"NVMe-over-Fabrics", HASH_NAMES[t]).digest()


def dhchap_response(hash_id, key, chal, seq, tid, label, nqn1, nqn2):
    m = chal + struct.pack("<IHB", seq, tid, 0) + label + nqn1.encode() + b"\0" + nqn2.encode()
    return hmac.new(key, m, HASH_NAMES[hash_id]).digest()


def dhchap_augment(hash_id, skey, chal):
    hashed = hashlib.new(HASH_NAMES[hash_id], skey).digest()
    return hmac.new(hashed, chal, HASH_NAMES[hash_id]).digest()


class AuthFailed(Exception):
    """The controller answered a Failure1 (reason code explanation in .reason),
    or its own response was wrong (.reason None)."""

    def __init__(self, reason, what):
        super().__init__(what)
        self.reason = reason


def auth_send(q, data, check=True):
    tail = struct.pack("<BBBBI", 0, 1, 1, 0xE9, len(data))
    st, res, _ = q.command(fabrics(0x05, q.next_cid(), tail, sgl=sgl_inline(len(data))), data)
    if check and st:
        raise NvmeError(st, res, "Authentication Send")
    return st


def auth_recv(q, al=4096, check=True):
    tail = struct.pack("<BBBBI", 0, 1, 1, 0xE9, al)
    st, res, data = q.command(fabrics(0x06, q.next_cid(), tail, sgl=sgl_transport(al)))
    if check and st:
        raise NvmeError(st, res, "Authentication Receive")
    if check and data[0] == 0 and data[1] == 0xF1:
        raise AuthFailed(data[7], "Failure1, reason 0x%02x/0x%02x" % (data[6], data[7]))
    return data if check else (st, data)


def negotiate_msg(tid, hashes=(1, 2, 3), dhgroups=(0, 1, 2, 3, 4, 5), sc_c=0):
    ids = bytearray(60)
    ids[0:len(hashes)] = bytes(hashes)
    ids[30:30 + len(dhgroups)] = bytes(dhgroups)
    desc = struct.pack("<BBBB", 1, 0, len(hashes), len(dhgroups)) + bytes(ids)
    return struct.pack("<BBHHBB", 0, 0, 0, tid, sc_c, 1) + desc


def authenticate(q, hostnqn, subnqn, key, ctrl_key=None, hashes=(1, 2, 3),
                 dhgroups=(0, 1, 2, 3, 4, 5), tid=None, wrong_r1=False):
    """Run one DH-HMAC-CHAP transaction on queue q as the host. Returns the
    (hash id, DH group id) the controller chose; raises AuthFailed."""
    tid = os.urandom(2)[0] | 0x100 if tid is None else tid
    auth_send(q, negotiate_msg(tid, hashes, dhgroups))
    ch = auth_recv(q)
    t, i, ctid, hl, hash_id, dhgid, dhvlen, s1 = struct.unpack_from("<BBxxHBxBBHI", ch, 0)
    assert (t, i, ctid) == (1, 1, tid), ("challenge", t, i, ctid)
    assert hl == hashlib.new(HASH_NAMES[hash_id]).digest_size, hl
    c1, dhv = ch[16:16 + hl], ch[16 + hl:16 + hl + dhvlen]
    ours, skey = b"", None
    if dhgid:
        p = ffdhe_prime(dhgid)
        plen = DH_BITS[dhgid] // 8
        assert dhvlen == plen, dhvlen
        x = int.from_bytes(os.urandom(64), "big") | (1 << 511)
        ours = pow(2, x, p).to_bytes(plen, "big")
        skey = pow(int.from_bytes(dhv, "big"), x, p).to_bytes(plen, "big")
        c1 = dhchap_augment(hash_id, skey, c1)
    kh = dhchap_secret(key, hostnqn)
    r1 = dhchap_response(hash_id, kh, c1, s1, tid, b"HostHost", hostnqn, subnqn)
    if wrong_r1:
        r1 = bytes(b ^ 0xFF for b in r1)
    c2, s2 = bytes(hl), 0
    if ctrl_key:
        c2 = os.urandom(hl)
        s2 = struct.unpack("<I", os.urandom(4))[0] | 1
    reply = struct.pack("<BBHHBBBBHI", 1, 2, 0, tid, hl, 0, 1 if ctrl_key else 0, 0,
                        len(ours), s2) + r1 + c2 + ours
    auth_send(q, reply)
    ok = auth_recv(q)
    t, i, ctid, shl, rvalid = struct.unpack_from("<BBxxHBxB", ok, 0)
    assert (t, i, ctid, shl) == (1, 3, tid, hl), ("success1", t, i, ctid, shl)
    if ctrl_key:
        kc = dhchap_secret(ctrl_key, subnqn)
        c2a = dhchap_augment(hash_id, skey, c2) if skey else c2
        want = dhchap_response(hash_id, kc, c2a, s2, tid, b"Controller", subnqn, hostnqn)
        if not (rvalid & 1) or not hmac.compare_digest(ok[16:16 + hl], want):
            auth_send(q, struct.pack("<BBHHBB", 0, 0xF0, 0, tid, 1, R_FAILED) + bytes(8))
            raise AuthFailed(None, "the controller's response R2 is wrong")
        auth_send(q, struct.pack("<BBHH", 1, 4, 0, tid) + bytes(10))
    return hash_id, dhgid
