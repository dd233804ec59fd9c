/* Fill kernels: does the CPU care about the value it stores?  (Seed 000,
 * "Hardware store elimination": on Skylake client, filling a region that
 * has left L2 with zeros ran ~17% faster than with ones.)
 *
 * Value semantic, shared by every kernel so that all of them write the same
 * bytes: the fill byte is the LOW BYTE of the 64-bit value; every byte of
 * [dst, dst + size) receives it, nothing outside is touched.  Vector and
 * scalar kernels store that byte replicated to the store width
 * (b * 0x0101010101010101); rep stosb and memset store the byte itself.
 *
 * The value is a runtime argument: one compiled function serves every
 * value, so fill0 and fill1 execute exactly the same instructions (seed 000
 * insists on this; the test suite checks it).  The pattern is computed with
 * an and + imul from a value loaded from the argument block in memory, so a
 * zero never comes from a zeroing idiom (xor reg, reg).  The seed's comment
 * thread worried that a register renamed to the "zero register" by such an
 * idiom might be what the hardware detects; the author answered by loading
 * the zero from a `volatile int`.  aux bit MFX_FILL_VALUE_FROM_SRC replays
 * that check: the pattern is then re-read through a volatile pointer (src)
 * at the start of every pass and a->value is ignored.
 *
 * aux bit MFX_FILL_ALTERNATE: odd passes write byte (aux >> 8) & 0xff
 * instead (the "write b over a" pairwise arm, one pass = one fill, so the
 * declared traffic stays size bytes per pass).
 *
 * aux bit MFX_FILL_ROTATE: the region is R = aux >> 16 bytes and each of the
 * `count` iterations fills the next `size` bytes of it, wrapping at R, from
 * a cursor kept in a slot just past the region (64-byte aligned: cursor,
 * sweeps; the caller maps the slot).  Every line is rewritten exactly R
 * bytes after its previous write, as in full passes over R, but one call
 * can be short: a sample over a 200 MiB region need not take 50 ms (long
 * samples are rarely free of preemption).  A "pass" for the value
 * semantic (alternation) is then one full sweep of R.
 *
 * Every kernel handles any size (0 included) and any alignment: stores
 * narrower than the kernel's width only at the head and tail (overlapping,
 * unaligned), aligned stores of the full width in between.  The main loops
 * are inline asm so the compiler cannot turn them into something else.
 *
 * The second half of the file: calloc / malloc+memset / mmap first touch
 * (seed 000, footnote on calloc), group "fill_alloc". */
#define _GNU_SOURCE
#include <immintrin.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../core.h"

#define MFX_FILL_VALUE_FROM_SRC 1u
#define MFX_FILL_ALTERNATE 2u
#define MFX_FILL_ROTATE 4u

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE uint64_t replicate(uint64_t v)
{
    return (v & 0xff) * 0x0101010101010101ULL;
}

/* The pattern word may sit at any address: a GCC type with alignment 1 is
 * the same single 8-byte load on x86 without undefined behaviour. */
typedef uint64_t __attribute__((aligned(1))) mfx_unaligned_u64;

/* The pattern of pass i (see the header comment). */
ALWAYS_INLINE uint64_t pass_pattern(const struct mfx_args *a, uint64_t i)
{
    uint64_t v;
    if ((a->aux & MFX_FILL_ALTERNATE) && (i & 1))
        v = a->aux >> 8;
    else if (a->aux & MFX_FILL_VALUE_FROM_SRC)
        v = *(const volatile mfx_unaligned_u64 *)a->src;
    else
        v = a->value;
    return replicate(v);
}

ALWAYS_INLINE void st64(char *p, uint64_t v) { __builtin_memcpy(p, &v, 8); }
ALWAYS_INLINE void st32(char *p, uint64_t v) { uint32_t x = (uint32_t)v; __builtin_memcpy(p, &x, 4); }
ALWAYS_INLINE void st16(char *p, uint64_t v) { uint16_t x = (uint16_t)v; __builtin_memcpy(p, &x, 2); }

/* n < 16 bytes with at most two overlapping stores. */
ALWAYS_INLINE void small_fill(char *d, size_t n, uint64_t v)
{
    if (n >= 8) {
        st64(d, v);
        st64(d + n - 8, v);
    } else if (n >= 4) {
        st32(d, v);
        st32(d + n - 4, v);
    } else if (n >= 2) {
        st16(d, v);
        st16(d + n - 2, v);
    } else if (n) {
        *d = (char)v;
    }
    __asm__ __volatile__("" ::: "memory");
}

