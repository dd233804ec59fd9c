/* Teams: one kernel call spread over several pinned threads.
 *
 * The pool: one thread per CPU, pinned once (pthread_attr_setaffinity_np)
 * and parked on a futex between calls.  Starting threads per call would put
 * each new thread first on the caller's CPU (it inherits the caller's mask
 * until glibc applies the attribute's affinity), where it preempts the
 * caller: a context switch in every sample.  Waking a parked thread is a
 * system call of the caller, not a switch.  mfx_pool_dispatch runs a job
 * function on a list of CPUs (index 0 on the caller when it already runs on
 * the first CPU) and spins until every index has returned.  The sharing
 * kernels (kernels/sharing.c) and the team call below both use it.
 *
 * The team call (mfx_team_run): member i runs its own kernel row on its own
 * CPU with its own arguments (its own buffer, or one shared with others).
 * Every member arrives at one spinning barrier; the last to arrive stamps
 * the release.  Then
 *   - together:   every member makes its one call; the figure is timed from
 *                 the release to the last finisher, so a member that starts
 *                 late lengthens the window instead of being left out;
 *   - background: member 0 makes the timed call; the others repeat theirs
 *                 until member 0 is done (loaders).  Member 0 starts only
 *                 once every loader has finished one call, so the loaders
 *                 are streaming for the whole timed window.
 * Per member the team records: TSC right after the barrier (after its
 * test delay) and after its last call, the CPU at both (rdtscp's TSC_AUX),
 * the context switches (getrusage RUSAGE_THREAD) and run-queue wait
 * (/proc/thread-self/schedstat) from the barrier's release (member 0 of a
 * background team: from the end of its lead-in) to its last call's end, the calls made and what
 * the last one returned.  The lab judges concurrency from these. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "team.h"

/* After a call a pool thread spins this many TSC ticks (a few ms at 2-4
 * GHz) before it sleeps: the lab's next sample comes within that, and then
 * finds the thread running instead of waiting for it to be woken and
 * scheduled (which, on a busy machine, takes milliseconds). */
#define POOL_SPIN_TICKS 10000000ull
/* A background team's timed member waits at most this long (TSC ticks,
 * ~1-3 s) for every loader's first call; then it starts anyway, and the
 * lab sees from the stamps that the loaders did not cover its window. */
#define LEAD_IN_MAX_TICKS 4000000000ull

struct pool_thread {
    pthread_t tid;
    int cpu;
    uint32_t generation;     /* bumped by the caller for each job (futex word) */
    uint32_t finished;       /* set to generation when the job returned */
    mfx_job_fn fn;
    void *ctx;
    unsigned index;
};

