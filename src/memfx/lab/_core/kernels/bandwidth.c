/* Bandwidth kernels: what the fill and copy tables do not have already
 * (seed 004, Drepper, "What every programmer should know about memory",
 * 3.5.1 "Sequential Read and Write", "Sequential Increment", "Random
 * Addnextlast").  Writes and copies are measured with the fill_* and copy_*
 * rows; this file adds reading, incrementing in place, reading lines in a
 * random order, and writing then reading back.
 *
 * One iteration = one pass over the whole region (`count` passes per call),
 * as a program sweeps its data: no chunking.
 *
 * The checksum.  Every summing kernel (bw_sum_*, bw_random_*, the reads of
 * the write-then-read rows) returns, summed over its passes (mod
 * 2^64), the sum of the region's 64-bit little-endian words taken from its
 * start -- words [p + 8k, p + 8k + 8) for k < size / 8 -- plus each of the
 * last size % 8 bytes zero-extended.  Integer addition is associative, so
 * the scalar, SSE2, AVX2 and AVX-512 kernels (lane-wise 64-bit adds, lanes
 * summed at the end) all return the same number, which a test compares with
 * numpy's; a kernel that skipped or re-read a byte would not.  The timed
 * sequential reads (bw_read_*) only load; see "sequential read" below.
 *
 * Main loops are inline asm so the compiler cannot drop or reshape the
 * loads; wide kernels carry target attributes and are only called when the
 * row's isa is supported (the build is baseline x86-64).  Loads are
 * unaligned-capable (movdqu / VEX and EVEX memory operands), so any start
 * address works; timed buffers are page aligned. */
#include <immintrin.h>
#include <string.h>
#include "../core.h"

/* The line order sits where the caller put it: any alignment is valid. */
typedef uint32_t __attribute__((aligned(1))) bw_u32;

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx512f")))

/* The random kernels visit lines of this many bytes (x86 cache line). */
#define LINE 64

/* ---- scalar pieces ------------------------------------------------------ */

/* Checksum of [p, p + n) from its start: words, then the trailing bytes. */
ALWAYS_INLINE uint64_t tail_sum(const char *p, size_t n)
{
    uint64_t s = 0, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        s += w;
    }
    for (; i < n; i++)
        s += (unsigned char)p[i];
    __asm__ __volatile__("" : "+r"(s));
    return s;
}

/* Add v to every word of [p, p + n) from its start, (v & 0xff) to each
 * trailing byte: the increment's definition (see bw_rmw_*). */
ALWAYS_INLINE void tail_add(char *p, size_t n, uint64_t v)
{
    uint64_t w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        w += v;
        memcpy(p + i, &w, 8);
    }
    for (; i < n; i++)
        p[i] = (char)((unsigned char)p[i] + (unsigned char)v);
    __asm__ __volatile__("" ::: "memory");
}

/* ---- sequential read ------------------------------------------------------ */

/* Each width has two rows built from one loop text: bw_sum_<w> adds every
 * loaded word or vector into accumulators and returns the checksum above,
 * and bw_read_<w>, the row timed as the read bandwidth, issues the same
 * loads at the same offsets into registers it then discards.  The adds are
 * not free: a 64-byte vpaddq from memory is a load and a vector ALU uop,
 * and on a core with two 512-bit load ports the summing loop ran at ~0.85
 * of a loads-only one over an L1-resident buffer (as likwid-bench's
 * load_* tests do), so a figure timed with the adds is not the port limit.
 * The proof that the timed row reads every byte once is the summing twin's
 * checksum (the loop text differs only in the instruction), checked before
 * timing, and its own return value: the bytes its pointer walked plus the
 * tail's, per pass, which a row that skipped or repeated a stride would
 * miss. */

/* One loop text per width: OP(offset, accumulator) per access, then the
 * pointer step.  STEP bytes per loop. */
#define SCALAR_LOOP(OP) "1:\n\t" OP(0, s0) OP(8, s1) OP(16, s2) OP(24, s3) OP(32, s0)     \
    OP(40, s1) OP(48, s2) OP(56, s3) "add $64, %[p]\n\tsub $64, %[m]\n\tjnz 1b\n"