ALWAYS_INLINE char *align_up(char *p, uintptr_t a) { return (char *)(((uintptr_t)p + a - 1) & ~(a - 1)); }
ALWAYS_INLINE char *align_down(char *p, uintptr_t a) { return (char *)((uintptr_t)p & ~(a - 1)); }

/* ---- scalar ------------------------------------------------------------ */

/* 4-byte stores: movl, 8 per iteration. */
ALWAYS_INLINE void fill4_pass(char *d, size_t n, uint64_t v)
{
    if (n < 8) {
        small_fill(d, n, v);
        return;
    }
    st32(d, v);
    st32(d + n - 4, v);
    char *p = align_up(d, 4);
    size_t m = (size_t)(align_down(d + n, 4) - p);
    __asm__ __volatile__(
        "cmp $32, %[m]\n\tjb 2f\n"
        "1:\n\t"
        "movl %k[v], 0(%[p])\n\tmovl %k[v], 4(%[p])\n\tmovl %k[v], 8(%[p])\n\tmovl %k[v], 12(%[p])\n\t"
        "movl %k[v], 16(%[p])\n\tmovl %k[v], 20(%[p])\n\tmovl %k[v], 24(%[p])\n\tmovl %k[v], 28(%[p])\n\t"
        "add $32, %[p]\n\tsub $32, %[m]\n\tcmp $32, %[m]\n\tjae 1b\n"
        "2:\n\ttest %[m], %[m]\n\tjz 4f\n"
        "3:\n\tmovl %k[v], (%[p])\n\tadd $4, %[p]\n\tsub $4, %[m]\n\tjnz 3b\n"
        "4:\n"
        : [p] "+r"(p), [m] "+r"(m)
        : [v] "r"(v)
        : "memory", "cc");
}

/* 8-byte stores: movq, 8 per iteration. */
ALWAYS_INLINE void fill8_pass(char *d, size_t n, uint64_t v)
{
    if (n < 16) {
        small_fill(d, n, v);
        return;
    }
    /* ordinary stores only for an unaligned head or tail: one ordinary
     * store per pass into a line the stream writes pulls that line into the
     * cache, and at 16 KiB those two stores, not the stream, set the pace */
    if ((uintptr_t)d & 7)
        st64(d, v);
    if ((uintptr_t)(d + n) & 7)
        st64(d + n - 8, v);
    char *p = align_up(d, 8);
    size_t m = (size_t)(align_down(d + n, 8) - p);
    __asm__ __volatile__(
        "cmp $64, %[m]\n\tjb 2f\n"
        "1:\n\t"
        "movq %q[v], 0(%[p])\n\tmovq %q[v], 8(%[p])\n\tmovq %q[v], 16(%[p])\n\tmovq %q[v], 24(%[p])\n\t"
        "movq %q[v], 32(%[p])\n\tmovq %q[v], 40(%[p])\n\tmovq %q[v], 48(%[p])\n\tmovq %q[v], 56(%[p])\n\t"
        "add $64, %[p]\n\tsub $64, %[m]\n\tcmp $64, %[m]\n\tjae 1b\n"
        "2:\n\ttest %[m], %[m]\n\tjz 4f\n"
        "3:\n\tmovq %q[v], (%[p])\n\tadd $8, %[p]\n\tsub $8, %[m]\n\tjnz 3b\n"
        "4:\n"
        : [p] "+r"(p), [m] "+r"(m)
        : [v] "r"(v)
        : "memory", "cc");
}

/* ---- SSE2 (baseline x86-64), 16 B ----------------------------------------- */

