/* Layout kernels (seed 004, Drepper "What every programmer should know about
 * memory"): where data sits decides what an access costs.
 *
 *   mis_*      loads and stores of 4/8/16/32/64 bytes at a byte offset aux
 *              from dst/src, which may split a cache line or a 4 KiB page
 *              (section 6.2, "Overhead of Unaligned Accesses")
 *   mm_*       Drepper's matrix multiplication table (section 6.2.1, "Optimizing
 *              Level 1 Data Cache Access"): naive, with the second matrix
 *              transposed first, blocked in SM x SM tiles (SM = line / 8
 *              doubles), and blocked with SSE2
 *   fault_*    first touch of fresh anonymous memory with transparent huge
 *              pages, MAP_POPULATE and madvise(MADV_POPULATE_WRITE) instead
 *              of touching, and munmap of a touched region timed alone
 *              (rows of the fill_alloc experiment, group "fill_alloc", next
 *              to its mmap first-touch row in fill.c)
 *   init_*     Drepper's matrix initialisation (section 6.1, "Bypassing the
 *              Cache", table 6.1): row vs column order, normal vs
 *              non-temporal stores (rows of the matmul experiment)
 *   col_sum    summing the columns of a row-major double matrix whose leading
 *              dimension is aux elements (section 3.3.4, "Cache
 *              Associativity Effects": a power-of-two leading dimension
 *              maps a column onto few sets)
 *
 * The 64-byte rows are two 32-byte AVX accesses covering 64 contiguous bytes
 * (the build exposes no AVX-512 on the machines we target; a zmm row would
 * be one more MIS_* line with isa "avx512f"). */
#include <emmintrin.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include "../core.h"

/* Matrices and columns sit where the caller put them: any alignment is valid
 * for these loads (movsd / movupd), and UBSan agrees with this type. */
typedef double __attribute__((aligned(1))) udouble;
typedef uint64_t __attribute__((aligned(1))) uu64;

#define TARGET_AVX __attribute__((target("avx")))

/* ---- misaligned: throughput of independent accesses to one address ---- */

/* count iterations of 8 loads of width w at src + aux, each independent of
 * the others (the same address: the load ports, not the caches, limit). */
#define MIS_LOAD(NAME, ATTR, INSN, TAIL)                                          \
    static ATTR uint64_t NAME(const struct mfx_args *a)                           \
    {                                                                             \
        const char *p = (const char *)a->src + a->aux;                            \
        for (uint64_t n = a->count; n; n--)                                       \
            __asm__ __volatile__(INSN INSN INSN INSN INSN INSN INSN INSN           \
                                 ::"r"(p) : "rax", "xmm0", "xmm1", "memory");     \
        TAIL;                                                                     \
        return (uint64_t)(uintptr_t)p;                                            \
    }

MIS_LOAD(mis_load_4, , "movl (%0), %%eax\n\t", )
MIS_LOAD(mis_load_8, , "movq (%0), %%rax\n\t", )
MIS_LOAD(mis_load_16, , "movdqu (%0), %%xmm0\n\t", )
MIS_LOAD(mis_load_32, TARGET_AVX, "vmovdqu (%0), %%ymm0\n\t", __asm__ __volatile__("vzeroupper"))
MIS_LOAD(mis_load_64, TARGET_AVX, "vmovdqu (%0), %%ymm0\n\tvmovdqu 32(%0), %%ymm1\n\t",
         __asm__ __volatile__("vzeroupper"))

/* count iterations of 8 stores of width w at dst + aux, of the byte pattern
 * value (its 8 bytes repeated): the store buffer's commit rate, which a store
 * splitting a line or a page halves or worse. */
static uint64_t mis_store_4(const struct mfx_args *a)
{
    char *p = (char *)a->dst + a->aux;
    uint32_t v = (uint32_t)a->value;
    for (uint64_t n = a->count; n; n--)
        __asm__ __volatile__("movl %1, (%0)\n\tmovl %1, (%0)\n\tmovl %1, (%0)\n\tmovl %1, (%0)\n\t"
                             "movl %1, (%0)\n\tmovl %1, (%0)\n\tmovl %1, (%0)\n\tmovl %1, (%0)"
                             ::"r"(p), "r"(v) : "memory");
    return a->count;
}

