#!/usr/bin/env python3
# Where blockd's threads wait in the kernel: samples /proc/PID/task/*/stat
# of every blockd process whose command line contains MATCH every 5 ms, and
# for each thread that stays in D state (uninterruptible: disk, page
# locks) 40 ms or more, appends to OUT how long and the kernel stacks seen
# (/proc/PID/task/TID/stack, root only), most frequent first. Used to find
# where snapshot-time write stalls came from (bench/results/snapshot.md):
#   python3 bench/dstacks.py snapshot-nostall /tmp/dspans.txt &
#   flock /tmp/blockd-bench.lock bash bench/snapshot.sh
import os, sys, time
match = sys.argv[1] if len(sys.argv) > 1 else "snapshot-nostall"
out = open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/dspans.txt", "a")
spans = {}  # tid -> [start, comm, set(stacks)]
def pids():
    r = []
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            c = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError: continue
        if b"blockd" in c.split(b"\0")[0] and match.encode() in c: r.append(p)
    return r
last_scan = 0; plist = []
while True:
    now = time.monotonic()
    if now - last_scan > 1: plist = pids(); last_scan = now
    seen = set()
    for p in plist:
        try: tids = os.listdir(f"/proc/{p}/task")
        except OSError: continue
        for t in tids:
            try:
                st = open(f"/proc/{p}/task/{t}/stat").read()
            except OSError: continue
            rp = st.rfind(")"); state = st[rp+2]; comm = st[st.find("(")+1:rp]
            if state == "D":
                seen.add(t)
                try: stk = open(f"/proc/{p}/task/{t}/stack").read().strip().replace("\n", " < ")
                except OSError: stk = "?"
                if t not in spans: spans[t] = [now, comm, {}]
                spans[t][2][stk] = spans[t][2].get(stk, 0) + 1
    for t in list(spans):
        if t not in seen:
            s = spans.pop(t); d = (now - s[0]) * 1000
            if d >= 40:
                out.write(f"{time.strftime('%H:%M:%S')} tid {t} {s[1]} D for {d:.0f} ms\n")
                for k, v in sorted(s[2].items(), key=lambda x: -x[1])[:4]:
                    out.write(f"    x{v}: {k[:600]}\n")
                out.flush()
    time.sleep(0.005)