ALWAYS_INLINE void fill16_pass(char *d, size_t n, uint64_t v)
{
    if (n < 16) {
        small_fill(d, n, v);
        return;
    }
    __m128i x = _mm_set1_epi64x((long long)v);
    if ((uintptr_t)d & 15)              /* as fill_nt8_pass: edges only when unaligned */
        _mm_storeu_si128((__m128i *)d, x);
    if ((uintptr_t)(d + n) & 15)
        _mm_storeu_si128((__m128i *)(d + n - 16), x);
    char *p = align_up(d, 16);
    size_t m = (size_t)(align_down(d + n, 16) - p);
    __asm__ __volatile__(
        "cmp $64, %[m]\n\tjb 2f\n"
        "1:\n\t"
        "movdqa %[x], 0(%[p])\n\tmovdqa %[x], 16(%[p])\n\tmovdqa %[x], 32(%[p])\n\tmovdqa %[x], 48(%[p])\n\t"
        "add $64, %[p]\n\tsub $64, %[m]\n\tcmp $64, %[m]\n\tjae 1b\n"
        "2:\n\ttest %[m], %[m]\n\tjz 4f\n"
        "3:\n\tmovdqa %[x], (%[p])\n\tadd $16, %[p]\n\tsub $16, %[m]\n\tjnz 3b\n"
        "4:\n"
        : [p] "+r"(p), [m] "+r"(m)
        : [x] "x"(x)
        : "memory", "cc");
}

/* ---- AVX2, 32 B ----------------------------------------------------------- */

__attribute__((target("avx2"))) ALWAYS_INLINE void fill32_pass(char *d, size_t n, uint64_t v)
{
    if (n < 32) {
        if (n >= 16) {
            __m128i x = _mm_set1_epi64x((long long)v);
            _mm_storeu_si128((__m128i *)d, x);
            _mm_storeu_si128((__m128i *)(d + n - 16), x);
        } else {
            small_fill(d, n, v);
        }
        return;
    }
    __m256i y = _mm256_set1_epi64x((long long)v);
    _mm256_storeu_si256((__m256i *)d, y);
    _mm256_storeu_si256((__m256i *)(d + n - 32), y);
    char *p = align_up(d, 32);
    size_t m = (size_t)(align_down(d + n, 32) - p);
    __asm__ __volatile__(
        "cmp $128, %[m]\n\tjb 2f\n"
        "1:\n\t"
        "vmovdqa %[y], 0(%[p])\n\tvmovdqa %[y], 32(%[p])\n\tvmovdqa %[y], 64(%[p])\n\tvmovdqa %[y], 96(%[p])\n\t"
        "add $128, %[p]\n\tsub $128, %[m]\n\tcmp $128, %[m]\n\tjae 1b\n"
        "2:\n\ttest %[m], %[m]\n\tjz 4f\n"
        "3:\n\tvmovdqa %[y], (%[p])\n\tadd $32, %[p]\n\tsub $32, %[m]\n\tjnz 3b\n"
        "4:\n"
        : [p] "+r"(p), [m] "+r"(m)
        : [y] "x"(y)
        : "memory", "cc");
}

/* ---- AVX-512F, 64 B -------------------------------------------------------- */

__attribute__((target("avx512f"))) ALWAYS_INLINE void fill64_pass(char *d, size_t n, uint64_t v)
{
    if (n < 64) {
        if (n >= 32) {
            __m256i y = _mm256_set1_epi64x((long long)v);
            _mm256_storeu_si256((__m256i *)d, y);
            _mm256_storeu_si256((__m256i *)(d + n - 32), y);
        } else if (n >= 16) {
            __m128i x = _mm_set1_epi64x((long long)v);
            _mm_storeu_si128((__m128i *)d, x);
            _mm_storeu_si128((__m128i *)(d + n - 16), x);
        } else {
            small_fill(d, n, v);
        }
        return;
    }
    __m512i z = _mm512_set1_epi64((long long)v);
    _mm512_storeu_si512((void *)d, z);
    _mm512_storeu_si512((void *)(d + n - 64), z);
    char *p = align_up(d, 64);
    size_t m = (size_t)(align_down(d + n, 64) - p);
    __asm__ __volatile__(
        "cmp $256, %[m]\n\tjb 2f\n"
        "1:\n\t"
        "vmovdqa64 %[z], 0(%[p])\n\tvmovdqa64 %[z], 64(%[p])\n\t"
        "vmovdqa64 %[z], 128(%[p])\n\tvmovdqa64 %[z], 192(%[p])\n\t"
        "add $256, %[p]\n\tsub $256, %[m]\n\tcmp $256, %[m]\n\tjae 1b\n"
        "2:\n\ttest %[m], %[m]\n\tjz 4f\n"
        "3:\n\tvmovdqa64 %[z], (%[p])\n\tadd $64, %[p]\n\tsub $64, %[m]\n\tjnz 3b\n"
        "4:\n"
        : [p] "+r"(p), [m] "+r"(m)
        : [z] "v"(z)
        : "memory", "cc");
}