#define SSE2_LOOP(OP) "1:\n\t" OP(0, x0, t0) OP(16, x1, t1) OP(32, x2, t2) OP(48, x3, t3)  \
    OP(64, x0, t0) OP(80, x1, t1) OP(96, x2, t2) OP(112, x3, t3)                          \
    "add $128, %[p]\n\tsub $128, %[m]\n\tjnz 1b\n"
#define AVX2_LOOP(OP) "1:\n\t" OP(0, y0) OP(32, y1) OP(64, y2) OP(96, y3) OP(128, y4)     \
    OP(160, y5) OP(192, y6) OP(224, y7) "add $256, %[p]\n\tsub $256, %[m]\n\tjnz 1b\n"
#define AVX512_LOOP(OP) "1:\n\t" OP(0, z0) OP(64, z1) OP(128, z2) OP(192, z3) OP(256, z4) \
    OP(320, z5) OP(384, z6) OP(448, z7) "add $512, %[p]\n\tsub $512, %[m]\n\tjnz 1b\n"

#define SCALAR_SUM(off, r) "add " #off "(%[p]), %[" #r "]\n\t"
#define SCALAR_LOAD(off, r) "mov " #off "(%[p]), %[" #r "]\n\t"
#define SSE2_SUM(off, r, t) "movdqu " #off "(%[p]), %[" #t "]\n\tpaddq %[" #t "], %[" #r "]\n\t"
#define SSE2_LOAD(off, r, t) "movdqu " #off "(%[p]), %[" #t "]\n\t"
#define VEC_SUM(off, r) "vpaddq " #off "(%[p]), %[" #r "], %[" #r "]\n\t"
#define AVX2_LOAD(off, r) "vmovdqu " #off "(%[p]), %[" #r "]\n\t"
#define AVX512_LOAD(off, r) "vmovdqu64 " #off "(%[p]), %[" #r "]\n\t"

/* What a loads-only row returns for one pass: the bytes its pointer walked
 * in the main loop plus the tail's, whose bytes it also loads (tail_sum,
 * kept by the asm there). */
ALWAYS_INLINE uint64_t walked(const char *base, const char *p, size_t n, size_t main)
{
    (void)tail_sum(base + main, n - main);
    return (uint64_t)(p - base) + (n - main);
}

#define SCALAR_OPERANDS                                                        \
    : [p] "+r"(p), [m] "+r"(m), [s0] "+r"(s0), [s1] "+r"(s1), [s2] "+r"(s2),   \
      [s3] "+r"(s3) : : "memory", "cc"

/* 8-byte loads (added into 4 accumulators in bw_sum_scalar), 64 bytes per loop. */
#define SCALAR_KERNEL(NAME, OP, SUM)                                           \
    static uint64_t NAME(const struct mfx_args *a)                             \
    {                                                                          \
        const char *base = a->src;                                             \
        size_t n = a->size, main = n & ~(size_t)63;                            \
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, total = 0;                    \
        for (uint64_t pass = 0; pass < a->count; pass++) {                     \
            const char *p = base;                                              \
            size_t m = main;                                                   \
            if (m)                                                             \
                __asm__ __volatile__(SCALAR_LOOP(OP) SCALAR_OPERANDS);         \
            total += SUM ? tail_sum(base + main, n - main)                     \
                         : walked(base, p, n, main);                           \
        }                                                                      \
        return SUM ? total + s0 + s1 + s2 + s3 : total;                        \
    }
SCALAR_KERNEL(bw_sum_scalar, SCALAR_SUM, 1)
SCALAR_KERNEL(bw_read_scalar, SCALAR_LOAD, 0)

/* 16-byte movdqu loads (paddq into 4 accumulators in bw_sum_sse2), 128 bytes per loop. */
#define SSE2_KERNEL(NAME, OP, SUM)                                             \
    static uint64_t NAME(const struct mfx_args *a)                             \
    {                                                                          \
        const char *base = a->src;                                             \
        size_t n = a->size, main = n & ~(size_t)127;                           \
        __m128i x0 = _mm_setzero_si128(), x1 = x0, x2 = x0, x3 = x0, t0, t1, t2, t3; \
        uint64_t total = 0;                                                    \
        for (uint64_t pass = 0; pass < a->count; pass++) {                     \
            const char *p = base;                                              \
            size_t m = main;                                                   \
            if (m)                                                             \
                __asm__ __volatile__(                                          \
                    SSE2_LOOP(OP)                                              \
                    : [p] "+r"(p), [m] "+r"(m), [x0] "+x"(x0), [x1] "+x"(x1),  \
                      [x2] "+x"(x2), [x3] "+x"(x3), [t0] "=&x"(t0),            \
                      [t1] "=&x"(t1), [t2] "=&x"(t2), [t3] "=&x"(t3)           \
                    :                                                          \
                    : "memory", "cc");                                         \
            total += SUM ? tail_sum(base + main, n - main)                     \
                         : walked(base, p, n, main);                           \
        }                                                                      \
        if (!SUM)                                                              \
            return total;                                                      \
        uint64_t lanes[2];                                                     \
        _mm_storeu_si128((__m128i *)lanes,                                     \
                         _mm_add_epi64(_mm_add_epi64(x0, x1), _mm_add_epi64(x2, x3))); \
        return total + lanes[0] + lanes[1];                                    \
    }
