/* An independent probe of what a prefetcht0 costs by target (issue 45),
 * written the plain way, to check memfx's prefetch cost part against.
 *
 *   gcc -O2 -o prefetch_targets prefetch_targets.c
 *   taskset -c 1 ./prefetch_targets [reps] [ms_per_sample]
 *
 * Targets, built here with plain mmap/munmap/mprotect:
 *   l1          a line of a page this process just wrote (in L1, TLB hit)
 *   null        address 0
 *   unmapped    the middle page of three mapped pages after munmap of it
 *   prot_none   the middle page of three mapped pages after mprotect(NONE)
 *   kernel      the kernel's text: the start of the kernel half's top 2 GiB,
 *               where x86-64 Linux links the kernel (Documentation/arch/
 *               x86/x86_64/mm.rst); mapped or not depends on KASLR and PTI
 *   kernel_hole the first address of the kernel half, the guard hole that
 *               mm.rst reserves for a hypervisor: nothing is mapped there
 *   noncanonical bit 62 alone (SDM Vol. 1, 3.3.7.1: bits 63..47 must be equal)
 *
 * Two loop shapes, each against its own loop without the prefetch:
 *   reg    the address in a register, the same every iteration, 8
 *          prefetches per loop trip (the plainest loop there is)
 *   table  the address loaded from a 64-entry table each iteration and added
 *          into a sum, one prefetch per iteration: memfx's pf_tput_t0 shape
 *
 * Repetitions are interleaved (every target and shape once per round, in a
 * rotated order); printed per target and shape: "probe <shape> <target> <ns>
 * <none_ns> <vs_l1>", the medians over rounds of ns per prefetch (per
 * iteration of the table shape), of the same loop without the prefetch and
 * of the ratio to the l1 target's time in the same round (a ratio of two
 * samples taken close together, so a host slowing down between rounds
 * moves both).
 * Before timing, each invalid target is checked to be what it is named:
 * mincore() fails with ENOMEM on an address no mapping covers (mincore(2)),
 * and a PROT_NONE page is one that mincore accepts. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "probe_common.h"

#define SLOTS 64
#define MAX_REPS 101

/* the prefetch as its own instruction, so the compiler can neither drop nor
 * hoist it (a prefetch of a loop-invariant address is a candidate for both) */
#define PF(p) __asm__ __volatile__("prefetcht0 (%0)" ::"r"(p) : "memory")

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* reg: n iterations of 8 prefetches of p (n * 8 prefetches in all) */
static __attribute__((noinline)) void loop_reg(const void *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        PF(p); PF(p); PF(p); PF(p); PF(p); PF(p); PF(p); PF(p);
    }
}

/* reg's baseline: the same trip count and the address kept live */
static __attribute__((noinline)) void loop_reg_none(const void *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        __asm__ __volatile__("" ::"r"(p) : "memory");
}

/* table: n iterations, each one load of the next table entry, a prefetch of
 * it and an add into the sum returned */
static __attribute__((noinline)) uint64_t loop_table(const uint64_t *t, uint64_t n)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = t[i % SLOTS];
        PF(a);
        sum += a;
    }
    return sum;
}

static __attribute__((noinline)) uint64_t loop_table_none(const uint64_t *t, uint64_t n)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = t[i % SLOTS];
        __asm__ __volatile__("" ::"r"(a) : "memory");
        sum += a;
    }
    return sum;
}

struct target {
    const char *name;
    uintptr_t addr;
};

static int unmapped_here(uintptr_t addr)
{
    unsigned char v;
    uintptr_t page = addr & ~(uintptr_t)4095;
    return mincore((void *)page, 4096, &v) != 0 && errno == ENOMEM;
}

enum { SHAPE_REG, SHAPE_TABLE, SHAPES };
static const char *shape_name[SHAPES] = {"reg", "table"};

