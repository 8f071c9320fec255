/*
 * The TrueNAS file-sharing namespaces (sharing.nfs.*, sharing.smb.*,
 * nfs.*, smb.*) that blockd answers without serving files: blockd exports
 * block volumes over iSCSI and NBD only.
 *
 * sharing.nfs.query / sharing.smb.query answer [] (there are no such
 * shares, which is the truth), so that clients listing shares before they
 * act (truenas_incus_ctl `list`, `dataset rename --update-shares`) work;
 * every other method fails with ENOTSUP and a message that says what
 * blockd serves. None is ever "Method not found".
 *
 * api_sharing_init(): start-up, before the transports start.
 */
#ifndef BLOCKD_API_SHARING_H
#define BLOCKD_API_SHARING_H

void api_sharing_init(void);

#endif