/* ---- non-temporal --------------------------------------------------------- */

/* movnti (SSE2, 8 B) between ordinary head/tail stores; sfence per pass so
 * the weakly-ordered stores are globally visible when the pass ends. */
ALWAYS_INLINE void fill_nt8_pass(char *d, size_t n, uint64_t v)
{
    if (n < 16) {
        small_fill(d, n, v);
        return;
    }
    /* ordinary stores only for an unaligned head or tail: one ordinary
     * store per pass into a line the stream writes pulls that line into the
     * cache, and at 16 KiB those two stores, not the stream, set the pace */
    if ((uintptr_t)d & 7)
        st64(d, v);
    if ((uintptr_t)(d + n) & 7)
        st64(d + n - 8, v);
    char *p = align_up(d, 8);
    size_t m = (size_t)(align_down(d + n, 8) - p);
    __asm__ __volatile__(
        "cmp $64, %[m]\n\tjb 2f\n"
        "1:\n\t"
        "movnti %q[v], 0(%[p])\n\tmovnti %q[v], 8(%[p])\n\tmovnti %q[v], 16(%[p])\n\tmovnti %q[v], 24(%[p])\n\t"
        "movnti %q[v], 32(%[p])\n\tmovnti %q[v], 40(%[p])\n\tmovnti %q[v], 48(%[p])\n\tmovnti %q[v], 56(%[p])\n\t"
        "add $64, %[p]\n\tsub $64, %[m]\n\tcmp $64, %[m]\n\tjae 1b\n"
        "2:\n\ttest %[m], %[m]\n\tjz 4f\n"
        "3:\n\tmovnti %q[v], (%[p])\n\tadd $8, %[p]\n\tsub $8, %[m]\n\tjnz 3b\n"
        "4:\n\tsfence\n"
        : [p] "+r"(p), [m] "+r"(m)
        : [v] "r"(v)
        : "memory", "cc");
}

/* movntdq (SSE2, 16 B, needs 16-byte alignment). */
ALWAYS_INLINE void fill_nt16_pass(char *d, size_t n, uint64_t v)
{
    if (n < 16) {
        small_fill(d, n, v);
        return;
    }
    __m128i x = _mm_set1_epi64x((long long)v);
    if ((uintptr_t)d & 15)              /* as fill_nt8_pass: edges only when unaligned */
        _mm_storeu_si128((__m128i *)d, x);
    if ((uintptr_t)(d + n) & 15)
        _mm_storeu_si128((__m128i *)(d + n - 16), x);
    char *p = align_up(d, 16);
    size_t m = (size_t)(align_down(d + n, 16) - p);
    __asm__ __volatile__(
        "cmp $64, %[m]\n\tjb 2f\n"
        "1:\n\t"
        "movntdq %[x], 0(%[p])\n\tmovntdq %[x], 16(%[p])\n\tmovntdq %[x], 32(%[p])\n\tmovntdq %[x], 48(%[p])\n\t"
        "add $64, %[p]\n\tsub $64, %[m]\n\tcmp $64, %[m]\n\tjae 1b\n"
        "2:\n\ttest %[m], %[m]\n\tjz 4f\n"
        "3:\n\tmovntdq %[x], (%[p])\n\tadd $16, %[p]\n\tsub $16, %[m]\n\tjnz 3b\n"
        "4:\n\tsfence\n"
        : [p] "+r"(p), [m] "+r"(m)
        : [x] "x"(x)
        : "memory", "cc");
}

/* ---- string instruction and libc ------------------------------------------ */

ALWAYS_INLINE void fill_stosb_pass(char *d, size_t n, uint64_t v)
{
    __asm__ __volatile__("rep stosb" : "+D"(d), "+c"(n) : "a"(v) : "memory");
}

/* Called through a volatile function pointer: GCC can neither inline nor
 * elide the call, so this is glibc's memset (its ifunc choice for this CPU). */
static void *(*volatile mfx_memset_fn)(void *, int, size_t) = memset;

ALWAYS_INLINE void fill_memset_pass(char *d, size_t n, uint64_t v)
{
    mfx_memset_fn(d, (int)(v & 0xff), n);
}