static uint64_t mis_store_8(const struct mfx_args *a)
{
    char *p = (char *)a->dst + a->aux;
    uint64_t v = a->value;
    for (uint64_t n = a->count; n; n--)
        __asm__ __volatile__("movq %1, (%0)\n\tmovq %1, (%0)\n\tmovq %1, (%0)\n\tmovq %1, (%0)\n\t"
                             "movq %1, (%0)\n\tmovq %1, (%0)\n\tmovq %1, (%0)\n\tmovq %1, (%0)"
                             ::"r"(p), "r"(v) : "memory");
    return a->count;
}

static uint64_t mis_store_16(const struct mfx_args *a)
{
    char *p = (char *)a->dst + a->aux;
    uint64_t v[2] = {a->value, a->value};
    __asm__ __volatile__("movdqu (%0), %%xmm0" ::"r"(v) : "xmm0", "memory");
    for (uint64_t n = a->count; n; n--)
        __asm__ __volatile__("movdqu %%xmm0, (%0)\n\tmovdqu %%xmm0, (%0)\n\t"
                             "movdqu %%xmm0, (%0)\n\tmovdqu %%xmm0, (%0)\n\t"
                             "movdqu %%xmm0, (%0)\n\tmovdqu %%xmm0, (%0)\n\t"
                             "movdqu %%xmm0, (%0)\n\tmovdqu %%xmm0, (%0)"
                             ::"r"(p) : "xmm0", "memory");
    return a->count;
}

/* The AVX stores load their pattern in the same asm block: no ymm register
 * is assumed to survive between two statements. */
#define MIS_STORE_AVX(NAME, INSN)                                                 \
    static TARGET_AVX uint64_t NAME(const struct mfx_args *a)                     \
    {                                                                             \
        char *p = (char *)a->dst + a->aux;                                        \
        uint64_t v[4] = {a->value, a->value, a->value, a->value};                 \
        uint64_t n = a->count;                                                    \
        if (n)                                                                    \
            __asm__ __volatile__("vmovdqu (%2), %%ymm0\n"                         \
                                 "1:\n\t" INSN INSN INSN INSN INSN INSN INSN INSN  \
                                 "dec %1\n\tjnz 1b\n\tvzeroupper"                 \
                                 : "+r"(p), "+r"(n)                               \
                                 : "r"(v)                                         \
                                 : "xmm0", "memory", "cc");                       \
        return a->count;                                                          \
    }

MIS_STORE_AVX(mis_store_32, "vmovdqu %%ymm0, (%0)\n\t")
MIS_STORE_AVX(mis_store_64, "vmovdqu %%ymm0, (%0)\n\tvmovdqu %%ymm0, 32(%0)\n\t")

/* ---- misaligned: load-to-use latency ----------------------------------- */

/* A chain of one element: the kernel writes the 32-bit index aux at dst +
 * aux (the other w - 4 bytes of the access zero), then count times loads w
 * bytes at dst + idx and takes the next idx from the loaded low 32 bits --
 * each load waits for the previous one, so the time per step is the
 * load-to-use latency of a w-byte access at that offset (plus the same
 * register moves at every offset).  Returns the final index (= aux). */
#define MIS_LAT(NAME, ATTR, W, INSN, TAIL)                                        \
    static ATTR uint64_t NAME(const struct mfx_args *a)                           \
    {                                                                             \
        char *base = (char *)a->dst;                                              \
        uint64_t idx = a->aux;                                                    \
        uint32_t self = (uint32_t)a->aux;                                         \
        memset(base + a->aux, 0, W);                                              \
        memcpy(base + a->aux, &self, 4);                                          \
        for (uint64_t n = a->count; n; n--)                                       \
            __asm__ __volatile__(INSN : "+r"(idx) : "r"(base) : "xmm0", "xmm1", "memory"); \
        TAIL;                                                                     \
        return idx;                                                               \
    }

MIS_LAT(mis_lat_4, , 4, "movl (%1,%0), %k0", )
MIS_LAT(mis_lat_8, , 8, "movq (%1,%0), %0", )
MIS_LAT(mis_lat_16, , 16, "movdqu (%1,%0), %%xmm0\n\tmovd %%xmm0, %k0", )
MIS_LAT(mis_lat_32, TARGET_AVX, 32, "vmovdqu (%1,%0), %%ymm0\n\tvmovd %%xmm0, %k0",
        __asm__ __volatile__("vzeroupper"))