static struct pool_thread pool[MFX_TEAM_MAX];
static int pool_used;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void futex_wait(uint32_t *word, uint32_t seen)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *pool_main(void *arg)
{
    struct pool_thread *pt = arg;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        uint64_t idle_since = mfx_tsc_begin();
        while ((g = __atomic_load_n(&pt->generation, __ATOMIC_ACQUIRE)) == seen) {
            if (mfx_tsc_begin() - idle_since < POOL_SPIN_TICKS)
                __asm__ __volatile__("pause");
            else
                futex_wait(&pt->generation, seen);
        }
        seen = g;
        pt->fn(pt->ctx, pt->index);
        __atomic_store_n(&pt->finished, g, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* The pool thread pinned to cpu (created when missing), or NULL with the
 * pthread error in *err. */
static struct pool_thread *pool_thread_on(int cpu, int *err)
{
    for (int i = 0; i < pool_used; i++)
        if (pool[i].cpu == cpu)
            return &pool[i];
    if (pool_used == MFX_TEAM_MAX) {
        *err = EAGAIN;
        return NULL;
    }
    struct pool_thread *pt = &pool[pool_used];
    memset(pt, 0, sizeof *pt);
    pt->cpu = cpu;
    pthread_attr_t attr;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    *err = pthread_attr_init(&attr);
    if (!*err)
        *err = pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    if (!*err)
        *err = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (!*err)
        *err = pthread_create(&pt->tid, &attr, pool_main, pt);
    pthread_attr_destroy(&attr);
    if (*err)
        return NULL;
    pool_used++;
    return pt;
}

int mfx_pool_dispatch(const uint64_t *cpus, unsigned n, mfx_job_fn fn, void *ctx, int *err,
                      unsigned *bad)
{
    *err = 0;
    *bad = 0;
    if (n < 1 || n > MFX_TEAM_MAX)
        return MFX_POOL_THREADS;
    for (unsigned i = 0; i < n; i++) {
        if (cpus[i] >= CPU_SETSIZE) {
            *bad = i;
            return MFX_POOL_CPU;
        }
        for (unsigned j = 0; j < i; j++)
            if (cpus[j] == cpus[i]) {
                *bad = i;
                return MFX_POOL_CPU;
            }
    }
    int self = mfx_cpu_id() == cpus[0] ? 0 : -1;
    struct pool_thread *workers[MFX_TEAM_MAX];
    uint32_t gen[MFX_TEAM_MAX];
    pthread_mutex_lock(&pool_lock);
    for (unsigned i = 0; i < n; i++) {
        workers[i] = NULL;
        if ((int)i == self)
            continue;
        workers[i] = pool_thread_on((int)cpus[i], err);
        if (!workers[i]) {
            *bad = i;
            pthread_mutex_unlock(&pool_lock);
            return MFX_POOL_CREATE;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        if (!workers[i])
            continue;
        workers[i]->fn = fn;
        workers[i]->ctx = ctx;
        workers[i]->index = i;
        gen[i] = __atomic_add_fetch(&workers[i]->generation, 1, __ATOMIC_RELEASE);
        futex_wake(&workers[i]->generation);
    }
    if (self == 0)
        fn(ctx, 0);
    /* wait without sleeping for the last finisher */
    for (unsigned i = 0; i < n; i++)
        if (workers[i])
            while (__atomic_load_n(&workers[i]->finished, __ATOMIC_ACQUIRE) != gen[i])
                __asm__ __volatile__("pause");
    pthread_mutex_unlock(&pool_lock);
    return MFX_POOL_OK;
}

uint64_t mfx_thread_switches(void)
{
    struct rusage r;
    if (getrusage(RUSAGE_THREAD, &r) != 0)
        return 0;
    return (uint64_t)r.ru_nvcsw + (uint64_t)r.ru_nivcsw;
}

/* ns this thread has waited on a run queue (schedstat field 2), or
 * UINT64_MAX when the kernel does not provide it (no CONFIG_SCHED_INFO). */
static uint64_t run_queue_wait_ns(void)
{
    char buf[128];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return UINT64_MAX;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return UINT64_MAX;
    buf[got] = 0;
    char *end;
    strtoull(buf, &end, 10);
    if (end == buf)
        return UINT64_MAX;
    char *start = end;
    unsigned long long w = strtoull(start, &end, 10);
    return end == start ? UINT64_MAX : (uint64_t)w;
}

struct team_call {
    struct mfx_team_member *m;
    unsigned n;
    int background;
    uint64_t arrived;      /* barrier count */
    uint64_t go;           /* set by the last arrival */
    uint64_t release;      /* its TSC stamp */
    uint64_t loaders_ready;
    uint64_t stop;         /* member 0 finished (background) */
};

static void team_member(void *ctx, unsigned i)
{
    struct team_call *c = ctx;
    struct mfx_team_member *m = &c->m[i];
    if (__atomic_add_fetch(&c->arrived, 1, __ATOMIC_ACQ_REL) == c->n) {
        c->release = mfx_tsc_begin();
        __atomic_store_n(&c->go, 1, __ATOMIC_RELEASE);
    } else {
        while (!__atomic_load_n(&c->go, __ATOMIC_ACQUIRE))
            __asm__ __volatile__("pause");
    }
    if (m->delay_ticks) {
        uint64_t t = mfx_tsc_begin();
        while (mfx_tsc_begin() - t < m->delay_ticks)
            __asm__ __volatile__("pause");
    }
    /* switches and run-queue wait count from here: before, a member may wait
     * to be woken (a busy CPU), which is outside every window; a late start
     * shows in the stamps instead */
    uint64_t sw0 = mfx_thread_switches(), wait0 = run_queue_wait_ns();
    uint32_t cpu0, cpu1;
    uint64_t t0, t1, result = 0, calls = 0;
    if (!c->background || i == 0) {
        if (c->background && c->n > 1) {
            uint64_t w = mfx_tsc_begin();
            while (__atomic_load_n(&c->loaders_ready, __ATOMIC_ACQUIRE) < c->n - 1 &&
                   mfx_tsc_begin() - w < LEAD_IN_MAX_TICKS)
                __asm__ __volatile__("pause");
            /* what happened to the timed member while it waited is not its window's */
            sw0 = mfx_thread_switches();
            wait0 = run_queue_wait_ns();
        }
        sigjmp_buf walk;
        if (sigsetjmp(walk, 0) != 0) {
            m->faulted = 1;      /* from the guard (guard.c): the walk left its chain */
            t0 = t1 = result = 0;
            cpu0 = cpu1 = 0;
        } else {
            if (m->guarded)
                mfx_guard_arm(&walk);
            t0 = mfx_tsc_end(&cpu0);
            result = m->kernel->fn(&m->args);
            t1 = mfx_tsc_end(&cpu1);
            mfx_guard_arm(NULL);
        }
        calls = 1;
        if (c->background)
            __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
    } else {
        struct mfx_args a = m->args;
        uint64_t chunks = m->chunks > 1 ? m->chunks : 1;
        t0 = mfx_tsc_end(&cpu0);
        do {
            size_t shift = (size_t)(calls % chunks) * m->args.size;
            a.dst = m->args.dst ? (char *)m->args.dst + shift : NULL;
            a.src = m->args.src ? (const char *)m->args.src + shift : NULL;
            result = m->kernel->fn(&a);
            if (++calls == 1)
                __atomic_add_fetch(&c->loaders_ready, 1, __ATOMIC_ACQ_REL);
        } while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE));
        t1 = mfx_tsc_end(&cpu1);
    }
    m->tsc_start = t0;
    m->tsc_end = t1;
    m->cpu_start = cpu0 & 0xfff;
    m->cpu_end = cpu1 & 0xfff;
    m->result = result;
    m->calls = calls;
    m->switches = mfx_thread_switches() - sw0;
    uint64_t wait1 = run_queue_wait_ns();
    m->wait_ns = wait0 == UINT64_MAX || wait1 == UINT64_MAX ? UINT64_MAX : wait1 - wait0;
    m->ran = 1;
}

int mfx_team_run(struct mfx_team_member *members, unsigned n, int background, uint64_t *release,
                 int *err, unsigned *bad)
{
    uint64_t cpus[MFX_TEAM_MAX];
    if (n < 1 || n > MFX_TEAM_MAX) {
        *err = 0;
        *bad = 0;
        return MFX_POOL_THREADS;
    }
    for (unsigned i = 0; i < n; i++) {
        cpus[i] = members[i].cpu;
        members[i].ran = 0;
        members[i].faulted = 0;
    }
    struct team_call call;
    memset(&call, 0, sizeof call);
    call.m = members;
    call.n = n;
    call.background = background;
    int rc = mfx_pool_dispatch(cpus, n, team_member, &call, err, bad);
    *release = call.release;
    return rc;
}
