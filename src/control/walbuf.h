/*
 * A SQLite VFS that gathers the writes SQLite makes to a WAL file into one
 * pwrite per commit. SQLite writes each WAL frame as two writes (a 24-byte
 * frame header, then the page), so an API call that changes 8 pages costs
 * 16 pwrite system calls; behind this VFS it costs one.
 *
 * Only WAL files are buffered; the database file and everything else go
 * straight to the underlying VFS. The buffer is written out:
 *   - right after the page of a commit frame (a frame whose header carries
 *     a non-zero database size), inside that xWrite, so a failed write
 *     fails the commit exactly as it would without the buffer;
 *   - before any other operation on the WAL (read, sync, truncate, size,
 *     close, file control), so SQLite never observes the buffer;
 *   - when a write does not continue the buffered range, or the buffer is
 *     full (a large transaction spills pages before its commit).
 * A commit therefore reaches the file before SQLite publishes it in the
 * WAL index, and before db.c's WAL hook runs its fdatasync.
 */
#ifndef BLOCKD_CONFIG_WALBUF_H
#define BLOCKD_CONFIG_WALBUF_H

/* Register the VFS named WALBUF_VFS on top of the default VFS (once; later
 * calls return 0). Not made the default. Returns 0 or -errno. */
#define WALBUF_VFS "blockd-walbuf"
int walbuf_register(void);

#endif