MIS_LAT(mis_lat_64, TARGET_AVX, 64,
        "vmovdqu (%1,%0), %%ymm0\n\tvmovdqu 32(%1,%0), %%ymm1\n\t"
        "vpor %%xmm1, %%xmm0, %%xmm0\n\tvmovd %%xmm0, %k0",
        __asm__ __volatile__("vzeroupper"))

#define MIS_FOOT(NAME, W, FIELD)                                                  \
    static void NAME(const struct mfx_args *a, struct mfx_footprint *f)           \
    {                                                                             \
        f->FIELD = mfx_sat_add(mfx_sat_u64(a->aux), W);                           \
    }
MIS_FOOT(foot_load_4, 4, src_bytes)
MIS_FOOT(foot_load_8, 8, src_bytes)
MIS_FOOT(foot_load_16, 16, src_bytes)
MIS_FOOT(foot_load_32, 32, src_bytes)
MIS_FOOT(foot_load_64, 64, src_bytes)
MIS_FOOT(foot_dst_4, 4, dst_bytes)
MIS_FOOT(foot_dst_8, 8, dst_bytes)
MIS_FOOT(foot_dst_16, 16, dst_bytes)
MIS_FOOT(foot_dst_32, 32, dst_bytes)
MIS_FOOT(foot_dst_64, 64, dst_bytes)

/* ---- column sums of a row-major double matrix ------------------------- */

/* src: an n x n matrix of doubles in rows of ld elements (size = n * 8
 * bytes: one column; aux = ld, at least n).  count = columns summed,
 * cycling over the n columns from column 0: column c's elements are ld
 * apart, so with ld a power of two a column's lines share few cache sets.
 * dst: 8 bytes, the double total of every element summed (rows in order
 * within a column, columns in order).  Returns the column it stopped at;
 * n = 0 or ld < n: returns 0 and touches nothing. */
static uint64_t col_sum(const struct mfx_args *a)
{
    const udouble *m = (const udouble *)a->src;
    size_t n = a->size / 8;
    uint64_t ld = a->aux;
    double total = 0.0;
    size_t c = 0;
    if (n == 0 || ld < n)
        return 0;
    for (uint64_t k = 0; k < a->count; k++) {
        double s = 0.0;
        const udouble *p = m + c;
        for (size_t r = 0; r < n; r++, p += ld)
            s += *p;
        total += s;
        if (++c == n)
            c = 0;
    }
    memcpy(a->dst, &total, 8);
    return c;
}

/* (n - 1) * ld + n doubles of src, saturating; 8 bytes of dst. */
static void col_sum_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t n = a->size / 8;
    uint64_t ld = a->aux;
    if (n == 0 || ld < n)
        return;
    f->dst_bytes = 8;
    size_t ldz = mfx_sat_u64(ld), rows = n - 1;
    size_t elems = ldz && rows > SIZE_MAX / ldz ? SIZE_MAX : rows * ldz;
    elems = mfx_sat_add(elems, n);
    f->src_bytes = elems > SIZE_MAX / 8 ? SIZE_MAX : elems * 8;
}

/* ---- matrix multiplication (Drepper 6.2.1) --------------------------- */

/* size = n (a multiple of MM_SM, else the kernels return 0 untouched); src:
 * mul1 then mul2, each n x n row-major doubles; dst: res (n x n), a scratch
 * n x n (mul2 transposed, for mm_transposed) and an 8-byte cursor.  One
 * iteration computes the next tile of res = mul1 x mul2: MM_TILE results,
 * n multiply-adds each, in the form's own order -- the next MM_TILE
 * elements in row-major order for the naive and transposed loops, the next
 * MM_SM x MM_SM block (by row bands, then columns) for the blocked ones --
 * so a run of iterations makes the same accesses as one whole product cut
 * into pieces, and a sample lasts min_sample_ms at any n (a band of rows
 * of the naive loop lasts a tenth of a second at n = 1024:
 * docs/machine-notes.md).  n * n /
 * MM_TILE iterations from cursor 0 are one whole product; the cursor is
 * written back.  mm_transposed transposes mul2 whenever it starts over at
 * tile 0 (Drepper counts the transposition; it is n^2 of n^3 work).
 * Returns the cursor. */
#define MM_SM 8            /* 64-byte line / sizeof(double) */
#define MM_TILE (MM_SM * MM_SM)

typedef void (*mm_tile_fn)(size_t n, size_t tile, const udouble *m1, const udouble *m2,
                           const udouble *t, udouble *res);