SSE2_KERNEL(bw_sum_sse2, SSE2_SUM, 1)
SSE2_KERNEL(bw_read_sse2, SSE2_LOAD, 0)

/* 32-byte loads (vpaddq from memory into 8 accumulators in bw_sum_avx2),
 * 256 bytes per loop. */
#define AVX2_KERNEL(NAME, OP, SUM)                                             \
    TARGET_AVX2 static uint64_t NAME(const struct mfx_args *a)                 \
    {                                                                          \
        const char *base = a->src;                                             \
        size_t n = a->size, main = n & ~(size_t)255;                           \
        __m256i y0 = _mm256_setzero_si256(), y1 = y0, y2 = y0, y3 = y0, y4 = y0, \
                y5 = y0, y6 = y0, y7 = y0;                                     \
        uint64_t total = 0;                                                    \
        for (uint64_t pass = 0; pass < a->count; pass++) {                     \
            const char *p = base;                                              \
            size_t m = main;                                                   \
            if (m)                                                             \
                __asm__ __volatile__(                                          \
                    AVX2_LOOP(OP)                                              \
                    : [p] "+r"(p), [m] "+r"(m), [y0] "+x"(y0), [y1] "+x"(y1),  \
                      [y2] "+x"(y2), [y3] "+x"(y3), [y4] "+x"(y4), [y5] "+x"(y5), \
                      [y6] "+x"(y6), [y7] "+x"(y7)                             \
                    :                                                          \
                    : "memory", "cc");                                         \
            total += SUM ? tail_sum(base + main, n - main)                     \
                         : walked(base, p, n, main);                           \
        }                                                                      \
        __m256i s = _mm256_add_epi64(                                          \
            _mm256_add_epi64(_mm256_add_epi64(y0, y1), _mm256_add_epi64(y2, y3)), \
            _mm256_add_epi64(_mm256_add_epi64(y4, y5), _mm256_add_epi64(y6, y7))); \
        uint64_t lanes[4];                                                     \
        _mm256_storeu_si256((__m256i *)lanes, s);                              \
        _mm256_zeroupper();                                                    \
        return SUM ? total + lanes[0] + lanes[1] + lanes[2] + lanes[3] : total; \
    }
AVX2_KERNEL(bw_sum_avx2, VEC_SUM, 1)
AVX2_KERNEL(bw_read_avx2, AVX2_LOAD, 0)

/* 64-byte loads (EVEX vpaddq from memory into 8 accumulators in
 * bw_sum_avx512), 512 bytes per loop. */
#define AVX512_KERNEL(NAME, OP, SUM)                                           \
    TARGET_AVX512 static uint64_t NAME(const struct mfx_args *a)               \
    {                                                                          \
        const char *base = a->src;                                             \
        size_t n = a->size, main = n & ~(size_t)511;                           \
        __m512i z0 = _mm512_setzero_si512(), z1 = z0, z2 = z0, z3 = z0, z4 = z0, \
                z5 = z0, z6 = z0, z7 = z0;                                     \
        uint64_t total = 0;                                                    \
        for (uint64_t pass = 0; pass < a->count; pass++) {                     \
            const char *p = base;                                              \
            size_t m = main;                                                   \
            if (m)                                                             \
                __asm__ __volatile__(                                          \
                    AVX512_LOOP(OP)                                            \
                    : [p] "+r"(p), [m] "+r"(m), [z0] "+v"(z0), [z1] "+v"(z1),  \
                      [z2] "+v"(z2), [z3] "+v"(z3), [z4] "+v"(z4), [z5] "+v"(z5), \
                      [z6] "+v"(z6), [z7] "+v"(z7)                             \
                    :                                                          \
                    : "memory", "cc");                                         \
            total += SUM ? tail_sum(base + main, n - main)                     \
                         : walked(base, p, n, main);                           \
        }                                                                      \
        __m512i s = _mm512_add_epi64(                                          \
            _mm512_add_epi64(_mm512_add_epi64(z0, z1), _mm512_add_epi64(z2, z3)), \
            _mm512_add_epi64(_mm512_add_epi64(z4, z5), _mm512_add_epi64(z6, z7))); \
        uint64_t r = SUM ? total + (uint64_t)_mm512_reduce_add_epi64(s) : total; \
        _mm256_zeroupper();                                                    \
        return r;                                                              \
    }
