/* An independent probe of zero-store elimination for non-temporal fills
 * (issue 45): fill one region again and again with streaming stores of zero
 * bytes, and of 0x01 bytes, and compare the speeds, to check the NT cells of
 * memfx's fill.zero_store_elimination against.
 *
 *   gcc -O2 -Wall -o nt_fill nt_fill.c
 *   taskset -c 1 ./nt_fill [reps] [bytes] [ms_per_sample]
 *
 * The pattern is memfx's fill experiment's nt_sse and nt_movnti kernels: one
 * page-aligned region of `bytes` (default 16 KiB), each pass writes every
 * byte of it once, front to back, with aligned streaming stores only --
 * movntdq (16 B, SSE2) or movnti (8 B) -- and ends with an sfence (the
 * stores are weakly ordered; the fence makes each pass complete before the
 * next begins, and is part of the cost memfx times as well).  A sample is
 * as many back-to-back passes as last `ms_per_sample`, timed as a whole;
 * bandwidth = bytes written / time.
 *
 * The two values run the same compiled loop: the fill byte is read at run
 * time through a volatile (so the compiler can neither know it is zero nor
 * produce it with a zeroing idiom) and broadcast into the stored register.
 * Each visit of a value first fills the region with it for a few ms
 * (untimed), so that, as in memfx, zeros are written over zeros and 0x01
 * over 0x01 (whether what a line already holds matters is the question).
 *
 * Repetitions are interleaved: each round visits every (store, value) cell
 * once, in an order rotated and reversed from round to round; a sample
 * during which the thread was switched out is retaken.  Printed per store:
 * "probe <store> <zero GB/s> <one GB/s> <zero/one>", the medians over
 * rounds of each value's bandwidth and of the per-round ratio (two samples
 * taken close together, so a host slowing down between rounds moves both),
 * then "ratios <store> <r>..." (every round's ratio, sorted). */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "probe_common.h"

#define MAX_REPS 101
#define MAX_ATTEMPTS 20
#define WARM_MS 2.0

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* passes over [d, d + n) with movntdq, four per 64-byte line; n a multiple
 * of 64 and d 16-byte aligned (checked by the caller) */
static __attribute__((noinline)) void nt_movntdq(char *d, size_t n, __m128i v, uint64_t passes)
{
    for (uint64_t k = 0; k < passes; k++) {
        for (char *p = d; p < d + n; p += 64) {
            _mm_stream_si128((__m128i *)p, v);
            _mm_stream_si128((__m128i *)(p + 16), v);
            _mm_stream_si128((__m128i *)(p + 32), v);
            _mm_stream_si128((__m128i *)(p + 48), v);
        }
        _mm_sfence();
    }
}

/* the same with movnti, eight per line */
static __attribute__((noinline)) void nt_movnti(char *d, size_t n, long long v, uint64_t passes)
{
    for (uint64_t k = 0; k < passes; k++) {
        for (char *p = d; p < d + n; p += 64) {
            long long *q = (long long *)p;
            _mm_stream_si64(q, v);
            _mm_stream_si64(q + 1, v);
            _mm_stream_si64(q + 2, v);
            _mm_stream_si64(q + 3, v);
            _mm_stream_si64(q + 4, v);
            _mm_stream_si64(q + 5, v);
            _mm_stream_si64(q + 6, v);
            _mm_stream_si64(q + 7, v);
        }
        _mm_sfence();
    }
}

enum { MOVNTDQ, MOVNTI, STORES };
static const char *store_name[STORES] = {"movntdq", "movnti"};
/* the two fill bytes; volatile: read at run time, never a constant */
static volatile unsigned char fill_byte[2] = {0x00, 0x01};

static void run(int store, int value, char *d, size_t n, uint64_t passes)
{
    long long word = (long long)(fill_byte[value] * 0x0101010101010101ull);
    if (store == MOVNTDQ)
        nt_movntdq(d, n, _mm_set1_epi64x(word), passes);
    else
        nt_movnti(d, n, word, passes);
}

/* passes that last about `ms` for one cell (doubling from one pass) */
static uint64_t calibrate(int store, int value, char *d, size_t n, double ms)
{
    uint64_t passes = 1;
    for (;;) {
        double t0 = now_ns();
        run(store, value, d, n, passes);
        double t = now_ns() - t0;
        if (t >= ms * 1e6 || passes >= (1ull << 40))
            return passes;
        passes *= 2;
    }
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 9;
    long long bytes = argc > 2 ? atoll(argv[2]) : 16384;
    double ms = argc > 3 ? atof(argv[3]) : 1.0;
    if (reps < 1 || reps > MAX_REPS || bytes < 64 || bytes % 64 || ms <= 0) {
        fprintf(stderr, "usage: %s [reps 1..%d] [bytes, a multiple of 64] [ms_per_sample]\n",
                argv[0], MAX_REPS);
        return 2;
    }
    size_t n = (size_t)bytes;
    char *d = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (d == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(d, 0x5A, n);                   /* fault the pages in */
    uint64_t passes[STORES][2];
    for (int s = 0; s < STORES; s++)
        for (int v = 0; v < 2; v++) {
            run(s, v, d, n, calibrate(s, v, d, n, WARM_MS));   /* warm-up */
            passes[s][v] = calibrate(s, v, d, n, ms);
        }
    static double gbps[STORES][2][MAX_REPS];
    long retakes = 0;
    enum { CELLS = STORES * 2 };
    for (int r = 0; r < reps; r++) {
        for (int c = 0; c < CELLS; c++) {
            int k = (r % 2 ? CELLS - 1 - c : c);           /* A B .. B A */
            k = (k + r / 2) % CELLS;                       /* rotated every second round */
            int s = k / 2, v = k % 2;
            uint64_t warm = passes[s][v] * (uint64_t)(WARM_MS / ms + 1);
            double t = 0;
            for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
                long before = switches();
                run(s, v, d, n, warm);    /* the region holds this value before timing */
                double t0 = now_ns();
                run(s, v, d, n, passes[s][v]);
                t = now_ns() - t0;
                if (switches() == before)
                    break;
                retakes++;
            }
            gbps[s][v][r] = (double)n * (double)passes[s][v] / t;
        }
    }
    /* the region must hold the last value written: the stores did land */
    unsigned char last = fill_byte[1];
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)d[i] != last && (unsigned char)d[i] != fill_byte[0]) {
            fprintf(stderr, "byte %zu holds %#x, neither fill value\n", i, (unsigned char)d[i]);
            return 1;
        }
    printf("# nt_fill: %d interleaved rounds, %zu bytes, ~%.2f ms per sample, "
           "%ld samples retaken after a context switch\n", reps, n, ms, retakes);
    static double ratio[MAX_REPS];
    for (int s = 0; s < STORES; s++) {
        for (int r = 0; r < reps; r++)
            ratio[r] = gbps[s][0][r] / gbps[s][1][r];
        double q = median(ratio, reps);
        printf("probe %s %.3f %.3f %.4f\n", store_name[s], median(gbps[s][0], reps),
               median(gbps[s][1], reps), q);
        printf("ratios %s", store_name[s]);
        for (int r = 0; r < reps; r++)
            printf(" %.3f", ratio[r]);
        printf("\n");
    }
    return 0;
}