/* res elements tile * MM_TILE ... + MM_TILE - 1, row-major (n * n is a
 * multiple of MM_TILE since n is one of MM_SM; a tile may cross rows). */
static void mm_tile_naive(size_t n, size_t tile, const udouble *m1, const udouble *m2,
                          const udouble *t, udouble *res)
{
    (void)t;
    for (size_t e = tile * MM_TILE; e < (tile + 1) * MM_TILE; e++) {
        size_t i = e / n, j = e % n;
        double acc = 0;
        for (size_t k = 0; k < n; k++)
            acc += m1[i * n + k] * m2[k * n + j];           /* m2 walked down a column */
        res[e] = acc;
    }
}

static void mm_tile_transposed(size_t n, size_t tile, const udouble *m1, const udouble *m2,
                               const udouble *t, udouble *res)
{
    (void)m2;
    for (size_t e = tile * MM_TILE; e < (tile + 1) * MM_TILE; e++) {
        size_t i = e / n, j = e % n;
        double acc = 0;
        for (size_t k = 0; k < n; k++)
            acc += m1[i * n + k] * t[j * n + k];            /* both walked along rows */
        res[e] = acc;
    }
}

/* Tile `tile` of the blocked forms: the block of res whose top left is
 * (*i0, *j0), by row bands then columns; zeroed. */
static void mm_block_zero(size_t n, size_t tile, udouble *res, size_t *i0, size_t *j0)
{
    *i0 = tile / (n / MM_SM) * MM_SM;
    *j0 = tile % (n / MM_SM) * MM_SM;
    for (size_t i = *i0; i < *i0 + MM_SM; i++)
        memset(res + i * n + *j0, 0, MM_SM * sizeof(double));
}

/* The block of rows i0 .. i0 + MM_SM - 1 and columns j0 .. j0 + MM_SM - 1,
 * over tiles of mul2 of MM_SM x MM_SM: a tile of mul2 (MM_SM lines) stays
 * in L1d while the MM_SM rows of mul1 and res pass over it.  With simd (a
 * constant: each caller gets its own copy), two doubles at a time with SSE2
 * (baseline x86-64) -- the mul1 element broadcast, a pair of mul2
 * multiplied and added to a pair of res -- and a non-temporal prefetch of
 * mul1's next row, as in Drepper's SSE2 form.  Unaligned loads: the rows
 * need not be 16-byte aligned. */
static inline __attribute__((always_inline)) void
mm_block(size_t n, size_t tile, const udouble *m1, const udouble *m2, udouble *res, int simd)
{
    size_t i0, j0;
    mm_block_zero(n, tile, res, &i0, &j0);
    for (size_t k0 = 0; k0 < n; k0 += MM_SM)
        for (size_t i = i0; i < i0 + MM_SM; i++) {
            udouble *r = res + i * n + j0;
            const udouble *row1 = m1 + i * n + k0;
            if (simd)
                _mm_prefetch((const char *)(row1 + n), _MM_HINT_NTA);
            for (size_t k = 0; k < MM_SM; k++) {
                const udouble *row2 = m2 + (k0 + k) * n + j0;
                if (simd) {
                    __m128d f = _mm_set1_pd(row1[k]);
                    for (size_t j = 0; j < MM_SM; j += 2)
                        _mm_storeu_pd(r + j, _mm_add_pd(_mm_loadu_pd(r + j),
                                                        _mm_mul_pd(f, _mm_loadu_pd(row2 + j))));
                } else {
                    double f = row1[k];
                    for (size_t j = 0; j < MM_SM; j++)
                        r[j] += f * row2[j];
                }
            }
        }
}

static void mm_tile_blocked(size_t n, size_t tile, const udouble *m1, const udouble *m2,
                            const udouble *t, udouble *res)
{
    (void)t;
    mm_block(n, tile, m1, m2, res, 0);
}

static void mm_tile_blocked_simd(size_t n, size_t tile, const udouble *m1, const udouble *m2,
                                 const udouble *t, udouble *res)
{
    (void)t;
    mm_block(n, tile, m1, m2, res, 1);
}

