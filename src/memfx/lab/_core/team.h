/* Teams of pinned threads (team.c): the pool every threaded kernel uses,
 * and the team call that runs kernel rows on several CPUs at once. */
#ifndef MEMFX_TEAM_H
#define MEMFX_TEAM_H

#include <stdint.h>
#include "core.h"

#define MFX_TEAM_MAX 64

/* mfx_pool_dispatch / mfx_team_run return codes */
enum { MFX_POOL_OK, MFX_POOL_THREADS, MFX_POOL_CPU, MFX_POOL_CREATE };

typedef void (*mfx_job_fn)(void *ctx, unsigned index);

/* Run fn(ctx, i) for i in 0..n-1, index i on a pool thread pinned to
 * cpus[i] (index 0 on the caller when it runs on cpus[0]); return when all
 * have returned.  MFX_POOL_CPU: cpus[*bad] is out of range or repeated;
 * MFX_POOL_CREATE: pthread error *err creating the thread for *bad. */
int mfx_pool_dispatch(const uint64_t *cpus, unsigned n, mfx_job_fn fn, void *ctx, int *err,
                      unsigned *bad);

/* Context switches of the calling thread so far (getrusage RUSAGE_THREAD). */
uint64_t mfx_thread_switches(void);

struct mfx_team_member {
    /* in */
    const struct mfx_kernel *kernel;
    struct mfx_args args;
    uint64_t cpu;
    uint64_t delay_ticks;    /* spin this long after the barrier first (tests: a late start) */
    uint64_t chunks;         /* background member: call k works on chunk k mod chunks, i.e.
                              * dst and src advanced by (k mod chunks) * size bytes (0 or 1:
                              * always the same bytes); short calls let a loader stream a
                              * large buffer and still stop soon after member 0 */
    int guarded;             /* the kernel walks a chain: run it under the fault guard */
    /* out */
    uint64_t tsc_start, tsc_end;    /* after the barrier (and delay); after the last call */
    uint32_t cpu_start, cpu_end;
    uint64_t switches;              /* context switches around the member's work */
    uint64_t wait_ns;               /* run-queue wait around it; UINT64_MAX = unknown */
    uint64_t calls;                 /* calls made (background loaders: >= 1) */
    uint64_t result;                /* what the last call returned */
    int ran;
    int faulted;                    /* guarded, and the walk faulted (left its chain) */
};

/* One team call (see team.c); *release = TSC at the barrier's release. */
int mfx_team_run(struct mfx_team_member *members, unsigned n, int background, uint64_t *release,
                 int *err, unsigned *bad);

#endif
