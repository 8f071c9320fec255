/*
 * WAL write gathering (walbuf.h). The file object SQLite allocates is
 * szOsFile bytes: for a WAL file it holds our struct walbuf followed by the
 * underlying VFS's file; for any other file the underlying VFS's file sits
 * at its start, so those files run on the underlying methods untouched.
 */
#include "control/walbuf.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Below 128 KiB: SQLite's unix VFS writes at most 0x1ffff bytes per call
 * and takes a zero-length result for a full disk. */
#define WALBUF_CAP (124u << 10)
#define WAL_FRAME_HDR 24

struct walbuf {
    sqlite3_file base;  /* pMethods = &wal_methods */
    sqlite3_file *real; /* the underlying VFS's file, right after us */
    unsigned char *buf; /* pending bytes for [off, off + len) */
    sqlite3_int64 off;
    size_t len;
    bool commit_next; /* the next write is the page of a commit frame */
};

static sqlite3_vfs walbuf_vfs;
static sqlite3_vfs *base_vfs;

static int wb_flush(struct walbuf *w)
{
    if (!w->len)
        return SQLITE_OK;
    int rc = w->real->pMethods->xWrite(w->real, w->buf, (int)w->len, w->off);
    w->len = 0;
    return rc;
}

static int wb_write(sqlite3_file *f, const void *data, int amt, sqlite3_int64 off)
{
    struct walbuf *w = (struct walbuf *)f;
    size_t n = (size_t)amt;
    bool commit = w->commit_next;
    w->commit_next = false;
    /* A frame header: bytes 4-7 are the database size after a commit, 0
     * for the frames before it. */
    if (n == WAL_FRAME_HDR) {
        const unsigned char *h = data;
        w->commit_next = (h[4] | h[5] | h[6] | h[7]) != 0;
    }
    if (w->len && (off != w->off + (sqlite3_int64)w->len || w->len + n > WALBUF_CAP)) {
        int rc = wb_flush(w);
        if (rc != SQLITE_OK)
            return rc;
    }
    if (!w->buf || n > WALBUF_CAP)
        return w->real->pMethods->xWrite(w->real, data, amt, off);
    if (!w->len)
        w->off = off;
    memcpy(w->buf + w->len, data, n);
    w->len += n;
    return commit ? wb_flush(w) : SQLITE_OK;
}

/* Every other method: write out what is pending, then pass through. */
#define WB_FLUSH_OR_RETURN(w)                                                                      \
    do {                                                                                           \
        int frc_ = wb_flush(w);                                                                    \
        if (frc_ != SQLITE_OK)                                                                     \
            return frc_;                                                                           \
    } while (0)

static int wb_close(sqlite3_file *f)
{
    struct walbuf *w = (struct walbuf *)f;
    int rc = wb_flush(w);
    int rc2 = w->real->pMethods->xClose(w->real);
    sqlite3_free(w->buf);
    w->buf = NULL;
    return rc != SQLITE_OK ? rc : rc2;
}

static int wb_read(sqlite3_file *f, void *data, int amt, sqlite3_int64 off)
{
    struct walbuf *w = (struct walbuf *)f;
    WB_FLUSH_OR_RETURN(w);
    return w->real->pMethods->xRead(w->real, data, amt, off);
}

static int wb_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    struct walbuf *w = (struct walbuf *)f;
    WB_FLUSH_OR_RETURN(w);
    return w->real->pMethods->xTruncate(w->real, size);
}

static int wb_sync(sqlite3_file *f, int flags)
{
    struct walbuf *w = (struct walbuf *)f;
    WB_FLUSH_OR_RETURN(w);
    return w->real->pMethods->xSync(w->real, flags);
}

static int wb_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    struct walbuf *w = (struct walbuf *)f;
    WB_FLUSH_OR_RETURN(w);
    return w->real->pMethods->xFileSize(w->real, size);
}

static int wb_lock(sqlite3_file *f, int level)
{
    struct walbuf *w = (struct walbuf *)f;
    return w->real->pMethods->xLock(w->real, level);
}

static int wb_unlock(sqlite3_file *f, int level)
{
    struct walbuf *w = (struct walbuf *)f;
    return w->real->pMethods->xUnlock(w->real, level);
}

static int wb_check_reserved(sqlite3_file *f, int *out)
{
    struct walbuf *w = (struct walbuf *)f;
    return w->real->pMethods->xCheckReservedLock(w->real, out);
}

static int wb_file_control(sqlite3_file *f, int op, void *arg)
{
    struct walbuf *w = (struct walbuf *)f;
    WB_FLUSH_OR_RETURN(w);
    return w->real->pMethods->xFileControl(w->real, op, arg);
}

