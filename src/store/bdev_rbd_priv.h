/*
 * The RBD backend's internals, shared by bdev_rbd.c (open, synchronous ops)
 * and bdev_rbd_aio.c (the asynchronous data path). Not for other modules:
 * they use bdev_rbd.h.
 */
#ifndef BLOCKD_STORE_BDEV_RBD_PRIV_H
#define BLOCKD_STORE_BDEV_RBD_PRIV_H

#include <rados/librados.h>
#include <rbd/librbd.h>

#include "store/bdev.h"
#include "store/rbd_cluster.h"

struct bdev_rbd {
    struct bdev base;
    struct rbd_cluster *cluster; /* a reference */
    rados_ioctx_t ioctx;
    rbd_image_t image;
    char name[256]; /* pool/[ns/]image[@snap], for logs */
};

/* rbd_write_zeroes flags for enum bdev_zero_flags. */
int bdev_rbd_zero_flags(unsigned flags);

#endif