static uint64_t mm_run(const struct mfx_args *a, mm_tile_fn tile_fn, int transpose)
{
    size_t n = a->size;
    const udouble *m1 = (const udouble *)a->src, *m2 = m1 + n * n;
    udouble *res = (udouble *)a->dst, *t = res + n * n;
    uu64 *cursor = (uu64 *)(t + n * n);
    if (n == 0 || n % MM_SM)
        return 0;
    size_t tiles = n * n / MM_TILE, b = (size_t)(*cursor % tiles);
    for (uint64_t c = 0; c < a->count; c++) {
        if (b == 0 && transpose)
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < n; j++)
                    t[i * n + j] = m2[j * n + i];
        tile_fn(n, b, m1, m2, t, res);
        if (++b == tiles)
            b = 0;
    }
    *cursor = b;
    return b;
}

static uint64_t mm_naive(const struct mfx_args *a) { return mm_run(a, mm_tile_naive, 0); }
static uint64_t mm_transposed(const struct mfx_args *a) { return mm_run(a, mm_tile_transposed, 1); }
static uint64_t mm_blocked(const struct mfx_args *a) { return mm_run(a, mm_tile_blocked, 0); }
static uint64_t mm_blocked_simd(const struct mfx_args *a)
{
    return mm_run(a, mm_tile_blocked_simd, 0);
}

/* src: two n x n matrices; dst: two and the cursor.  Nothing where n is
 * not a positive multiple of MM_SM (the kernels return 0 untouched). */
static void mm_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t n = a->size, two = SIZE_MAX;
    if (n == 0 || n % MM_SM)
        return;
    if (n <= 0x10000000)                     /* 2 * n * n * 8 fits in 64 bits */
        two = 2 * n * n * 8;
    f->src_bytes = two;
    f->dst_bytes = mfx_sat_add(two, 8);
}

#define MM_ROW(NAME, DOC)                                                         \
    {                                                                             \
        .name = #NAME, .group = "layout", .isa = "", .fn = NAME,                  \
        .footprint = mm_footprint,                                                \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 0, .write_fixed = 0, \
        .ops_per_iter = 1, .op = "tile", .doc = DOC,                              \
    }

/* ---- page faults: fresh anonymous memory (fill_alloc rows) ----------- */

#define FAULT_CHECK 2u          /* aux bit (fill_alloc's ALLOC_CHECK): return non-zero bytes seen */
#define FAULT_HUGE (2u << 20)   /* x86-64 PMD page (Intel SDM Vol. 3A 4.5) */

/* count times: map size bytes, obtain them (a write per 4 KiB page, or
 * MAP_POPULATE), unmap.  mfx_fault_thp aligns the mapping to 2 MiB and asks
 * for transparent huge pages first, so each 2 MiB takes one fault (where
 * THP is enabled; madvise(2) MADV_HUGEPAGE).  Returns the non-zero bytes
 * seen with FAULT_CHECK (fresh memory must be zero), UINT64_MAX when a
 * mapping fails. */
static uint64_t fault_kernel(const struct mfx_args *a, int huge, int populate)
{
    size_t n = a->size ? a->size : 1;
    size_t len = huge ? n + FAULT_HUGE : n;
    uint64_t bad = 0;
    for (uint64_t c = 0; c < a->count; c++) {
        char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
        if (m == MAP_FAILED)
            return UINT64_MAX;
        char *p = m;
        if (huge) {
            p = (char *)(((uintptr_t)m + FAULT_HUGE - 1) & ~(uintptr_t)(FAULT_HUGE - 1));
            madvise(p, n, MADV_HUGEPAGE);
        }
        if (a->aux & FAULT_CHECK)
            for (size_t i = 0; i < n; i++)
                bad += p[i] != 0;
        for (size_t i = 0; i < n; i += 4096)
            ((volatile char *)p)[i] = 1;
        ((volatile char *)p)[n - 1] = 1;
        munmap(m, len);
    }
    return bad;
}

static uint64_t fault_mmap_thp(const struct mfx_args *a) { return fault_kernel(a, 1, 0); }
static uint64_t fault_map_populate(const struct mfx_args *a) { return fault_kernel(a, 0, 1); }

/* madvise(2): MADV_POPULATE_WRITE (Linux 5.14) faults a range in writable
 * without touching it; older kernels answer EINVAL.  The value is the
 * kernel's uapi one (include/uapi/asm-generic/mman-common.h), for libcs
 * whose headers predate it. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define FAULT_EINVAL (UINT64_MAX - 1)   /* the kernel refused the madvise / mmap flag */

/* Map size bytes (2 MiB aligned + MADV_HUGEPAGE with huge), obtain them as
 * `how` says, and return the start of the mapping in *base, the usable
 * address as the result; NULL with *err = FAULT_EINVAL or UINT64_MAX. */
