#!/usr/bin/env python3
"""What the disk allows any honest server in the "W writers, each writing
one block and then flushing" pattern.

A flush may only be answered after an fdatasync that started after the
writes it covers, so with W writers at queue depth 1 a sync covers at most
W writes, and no server completes more than W flushes per fdatasync time
of W freshly dirtied pages. This measures that time on FILE (random 4 KiB
pages, one sync at a time, median over ~3 s) and prints

    <median fdatasync us> <bound flushes/s>

usage: sync_bound.py FILE WRITERS [BLOCK_BYTES]
"""
import os
import random
import statistics
import sys
import time


def main():
    path, writers = sys.argv[1], int(sys.argv[2])
    bs = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    fd = os.open(path, os.O_RDWR)
    blocks = os.fstat(fd).st_size // bs
    buf = os.urandom(bs)
    lat, end = [], time.monotonic() + 3
    while time.monotonic() < end:
        for _ in range(writers):
            os.pwrite(fd, buf, random.randrange(blocks) * bs)
        t0 = time.perf_counter()
        os.fdatasync(fd)
        lat.append(time.perf_counter() - t0)
    os.close(fd)
    m = statistics.median(lat)
    print("%.0f %.0f" % (m * 1e6, writers / m))


if __name__ == "__main__":
    main()
