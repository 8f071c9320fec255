/*
 * The qemu:dirty-bitmap:SNAPNAME meta contexts: an export of a volume or
 * of one of its snapshots tells, for each older snapshot SNAPNAME of the
 * same volume, which blocks may differ from it (bit 0 of a block status
 * descriptor, NBD_STATE_DIRTY), as qemu-nbd does for a persistent dirty
 * bitmap named SNAPNAME; `qemu:dirty-bitmap:` lists them. Backup tools
 * written for qemu's bitmaps (nbdinfo --map, libvirt pull-mode backup,
 * virtnbdbackup, qemu's x-dirty-bitmap) read it unchanged. The map is the
 * changed-blocks walk of config/snapdiff.h (whose guarantees per pool type
 * are store/diff.h's), computed once, when the client selects the
 * context, and held by the connection.
 *
 * One dirty-bitmap context per connection (as qemu-nbd): a SET naming
 * several gets the first that exists.
 *
 * Threads: the lookup and the walk run as an I/O pool job
 * (nbd_dirty_start); everything else runs on the connection's reactor and
 * never blocks.
 */
#ifndef BLOCKD_NBD_DIRTY_H
#define BLOCKD_NBD_DIRTY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_META_DIRTY_PREFIX "qemu:dirty-bitmap:"
#define NBD_META_ID_DIRTY 2u
#define NBD_STATE_DIRTY (1u << 0)

/* Ranges a map holds at most (16 bytes each). Past it, each new range is
 * merged into the last one: more is reported dirty, nothing is lost. */
#define NBD_DIRTY_RANGES_MAX 65536u

struct nbd_dirty; /* a lookup (and map) in progress or done; refcounted */

/*
 * Start, on the I/O pool, finding the bases of dataset ("pool/vol" or
 * "pool/vol@snap", the export's) and, when want (want_len bytes, not
 * NUL-terminated) is not empty and is one of them, the map from it to
 * dataset. NULL: out of memory. Poll nbd_dirty_done; drop with
 * nbd_dirty_put (also while it runs: the job holds its own reference).
 */
struct nbd_dirty *nbd_dirty_start(const char *dataset, const char *want, size_t want_len);
bool nbd_dirty_done(const struct nbd_dirty *d);
/* How many more handshake deadlines (admit_handshake_timeout_s each) a
 * connection waits while its lookup runs before it is closed as any slow
 * handshake is: a large volume without a trusted change log is compared by
 * content, which may take minutes (docs/changed-blocks.md). */
#define NBD_DIRTY_WAITS 12u
void nbd_dirty_put(struct nbd_dirty *d);

/* After done: the job's result (0 or -errno, for the log), the number of
 * bases found and the i-th one's name, and whether the map of want was
 * made (want was a base and the walk succeeded). */
int nbd_dirty_result(const struct nbd_dirty *d);
size_t nbd_dirty_base_count(const struct nbd_dirty *d);
const char *nbd_dirty_base(const struct nbd_dirty *d, size_t i);
bool nbd_dirty_have_map(const struct nbd_dirty *d);
const char *nbd_dirty_want(const struct nbd_dirty *d);

/*
 * Block status descriptors (be32 length, be32 flags) of [offset,
 * offset+length) from the map, at most max, into out (8 * max bytes).
 * Past the end of what the map covers (a volume grown since) is dirty.
 * Returns the count (≥ 1 for length > 0).
 */
uint32_t nbd_dirty_describe(const struct nbd_dirty *d, uint64_t offset, uint32_t length,
                            uint32_t max, uint8_t *out);

/* Does a LIST_META_CONTEXT query (q, qlen bytes) ask for base name? ""
 * (no query), "qemu:", "qemu:dirty-bitmap:" and the full name do. */
bool nbd_dirty_query_lists(const char *q, uint32_t qlen, const char *name);

#endif
