"""Checks of the NVMe/TCP target through the test initiator (nvmetcp.py),
shared by t-nvme-engine (the engine alone, nvmet_harness) and the
end-to-end tests. Each check raises on failure; run(name) prints it.

Needs: HOST, IO_PORT, DISC_PORT and the subsystems of nvmet_harness (or
the same ones made through the API): ANY (any host; nsid 1 of 512-byte
blocks, nsid 2 of 4096-byte blocks), ONLY (host HOST_OK only; nsid 1
read-only).
"""
import os
import socket
import struct
import time

import nvmetcp as n

ANY = "nqn.2026-01.org.blockd:any"
ONLY = "nqn.2026-01.org.blockd:only"
HOST_OK = "nqn.2026-01.org.blockd:host-ok"


class Env:
    def __init__(self, host, io_port, disc_port, log=None):
        self.host, self.io_port, self.disc_port, self.log = host, io_port, disc_port, log

    def ctrl(self, subnqn=ANY, **kw):
        return n.Controller(self.host, self.io_port, subnqn, **kw)

    def log_has(self, text, timeout=10):
        if not self.log:
            return True
        end = time.time() + timeout
        while time.time() < end:
            with open(self.log, errors="replace") as f:
                if text in f.read():
                    return True
            time.sleep(0.1)
        raise AssertionError("log never said %r" % text)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def check_identify(env):
    c = env.ctrl().connect(io_queues=2)
    idc = n.parse_id_ctrl(c.identify(1))
    expect(idc["subnqn"] == ANY and idc["cntlid"] == c.cntlid, "identify controller: %r" % idc)
    expect(idc["ver"] == 0x20000 and idc["cntrltype"] == 1, "VER 2.0, I/O controller")
    expect(idc["sgls"] & 1 and idc["sgls"] & (1 << 20), "SGL support bits")
    expect(idc["icdoff"] == 0 and idc["msdbd"] == 1 and idc["iorcsz"] == 1, "fabrics fields")
    expect(idc["ioccsz"] * 16 - 64 >= 4096, "IOCCSZ advertises in-capsule data")
    expect(idc["oncs"] & 0b101101 == 0b101101, "ONCS: compare, DSM, write zeroes, reservations")
    expect(idc["vwc"] & 1 and idc["mdts"] == 8, "VWC and MDTS")
    ns1 = n.parse_id_ns(c.identify(0, 1))
    ns2 = n.parse_id_ns(c.identify(0, 2))
    expect(ns1["block_size"] == 512 and ns2["block_size"] == 4096, "block sizes")
    expect(ns1["nsze"] * 512 == 64 << 20 and ns2["nsze"] * 4096 == 16 << 20, "sizes")
    nslist = struct.unpack("<4I", c.identify(2)[:16])
    expect(nslist == (1, 2, 0, 0), "active namespace list %r" % (nslist,))
    descs = c.identify(3, 1)
    expect(descs[0] == 1 and descs[1] == 8 and descs[4:12] == ns1["eui64"], "EUI64 descriptor")
    expect(descs[12] == 2 and descs[16:32] == ns1["nguid"], "NGUID descriptor")
    expect(descs[32] == 3 and descs[33] == 16, "UUID descriptor")
    indep = c.identify(0x08, 1)
    expect(indep[1] & 1 and indep[14] & 1 and not indep[8] & 1, "CNS 08h: shared, ready, writable")
    expect(c.identify(0x06) == bytes(4096), "CNS 06h: no NVM command set limits")
    st, _ = c.identify(0x55, check=False)
    expect(st == n.SC_INVALID_FIELD, "unknown CNS: invalid field, got 0x%x" % st)
    st, _, _ = c.admin_cmd(n.sqe(0x7E, c.admin.next_cid()), check=False)
    expect(st == n.SC_INVALID_OPCODE, "unknown admin opcode: 0x%x" % st)
    nq = c.set_features(0x07, (7 << 16) | 7)
    expect(nq == (3 << 16) | 3, "number of queues bounded by qid_max: 0x%x" % nq)
    expect(c.prop_get(0x08) == 0x20000, "VS")
    cap = c.prop_get(0x00, wide=True)
    expect(cap & 0xFFFF == 127 and cap >> 37 & 1, "CAP MQES/CSS 0x%x" % cap)
    smart = c.get_log_page(0x02, 512)
    expect(len(smart) == 512, "SMART log")
    st, _ = c.get_log_page(0x70, 1024, check=False)
    expect(st == n.SC_INVALID_LOG, "discovery log on an I/O controller: 0x%x" % st)
    st, res, _ = c.admin_cmd(n.sqe(0x08, c.admin.next_cid(), cdw10=1 << 16), check=False)
    expect(st == 0 and res & 1, "Abort: not aborted")
    c.keep_alive()
    c.prop_set(0x14, (6 << 16) | (4 << 20) | 1 | (1 << 14))  # CC.SHN normal
    expect(c.prop_get(0x1C) & 0xC == 0x8, "CSTS.SHST complete after CC.SHN")
    c.close()