ALWAYS_INLINE uint64_t *rotate_slot(char *base, size_t region)
{
    return (uint64_t *)(((uintptr_t)base + region + 63) & ~(uintptr_t)63);
}

/* One kernel per pass function: `count` passes over [dst, dst + size), or
 * with MFX_FILL_ROTATE `count` chunks of `size` bytes through the region.
 * Returns the cursor (rotating) or 0. */
#define FILL_KERNEL(NAME, PASS, ATTR)                                       \
    ATTR static uint64_t NAME(const struct mfx_args *a)                     \
    {                                                                       \
        char *d = (char *)a->dst;                                           \
        size_t n = a->size;                                                 \
        if (a->aux & MFX_FILL_ROTATE) {                                     \
            size_t region = (size_t)(a->aux >> 16);                         \
            if (!region)                                                    \
                return 0;                                                   \
            uint64_t *slot = rotate_slot(d, region);                        \
            uint64_t cur = slot[0] < region ? slot[0] : 0, sweeps = slot[1]; \
            for (uint64_t i = 0; i < a->count; i++) {                       \
                size_t left = n;                                            \
                while (left) {                                              \
                    size_t k = region - cur < left ? region - cur : left;   \
                    PASS(d + cur, k, pass_pattern(a, sweeps));              \
                    cur += k;                                               \
                    left -= k;                                              \
                    if (cur == region) {                                    \
                        cur = 0;                                            \
                        sweeps++;                                           \
                    }                                                       \
                }                                                           \
            }                                                               \
            slot[0] = cur;                                                  \
            slot[1] = sweeps;                                               \
            return cur;                                                     \
        }                                                                   \
        for (uint64_t i = 0; i < a->count; i++)                             \
            PASS(d, n, pass_pattern(a, i));                                 \
        return 0;                                                           \
    }

FILL_KERNEL(fill_scalar4, fill4_pass, )
FILL_KERNEL(fill_scalar8, fill8_pass, )
FILL_KERNEL(fill_sse, fill16_pass, )
FILL_KERNEL(fill_avx2_k, fill32_pass, __attribute__((target("avx2"))))
FILL_KERNEL(fill_avx512_k, fill64_pass, __attribute__((target("avx512f"))))
FILL_KERNEL(fill_nt_movnti, fill_nt8_pass, )
FILL_KERNEL(fill_nt_sse, fill_nt16_pass, )
FILL_KERNEL(fill_rep_stosb, fill_stosb_pass, )
FILL_KERNEL(fill_memset, fill_memset_pass, )

/* The AVX kernels leave the upper halves dirty; clear them so that SSE code
 * run afterwards by the caller pays no transition penalty. */
__attribute__((target("avx2"))) static uint64_t fill_avx2(const struct mfx_args *a)
{
    uint64_t r = fill_avx2_k(a);
    _mm256_zeroupper();
    return r;
}

__attribute__((target("avx512f"))) static uint64_t fill_avx512(const struct mfx_args *a)
{
    uint64_t r = fill_avx512_k(a);
    _mm256_zeroupper();
    return r;
}

/* ---- byte-exact checker ------------------------------------------------- */

/* Run kernel k once (with `count` passes) for every size 0..max_size and dst
 * offset 0..max_offset-1 from a 64-byte-aligned base, with 64 guard bytes on
 * both sides; after each call the region must hold `expect` everywhere and
 * the guards must be unchanged.  Returns 0, or 1 with fail[] = {size,
 * offset, index relative to dst (negative = head guard), expected, got};
 * -1 when out of memory; -2 when the row's footprint for a call does not fit
 * the checker's buffer (mfx_fits: nothing is called then).  `src_word` is
 * what a kernel reading its value from src sees. */