enum fault_how { FAULT_TOUCH, FAULT_POPULATE_WRITE };

static char *fault_map(size_t n, int huge, int how, char **base, size_t *len, uint64_t *err)
{
    *len = huge ? n + FAULT_HUGE : n;
    char *m = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        *err = UINT64_MAX;
        return NULL;
    }
    char *p = m;
    if (huge) {
        p = (char *)(((uintptr_t)m + FAULT_HUGE - 1) & ~(uintptr_t)(FAULT_HUGE - 1));
        madvise(p, n, MADV_HUGEPAGE);
    }
    if (how == FAULT_POPULATE_WRITE && madvise(p, n, MADV_POPULATE_WRITE) != 0) {
        *err = errno == EINVAL ? FAULT_EINVAL : UINT64_MAX;
        munmap(m, *len);
        return NULL;
    }
    *base = m;
    return p;
}

/* count times: map, madvise(MADV_POPULATE_WRITE), write one byte per 4 KiB
 * page (no fault left to take), unmap.  Returns the non-zero bytes seen
 * with FAULT_CHECK, FAULT_EINVAL where the kernel lacks the advice. */
static uint64_t populate_write_kernel(const struct mfx_args *a, int huge)
{
    size_t n = a->size ? a->size : 1, len;
    uint64_t bad = 0, err = 0;
    for (uint64_t c = 0; c < a->count; c++) {
        char *m, *p = fault_map(n, huge, FAULT_POPULATE_WRITE, &m, &len, &err);
        if (!p)
            return err;
        if (a->aux & FAULT_CHECK)
            for (size_t i = 0; i < n; i++)
                bad += p[i] != 0;
        for (size_t i = 0; i < n; i += 4096)
            ((volatile char *)p)[i] = 1;
        ((volatile char *)p)[n - 1] = 1;
        munmap(m, len);
    }
    return bad;
}

/* count times: map, touch every 4 KiB page, then munmap -- only the munmap
 * timed (fenced TSC reads around it): returns the TSC ticks spent in munmap
 * in total (the row's `kernel_ticks`: the sample's time is these ticks, not
 * the call's), or the non-zero bytes seen with FAULT_CHECK. */
static uint64_t munmap_kernel(const struct mfx_args *a, int huge)
{
    size_t n = a->size ? a->size : 1, len;
    uint64_t bad = 0, err = 0, ticks = 0;
    for (uint64_t c = 0; c < a->count; c++) {
        char *m, *p = fault_map(n, huge, FAULT_TOUCH, &m, &len, &err);
        if (!p)
            return err;
        if (a->aux & FAULT_CHECK)
            for (size_t i = 0; i < n; i++)
                bad += p[i] != 0;
        for (size_t i = 0; i < n; i += 4096)
            ((volatile char *)p)[i] = 1;
        ((volatile char *)p)[n - 1] = 1;
        uint64_t t0 = mfx_tsc_begin();
        munmap(m, len);
        ticks += mfx_tsc_end(NULL) - t0;
    }
    return a->aux & FAULT_CHECK ? bad : ticks;
}

static uint64_t fault_populate_write(const struct mfx_args *a) { return populate_write_kernel(a, 0); }
static uint64_t fault_thp_populate_write(const struct mfx_args *a) { return populate_write_kernel(a, 1); }
static uint64_t fault_munmap(const struct mfx_args *a) { return munmap_kernel(a, 0); }
static uint64_t fault_thp_munmap(const struct mfx_args *a) { return munmap_kernel(a, 1); }

/* ---- matrix initialisation (Drepper 6.1, "Bypassing the Cache") -------- */

/* dst: an n x n row-major matrix of 32-bit integers (n = aux) followed by
 * an 8-byte cursor; size = 64 * n, the bytes of one band (INIT_BAND rows or
 * INIT_BAND columns: the declared traffic); otherwise, or n = 0, the
 * kernels return 0 untouched.  One iteration writes the next band from the
 * cursor (cycling; the cursor is written back): samples stay a few
 * milliseconds long at any n, and ceil(n / INIT_BAND) iterations from
 * cursor 0 write the whole matrix.  Element (i, j) gets (uint32_t)(value +
 * i * n + j): a value per element, so an element written twice or skipped
 * shows.  Row order: a band of rows, j fastest (consecutive addresses);
 * column order: a band of columns (one line wide), i fastest (a stride of
 * one row), as Drepper's column loop visits them.  _nt: movnti
 * (non-temporal, no read for ownership; sfence at the end: Intel SDM Vol.
 * 2B MOVNTI).  Any byte alignment: the stores go through memcpy / asm on a
 * char pointer.  Returns the cursor. */