def check_io(env, hdgst=False, ddgst=False):
    c = env.ctrl(hdgst=hdgst, ddgst=ddgst).connect(io_queues=2)
    data = os.urandom(4096)
    c.write(1, 16, data)
    expect(c.read(1, 16, 8, q=c.ioq(1)) == data, "in-capsule write reads back on queue 2")
    big = os.urandom(1 << 20)
    c.write(1, 4096, big, inline=False, fua=True)
    expect(c.read(1, 4096, 2048) == big, "1 MiB write through R2T reads back")
    big4k = os.urandom(256 * 1024)
    c.write(2, 10, big4k, bs=4096, inline=False)
    expect(c.read(2, 10, 64, bs=4096) == big4k, "4 KiB-block namespace")
    c.flush(1)
    expect(c.compare(1, 16, data) == n.SC_SUCCESS, "compare equal")
    expect(c.compare(1, 16, bytes(4096)) == n.SC_COMPARE_FAILED, "compare miscompare")
    c.write_zeroes(1, 16, 8)
    expect(c.read(1, 16, 8) == bytes(4096), "write zeroes")
    c.write(1, 32, data)
    c.write_zeroes(1, 32, 8, deac=True)
    expect(c.read(1, 32, 8) == bytes(4096), "write zeroes with DEAC reads zeroes")
    c.deallocate(1, [(4096, 2048), (0, 8)])
    st = c.write(1, 131072 - 4, data, check=False)
    expect(st == n.SC_LBA_RANGE, "write past the end: LBA out of range, got 0x%x" % st)
    st, _ = c.read(1, 1 << 40, 1, check=False)
    expect(st == n.SC_LBA_RANGE, "read far past the end: 0x%x" % st)
    st, _ = c.read(9, 0, 1, check=False)
    expect(st == n.SC_INVALID_NS, "unknown namespace: 0x%x" % st)
    q = c.ioq()
    st, _ = c.io_cmd(n.sqe(0x0D, q.next_cid(), 1), check=False)
    expect(st == n.SC_INVALID_OPCODE,
           "reservation register on a namespace without reservations: invalid opcode 0x%x" % st)
    expect(n.parse_id_ns(c.identify(0, 1))["rescap"] == 0, "RESCAP 0 without reservations")
    e = n.sqe(0x02, q.next_cid(), 1, n.sgl_transport(2 << 20), cdw12=4095)
    st, _ = c.io_cmd(e, check=False)
    expect(st == n.SC_INVALID_FIELD, "read above MDTS: invalid field 0x%x" % st)
    if ddgst:
        st = c.write(1, 64, data, check=False, bad_ddgst=True)
        expect(st == n.SC_TRANSIENT, "bad data digest: transient transport error 0x%x" % st)
        expect(c.read(1, 64, 8) != data, "a write with a bad digest is not written")
    c.close()


