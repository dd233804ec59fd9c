/* Kernels where several threads touch one cache line (seed 004, Drepper,
 * "Concurrent Cache Line Access Overhead", "Atomicity Optimizations",
 * "Atomic Increment in a Loop"): false sharing, a line bounced between two
 * CPUs (ping-pong), atomic read-modify-writes on one contended variable.
 *
 * One call = one run of `size` threads.  The kernel runs thread i on the
 * CPU the lab wrote in the control area (threads of the lab's pool in
 * team.c, pinned with pthread_attr_setaffinity_np, parked between calls),
 * lets them all go on one spinning barrier and waits, spinning, for the last finisher.  The
 * calling thread is thread 0 when it already runs on CPU 0 of the list
 * (the lab pins it there); otherwise it only waits.  The caller never
 * sleeps in the call, so its software perf events see a context switch
 * only when it was really preempted.
 *
 * dst is the whole shared area, page-aligned by the lab:
 *   [0, 512)          header: status, final value of the shared variable,
 *                     its expected value, TSC at entry and exit; the
 *                     barrier and the stop flag on lines of their own
 *   [512, 1024)       the CPU of each thread (u64 each; written by the lab)
 *   [1024, 9216)      one 128-byte results slot per thread (S_* words)
 *   [12288, ...)      the counters / the shared variable: thread i's
 *                     counter at COUNTERS + i * aux (false sharing), or one
 *                     variable at COUNTERS (atomics, ping-pong)
 * Python mirrors these offsets (experiments/_kit.py, HEADER..COUNTERS) and the
 * tests check them through the counter addresses each thread reports.
 *
 * Per thread the slot receives: the CPU asked for, the CPU at the start and
 * at the end of its work (rdtscp's TSC_AUX), TSC stamps right after the
 * barrier and after its last operation, the context switches it suffered
 * (getrusage RUSAGE_THREAD, outside the stamps), its counter's address and
 * final value, and what its operations returned (checksum, CAS retries,
 * stores of a writer).  The lab reads them after each call. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "../core.h"
#include "../team.h"
#include "../layout_shared.h"     /* SH_*: the shared area's layout */

/* header words */
enum { H_STATUS, H_FINAL, H_EXPECTED, H_TSC_ENTRY, H_TSC_EXIT, H_THREADS };
/* slot words */
enum {
    S_CPU_ASKED, S_CPU_START, S_CPU_END, S_TSC_START, S_TSC_END, S_SWITCHES, S_ADDRESS,
    S_FINAL, S_OPS, S_CHECKSUM, S_RETRIES, S_DONE, S_RAN,
};
/* status: 0 ok; low byte the error, the rest an errno */
enum { ST_OK, ST_THREADS, ST_CPU, ST_CREATE, ST_PAIR, ST_DISTANCE };

enum kind { FS_PLAIN, FS_ATOMIC, PINGPONG, AT_FETCH_ADD, AT_ADD_FETCH, AT_CAS, AT_XCHG,
            AT_PLAIN, AT_REMOTE };

struct sh_call {
    char *base;
    enum kind kind;
    unsigned n;
    uint64_t count;
    uint64_t distance;
};

#define WORD(base, off) ((volatile uint64_t *)((base) + (off)))
#define SLOT(base, i) ((volatile uint64_t *)((base) + SH_SLOTS + (size_t)(i) * SH_SLOT_BYTES))

static char *counter_of(const struct sh_call *c, unsigned i)
{
    if (c->kind == FS_PLAIN || c->kind == FS_ATOMIC)
        return c->base + SH_COUNTERS + (size_t)i * c->distance;
    return c->base + SH_COUNTERS;
}

static uint64_t switches(void)
{
    return mfx_thread_switches();
}

/* xchg tags: XCHG_TAG_SHIFT (layout_shared.h) */

