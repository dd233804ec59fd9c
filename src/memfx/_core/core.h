/* memfx C core: shared declarations.
 *
 * A kernel is one function with one fixed signature and one table row that
 * declares its traffic; the Python driver derives ns/op and GB/s from the row
 * and never special-cases a kernel. */
#ifndef MEMFX_CORE_H
#define MEMFX_CORE_H

#include <stddef.h>
#include <stdint.h>

struct mfx_args {
    void *dst;          /* destination region (stores), may be NULL */
    const void *src;    /* source region (loads) or pointer-chase start */
    size_t size;        /* bytes per iteration (region size, copy length) */
    uint64_t value;     /* fill value / pattern, a runtime argument */
    uint64_t count;     /* iterations: passes, calls or chase steps */
    uint64_t aux;       /* kernel-specific (stride, offset, distance) */
};

typedef uint64_t (*mfx_kernel_fn)(const struct mfx_args *a);

/* One row per kernel.  Traffic per iteration = coefficient * size + constant,
 * operations per iteration = ops_per_iter.  The driver multiplies by count. */
struct mfx_kernel {
    const char *name;
    const char *group;        /* "chase", "fill", "copy", ... */
    const char *isa;          /* "" or a feature name understood by mfx_isa_supported */
    mfx_kernel_fn fn;
    double read_per_byte;     /* bytes loaded per byte of size */
    double write_per_byte;    /* bytes stored per byte of size */
    double read_fixed;        /* bytes loaded per iteration regardless of size */
    double write_fixed;       /* bytes stored per iteration regardless of size */
    double ops_per_iter;      /* operations per iteration (1 call, 1 load, ...) */
    const char *op;           /* what one operation is: "load", "call", "pass" */
    const char *doc;          /* one line */
};

/* Each file in kernels/ exports a table terminated by a row with name NULL;
 * kernel_table.c lists the tables. */
extern const struct mfx_kernel mfx_kernels_chase[];
extern const struct mfx_kernel mfx_kernels_fill[];
extern const struct mfx_kernel mfx_kernels_storefwd[];
extern const struct mfx_kernel mfx_kernels_copy[];

int mfx_isa_supported(const char *isa);

/* ---- timing ---- */
static inline uint64_t mfx_tsc_begin(void)
{
    uint32_t lo, hi;
    /* lfence; rdtsc; lfence: earlier instructions complete before the read,
     * later ones do not start before it (Intel SDM Vol. 2B, RDTSC). */
    __asm__ __volatile__("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi)::"memory");
    return ((uint64_t)hi << 32) | lo;
}

static inline uint64_t mfx_tsc_end(uint32_t *aux)
{
    uint32_t lo, hi, c;
    /* rdtscp waits for earlier instructions; the lfence keeps later ones out
     * (Intel SDM Vol. 2B, RDTSCP).  TSC_AUX holds the CPU id on Linux. */
    __asm__ __volatile__("rdtscp\n\tlfence" : "=a"(lo), "=d"(hi), "=c"(c)::"memory");
    if (aux)
        *aux = c;
    return ((uint64_t)hi << 32) | lo;
}

static inline uint32_t mfx_cpu_id(void)
{
    uint32_t aux;
    mfx_tsc_end(&aux);
    return aux & 0xfff; /* Linux: TSC_AUX = (node << 12) | cpu */
}

/* ---- perf_event ---- */
#define MFX_PERF_MAX 8
struct mfx_perf_sample {
    int n;
    uint64_t value[MFX_PERF_MAX];
    uint64_t time_enabled, time_running;
};
int mfx_perf_read_group(int leader_fd, struct mfx_perf_sample *out);

#endif
