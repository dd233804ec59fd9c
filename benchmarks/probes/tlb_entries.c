/* An independent probe of how many 4 KiB translations the L1 data TLB and
 * the L2 TLB hold (issue 45), written the plain way, to check memfx's
 * tlb.l1_entries and tlb.l2_entries against.
 *
 *   gcc -O2 -Wall -o tlb_entries tlb_entries.c
 *   taskset -c 1 ./tlb_entries REPS MS_PER_SAMPLE COUNTS...
 *
 * COUNTS are page counts, each a number or a range LO:HI:STEP (HI included).
 *
 * The pattern is memfx's tlb experiment's 4k arm: element e of a chain
 * starts e * (4096 + 64) bytes into one mapping on base pages
 * (MADV_NOHUGEPAGE), so every element's pointer lies in a page of its own and
 * the line inside the page moves on by one per element (the lines spread over
 * every set of an L1d indexed by the page offset instead of piling into one
 * set); the chain visits the n elements in a random order and closes into one
 * cycle; each load's address is the value the previous load returned (a
 * pointer chase: one dependent load per page, so the time per load is its
 * latency, translation included).
 *
 * Repetitions are interleaved: every round visits every page count once, in
 * an order shuffled afresh each round, and each visit links a fresh random
 * chain over the first n elements, runs it twice round (untimed: the
 * translations and lines are then the chain's own), then times one sample of
 * at least MS_PER_SAMPLE; a sample during which the thread was switched out
 * is retaken, warm-up included (up to MAX_ATTEMPTS times).  Printed per count: "probe <pages> <median ns>
 * <min ns> <max ns>" over the rounds, then "samples <pages> <ns>..." (each
 * round's sample, sorted). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "probe_common.h"

#define PAGE 4096
#define LINE 64
#define ELEMENT (PAGE + LINE)
#define MAX_REPS 101
#define MAX_COUNTS 100000
#define MAX_ATTEMPTS 20

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
 * generators", 2014): enough for shuffles, and no state beyond one word */
static uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(uint32_t *v, size_t n, uint64_t *s)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(next_random(s) % i);
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* n loads, each from the address the previous one read.  Plain C: the
 * compiler cannot drop or reorder the loads, because every address comes
 * from the load before it and the last one is returned. */
static __attribute__((noinline)) void *chase(void *start, uint64_t n)
{
    void **p = start;
    while (n >= 4) {
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        n -= 4;
    }
    while (n--)
        p = (void **)*p;
    return p;
}

/* one cycle through elements 0..n-1 in a random order; returns its start */
static void *link_chain(char *base, uint32_t *order, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    shuffle(order, n, s);
    for (size_t i = 0; i < n; i++) {
        char *from = base + (size_t)order[i] * ELEMENT;
        char *to = base + (size_t)order[(i + 1) % n] * ELEMENT;
        memcpy(from, &to, sizeof to);
    }
    return base + (size_t)order[0] * ELEMENT;
}

static int parse_counts(int argc, char **argv, uint32_t *out)
{
    int k = 0;
    for (int i = 0; i < argc; i++) {
        unsigned long lo, hi, step;
        int got = sscanf(argv[i], "%lu:%lu:%lu", &lo, &hi, &step);
        if (got == 1) {
            hi = lo;
            step = 1;
        } else if (got != 3 || step == 0 || hi < lo) {
            return -1;
        }
        for (unsigned long n = lo; n <= hi; n += step) {
            if (n < 2 || k >= MAX_COUNTS)
                return -1;
            out[k++] = (uint32_t)n;
        }
    }
    return k;
}

int main(int argc, char **argv)
{
    static uint32_t counts[MAX_COUNTS];
    int reps = argc > 1 ? atoi(argv[1]) : 0;
    double ms = argc > 2 ? atof(argv[2]) : 0;
    int nc = argc > 3 ? parse_counts(argc - 3, argv + 3, counts) : -1;
    if (reps < 1 || reps > MAX_REPS || ms <= 0 || nc < 1) {
        fprintf(stderr, "usage: %s REPS(1..%d) MS_PER_SAMPLE COUNTS(N or LO:HI:STEP)...\n",
                argv[0], MAX_REPS);
        return 2;
    }
    uint32_t most = 0;
    for (int i = 0; i < nc; i++)
        most = counts[i] > most ? counts[i] : most;
    size_t bytes = (size_t)most * ELEMENT + PAGE;
    char *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    /* base pages only: a huge page would hold 512 of the chain's pages under
     * one translation, and the step would move (or vanish) */
    if (madvise(base, bytes, MADV_NOHUGEPAGE) != 0)
        perror("madvise(MADV_NOHUGEPAGE)");
    memset(base, 0, bytes);          /* fault every page in before timing */
    uint32_t *order = malloc((size_t)most * sizeof *order);
    uint32_t *visit = malloc((size_t)nc * sizeof *visit);
    double *got = malloc((size_t)nc * MAX_REPS * sizeof *got);
    if (!order || !visit || !got) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t seed = 0x7EB45u;
    volatile uintptr_t sink = 0;
    long retakes = 0;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < nc; i++)
            visit[i] = (uint32_t)i;
        shuffle(visit, (size_t)nc, &seed);
        for (int v = 0; v < nc; v++) {
            int i = (int)visit[v];
            uint64_t n = counts[i];
            void *start = link_chain(base, order, n, &seed);
            double ns = 0;
            for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
                long before = switches();
                /* warm-up: twice round the chain, timed only to size the
                 * sample; redone on a retake, as whatever ran meanwhile may
                 * have taken translations of the chain's pages */
                double t0 = now_ns();
                sink += (uintptr_t)chase(start, 2 * n);
                double per = (now_ns() - t0) / (double)(2 * n);
                uint64_t loads = (uint64_t)(ms * 1e6 / (per > 0.2 ? per : 0.2));
                loads = loads < n ? n : loads;
                t0 = now_ns();
                sink += (uintptr_t)chase(start, loads);
                ns = (now_ns() - t0) / (double)loads;
                if (switches() == before)
                    break;
                retakes++;
            }
            got[(size_t)i * MAX_REPS + r] = ns;
        }
    }
    printf("# tlb_entries: %d interleaved rounds, %.2f ms per sample, element %d bytes, "
           "%ld samples retaken after a context switch\n", reps, ms, ELEMENT, retakes);
    for (int i = 0; i < nc; i++) {
        double *g = got + (size_t)i * MAX_REPS;
        qsort(g, (size_t)reps, sizeof *g, cmp_double);
        double med = reps % 2 ? g[reps / 2] : 0.5 * (g[reps / 2 - 1] + g[reps / 2]);
        printf("probe %u %.4f %.4f %.4f\n", counts[i], med, g[0], g[reps - 1]);
    }
    for (int i = 0; i < nc; i++) {        /* every sample, sorted, for a closer look */
        printf("samples %u", counts[i]);
        for (int r = 0; r < reps; r++)
            printf(" %.3f", got[(size_t)i * MAX_REPS + r]);
        printf("\n");
    }
    return 0;
}