static void body(struct sh_call *c, unsigned i, volatile uint64_t *slot)
{
    uint64_t *p = (uint64_t *)counter_of(c, i);
    uint64_t sum = 0, retries = 0, ops = 0;
    switch (c->kind) {
    case FS_PLAIN:
    case AT_PLAIN:
        /* one read-modify-write of memory, not locked: a lost update is
         * possible when another core writes the same bytes */
        for (uint64_t k = 0; k < c->count; k++)
            __asm__ __volatile__("addq $1, (%0)" ::"r"(p) : "memory", "cc");
        ops = c->count;
        break;
    case FS_ATOMIC:
        for (uint64_t k = 0; k < c->count; k++)
            __asm__ __volatile__("lock addq $1, (%0)" ::"r"(p) : "memory", "cc");
        ops = c->count;
        break;
    case AT_FETCH_ADD:
        /* __atomic_fetch_add with the old value used: lock xadd */
        for (uint64_t k = 0; k < c->count; k++) {
            uint64_t v = 1;
            __asm__ __volatile__("lock xaddq %0, (%1)" : "+r"(v) : "r"(p) : "memory", "cc");
            sum += v;
        }
        ops = c->count;
        break;
    case AT_ADD_FETCH:
        /* __atomic_add_fetch with the new value used: lock xadd, then add */
        for (uint64_t k = 0; k < c->count; k++) {
            uint64_t v = 1;
            __asm__ __volatile__("lock xaddq %0, (%1)\n\taddq $1, %0"
                                 : "+r"(v) : "r"(p) : "memory", "cc");
            sum += v;
        }
        ops = c->count;
        break;
    case AT_CAS:
        /* Drepper's loop: do { cur = var; new = cur + 1; } while (!CAS) */
        for (uint64_t k = 0; k < c->count; k++) {
            for (;;) {
                uint64_t cur, next;
                unsigned char ok;
                __asm__ __volatile__("movq (%1), %0" : "=r"(cur) : "r"(p) : "memory");
                next = cur + 1;
                __asm__ __volatile__("lock cmpxchgq %2, (%3)\n\tsete %1"
                                     : "+a"(cur), "=q"(ok) : "r"(next), "r"(p) : "memory", "cc");
                if (ok)
                    break;
                retries++;
            }
        }
        ops = c->count;
        break;
    case AT_XCHG:
        for (uint64_t k = 0; k < c->count; k++) {
            uint64_t v = ((uint64_t)(i + 1) << XCHG_TAG_SHIFT) | (k + 1);
            __asm__ __volatile__("xchgq %0, (%1)" : "+r"(v) : "r"(p) : "memory");
            sum += v;
        }
        ops = c->count;
        break;
    case AT_REMOTE:
        if (i == 0) {
            /* lock add on word 0 of a line the writers keep taking back */
            for (uint64_t k = 0; k < c->count; k++)
                __asm__ __volatile__("lock addq $1, (%0)" ::"r"(p) : "memory", "cc");
            ops = c->count;
            __atomic_store_n(WORD(c->base, SH_STOP), 1, __ATOMIC_RELEASE);
        } else {
            /* a writer: plain stores to a word of the same line, never word
             * 0 (thread 0's variable): words 1..7, shared beyond 8 threads */
            volatile uint64_t *mine =
                (volatile uint64_t *)(c->base + SH_COUNTERS + 8 * (1 + (i - 1) % 7));
            while (!__atomic_load_n(WORD(c->base, SH_STOP), __ATOMIC_ACQUIRE)) {
                *mine = ops;
                ops++;
            }
        }
        break;
    case PINGPONG: {
        /* thread 0 writes odd values, thread 1 even ones; each waits for the
         * other's write, so each round trip is two one-way transfers */
        volatile uint64_t *flag = (volatile uint64_t *)p;
        for (uint64_t k = 0; k < c->count; k++) {
            uint64_t want = 2 * k + i;
            while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != want)
                ;
            __atomic_store_n(flag, want + 1, __ATOMIC_RELEASE);
            ops++;
        }
        break;
    }
    }
    slot[S_OPS] = ops;
    slot[S_CHECKSUM] = sum;
    slot[S_RETRIES] = retries;
}

