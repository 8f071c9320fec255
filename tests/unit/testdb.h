/*
 * Unit tests: a temporary database directory. Each test program that opens
 * its own config DB makes one fresh directory under /tmp for it (and for
 * whatever else the test keeps beside it, e.g. pools), and removes it with
 * everything in it (the DB and its -wal/-shm files) when done.
 *
 * Not thread-safe: call from the test's main thread (main, group setup
 * or teardown).
 */
#ifndef BLOCKD_TESTS_UNIT_TESTDB_H
#define BLOCKD_TESTS_UNIT_TESTDB_H

/*
 * dir   the directory: prefix followed by mkdtemp's ".XXXXXX"
 * path  the DB file in it: dir/file (not created here)
 */
struct testdb {
    char dir[128];
    char path[192];
};

/* Make a new directory prefix.XXXXXX (e.g. prefix "/tmp/blockd-test-db")
 * and set t->path to dir/file. 0, -ENAMETOOLONG or -errno (mkdtemp). */
int testdb_make(struct testdb *t, const char *prefix, const char *file);

/* Remove t->dir and everything below it. 0 or -errno (the first failure;
 * the walk goes on past it). */
int testdb_remove(const struct testdb *t);

#endif
