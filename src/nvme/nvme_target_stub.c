/*
 * STUB, to be deleted when the NVMe/TCP target (nvme_*.c) lands: the
 * functions of nvme_target.h the configuration calls, doing nothing but
 * closing accepted sockets, so that the configuration half links and is
 * tested on its own. The target's branch replaces this file.
 */
#include <unistd.h>

#include "core/log.h"
#include "nvme/nvme_target.h"

int nvme_target_init(void)
{
    return 0;
}

void nvme_target_stop(void)
{
}

void nvme_target_accept(int fd, const struct sockaddr *peer, socklen_t peerlen,
                        const struct sockaddr *local, socklen_t locallen, void *arg)
{
    (void)peer;
    (void)peerlen;
    (void)local;
    (void)locallen;
    (void)arg;
    close(fd); /* no target yet */
}

void nvme_target_subsys_gone(struct nvme_subsys *s)
{
    (void)s;
}

void nvme_target_subsys_changed(struct nvme_subsys *old, struct nvme_subsys *next)
{
    (void)old;
    (void)next;
}