#define INIT_BAND 16            /* 64-byte line / sizeof(int32) */

static inline void init_store(char *p, uint32_t v) { memcpy(p, &v, 4); }

static inline void init_store_nt(char *p, uint32_t v)
{
    __asm__ __volatile__("movnti %1, (%0)" ::"r"(p), "r"(v) : "memory");
}

static int init_shape_ok(const struct mfx_args *a)
{
    uint64_t n = a->aux;
    return n != 0 && n <= 0x10000000 && a->size == 64 * n;
}

#define INIT_KERNEL(NAME, STORE, COLUMNS, FENCE)                                  \
    static uint64_t NAME(const struct mfx_args *a)                                \
    {                                                                             \
        if (!init_shape_ok(a))                                                    \
            return 0;                                                             \
        size_t n = (size_t)a->aux, bands = (n + INIT_BAND - 1) / INIT_BAND;       \
        char *m = (char *)a->dst;                                                 \
        uint64_t cur;                                                             \
        memcpy(&cur, m + 4 * n * n, 8);                                           \
        size_t b = (size_t)(cur % bands);                                         \
        uint32_t v0 = (uint32_t)a->value;                                         \
        for (uint64_t c = 0; c < a->count; c++) {                                 \
            size_t lo = b * INIT_BAND, hi = lo + INIT_BAND < n ? lo + INIT_BAND : n; \
            if (COLUMNS) {                                                        \
                for (size_t j = lo; j < hi; j++)                                  \
                    for (size_t i = 0; i < n; i++)                                \
                        STORE(m + 4 * (i * n + j), v0 + (uint32_t)(i * n + j));   \
            } else {                                                              \
                for (size_t i = lo; i < hi; i++)                                  \
                    for (size_t j = 0; j < n; j++)                                \
                        STORE(m + 4 * (i * n + j), v0 + (uint32_t)(i * n + j));   \
            }                                                                     \
            /* every pass's stores are kept (the same values each time) */        \
            __asm__ __volatile__("" ::: "memory");                                \
            if (++b == bands)                                                     \
                b = 0;                                                            \
        }                                                                         \
        if (FENCE)                                                                \
            __asm__ __volatile__("sfence" ::: "memory");                          \
        cur = b;                                                                  \
        memcpy(m + 4 * n * n, &cur, 8);                                           \
        return b;                                                                 \
    }

INIT_KERNEL(init_row, init_store, 0, 0)
INIT_KERNEL(init_column, init_store, 1, 0)
INIT_KERNEL(init_row_nt, init_store_nt, 0, 1)
INIT_KERNEL(init_column_nt, init_store_nt, 1, 1)

/* The matrix and the cursor: 4 n^2 + 8 bytes of dst (nothing for a bad shape). */
static void init_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    if (!init_shape_ok(a))
        return;
    size_t n = (size_t)a->aux;
    f->dst_bytes = 4 * n * n + 8;
}

#define INIT_ROW(NAME, DOC)                                                       \
    {                                                                             \
        .name = #NAME, .group = "layout", .isa = "", .fn = NAME,                  \
        .footprint = init_footprint,                                              \
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0, \
        .ops_per_iter = 1, .op = "band", .doc = DOC,                            \
    }

/* WRITE: bytes stored per byte of size in the timed part: 1 where the call
 * touches its pages; 0 for the munmap rows, whose touches are outside the
 * ticks they return (a THP unmapped in a few microseconds is not 2 MiB moved). */
#define FAULT_ROW(NAME, WRITE, DOC)                                               \
    {                                                                             \
        .name = #NAME, .group = "fill_alloc", .isa = "", .fn = NAME,              \
        .footprint = mfx_footprint_none,                                          \
        .read_per_byte = 0, .write_per_byte = WRITE, .read_fixed = 0, .write_fixed = 0, \
        .ops_per_iter = 1, .op = "call", .doc = DOC,                              \
    }