static int wb_sector_size(sqlite3_file *f)
{
    struct walbuf *w = (struct walbuf *)f;
    return w->real->pMethods->xSectorSize(w->real);
}

static int wb_device_characteristics(sqlite3_file *f)
{
    struct walbuf *w = (struct walbuf *)f;
    return w->real->pMethods->xDeviceCharacteristics(w->real);
}

/* Version 1: SQLite uses shared memory and memory mapping on the database
 * file only, never on the WAL. */
static const sqlite3_io_methods wal_methods = {
    .iVersion = 1,
    .xClose = wb_close,
    .xRead = wb_read,
    .xWrite = wb_write,
    .xTruncate = wb_truncate,
    .xSync = wb_sync,
    .xFileSize = wb_file_size,
    .xLock = wb_lock,
    .xUnlock = wb_unlock,
    .xCheckReservedLock = wb_check_reserved,
    .xFileControl = wb_file_control,
    .xSectorSize = wb_sector_size,
    .xDeviceCharacteristics = wb_device_characteristics,
};

static int wb_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    (void)vfs;
    if (!(flags & SQLITE_OPEN_WAL))
        return base_vfs->xOpen(base_vfs, name, f, flags, out_flags);
    struct walbuf *w = (struct walbuf *)f;
    memset(w, 0, sizeof(*w));
    w->real = (sqlite3_file *)(w + 1);
    int rc = base_vfs->xOpen(base_vfs, name, w->real, flags, out_flags);
    if (rc != SQLITE_OK) {
        w->base.pMethods = NULL; /* SQLite calls no method then */
        return rc;
    }
    /* Without the buffer (no memory) every write passes straight through. */
    w->buf = sqlite3_malloc(WALBUF_CAP);
    w->base.pMethods = &wal_methods;
    return SQLITE_OK;
}

/* The rest of the VFS is the underlying one's. */
static int wb_delete(sqlite3_vfs *v, const char *n, int s)
{
    (void)v;
    return base_vfs->xDelete(base_vfs, n, s);
}
static int wb_access(sqlite3_vfs *v, const char *n, int fl, int *out)
{
    (void)v;
    return base_vfs->xAccess(base_vfs, n, fl, out);
}
static int wb_full_pathname(sqlite3_vfs *v, const char *n, int len, char *out)
{
    (void)v;
    return base_vfs->xFullPathname(base_vfs, n, len, out);
}
static void *wb_dlopen(sqlite3_vfs *v, const char *n)
{
    (void)v;
    return base_vfs->xDlOpen(base_vfs, n);
}
static void wb_dlerror(sqlite3_vfs *v, int n, char *msg)
{
    (void)v;
    base_vfs->xDlError(base_vfs, n, msg);
}
static void (*wb_dlsym(sqlite3_vfs *v, void *h, const char *s))(void)
{
    (void)v;
    return base_vfs->xDlSym(base_vfs, h, s);
}
static void wb_dlclose(sqlite3_vfs *v, void *h)
{
    (void)v;
    base_vfs->xDlClose(base_vfs, h);
}
static int wb_randomness(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return base_vfs->xRandomness(base_vfs, n, out);
}
static int wb_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return base_vfs->xSleep(base_vfs, us);
}
static int wb_current_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return base_vfs->xCurrentTime(base_vfs, out);
}
static int wb_get_last_error(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return base_vfs->xGetLastError(base_vfs, n, out);
}
static int wb_current_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    return base_vfs->xCurrentTimeInt64(base_vfs, out);
}

static int register_rc;
static void register_once(void)
{
    base_vfs = sqlite3_vfs_find(NULL);
    if (!base_vfs || base_vfs->iVersion < 2) {
        register_rc = -ENOSYS;
        return;
    }
    walbuf_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct walbuf) + base_vfs->szOsFile,
        .mxPathname = base_vfs->mxPathname,
        .zName = WALBUF_VFS,
        .xOpen = wb_open,
        .xDelete = wb_delete,
        .xAccess = wb_access,
        .xFullPathname = wb_full_pathname,
        .xDlOpen = wb_dlopen,
        .xDlError = wb_dlerror,
        .xDlSym = wb_dlsym,
        .xDlClose = wb_dlclose,
        .xRandomness = wb_randomness,
        .xSleep = wb_sleep,
        .xCurrentTime = wb_current_time,
        .xGetLastError = wb_get_last_error,
        .xCurrentTimeInt64 = wb_current_time64,
    };
    register_rc = sqlite3_vfs_register(&walbuf_vfs, 0) == SQLITE_OK ? 0 : -ENOMEM;
}

int walbuf_register(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_once);
    return register_rc;
}