static void run_thread(struct sh_call *c, unsigned i)
{
    volatile uint64_t *slot = SLOT(c->base, i);
    volatile uint64_t *arrived = WORD(c->base, SH_BARRIER);
    char *mine = counter_of(c, i);
    uint64_t sw0 = switches();
    slot[S_ADDRESS] = (uint64_t)(uintptr_t)mine;
    if (c->kind == FS_PLAIN || c->kind == FS_ATOMIC)
        *(volatile uint64_t *)mine = 0;    /* each thread zeroes its own counter */
    __atomic_fetch_add(arrived, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(arrived, __ATOMIC_ACQUIRE) < c->n)
        __asm__ __volatile__("pause");
    uint32_t cpu0, cpu1;
    uint64_t t0 = mfx_tsc_end(&cpu0);
    body(c, i, slot);
    uint64_t t1 = mfx_tsc_end(&cpu1);
    slot[S_TSC_START] = t0;
    slot[S_TSC_END] = t1;
    slot[S_CPU_START] = cpu0 & 0xfff;
    slot[S_CPU_END] = cpu1 & 0xfff;
    slot[S_FINAL] = *(volatile uint64_t *)mine;
    slot[S_SWITCHES] = switches() - sw0;
    slot[S_RAN] = 1;
    __atomic_store_n(&slot[S_DONE], 1, __ATOMIC_RELEASE);
}

/* The threads come from the lab's pool (team.c): pinned once, parked on a
 * futex between calls. */
static void sh_thread(void *ctx, unsigned i)
{
    run_thread((struct sh_call *)ctx, i);
}

/* The driver shared by every row: returns the final value of the shared
 * variable (atomics, ping-pong) or the sum of the counters (false sharing). */
static uint64_t sh_run(const struct mfx_args *a, enum kind kind)
{
    char *base = (char *)a->dst;
    volatile uint64_t *h = WORD(base, SH_HEADER);
    struct sh_call call = {base, kind, (unsigned)a->size, a->count, a->aux};
    h[H_TSC_ENTRY] = mfx_tsc_begin();
    h[H_STATUS] = ST_OK;
    h[H_THREADS] = a->size;
    if (a->size < 1 || a->size > SH_MAX_THREADS) {
        h[H_STATUS] = ST_THREADS;
        return 0;
    }
    if (kind == PINGPONG && a->size != 2) {
        h[H_STATUS] = ST_PAIR;
        return 0;
    }
    if ((kind == FS_PLAIN || kind == FS_ATOMIC) &&
        (a->aux < 8 || a->aux % 8 || a->aux > SH_MAX_DISTANCE)) {
        h[H_STATUS] = ST_DISTANCE;
        return 0;
    }
    unsigned n = call.n;
    const volatile uint64_t *cpus = WORD(base, SH_CPUS);
    for (unsigned i = 0; i < n; i++) {
        if (cpus[i] >= CPU_SETSIZE) {
            h[H_STATUS] = ST_CPU | (uint64_t)i << 8;
            return 0;
        }
        volatile uint64_t *slot = SLOT(base, i);
        for (unsigned w = 0; w < SH_SLOT_BYTES / 8; w++)
            slot[w] = 0;
        slot[S_CPU_ASKED] = cpus[i];
        slot[S_CPU_START] = slot[S_CPU_END] = UINT64_MAX;
    }
    *WORD(base, SH_BARRIER) = 0;
    *WORD(base, SH_STOP) = 0;
    if (kind != FS_PLAIN && kind != FS_ATOMIC)
        for (unsigned w = 0; w < 8; w++)
            *WORD(base, SH_COUNTERS + 8 * w) = 0;
    /* ping-pong: two writes per round trip; xchg: each thread's last value
     * is its count; remote: only thread 0 adds; the rest: every thread adds */
    h[H_EXPECTED] = kind == PINGPONG ? 2 * a->count
                    : (kind == AT_XCHG || kind == AT_REMOTE) ? a->count
                    : n * a->count;

    /* thread 0 is the caller when it already runs on thread 0's CPU */
    uint64_t cpu_list[SH_MAX_THREADS];
    for (unsigned i = 0; i < n; i++)
        cpu_list[i] = cpus[i];
    int err = 0;
    unsigned bad = 0;
    int rc = mfx_pool_dispatch(cpu_list, n, sh_thread, &call, &err, &bad);
    if (rc == MFX_POOL_CPU) {
        h[H_STATUS] = ST_CPU | (uint64_t)bad << 8;
        return 0;
    }
    if (rc != MFX_POOL_OK) {
        h[H_STATUS] = ST_CREATE | (uint64_t)err << 8 | (uint64_t)bad << 24;
        return 0;
    }
    uint64_t result = 0;
    if (kind == FS_PLAIN || kind == FS_ATOMIC) {
        for (unsigned i = 0; i < n; i++)
            result += *(volatile uint64_t *)counter_of(&call, i);
    } else {
        result = *WORD(base, SH_COUNTERS);
    }
    h[H_FINAL] = result;
    h[H_TSC_EXIT] = mfx_tsc_begin();
    return result;
}

