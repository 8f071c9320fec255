/*
 * libFuzzer target for the JSON-RPC API through the full request path: each
 * input is the byte stream a client sends on the daemon's Unix socket (one
 * JSON-RPC text per line), served by the real socket server (framing, size
 * limits, batches) against the method table and SQLite configuration DB
 * the daemon itself brings up (src/daemon/modules.c): validation, queries,
 * datasets, snapshots, iSCSI and NBD configuration, jobs, auth.
 *
 * The methods create files and directories, so the target runs only in the
 * sandbox scripts/fuzz.sh sets up (a private mount namespace whose root is
 * read-only, with a writable state directory FUZZ_STATE): it refuses to
 * start without FUZZ_API_SANDBOX=1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz_conn.h"

#include "api/server.h"
#include "core/iopool.h"
#include "core/log.h"
#include "core/reactor.h"
#include "daemon/modules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sockaddr_un sa = {.sun_family = AF_UNIX};

static void setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    const char *state = getenv("FUZZ_STATE");
    if (!getenv("FUZZ_API_SANDBOX") || !state) {
        fprintf(stderr, "fuzz_api: run it through scripts/fuzz.sh (it needs the sandbox: "
                        "FUZZ_API_SANDBOX=1 and FUZZ_STATE)\n");
        exit(1);
    }
    log_set_level(getenv("FUZZ_LOG") ? LOG_DEBUG : LOG_ERROR);
    char db[512];
    snprintf(db, sizeof(db), "%s/blockd.db", state);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/blockd.sock", state);
    if (reactors_start(1) < 0 || iopool_start(2) < 0 || modules_init(state, db) < 0 ||
        api_server_start(sa.sun_path) < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size > (1 << 20))
        return 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        abort();
    /* Returns once the server has answered every line and closed (it
     * closes after the client's EOF), or has gone quiet. */
    fuzz_conn_talk(fd, data, size);
    return 0;
}