int mfx_fill_check(const struct mfx_kernel *k, uint64_t value, uint64_t aux, uint64_t count,
                   uint64_t src_word, unsigned expect, size_t max_size, size_t max_offset,
                   long long fail[5])
{
    enum { G = 64 };
    const unsigned char guard = (unsigned char)(expect ^ 0xA5);
    size_t total = G + max_offset + max_size + G;
    size_t alloc = (total + 63) & ~(size_t)63;
    unsigned char *buf = aligned_alloc(64, alloc);
    unsigned char *ref_guard = malloc(max_offset + max_size + G + G);
    unsigned char *ref_fill = malloc(max_size + 1);
    if (!buf || !ref_guard || !ref_fill) {
        free(buf);
        free(ref_guard);
        free(ref_fill);
        return -1;
    }
    memset(ref_guard, guard, max_offset + max_size + G + G);
    memset(ref_fill, (int)expect, max_size + 1);
    volatile uint64_t word = src_word;
    int bad = 0;
    for (size_t off = 0; off < max_offset && !bad; off++) {
        for (size_t n = 0; n <= max_size && !bad; n++) {
            size_t used = G + off + n + G;
            memset(buf, guard, used);
            unsigned char *dst = buf + G + off;
            struct mfx_args a = {dst, (const void *)&word, n, value, count, aux};
            if (!mfx_fits(k, &a, alloc - (G + off), sizeof word)) {
                bad = -2;
                break;
            }
            k->fn(&a);
            const unsigned char *where = NULL;
            if (memcmp(buf, ref_guard, G + off))
                where = buf;
            else if (memcmp(dst, ref_fill, n))
                where = dst;
            else if (memcmp(dst + n, ref_guard, G))
                where = dst + n;
            if (where) {
                /* find the first wrong byte for the report */
                for (const unsigned char *q = buf; q < buf + used; q++) {
                    unsigned want = (q >= dst && q < dst + n) ? expect : guard;
                    if (*q != want) {
                        fail[0] = (long long)n;
                        fail[1] = (long long)off;
                        fail[2] = (long long)(q - dst);
                        fail[3] = want;
                        fail[4] = *q;
                        break;
                    }
                }
                bad = 1;
            }
        }
    }
    free(buf);
    free(ref_guard);
    free(ref_fill);
    return bad;
}

/* ---- calloc vs malloc+memset vs mmap first touch ------------------------- */

#define MFX_ALLOC_RECYCLED 1u  /* memory comes back from the heap (freed before), else fresh from the OS */
#define MFX_ALLOC_CHECK 2u     /* dirty the heap first, return the number of non-zero bytes obtained */

/* glibc malloc policy for one call.  Fresh: every block is mmapped (the
 * threshold at 0 also stops the dynamic threshold from moving), free
 * munmaps it, so each iteration gets pages from the OS, which are zero, and
 * calloc knows it.  Recycled: mmap disabled and trimming off, so a freed
 * block stays in the heap and the next allocation reuses it, dirty.
 * Restored afterwards to glibc's documented defaults (mallopt(3): 128 KiB
 * thresholds, 65536 mmaps), minus the dynamic threshold. */
static void alloc_policy(int recycled)
{
    if (recycled) {
        mallopt(M_MMAP_MAX, 0);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    } else {
        mallopt(M_MMAP_MAX, 65536);
        mallopt(M_MMAP_THRESHOLD, 0);
    }
}

static void alloc_policy_restore(void)
{
    mallopt(M_MMAP_MAX, 65536);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
}

/* Write one byte per page: the first write to a fresh page faults it in. */
static void touch_pages(char *p, size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < n; i += (size_t)page)
        ((volatile char *)p)[i] = 0;
    if (n)
        ((volatile char *)p)[n - 1] = 0;
}

static uint64_t count_nonzero(const char *p, size_t n)
{
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += p[i] != 0;
    return bad;
}

static void dirty_heap(size_t n)
{
    char *q = malloc(n);
    if (q) {
        mfx_memset_fn(q, 0xA5, n);
        free(q);
    }
}

enum { ALLOC_CALLOC, ALLOC_MALLOC_MEMSET, ALLOC_MMAP };

static uint64_t alloc_kernel(const struct mfx_args *a, int how)
{
    size_t n = a->size;
    int recycled = (a->aux & MFX_ALLOC_RECYCLED) != 0;
    int check = (a->aux & MFX_ALLOC_CHECK) != 0;
    uint64_t result = 0;
    alloc_policy(recycled);
    if (check && how != ALLOC_MMAP)
        dirty_heap(n);
    for (uint64_t i = 0; i < a->count; i++) {
        char *p;
        if (how == ALLOC_CALLOC) {
            p = calloc(1, n);
        } else if (how == ALLOC_MALLOC_MEMSET) {
            p = malloc(n);
            if (p)
                mfx_memset_fn(p, 0, n);
        } else {
            p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                p = NULL;
        }
        if (!p) {
            result = UINT64_MAX;
            break;
        }
        if (check)
            result += count_nonzero(p, n);
        touch_pages(p, n);
        if (how == ALLOC_MMAP)
            munmap(p, n ? n : 1);
        else
            free(p);
    }
    alloc_policy_restore();
    return result;
}

