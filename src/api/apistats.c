/* API call statistics by method (see apistats.h). */
#include "api/apistats.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct apistats_row *rows; /* one per method called, in first-call order */
static size_t nrows, caprows;

void apistats_record(const struct api_method *m, uint64_t ns, bool failed)
{
    pthread_mutex_lock(&lock);
    size_t i = 0;
    /* Method names are registered once; compare the pointers. */
    while (i < nrows && rows[i].method != m->name)
        i++;
    if (i == nrows) {
        if (nrows == caprows) {
            size_t nc = caprows ? 2 * caprows : 64;
            struct apistats_row *nr = realloc(rows, nc * sizeof(*nr));
            if (!nr) {
                pthread_mutex_unlock(&lock);
                return;
            }
            rows = nr;
            caprows = nc;
        }
        rows[nrows++] = (struct apistats_row){.method = m->name};
    }
    rows[i].calls++;
    rows[i].errors += failed;
    rows[i].sum_ns += ns;
    pthread_mutex_unlock(&lock);
}

int apistats_snapshot(struct apistats_row **out)
{
    pthread_mutex_lock(&lock);
    struct apistats_row *a = malloc((nrows ? nrows : 1) * sizeof(*a));
    if (!a) {
        pthread_mutex_unlock(&lock);
        return -ENOMEM;
    }
    if (nrows) /* rows is NULL until the first call is counted */
        memcpy(a, rows, nrows * sizeof(*a));
    int n = (int)nrows;
    pthread_mutex_unlock(&lock);
    *out = a;
    return n;
}