AVX512_KERNEL(bw_sum_avx512, VEC_SUM, 1)
AVX512_KERNEL(bw_read_avx512, AVX512_LOAD, 0)

/* ---- random line order (Drepper's "Random Addnextlast" without the chain) */

/* Lines of src are visited in the order held by dst: size / 64 uint32 line
 * indices (read only), each below reach = aux, or size / 64 when aux is 0
 * (aux > size / 64: one chunk of a longer order, run() chunks).  Each line's
 * eight words are added to the checksum; the loads of different lines are
 * independent, so the core overlaps as many misses as it can, but no
 * prefetcher can guess the next line.  An index >= reach is replaced by 0
 * (cmov): whatever the order holds, the kernel stays inside its footprint.  For a permutation the checksum equals the sequential
 * read's of size / 64 * 64 bytes. */
#define RANDOM_LOOP_HEAD                                                        \
    "1:\n\t"                                                                    \
    "movl (%[o]), %k[i]\n\t"                                                    \
    "cmp %[lines], %[i]\n\t"                                                    \
    "cmovae %[zero], %[i]\n\t"                                                  \
    "shl $6, %[i]\n\t"
#define RANDOM_LOOP_TAIL "add $4, %[o]\n\tdec %[k]\n\tjnz 1b\n"
#define RANDOM_INPUTS [s] "r"(s), [lines] "r"(reach), [zero] "r"(zero)
#define RANDOM_SETUP                                                            \
    const char *s = a->src;                                                     \
    const bw_u32 *order = (const bw_u32 *)a->dst;                           \
    uint64_t lines = a->size / LINE, zero = 0;                                  \
    uint64_t reach = a->aux ? a->aux : lines
#define RANDOM_PASS_LOCALS                                                      \
    const uint32_t *o = order;                                                  \
    uint64_t k = lines, i

static uint64_t bw_random_scalar(const struct mfx_args *a)
{
    RANDOM_SETUP;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (uint64_t pass = 0; pass < a->count && lines; pass++) {
        RANDOM_PASS_LOCALS;
        __asm__ __volatile__(
            RANDOM_LOOP_HEAD
            "add 0(%[s],%[i]), %[s0]\n\tadd 8(%[s],%[i]), %[s1]\n\t"
            "add 16(%[s],%[i]), %[s2]\n\tadd 24(%[s],%[i]), %[s3]\n\t"
            "add 32(%[s],%[i]), %[s0]\n\tadd 40(%[s],%[i]), %[s1]\n\t"
            "add 48(%[s],%[i]), %[s2]\n\tadd 56(%[s],%[i]), %[s3]\n\t"
            RANDOM_LOOP_TAIL
            : [o] "+&r"(o), [k] "+&r"(k), [i] "=&r"(i), [s0] "+&r"(s0), [s1] "+&r"(s1),
              [s2] "+&r"(s2), [s3] "+&r"(s3)
            : RANDOM_INPUTS
            : "memory", "cc");
    }
    return s0 + s1 + s2 + s3;
}