static uint64_t alloc_calloc(const struct mfx_args *a) { return alloc_kernel(a, ALLOC_CALLOC); }
static uint64_t alloc_malloc_memset(const struct mfx_args *a) { return alloc_kernel(a, ALLOC_MALLOC_MEMSET); }
static uint64_t alloc_mmap(const struct mfx_args *a) { return alloc_kernel(a, ALLOC_MMAP); }

/* Footprint: [dst, dst + size) per pass; rotating, the region R = aux >> 16
 * and its cursor slot (two words at the next 64-byte boundary past the
 * region, which depends on dst's address); with MFX_FILL_VALUE_FROM_SRC the
 * pattern word at src. */
static void fill_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    if (a->aux & MFX_FILL_ROTATE) {
        uint64_t region = a->aux >> 16;
        if (region) {
            uintptr_t d = (uintptr_t)a->dst;
            size_t to_slot = mfx_sat_add(mfx_sat_u64(region), (size_t)((-(d + region)) & 63));
            f->dst_bytes = mfx_sat_add(to_slot, 2 * sizeof(uint64_t));
        }
    } else {
        f->dst_bytes = a->size;
    }
    if (a->aux & MFX_FILL_VALUE_FROM_SRC)
        f->src_bytes = sizeof(uint64_t);
}

/* Traffic: `size` bytes written per pass (the fill; RFO reads are not
 * counted, as in seed 000's GB/s).  For the alloc rows: `size` bytes of
 * zeroed, touched memory delivered per call; they touch no caller buffer. */
MFX_KERNEL_TABLE(fill) = {
    {
        .name = "fill_scalar4", .group = "fill", .isa = "",
        .fn = fill_scalar4, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "fill with 4-byte movl stores (fill byte replicated), 8 per loop iteration",
    },
    {
        .name = "fill_scalar8", .group = "fill", .isa = "",
        .fn = fill_scalar8, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "fill with 8-byte movq stores (fill byte replicated), 8 per loop iteration",
    },
    {
        .name = "fill_sse", .group = "fill", .isa = "sse2",
        .fn = fill_sse, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "fill with 16-byte aligned movdqa stores, 4 per loop iteration",
    },
    {
        .name = "fill_avx2", .group = "fill", .isa = "avx2",
        .fn = fill_avx2, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "fill with 32-byte aligned vmovdqa stores, 4 per loop iteration (seed 000's fill)",
    },
    {
        .name = "fill_avx512", .group = "fill", .isa = "avx512f",
        .fn = fill_avx512, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "fill with 64-byte aligned vmovdqa64 stores, 4 per loop iteration",
    },
    {
        .name = "fill_rep_stosb", .group = "fill", .isa = "",
        .fn = fill_rep_stosb, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "fill with one rep stosb per pass (fast with ERMS/FSRS)",
    },
    {
        .name = "fill_memset", .group = "fill", .isa = "",
        .fn = fill_memset, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "libc memset called through a volatile function pointer",
    },
    {
        .name = "fill_nt_movnti", .group = "fill", .isa = "sse2",
        .fn = fill_nt_movnti, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "non-temporal 8-byte movnti stores, sfence per pass",
    },
    {
        .name = "fill_nt_sse", .group = "fill", .isa = "sse2",
        .fn = fill_nt_sse, .footprint = fill_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "pass",
        .doc = "non-temporal 16-byte movntdq stores, sfence per pass",
    },
    {
        .name = "alloc_calloc", .group = "fill_alloc", .isa = "",
        .fn = alloc_calloc, .footprint = mfx_footprint_none,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "calloc(size), write one byte per page, free (aux: 1 = recycled heap memory)",
    },
    {
        .name = "alloc_malloc_memset", .group = "fill_alloc", .isa = "",
        .fn = alloc_malloc_memset, .footprint = mfx_footprint_none,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "malloc(size) + memset 0, write one byte per page, free (aux: 1 = recycled heap memory)",
    },
    {
        .name = "alloc_mmap", .group = "fill_alloc", .isa = "",
        .fn = alloc_mmap, .footprint = mfx_footprint_none,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "mmap(size) anonymous, first touch of every page, munmap",
    },
    {0},
};