#define LOAD_ROW(W, ISA)                                                          \
    {                                                                             \
        .name = "mis_load_" #W, .group = "layout", .isa = ISA, .fn = mis_load_##W, \
        .footprint = foot_load_##W,                                               \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 8 * W,             \
        .write_fixed = 0, .ops_per_iter = 8, .op = "load",                        \
        .doc = "8 independent " #W "-byte loads at src + aux per iteration",      \
    }
#define STORE_ROW(W, ISA)                                                         \
    {                                                                             \
        .name = "mis_store_" #W, .group = "layout", .isa = ISA, .fn = mis_store_##W, \
        .footprint = foot_dst_##W,                                                \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 0,                 \
        .write_fixed = 8 * W, .ops_per_iter = 8, .op = "store",                   \
        .doc = "8 " #W "-byte stores of the pattern value at dst + aux per iteration", \
    }
#define LAT_ROW(W, ISA)                                                           \
    {                                                                             \
        .name = "mis_lat_" #W, .group = "layout", .isa = ISA, .fn = mis_lat_##W,  \
        .footprint = foot_dst_##W,                                                \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = W,                 \
        .write_fixed = 0, .ops_per_iter = 1, .op = "step",                        \
        .doc = "dependent " #W "-byte loads at dst + aux (a one-element chain it writes)", \
    }

MFX_KERNEL_TABLE(layout) = {
    LOAD_ROW(4, ""), LOAD_ROW(8, ""), LOAD_ROW(16, ""), LOAD_ROW(32, "avx"), LOAD_ROW(64, "avx"),
    STORE_ROW(4, ""), STORE_ROW(8, ""), STORE_ROW(16, ""), STORE_ROW(32, "avx"),
    STORE_ROW(64, "avx"),
    LAT_ROW(4, ""), LAT_ROW(8, ""), LAT_ROW(16, ""), LAT_ROW(32, "avx"), LAT_ROW(64, "avx"),
    {
        .name = "col_sum", .group = "layout", .isa = "", .fn = col_sum,
        .footprint = col_sum_footprint,
        .read_per_byte = 1, .write_per_byte = 0, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "column",
        .doc = "sum one column of an n x n double matrix (n = size / 8, leading dimension aux) per iteration",
    },
    {
        .name = "fault_mmap_thp", .group = "fill_alloc", .isa = "", .fn = fault_mmap_thp,
        .footprint = mfx_footprint_none,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "mmap size (2 MiB aligned, MADV_HUGEPAGE), write one byte per 4 KiB page, munmap",
    },
    {
        .name = "fault_map_populate", .group = "fill_alloc", .isa = "", .fn = fault_map_populate,
        .footprint = mfx_footprint_none,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "mmap size with MAP_POPULATE, write one byte per 4 KiB page, munmap",
    },
    MM_ROW(mm_naive, "the next 64 results of res = mul1 x mul2 (n = size) in row order, i-j-k: mul2 read down columns"),
    MM_ROW(mm_transposed, "the next 64 results of res = mul1 x transpose(mul2) in row order, transposed at tile 0"),
    MM_ROW(mm_blocked, "the next 8 x 8 block of res = mul1 x mul2 over 8 x 8 tiles (one line of doubles)"),
    MM_ROW(mm_blocked_simd, "the next 8 x 8 block of res over 8 x 8 tiles, SSE2 pairs, prefetchnta of mul1's next row"),
    FAULT_ROW(fault_populate_write, 1, "mmap size, madvise(MADV_POPULATE_WRITE), write one byte per 4 KiB page, munmap"),
    FAULT_ROW(fault_thp_populate_write, 1, "mmap size (2 MiB aligned, MADV_HUGEPAGE), MADV_POPULATE_WRITE, write one byte per 4 KiB page, munmap"),
    FAULT_ROW(fault_munmap, 0, "mmap size, write one byte per 4 KiB page, munmap: returns the ticks of the munmap alone"),
    FAULT_ROW(fault_thp_munmap, 0, "mmap size (2 MiB aligned, MADV_HUGEPAGE), touch, munmap: returns the ticks of the munmap alone"),
    INIT_ROW(init_row, "the next 16 rows of an aux x aux uint32 matrix (size = 64 * aux), row by row"),
    INIT_ROW(init_column, "the next 16 columns of an aux x aux uint32 matrix, column by column"),
    INIT_ROW(init_row_nt, "the next 16 rows of an aux x aux uint32 matrix with movnti (non-temporal)"),
    INIT_ROW(init_column_nt, "the next 16 columns of an aux x aux uint32 matrix with movnti"),
    {0},
};