def check_queue_depth(env):
    """Many commands in flight on one queue, completions out of order."""
    c = env.ctrl().connect(io_queues=1, io_sqsize=128)
    q = c.ioq()
    blocks = {}
    cids = []
    for i in range(48):
        d = os.urandom(4096)
        blocks[i] = d
        cid = q.next_cid()
        q.submit(n.sqe(0x01, cid, 1, n.sgl_inline(4096), cdw10=1000 + 8 * i, cdw12=7), d)
        cids.append(cid)
    for cid in cids:
        st, _, _ = q.wait(cid)
        expect(st == 0, "pipelined write %d: 0x%x" % (cid, st))
    for i in range(48):
        expect(c.read(1, 1000 + 8 * i, 8) == blocks[i], "pipelined data %d" % i)
    # 96 MiB of writes through R2T in flight at once: past the queue's
    # payload bound, R2Ts wait for buffers instead of the reading stopping.
    big = [os.urandom(1 << 20) for _ in range(4)]
    cids = []
    for i in range(96):
        cid = q.next_cid()
        q.submit(n.sqe(0x01, cid, 1, n.sgl_transport(1 << 20), cdw10=2048 * (i % 32),
                       cdw12=2047), big[i % 4], inline=False)
        cids.append(cid)
    for cid in cids:
        st, _, _ = q.wait(cid)
        expect(st == 0, "pipelined 1 MiB write %d: 0x%x" % (cid, st))
    for i in range(64, 96):
        expect(c.read(1, 2048 * (i % 32), 2048) == big[i % 4], "pipelined 1 MiB data %d" % i)
    env.log_has("R2Ts wait for some to be released")
    c.close()


def check_readonly_and_hosts(env):
    try:
        env.ctrl(ONLY).connect()
        raise AssertionError("a host not listed connected to the restricted subsystem")
    except n.NvmeError as e:
        expect(e.status == n.SC_CONNECT_INVALID_HOST, "refused host status 0x%x" % e.status)
        expect(e.result == (1 << 16) | 512, "IATTR/IPO name the host NQN: 0x%x" % e.result)
    env.log_has("Connect of host nqn.2026-01.org.blockd:host-test refused")
    try:
        env.ctrl("nqn.2026-01.org.blockd:nothere").connect()
        raise AssertionError("connected to a subsystem that does not exist")
    except n.NvmeError as e:
        expect(e.status == n.SC_CONNECT_INVALID_PARAM and e.result == (1 << 16) | 256,
               "unknown subsystem: 0x%x 0x%x" % (e.status, e.result))
    c = env.ctrl(ONLY, hostnqn=HOST_OK).connect()
    expect(n.parse_id_ns(c.identify(0, 1))["nsattr"] & 1, "read-only namespace is write protected")
    st = c.write(1, 0, bytes(512), check=False)
    expect(st == n.SC_WRITE_PROTECTED, "write to read-only: 0x%x" % st)
    # An I/O queue from another host ID must not join the controller.
    q = n.Queue(env.host, env.io_port)
    q.icreq()
    st, res, _ = q.command(n.connect_entry(q.next_cid(), 1, 32),
                           n.connect_data(os.urandom(16), c.cntlid, ONLY, HOST_OK))
    expect(st == n.SC_CONNECT_INVALID_PARAM and res == (1 << 16) | 0,
           "I/O queue of another host ID: 0x%x 0x%x" % (st, res))
    q.close()
    # Nor a queue ID above the number of queues.
    q = n.Queue(env.host, env.io_port)
    q.icreq()
    st, res, _ = q.command(n.connect_entry(q.next_cid(), 9, 32),
                           n.connect_data(c.hostid, c.cntlid, ONLY, HOST_OK))
    expect(st == n.SC_CONNECT_INVALID_PARAM and res == 42, "qid too big: 0x%x %d" % (st, res))
    q.close()
    c.close()