/* ns per iteration of one shape at one target (with or without the prefetch) */
static double sample(int shape, int with_pf, uintptr_t addr, uint64_t *table, uint64_t iters)
{
    volatile uint64_t sink;
    double t0, t1;
    if (shape == SHAPE_REG) {
        /* 8 prefetches per trip: time per prefetch is per trip / 8 */
        uint64_t trips = iters / 8;
        t0 = now_ns();
        if (with_pf)
            loop_reg((const void *)addr, trips);
        else
            loop_reg_none((const void *)addr, trips);
        t1 = now_ns();
        return (t1 - t0) / (double)(trips * 8);
    }
    for (int k = 0; k < SLOTS; k++)
        table[k] = addr;
    t0 = now_ns();
    sink = with_pf ? loop_table(table, iters) : loop_table_none(table, iters);
    t1 = now_ns();
    (void)sink;
    return (t1 - t0) / (double)iters;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 9;
    double ms = argc > 2 ? atof(argv[2]) : 2.0;
    if (reps < 1 || reps > MAX_REPS || ms <= 0) {
        fprintf(stderr, "usage: %s [reps 1..%d] [ms_per_sample]\n", argv[0], MAX_REPS);
        return 2;
    }
    long page = sysconf(_SC_PAGESIZE);
    /* every mapping is made before the holes are punched, so no later mmap
     * of this process can land in them */
    uint64_t *table = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *hot = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *three = mmap(NULL, 5 * (size_t)page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (table == MAP_FAILED || hot == MAP_FAILED || three == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(hot, 1, (size_t)page);
    memset(three, 1, 5 * (size_t)page);
    if (munmap(three + page, (size_t)page) || mprotect(three + 3 * page, (size_t)page, PROT_NONE)) {
        perror("munmap/mprotect");
        return 1;
    }
    struct target targets[] = {
        {"l1", (uintptr_t)hot + 64},
        {"null", 0},
        {"unmapped", (uintptr_t)three + (uintptr_t)page + 64},
        {"prot_none", (uintptr_t)three + 3 * (uintptr_t)page + 64},
        {"kernel", (uintptr_t)0xFFFFFFFF81000000ull},
        {"kernel_hole", (uintptr_t)0xFFFF800000000000ull},
        {"noncanonical", (uintptr_t)0x4000000000000000ull},
    };
    int nt = (int)(sizeof targets / sizeof *targets);
    /* the targets are what they are named, checked before any timing */
    if (!unmapped_here(targets[2].addr) || !unmapped_here(0)) {
        fprintf(stderr, "unmapped or null target is mapped\n");
        return 1;
    }
    unsigned char v;
    if (mincore((void *)(targets[3].addr & ~(uintptr_t)4095), 4096, &v) != 0) {
        fprintf(stderr, "prot_none target is not mapped\n");
        return 1;
    }

    /* calibrate: iterations for `ms` of the dearest first guess */
    uint64_t iters = 1 << 16;
    for (;;) {
        double t = sample(SHAPE_TABLE, 1, targets[2].addr, table, iters) * (double)iters;
        if (t >= ms * 1e6 || iters >= (1ull << 34))
            break;
        iters *= 2;
    }
    static double got[SHAPES][16][2][MAX_REPS];
    for (int s = 0; s < SHAPES; s++)          /* warm-up: one untimed round */
        for (int i = 0; i < nt; i++)
            for (int w = 0; w < 2; w++)
                sample(s, w, targets[i].addr, table, iters / 8);
    int cells = SHAPES * nt * 2;
    for (int r = 0; r < reps; r++) {
        for (int c = 0; c < cells; c++) {
            int k = (c + r * 5) % cells;      /* rotate the order each round */
            int s = k / (nt * 2), i = (k / 2) % nt, w = k % 2;
            got[s][i][w][r] = sample(s, w, targets[i].addr, table, iters);
        }
    }
    printf("# prefetch_targets: %d interleaved rounds, %llu iterations per sample\n", reps,
           (unsigned long long)iters);
    for (int i = 0; i < nt; i++)
        printf("# target %s = %#llx\n", targets[i].name, (unsigned long long)targets[i].addr);
    static double ratio[MAX_REPS];
    for (int s = 0; s < SHAPES; s++)
        for (int i = 0; i < nt; i++) {
            for (int r = 0; r < reps; r++)   /* target 0 is l1 */
                ratio[r] = got[s][i][1][r] / got[s][0][1][r];
            double vs_l1 = median(ratio, reps);
            printf("probe %s %s %.4f %.4f %.4f\n", shape_name[s], targets[i].name,
                   median(got[s][i][1], reps), median(got[s][i][0], reps), vs_l1);
        }
    return 0;
}
