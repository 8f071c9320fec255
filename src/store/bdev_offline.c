/* The offline backend (store/bdev.h, bdev_offline_open): a placeholder
 * with a size that refuses every request. Front-ends gate media access on
 * it before any request gets here (an iSCSI LU becoming ready); these
 * -EAGAIN results are the backstop. */
#include <errno.h>
#include <stdlib.h>

#include "store/bdev.h"

static int off_read(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    (void)b, (void)buf, (void)len, (void)off;
    return -EAGAIN;
}

static int off_write(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    (void)b, (void)buf, (void)len, (void)off;
    return -EAGAIN;
}

static int off_sync(struct bdev *b)
{
    (void)b;
    return -EAGAIN;
}

static int off_range(struct bdev *b, uint64_t off, uint64_t len)
{
    (void)b, (void)off, (void)len;
    return -EAGAIN;
}

static int off_zero(struct bdev *b, uint64_t off, uint64_t len, unsigned flags)
{
    (void)b, (void)off, (void)len, (void)flags;
    return -EAGAIN;
}

static int off_extents(struct bdev *b, uint64_t off, uint64_t len, struct extent *out, size_t max,
                       size_t *n)
{
    (void)b, (void)off, (void)len, (void)out, (void)max;
    *n = 0;
    return -EAGAIN;
}

static int off_resize(struct bdev *b, uint64_t new_size)
{
    (void)b, (void)new_size;
    return -EAGAIN;
}

static void off_close(struct bdev *b)
{
    free(b);
}

static const struct bdev_ops offline_ops = {
    .name = "offline",
    .read = off_read,
    .read_nowait = off_read,
    .write = off_write,
    .write_nowait = off_write,
    .sync = off_sync,
    .trim = off_range,
    .write_zeroes = off_zero,
    .cache = off_range,
    .extents = off_extents,
    .resize = off_resize,
    .close = off_close,
};

int bdev_offline_open(uint64_t size, struct bdev **out)
{
    struct bdev *b = calloc(1, sizeof(*b));

    *out = NULL;
    if (!b)
        return -ENOMEM;
    b->ops = &offline_ops;
    b->size = size;
    *out = b;
    return 0;
}

bool bdev_is_offline(const struct bdev *b)
{
    return b && b->ops == &offline_ops;
}