def check_discovery(env):
    for port in (env.disc_port, env.io_port):
        d = n.Controller(env.host, port, n.DISCOVERY_NQN).connect(io_queues=0)
        idc = n.parse_id_ctrl(d.identify(1))
        expect(idc["cntrltype"] == 2 and idc["subnqn"] == n.DISCOVERY_NQN, "discovery identify")
        gen, entries = d.discovery_log()
        subs = sorted(e["subnqn"] for e in entries)
        expect(subs == [ANY], "a stranger sees only the open subsystem: %r" % subs)
        e = entries[0]
        expect(e["trtype"] == 3 and e["adrfam"] == 1 and e["subtype"] == 2, "entry %r" % e)
        expect(e["cntlid"] == 0xFFFF and e["treq"] & 3 == 2, "entry %r" % e)
        expect(e["traddr"] == env.host and e["trsvcid"] == str(env.io_port), "entry %r" % e)
        d.close()
    d = n.Controller(env.host, env.disc_port, n.DISCOVERY_NQN, hostnqn=HOST_OK).connect(
        io_queues=0)
    gen, entries = d.discovery_log()
    expect(sorted(e["subnqn"] for e in entries) == [ANY, ONLY], "the allowed host sees both")
    d.close()
    try:
        n.Controller(env.host, env.disc_port, ANY).connect()
        raise AssertionError("an I/O controller on the discovery-only port")
    except n.NvmeError as e:
        expect(e.status == n.SC_CONNECT_INVALID_PARAM, "discovery-only port: 0x%x" % e.status)
    return gen


def expect_term(q, send, fes, what):
    """Send raw bytes; the controller must answer with a C2HTermReq, then close."""
    q.send(send)
    try:
        while True:
            q.recv_pdu()
    except n.TermReq as t:
        expect(t.fes == fes, "%s: FES 0x%x, wanted 0x%x" % (what, t.fes, fes))
    except (ConnectionError, OSError) as e:
        raise AssertionError("%s: closed without a C2HTermReq (%r)" % (what, e))
    try:
        expect(q.sock.recv(1) == b"", "%s: connection not closed" % what)
    except ConnectionResetError:
        pass
    q.close()


def fresh(env, hdgst=False):
    q = n.Queue(env.host, env.io_port, hdgst=hdgst)
    q.icreq()
    return q