static uint64_t bw_random_sse2(const struct mfx_args *a)
{
    RANDOM_SETUP;
    __m128i x0 = _mm_setzero_si128(), x1 = x0, t0, t1;
    for (uint64_t pass = 0; pass < a->count && lines; pass++) {
        RANDOM_PASS_LOCALS;
        __asm__ __volatile__(
            RANDOM_LOOP_HEAD
            "movdqu 0(%[s],%[i]), %[t0]\n\tmovdqu 16(%[s],%[i]), %[t1]\n\t"
            "paddq %[t0], %[x0]\n\tpaddq %[t1], %[x1]\n\t"
            "movdqu 32(%[s],%[i]), %[t0]\n\tmovdqu 48(%[s],%[i]), %[t1]\n\t"
            "paddq %[t0], %[x0]\n\tpaddq %[t1], %[x1]\n\t"
            RANDOM_LOOP_TAIL
            : [o] "+&r"(o), [k] "+&r"(k), [i] "=&r"(i), [x0] "+x"(x0), [x1] "+x"(x1),
              [t0] "=&x"(t0), [t1] "=&x"(t1)
            : RANDOM_INPUTS
            : "memory", "cc");
    }
    uint64_t lanes[2];
    _mm_storeu_si128((__m128i *)lanes, _mm_add_epi64(x0, x1));
    return lanes[0] + lanes[1];
}

TARGET_AVX2 static uint64_t bw_random_avx2_k(const struct mfx_args *a)
{
    RANDOM_SETUP;
    __m256i y0 = _mm256_setzero_si256(), y1 = y0;
    for (uint64_t pass = 0; pass < a->count && lines; pass++) {
        RANDOM_PASS_LOCALS;
        __asm__ __volatile__(
            RANDOM_LOOP_HEAD
            "vpaddq 0(%[s],%[i]), %[y0], %[y0]\n\tvpaddq 32(%[s],%[i]), %[y1], %[y1]\n\t"
            RANDOM_LOOP_TAIL
            : [o] "+&r"(o), [k] "+&r"(k), [i] "=&r"(i), [y0] "+x"(y0), [y1] "+x"(y1)
            : RANDOM_INPUTS
            : "memory", "cc");
    }
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, _mm256_add_epi64(y0, y1));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

TARGET_AVX512 static uint64_t bw_random_avx512_k(const struct mfx_args *a)
{
    RANDOM_SETUP;
    __m512i z0 = _mm512_setzero_si512();
    for (uint64_t pass = 0; pass < a->count && lines; pass++) {
        RANDOM_PASS_LOCALS;
        __asm__ __volatile__(
            RANDOM_LOOP_HEAD
            "vpaddq 0(%[s],%[i]), %[z0], %[z0]\n\t"
            RANDOM_LOOP_TAIL
            : [o] "+&r"(o), [k] "+&r"(k), [i] "=&r"(i), [z0] "+v"(z0)
            : RANDOM_INPUTS
            : "memory", "cc");
    }
    return (uint64_t)_mm512_reduce_add_epi64(z0);
}

TARGET_AVX2 static uint64_t bw_random_avx2(const struct mfx_args *a)
{
    uint64_t r = bw_random_avx2_k(a);
    _mm256_zeroupper();
    return r;
}

TARGET_AVX512 static uint64_t bw_random_avx512(const struct mfx_args *a)
{
    uint64_t r = bw_random_avx512_k(a);
    _mm256_zeroupper();
    return r;
}

/* ---- read-modify-write: increment in place ("Sequential Increment") ------ */

/* Every 64-bit word of [dst, dst + size), counted from dst, gets `value`
 * added per pass; each of the last size % 8 bytes gets (value & 0xff).
 * Loads and stores go to the same addresses, so each line is read (from
 * wherever it lives) and written back dirty. */

/* add reg, mem: 8 per 64-byte loop. */
static uint64_t bw_rmw_scalar(const struct mfx_args *a)
{
    char *base = a->dst;
    size_t n = a->size, main = n & ~(size_t)63;
    uint64_t v = a->value;
    for (uint64_t pass = 0; pass < a->count; pass++) {
        char *p = base;
        size_t m = main;
        if (m)
            __asm__ __volatile__(
                "1:\n\t"
                "add %[v], 0(%[p])\n\tadd %[v], 8(%[p])\n\tadd %[v], 16(%[p])\n\tadd %[v], 24(%[p])\n\t"
                "add %[v], 32(%[p])\n\tadd %[v], 40(%[p])\n\tadd %[v], 48(%[p])\n\tadd %[v], 56(%[p])\n\t"
                "add $64, %[p]\n\tsub $64, %[m]\n\tjnz 1b\n"
                : [p] "+r"(p), [m] "+r"(m)
                : [v] "r"(v)
                : "memory", "cc");
        tail_add(base + main, n - main, v);
    }
    return n ? (unsigned char)base[n - 1] : 0;
}

