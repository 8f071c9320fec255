/*
 * replication.run_onetime (TrueNAS, transport LOCAL): copy volumes with
 * their snapshots to another dataset of the same or another pool,
 * incrementally from the newest snapshot both sides share, as a job.
 * Also replication.list_naming_schemas and
 * replication.count_eligible_manual_snapshots. See docs/api-datasets.md.
 */
#ifndef BLOCKD_CONFIG_REPLICATION_H
#define BLOCKD_CONFIG_REPLICATION_H

/* Register the replication.* methods. Start-up only, after
 * datasets_init() and jobs_init() (the work runs as a job). */
void replication_init(void);

#endif
