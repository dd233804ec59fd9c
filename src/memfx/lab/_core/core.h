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

/* The bytes one call may touch, relative to the pointers it is given:
 * [dst, dst + dst_bytes) loaded or stored, [src, src + src_bytes) loaded.
 * A kernel that walks a pointer chain from src sets chain_element_min: src
 * must then be an element of a chain linked by mfx_link_chain, with
 * elements of at least that many bytes (the walk stays on the chain's
 * elements, which the binding cannot bound by a byte count). */
struct mfx_footprint {
    size_t dst_bytes;
    size_t src_bytes;
    size_t chain_element_min;
    int chain_written;       /* the walk also stores into the chain's elements */
};

/* A row's footprint as a function of the call's arguments (size, count,
 * aux; dst only where the kernel aligns to its address).  The pointers are
 * not dereferenced.  Extents too large for size_t saturate at SIZE_MAX, so
 * they fail the binding's check instead of wrapping. */
typedef void (*mfx_footprint_fn)(const struct mfx_args *a, struct mfx_footprint *f);

static inline size_t mfx_sat_add(size_t x, size_t y)
{
    return x > SIZE_MAX - y ? SIZE_MAX : x + y;
}

static inline size_t mfx_sat_u64(uint64_t x)
{
    return x > SIZE_MAX ? SIZE_MAX : (size_t)x;
}

static inline size_t mfx_max(size_t x, size_t y)
{
    return x > y ? x : y;
}

/* One row per kernel, written with designated initializers so that a row
 * reads like a likwid .ptt header.  Traffic per iteration = coefficient *
 * size + constant, operations per iteration = ops_per_iter; the driver
 * multiplies by count.  The footprint is what the binding checks before a
 * call; the traffic is what the driver reports after it. */
struct mfx_kernel {
    const char *name;
    const char *group;        /* "chase", "fill", "copy", ... */
    const char *isa;          /* "" or a feature name understood by mfx_isa_supported */
    mfx_kernel_fn fn;
    mfx_footprint_fn footprint;
    double read_per_byte;     /* bytes loaded per byte of size */
    double write_per_byte;    /* bytes stored per byte of size */
    double read_fixed;        /* bytes loaded per iteration regardless of size */
    double write_fixed;       /* bytes stored per iteration regardless of size */
    double ops_per_iter;      /* operations per iteration (1 call, 1 load, ...) */
    const char *op;           /* what one operation is: "load", "call", "pass" */
    const char *doc;          /* one line */
};

/* Whether one call of k with args a stays inside dst_room bytes from a->dst
 * and src_room bytes from a->src, and walks no chain: what a checker that
 * owns its buffers (verify_copy, fill_check) asks before each call, as the
 * binding does for run(). */
static inline int mfx_fits(const struct mfx_kernel *k, const struct mfx_args *a, size_t dst_room,
                           size_t src_room)
{
    struct mfx_footprint fp = {0, 0, 0, 0};
    k->footprint(a, &fp);
    return !fp.chain_element_min && fp.dst_bytes <= dst_room && fp.src_bytes <= src_room;
}

/* Footprints shared by several tables. */
void mfx_footprint_none(const struct mfx_args *a, struct mfx_footprint *f);

/* Link a cyclic pointer chain of n elements of `element` bytes at base:
 * element order[i]'s first word gets the address of element order[i + 1]
 * (order NULL = address order; else n int32 or int64 indices, itemsize 4
 * or 8, signed or not).  Every index is checked to be below n and used once
 * before anything is written.  Returns 0, or -1 with a message in msg (the
 * region is then untouched).  kernels/chase.c. */
int mfx_link_chain(char *base, size_t n, size_t element, const void *order, int order_itemsize,
                   int order_signed, char *msg, size_t msglen);

/* Shuffle n int32 (itemsize 4) or int64 (8) items in place, seeded with
 * four words; -1 for another itemsize.  kernels/chase.c. */
int mfx_shuffle(void *items, size_t n, int itemsize, const uint64_t seed[4]);

/* 1 when every first word of the n elements at base points at one of them
 * (element-aligned), else 0.  kernels/chase.c. */
int mfx_chain_intact(const char *base, size_t n, size_t element);

/* The fault guard of the chase kernels (guard.c): install around a call,
 * arm with a sigsetjmp target on the thread that walks, disarm (NULL) after
 * the walk.  A SIGSEGV/SIGBUS while armed returns to the target with 1. */
#include <setjmp.h>
void mfx_guard_install(void);
void mfx_guard_remove(void);
void mfx_guard_arm(sigjmp_buf *target);

/* Registering a kernel table takes one place: the file in kernels/ that
 * defines it, as
 *
 *     MFX_KERNEL_TABLE(name) = {
 *         {.name = "...", .group = "...", ...},
 *         {0},
 *     };
 *
 * which defines the global mfx_kernels_<name>[] (ended by a row whose name
 * is NULL) and puts a pointer to its descriptor in the linker section
 * mfx_kernel_tables.  The GNU and LLVM linkers bound a section named like a
 * C identifier with __start_ and __stop_ symbols; kernel_table.c walks them.
 * There is no list of tables to edit, and setup.py compiles every .c file
 * in kernels/. */
struct mfx_kernel_table {
    const char *name;                 /* <name> of MFX_KERNEL_TABLE(<name>) */
    const char *file;                 /* the source file, for error messages */
    const struct mfx_kernel *rows;
};

#define MFX_KERNEL_TABLE(tname)                                                         \
    extern const struct mfx_kernel mfx_kernels_##tname[];                                \
    static const struct mfx_kernel_table mfx_table_##tname = {#tname, __FILE__,          \
                                                              mfx_kernels_##tname};      \
    static const struct mfx_kernel_table *const mfx_table_entry_##tname                  \
        __attribute__((used, section("mfx_kernel_tables"))) = &mfx_table_##tname;        \
    const struct mfx_kernel mfx_kernels_##tname[]

/* Every registered table, in no particular order: sets *tables to the first
 * entry and returns how many there are (kernel_table.c). */
size_t mfx_kernel_tables(const struct mfx_kernel_table *const **tables);

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
/* perf.c: open one event for the calling thread (a member of group_fd's
 * group when group_fd >= 0): the fd, or -errno.  Read a counter with rdpmc
 * through its mmap'ed page: 0, or -1 when the kernel does not allow it. */
struct perf_event_mmap_page;
int mfx_perf_open(uint32_t type, uint64_t config, int group_fd, int pinned_cpu_only);
int mfx_perf_rdpmc(const volatile struct perf_event_mmap_page *pc, uint64_t *value);

/* timing.c: TSC ticks taken by n dependent register adds (n a multiple of
 * 100), for the core-cycle estimate. */
uint64_t mfx_add_chain(uint64_t n);

/* ---- checkers the binding calls (their contracts are at the definitions) ---- */
/* kernels/fill.c */
int mfx_fill_check(const struct mfx_kernel *k, uint64_t value, uint64_t aux, uint64_t count,
                   uint64_t src_word, unsigned expect, size_t max_size, size_t max_offset,
                   long long fail[5]);
/* kernels/copy.c */
int mfx_verify_copy_kernel(const struct mfx_kernel *k, size_t max_size, unsigned max_misalign,
                           int all_pairs, uint64_t aux, uint64_t count, const char *as_group,
                           long size_skew, char *msg, size_t msglen);

#endif