/* movdqu load, paddq, movdqu store: 4 vectors per 64-byte loop. */
static uint64_t bw_rmw_sse2(const struct mfx_args *a)
{
    char *base = a->dst;
    size_t n = a->size, main = n & ~(size_t)63;
    uint64_t v = a->value;
    __m128i inc = _mm_set1_epi64x((long long)v), t0, t1, t2, t3;
    for (uint64_t pass = 0; pass < a->count; pass++) {
        char *p = base;
        size_t m = main;
        if (m)
            __asm__ __volatile__(
                "1:\n\t"
                "movdqu 0(%[p]), %[t0]\n\tmovdqu 16(%[p]), %[t1]\n\t"
                "movdqu 32(%[p]), %[t2]\n\tmovdqu 48(%[p]), %[t3]\n\t"
                "paddq %[inc], %[t0]\n\tpaddq %[inc], %[t1]\n\tpaddq %[inc], %[t2]\n\tpaddq %[inc], %[t3]\n\t"
                "movdqu %[t0], 0(%[p])\n\tmovdqu %[t1], 16(%[p])\n\t"
                "movdqu %[t2], 32(%[p])\n\tmovdqu %[t3], 48(%[p])\n\t"
                "add $64, %[p]\n\tsub $64, %[m]\n\tjnz 1b\n"
                : [p] "+r"(p), [m] "+r"(m), [t0] "=&x"(t0), [t1] "=&x"(t1), [t2] "=&x"(t2),
                  [t3] "=&x"(t3)
                : [inc] "x"(inc)
                : "memory", "cc");
        tail_add(base + main, n - main, v);
    }
    return n ? (unsigned char)base[n - 1] : 0;
}

/* vpaddq from memory, vmovdqu store: 4 vectors per 128-byte loop. */
TARGET_AVX2 static uint64_t bw_rmw_avx2(const struct mfx_args *a)
{
    char *base = a->dst;
    size_t n = a->size, main = n & ~(size_t)127;
    uint64_t v = a->value;
    __m256i inc = _mm256_set1_epi64x((long long)v), t0, t1, t2, t3;
    for (uint64_t pass = 0; pass < a->count; pass++) {
        char *p = base;
        size_t m = main;
        if (m)
            __asm__ __volatile__(
                "1:\n\t"
                "vpaddq 0(%[p]), %[inc], %[t0]\n\tvpaddq 32(%[p]), %[inc], %[t1]\n\t"
                "vpaddq 64(%[p]), %[inc], %[t2]\n\tvpaddq 96(%[p]), %[inc], %[t3]\n\t"
                "vmovdqu %[t0], 0(%[p])\n\tvmovdqu %[t1], 32(%[p])\n\t"
                "vmovdqu %[t2], 64(%[p])\n\tvmovdqu %[t3], 96(%[p])\n\t"
                "add $128, %[p]\n\tsub $128, %[m]\n\tjnz 1b\n"
                : [p] "+r"(p), [m] "+r"(m), [t0] "=&x"(t0), [t1] "=&x"(t1), [t2] "=&x"(t2),
                  [t3] "=&x"(t3)
                : [inc] "x"(inc)
                : "memory", "cc");
        tail_add(base + main, n - main, v);
    }
    _mm256_zeroupper();
    return n ? (unsigned char)base[n - 1] : 0;
}

/* vpaddq (EVEX) from memory, vmovdqu64 store: 4 vectors per 256-byte loop. */
TARGET_AVX512 static uint64_t bw_rmw_avx512(const struct mfx_args *a)
{
    char *base = a->dst;
    size_t n = a->size, main = n & ~(size_t)255;
    uint64_t v = a->value;
    __m512i inc = _mm512_set1_epi64((long long)v), t0, t1, t2, t3;
    for (uint64_t pass = 0; pass < a->count; pass++) {
        char *p = base;
        size_t m = main;
        if (m)
            __asm__ __volatile__(
                "1:\n\t"
                "vpaddq 0(%[p]), %[inc], %[t0]\n\tvpaddq 64(%[p]), %[inc], %[t1]\n\t"
                "vpaddq 128(%[p]), %[inc], %[t2]\n\tvpaddq 192(%[p]), %[inc], %[t3]\n\t"
                "vmovdqu64 %[t0], 0(%[p])\n\tvmovdqu64 %[t1], 64(%[p])\n\t"
                "vmovdqu64 %[t2], 128(%[p])\n\tvmovdqu64 %[t3], 192(%[p])\n\t"
                "add $256, %[p]\n\tsub $256, %[m]\n\tjnz 1b\n"
                : [p] "+r"(p), [m] "+r"(m), [t0] "=&v"(t0), [t1] "=&v"(t1), [t2] "=&v"(t2),
                  [t3] "=&v"(t3)
                : [inc] "v"(inc)
                : "memory", "cc");
        tail_add(base + main, n - main, v);
    }
    _mm256_zeroupper();
    return n ? (unsigned char)base[n - 1] : 0;
}