def check_bad_pdus(env, bs=512):
    good = env.ctrl().connect(io_queues=1)
    ref = os.urandom(8192)
    good.write(1, 200, ref, bs=bs)
    # An ICReq with PFV 1, then one with a bad HLEN.
    q = n.Queue(env.host, env.io_port)
    expect_term(q, struct.pack("<BBBBIH", 0, 0, 128, 0, 128, 1) + bytes(118), 0x06, "PFV 1")
    q = n.Queue(env.host, env.io_port)
    expect_term(q, struct.pack("<BBBBI", 0, 0, 100, 0, 128) + bytes(120), 0x01, "ICReq HLEN")
    q = n.Queue(env.host, env.io_port)
    expect_term(q, struct.pack("<BBBBI", 4, 0, 72, 0, 72) + bytes(64), 0x02, "capsule before IC")
    # A capsule with a wrong HLEN, an unknown PDU type, a second ICReq.
    q = fresh(env)
    expect_term(q, struct.pack("<BBBBI", 4, 0, 60, 0, 60) + bytes(52), 0x01, "capsule HLEN")
    q = fresh(env)
    expect_term(q, struct.pack("<BBBBI", 0x0C, 0, 8, 0, 8), 0x01, "unknown type")
    q = fresh(env)
    expect_term(q, struct.pack("<BBBBI", 0, 0, 128, 0, 128) + bytes(120), 0x02, "second ICReq")
    # PLEN claiming 1 GiB of in-capsule data.
    q = fresh(env)
    expect_term(q, struct.pack("<BBBBI", 4, 0, 72, 72, 1 << 30) + bytes(64), 0x05, "huge PLEN")
    # A header digest error.
    q = fresh(env, hdgst=True)
    expect_term(q, q.pdu(4, n.sqe(0x18, 1), bad_hdgst=True), 0x03, "header digest")
    # H2CData nobody asked for.
    q = fresh(env)
    expect_term(q, q.pdu(6, struct.pack("<HHII4x", 1, 3, 0, 512), bytes(512)), 0x01,
                "unsolicited H2CData")
    # H2CData beyond the R2T's range.
    c = env.ctrl().connect(io_queues=1)
    q = c.ioq()
    cid = q.next_cid()
    q.submit(n.sqe(0x01, cid, 1, n.sgl_transport(65536), cdw10=0, cdw12=65536 // bs - 1),
             inline=False)
    t, flags, hdr, _ = q.recv_pdu()
    expect(t == n.R2T, "R2T for a write without in-capsule data")
    rcid, ttag, off, ln = struct.unpack_from("<HHII", hdr, 8)
    expect(rcid == cid and off == 0 and ln == 65536, "R2T fields")
    expect_term(q, q.pdu(6, struct.pack("<HHII4x", cid, ttag, 65536, 512), bytes(512)), 0x04,
                "H2CData out of range")
    c.close()
    # H2CData carrying no data.
    c = env.ctrl().connect(io_queues=1)
    q = c.ioq()
    cid = q.next_cid()
    q.submit(n.sqe(0x01, cid, 1, n.sgl_transport(65536), cdw10=0, cdw12=65536 // bs - 1),
             inline=False)
    t, flags, hdr, _ = q.recv_pdu()
    _, ttag, _, _ = struct.unpack_from("<HHII", hdr, 8)
    expect_term(q, q.pdu(6, struct.pack("<HHII4x", cid, ttag, 0, 0)), 0x01, "empty H2CData")
    c.close()
    # The good session still works.
    expect(good.read(1, 200, 8192 // bs, bs=bs) == ref, "other session disturbed")
    good.close()
    env.log_has("terminating the connection")


def check_keepalive(env):
    c = env.ctrl(kato=1000).connect(io_queues=1)
    c.keep_alive()
    time.sleep(0.4)
    c.keep_alive()
    # Now silent: within a few KATO the controller goes, queues closed.
    end = time.time() + 15
    closed = False
    c.admin.sock.settimeout(1)
    while time.time() < end and not closed:
        try:
            closed = c.admin.sock.recv(1) == b""
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed = True
    expect(closed, "keep-alive timeout did not close the admin queue")
    env.log_has("keep-alive timeout")
    c.close()


def check_aer(env, add_namespace, nsid=3, ana=False):
    """add_namespace(): the configuration gains nsid 3 on ANY (or changes
    nsid otherwise: then only the event and the changed list are checked).
    ana: ANA change notices on too (ANY reports ANA): the new namespace
    also changes the ANA log page, which a second event says."""
    c = env.ctrl().connect(io_queues=1)
    c.set_features(0x0B, (1 << 8) | (n.AEC_ANA_CHANGE if ana else 0))
    q = c.admin
    aers = [q.next_cid() for _ in range(4)]
    for cid in aers:
        q.submit(n.sqe(0x0C, cid))
    st, _, _ = c.admin_cmd(n.sqe(0x0C, q.next_cid()), check=False)
    expect(st == n.SC_AER_LIMIT, "a fifth AER: limit exceeded 0x%x" % st)
    add_namespace()
    got = None
    for cid in aers:
        q.sock.settimeout(15)
        t, flags, hdr, _ = q.recv_pdu()
        expect(t == n.RSP, "AER completion")
        res, _, _, rcid, sf = struct.unpack_from("<QHHHH", hdr, 8)
        got = res
        break
    expect(got is not None and got & 0xFFFFFF == 0x040002, "NS attribute changed: 0x%x" % got)
    if ana:
        res = None
        for _ in range(3):  # the other held AERs: the ANA change comes within the watch's period
            t, flags, hdr, _ = q.recv_pdu()
            res = struct.unpack_from("<Q", hdr, 8)[0]
            if t == n.RSP and res & 0xFFFFFF == n.AEN_ANA_CHANGE:
                break
        expect(res is not None and res & 0xFFFFFF == n.AEN_ANA_CHANGE, "ANA change: 0x%x" % res)
        log = n.ana_log(c)
        expect([(g["grpid"], g["state"], g["nsids"]) for g in log["groups"]] ==
               [(1, "optimized", [1, 2, 3])], "ANA log after the add: %r" % log)
    changed = c.get_log_page(0x04, 4096)
    expect(struct.unpack_from("<I", changed, 0)[0] == nsid, "changed NS list names nsid %d" % nsid)
    again = c.get_log_page(0x04, 4096)
    expect(again[:4] == bytes(4), "changed NS list cleared by the read")
    if nsid == 3:
        expect(struct.unpack("<4I", c.identify(2)[:16])[:3] == (1, 2, 3), "nsid 3 active")
    c.close()
    return c


def check_ana(env):
    """ANY reports ANA (one group, optimized); ONLY does not."""
    c = env.ctrl().connect(io_queues=0)
    idc = n.parse_id_ctrl(c.identify(1))
    expect(idc["cmic"] & 0x8 and idc["oaes"] & n.AEC_ANA_CHANGE, "CMIC/OAES: %r" % idc)
    expect(idc["anacap"] == 0x07 and idc["anagrpmax"] == 1 and idc["nanagrpid"] == 1, repr(idc))
    mnan = struct.unpack_from("<I", c.identify(1), 540)[0]
    expect(0 < mnan <= idc["nn"], "MNAN %d, NN %d" % (mnan, idc["nn"]))
    expect(n.parse_id_ns(c.identify(0, 2))["anagrpid"] == 1, "ANAGRPID")
    log = n.ana_log(c)
    expect([(g["grpid"], g["state"], g["nsids"]) for g in log["groups"]] ==
           [(1, "optimized", [1, 2])], "ANA log: %r" % log)
    expect(n.ana_log(c, rgo=True)["groups"][0]["nsids"] == [], "RGO lists no NSIDs")
    c.close()
    o = env.ctrl(ONLY, hostnqn=HOST_OK).connect(io_queues=0)
    expect(not n.parse_id_ctrl(o.identify(1))["cmic"] & 0x8, "ONLY reports ANA")
    st, _ = o.get_log_page(0x0C, 4096, check=False)
    expect(st == n.SC_INVALID_LOG, "log page 0Ch without ANA: 0x%x" % st)
    o.close()


def check_reservations(env):
    """Namespace 2 has reservations (in memory: the harness has no store):
    every type's rules against a registrant and a host that is not one."""
    a = env.ctrl(hostid=bytes([1] * 16)).connect()
    b = env.ctrl(hostid=bytes([2] * 16)).connect()
    c = env.ctrl(hostid=bytes([3] * 16)).connect()  # never registers
    expect(n.parse_id_ns(a.identify(0, 2))["rescap"] == 0xFF, "RESCAP: PTPL, six types, IEKEY")
    expect(a.resv_register(2, 10) == 0 and b.resv_register(2, 20) == 0, "register")
    blk = b"q" * 4096
    # type: (registrant b may read, write; non-registrant c may read, write)
    rules = {1: (1, 0, 1, 0), 2: (0, 0, 0, 0), 3: (1, 1, 1, 0), 4: (1, 1, 0, 0),
             5: (1, 1, 1, 0), 6: (1, 1, 0, 0)}
    for rtype, allowed in rules.items():
        expect(a.resv_acquire(2, 10, rtype) == 0, "acquire type %d" % rtype)
        got = []
        for host in (b, c):
            got.append(int(host.read(2, 0, 1, bs=4096, check=False)[0] == 0))
            got.append(int(host.write(2, 0, blk, bs=4096, check=False) == 0))
        expect(tuple(got) == allowed, "type %d: access %r, want %r" % (rtype, got, allowed))
        expect(a.write(2, 0, blk, bs=4096, check=False) == 0, "the holder writes")
        st, rep = c.resv_report(2)
        expect(st == 0 and rep["rtype"] == rtype and rep["regctl"] == 2, "report %r" % rep)
        holds = [r["holds"] for r in rep["regs"]]
        expect(holds == ([True, True] if rtype >= 5 else [True, False]), "holders %r" % rep)
        expect(a.resv_release(2, 10, rtype) == 0, "release type %d" % rtype)
    # All registrants: preempt with key 0 removes every other registrant.
    expect(b.resv_acquire(2, 20, 6) == 0, "acquire EA all registrants")
    expect(a.resv_acquire(2, 10, 1, action=1, prkey=0) == 0, "preempt all")
    st, rep = a.resv_report(2)
    expect([r["key"] for r in rep["regs"]] == [10] and rep["rtype"] == 1, "after preempt %r" % rep)
    expect(b.write(2, 0, blk, bs=4096, check=False) == n.SC_RESV_CONFLICT, "b preempted")
    # Replace with IEKEY, then clear.
    expect(a.resv_register(2, 11, crkey=999, action=2, iekey=True) == 0, "replace, IEKEY")
    expect(a.resv_release(2, 11, action=1) == 0, "clear")
    st, rep = a.resv_report(2)
    expect(rep["regs"] == [] and rep["rtype"] == 0, "cleared %r" % rep)
    for x in (a, b, c):
        x.close()


CHECKS = [
    ("identify, features, properties", check_identify),
    ("I/O, digests off", lambda e: check_io(e)),
    ("I/O, header and data digests", lambda e: check_io(e, True, True)),
    ("queue depth", check_queue_depth),
    ("hosts, read-only namespace, I/O queue checks", check_readonly_and_hosts),
    ("discovery", check_discovery),
    ("bad PDUs", check_bad_pdus),
    ("keep-alive", check_keepalive),
    ("ANA", check_ana),
    ("reservations", check_reservations),
]


def run(env, names=None):
    for name, fn in CHECKS:
        if names and name not in names:
            continue
        t0 = time.time()
        fn(env)
        print("ok  %-48s %.1fs" % (name, time.time() - t0), flush=True)


def check_disc_aen(env, change_config):
    """change_config(): the configuration moves; a discovery controller
    that enabled the notice gets Discovery Log Page Change, and GENCTR moves."""
    d = n.Controller(env.host, env.disc_port, n.DISCOVERY_NQN, kato=5000).connect(io_queues=0)
    expect(n.parse_id_ctrl(d.identify(1))["cntrltype"] == 2, "discovery controller")
    d.set_features(0x0B, 1 << 31)
    gen0, _ = d.discovery_log()
    d.admin.submit(n.sqe(0x0C, 900))
    change_config()
    d.admin.sock.settimeout(15)
    t, flags, hdr, _ = d.admin.recv_pdu()
    res, _, _, cid, sf = struct.unpack_from("<QHHHH", hdr, 8)
    expect(t == n.RSP and cid == 900 and res & 0xFFFFFF == 0x70F002,
           "discovery log change event: %d %d 0x%x" % (t, cid, res))
    gen1, _ = d.discovery_log()
    expect(gen1 != gen0, "GENCTR did not move: %d" % gen1)
    d.close()


def check_gone(env, remove_only):
    """remove_only(): ONLY leaves the configuration; its controller goes."""
    c = env.ctrl(ONLY, hostnqn=HOST_OK).connect(io_queues=1)
    remove_only()
    c.admin.sock.settimeout(15)
    try:
        closed = c.admin.sock.recv(1) == b""
    except ConnectionResetError:
        closed = True
    expect(closed, "controller of a removed subsystem still open")
    env.log_has("subsystem removed from the configuration")
    c.close()