#define SH_KERNEL(NAME, KIND)                                                    \
    static uint64_t NAME(const struct mfx_args *a) { return sh_run(a, KIND); }

SH_KERNEL(fs_plain, FS_PLAIN)
SH_KERNEL(fs_atomic, FS_ATOMIC)
SH_KERNEL(pingpong, PINGPONG)
SH_KERNEL(at_fetch_add, AT_FETCH_ADD)
SH_KERNEL(at_add_fetch, AT_ADD_FETCH)
SH_KERNEL(at_cas, AT_CAS)
SH_KERNEL(at_xchg, AT_XCHG)
SH_KERNEL(at_plain, AT_PLAIN)
SH_KERNEL(at_remote, AT_REMOTE)

/* The header, CPU list and slots, then the counters: thread i's at
 * COUNTERS + i * aux (size = threads), or one line at COUNTERS.  A thread
 * count or distance the kernel refuses touches only the header, but the
 * footprint still covers the whole area so the check does not depend on
 * which error the kernel finds. */
static void fs_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t n = a->size < 1 ? 1 : mfx_sat_u64(a->size);
    size_t d = mfx_sat_u64(a->aux);
    size_t span = (n - 1) > SIZE_MAX / (d ? d : 1) ? SIZE_MAX : (n - 1) * d;
    f->dst_bytes = mfx_sat_add(mfx_sat_add(SH_COUNTERS, span), 64);
}

static void line_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    (void)a;
    f->dst_bytes = SH_COUNTERS + 64;
}

#define SH_ROW(NAME, FOOT, OPS, OP, RD, WR, DOC)                                 \
    {                                                                            \
        .name = #NAME, .group = "sharing", .isa = "", .fn = NAME,                \
        .footprint = FOOT, .read_per_byte = 0, .write_per_byte = 0,              \
        .read_fixed = RD, .write_fixed = WR, .ops_per_iter = OPS, .op = OP,      \
        .doc = DOC,                                                              \
    }

/* Traffic is per thread and iteration (8-byte read-modify-writes); the
 * time per op is per thread: every thread does `count` of them at once. */
MFX_KERNEL_TABLE(sharing) = {
    SH_ROW(fs_plain, fs_footprint, 1, "increment", 8, 8,
           "size threads each add 1 (addq, not locked) to their own counter, aux bytes apart"),
    SH_ROW(fs_atomic, fs_footprint, 1, "increment", 8, 8,
           "size threads each lock add 1 to their own counter, aux bytes apart"),
    SH_ROW(pingpong, line_footprint, 2, "transfer", 8, 8,
           "two threads bounce one flag: each waits for the other's value and writes the next"),
    SH_ROW(at_fetch_add, line_footprint, 1, "op", 8, 8,
           "size threads lock xadd one variable (fetch_add, old value used)"),
    SH_ROW(at_add_fetch, line_footprint, 1, "op", 8, 8,
           "size threads lock xadd + add one variable (add_fetch, new value used)"),
    SH_ROW(at_cas, line_footprint, 1, "op", 8, 8,
           "size threads increment one variable with a load + lock cmpxchg retry loop"),
    SH_ROW(at_xchg, line_footprint, 1, "op", 8, 8,
           "size threads xchg a tagged value into one variable"),
    SH_ROW(at_plain, line_footprint, 1, "op", 8, 8,
           "size threads add 1 (addq, not locked) to one variable: updates get lost"),
    SH_ROW(at_remote, line_footprint, 1, "op", 8, 8,
           "thread 0 lock adds word 0 of a line the other threads keep storing to"),
    {0},
};