/* ---- write, then read back ----------------------------------------------- */

/* Does data written with non-temporal stores cost more to read back?  One
 * pass = the fill row's pass over [dst, dst + size) (the byte of `value`,
 * fill.c's value semantic), then a read pass summing it (the checksum
 * above).  The fill is the fill table's own kernel, found by name, not a
 * second copy of it; the read is this file's kernel of the same width. */
extern const struct mfx_kernel mfx_kernels_fill[];   /* kernels/fill.c */

static mfx_kernel_fn fill_row(const char *name)
{
    for (const struct mfx_kernel *k = mfx_kernels_fill; k->name; k++)
        if (!strcmp(k->name, name))
            return k->fn;
    return NULL;
}

ALWAYS_INLINE uint64_t write_then_read(const struct mfx_args *a, const char *fill_name,
                                       mfx_kernel_fn read_fn)
{
    mfx_kernel_fn fill = fill_row(fill_name);
    uint64_t total = 0;
    if (!fill)
        return 0;   /* unreachable: the names below are rows of fill.c (a test checks) */
    struct mfx_args w = {a->dst, NULL, a->size, a->value, 1, 0};
    struct mfx_args r = {NULL, a->dst, a->size, 0, 1, 0};
    for (uint64_t pass = 0; pass < a->count; pass++) {
        fill(&w);
        total += read_fn(&r);
    }
    return total;
}

static uint64_t bw_write_read_sse2(const struct mfx_args *a)
{
    return write_then_read(a, "fill_sse", bw_sum_sse2);
}

static uint64_t bw_ntwrite_read_sse2(const struct mfx_args *a)
{
    return write_then_read(a, "fill_nt_sse", bw_sum_sse2);
}

TARGET_AVX2 static uint64_t bw_write_read_avx2(const struct mfx_args *a)
{
    return write_then_read(a, "fill_avx2", bw_sum_avx2);
}

TARGET_AVX2 static uint64_t bw_ntwrite_read_avx2(const struct mfx_args *a)
{
    return write_then_read(a, "fill_nt_sse", bw_sum_avx2);
}

TARGET_AVX512 static uint64_t bw_write_read_avx512(const struct mfx_args *a)
{
    return write_then_read(a, "fill_avx512", bw_sum_avx512);
}

TARGET_AVX512 static uint64_t bw_ntwrite_read_avx512(const struct mfx_args *a)
{
    return write_then_read(a, "fill_nt_sse", bw_sum_avx512);
}

/* ---- footprints ---------------------------------------------------------- */

static void read_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    f->src_bytes = a->size;
}

static void write_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    f->dst_bytes = a->size;
}

/* The lines [src, src + reach * 64) (reach = aux, or size / 64 when aux is
 * 0) and the size / 64 indices of the order at dst. */
static void random_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t lines = a->size / LINE;
    size_t reach = a->aux ? (size_t)a->aux : lines;
    f->src_bytes = reach > SIZE_MAX / LINE ? SIZE_MAX : reach * LINE;
    f->dst_bytes = lines > SIZE_MAX / sizeof(uint32_t) ? SIZE_MAX : lines * sizeof(uint32_t);
}

/* Traffic: the bytes the program asks for, per pass.  Reads count `size`
 * bytes loaded; increments `size` loaded and `size` stored; random reads
 * the size / 64 lines' bytes (the order's 4 bytes per line, 1/16 more and
 * read sequentially, are not counted); write-then-read `size` stored and
 * `size` loaded.  Write-allocate reads are never counted (as in STREAM and
 * likwid-bench). */
#define ROW(NAME, ISA, FP, RD, WR, DOC)                                        \
    {                                                                          \
        .name = #NAME, .group = "bandwidth", .isa = ISA, .fn = NAME,           \
        .footprint = FP, .read_per_byte = RD, .write_per_byte = WR,            \
        .read_fixed = 0, .write_fixed = 0, .ops_per_iter = 1, .op = "pass",    \
        .doc = DOC,                                                            \
    }

MFX_KERNEL_TABLE(bandwidth) = {
    ROW(bw_read_scalar, "", read_footprint, 1, 0,
        "8-byte loads only (bw_sum_scalar's loop), one pass per iteration; returns bytes walked"),
    ROW(bw_read_sse2, "sse2", read_footprint, 1, 0,
        "16-byte movdqu loads only (bw_sum_sse2's loop); returns bytes walked"),
    ROW(bw_read_avx2, "avx2", read_footprint, 1, 0,
        "32-byte vmovdqu loads only (bw_sum_avx2's loop); returns bytes walked"),
    ROW(bw_read_avx512, "avx512f", read_footprint, 1, 0,
        "64-byte vmovdqu64 loads only (bw_sum_avx512's loop); returns bytes walked"),
    ROW(bw_sum_scalar, "", read_footprint, 1, 0,
        "sum of 8-byte words (add from memory into 4 accumulators): bw_read_scalar's check"),
    ROW(bw_sum_sse2, "sse2", read_footprint, 1, 0,
        "sum with 16-byte movdqu + paddq into 4 accumulators: bw_read_sse2's check"),
    ROW(bw_sum_avx2, "avx2", read_footprint, 1, 0,
        "sum with 32-byte vpaddq from memory into 8 accumulators: bw_read_avx2's check"),
    ROW(bw_sum_avx512, "avx512f", read_footprint, 1, 0,
        "sum with 64-byte vpaddq from memory into 8 accumulators: bw_read_avx512's check"),
    ROW(bw_random_scalar, "", random_footprint, 1, 0,
        "sum of the 64-byte lines of src in the uint32 line order at dst, 8-byte adds"),
    ROW(bw_random_sse2, "sse2", random_footprint, 1, 0,
        "sum of the 64-byte lines of src in the uint32 line order at dst, 16-byte loads"),
    ROW(bw_random_avx2, "avx2", random_footprint, 1, 0,
        "sum of the 64-byte lines of src in the uint32 line order at dst, 32-byte vpaddq"),
    ROW(bw_random_avx512, "avx512f", random_footprint, 1, 0,
        "sum of the 64-byte lines of src in the uint32 line order at dst, 64-byte vpaddq"),
    ROW(bw_rmw_scalar, "", write_footprint, 1, 1,
        "add value to every 8-byte word in place (add reg, mem), one pass per iteration"),
    ROW(bw_rmw_sse2, "sse2", write_footprint, 1, 1,
        "add value to every 8-byte word in place (movdqu, paddq, movdqu)"),
    ROW(bw_rmw_avx2, "avx2", write_footprint, 1, 1,
        "add value to every 8-byte word in place (vpaddq from memory, vmovdqu)"),
    ROW(bw_rmw_avx512, "avx512f", write_footprint, 1, 1,
        "add value to every 8-byte word in place (EVEX vpaddq from memory, vmovdqu64)"),
    ROW(bw_write_read_sse2, "sse2", write_footprint, 1, 1,
        "fill_sse pass over dst, then a bw_read_sse2 pass over it"),
    ROW(bw_ntwrite_read_sse2, "sse2", write_footprint, 1, 1,
        "fill_nt_sse (movntdq) pass over dst, then a bw_read_sse2 pass over it"),
    ROW(bw_write_read_avx2, "avx2", write_footprint, 1, 1,
        "fill_avx2 pass over dst, then a bw_read_avx2 pass over it"),
    ROW(bw_ntwrite_read_avx2, "avx2", write_footprint, 1, 1,
        "fill_nt_sse (movntdq) pass over dst, then a bw_read_avx2 pass over it"),
    ROW(bw_write_read_avx512, "avx512f", write_footprint, 1, 1,
        "fill_avx512 pass over dst, then a bw_read_avx512 pass over it"),
    ROW(bw_ntwrite_read_avx512, "avx512f", write_footprint, 1, 1,
        "fill_nt_sse (movntdq) pass over dst, then a bw_read_avx512 pass over it"),
    {0},
};
