/* Pointer-chase kernels: each load's address comes from the previous load,
 * so the time per step is the load-to-use latency of wherever the chain
 * lives (Drepper, "What every programmer should know about memory", 3.3.2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../core.h"

/* Follow `count` links starting at src; the chain is linked by
 * mfx_link_chain (below), never written from Python. */
static uint64_t chase_ptr(const struct mfx_args *a)
{
    void *const *p = (void *const *)a->src;
    uint64_t n = a->count;
    /* Unrolled by 8 so loop overhead hides under the dependent loads; the asm
     * keeps the compiler from merging or reordering the loads. */
    while (n >= 8) {
        __asm__ __volatile__(
            "mov (%0), %0\n\tmov (%0), %0\n\tmov (%0), %0\n\tmov (%0), %0\n\t"
            "mov (%0), %0\n\tmov (%0), %0\n\tmov (%0), %0\n\tmov (%0), %0\n\t"
            : "+r"(p)::"memory");
        n -= 8;
    }
    while (n--)
        __asm__ __volatile__("mov (%0), %0" : "+r"(p)::"memory");
    return (uint64_t)(uintptr_t)p;
}

/* The same walk, but each step also writes the element's second word:
 * Drepper's "Sequential Read and Write" variant (figure 3.13). */
static uint64_t chase_ptr_inc(const struct mfx_args *a)
{
    void **p = (void **)a->src;
    uint64_t n = a->count;
    while (n--) {
        __asm__ __volatile__("incq 8(%0)\n\tmov (%0), %0" : "+r"(p)::"memory");
    }
    return (uint64_t)(uintptr_t)p;
}

/* The walk reads each element's first word (chase_ptr_inc also its second):
 * it stays on the chain's elements, so the binding checks that src is one. */
static void chase_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    (void)a;
    f->src_bytes = 8;
    f->chain_element_min = 8;
}

static void chase_inc_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    (void)a;
    f->src_bytes = 16;
    f->chain_element_min = 16;
    f->chain_written = 1;
}

/* A chain may start at any offset the caller chose: memcpy, not a
 * (possibly misaligned) pointer store. */
static void store_pointer(char *at, const char *p)
{
    memcpy(at, &p, sizeof p);
}

static int64_t order_at(const void *order, int itemsize, int is_signed, size_t i)
{
    if (itemsize == 4)
        return is_signed ? (int64_t)((const int32_t *)order)[i]
                         : (int64_t)((const uint32_t *)order)[i];
    return ((const int64_t *)order)[i];
}

/* Every index below n and none twice (a bitmap of the elements seen), so
 * that a refused order leaves the region as it was: a chain already linked
 * there stays whole. */
static int check_order(size_t n, const void *order, int itemsize, int is_signed, char *msg,
                       size_t msglen)
{
    unsigned char *seen = calloc(n / 8 + 1, 1);
    if (!seen) {
        snprintf(msg, msglen, "no memory to check a chain order of %zu elements", n);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int64_t v = order_at(order, itemsize, is_signed, i);
        uint64_t e = (uint64_t)v;
        if (e >= n) {
            if (is_signed || itemsize == 4)
                snprintf(msg, msglen, "chain order[%zu] = %lld is not an element index below %zu", i,
                         (long long)v, n);
            else
                snprintf(msg, msglen, "chain order[%zu] = %llu is not an element index below %zu", i,
                         (unsigned long long)e, n);
            rc = -1;
        } else if (seen[e / 8] & (1u << (e % 8))) {
            snprintf(msg, msglen, "chain order[%zu] = %llu repeats an element", i,
                     (unsigned long long)e);
            rc = -1;
        } else {
            seen[e / 8] |= (unsigned char)(1u << (e % 8));
        }
    }
    free(seen);
    return rc;
}

/* Whether every element's first word holds the address of an element of
 * the same chain (n elements of `element` bytes from base): what a walk
 * that also writes through the chain needs before it starts. */
int mfx_chain_intact(const char *base, size_t n, size_t element)
{
    uintptr_t lo = (uintptr_t)base, span = (uintptr_t)(n * element);
    for (size_t e = 0; e < n; e++) {
        uintptr_t p;
        memcpy(&p, base + e * element, sizeof p);
        if (p - lo >= span || (p - lo) % element)
            return 0;
    }
    return 1;
}

/* The order is checked whole first (check_order); then one pass over the
 * elements' first words in `order`, each written once: n indices, each
 * below n and none twice, make one cycle through every element. */
int mfx_link_chain(char *base, size_t n, size_t element, const void *order, int order_itemsize,
                   int order_signed, char *msg, size_t msglen)
{
    if (n == 0 || element < 8 || element % 8) {
        snprintf(msg, msglen, "a chain needs at least one element of a multiple of 8 bytes");
        return -1;
    }
    if (order && check_order(n, order, order_itemsize, order_signed, msg, msglen) < 0)
        return -1;          /* refused before a byte of the region is written */
    uint64_t first = 0, prev = 0;
    for (size_t i = 0; i < n; i++) {
        /* the order was checked whole (check_order): each e is below n, once */
        uint64_t e = order ? (uint64_t)order_at(order, order_itemsize, order_signed, i) : i;
        if (i == 0)
            first = e;
        else
            store_pointer(base + prev * element, base + e * element);
        prev = e;
    }
    store_pointer(base + prev * element, base + first * element);
    return 0;
}

/* A chain's visiting order: n indices shuffled in place (Fisher-Yates),
 * drawn from xoshiro256** (Blackman and Vigna, "Scrambled linear
 * pseudorandom number generators", ACM TOMS 2021) seeded with the four
 * words Python derives from the run's seed, each bound unbiased by
 * Lemire's multiply-and-reject ("Fast random integer generation in an
 * interval", ACM TOMACS 2019).  About 4x faster than numpy's shuffle of a
 * DRAM-sized set (docs/machine-notes.md): the swaps miss the cache alike,
 * numpy spends the rest per element. */
static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* uniform in [0, range), range >= 1 */
static inline uint64_t bounded_draw(uint64_t s[4], uint64_t range)
{
    unsigned __int128 m = (unsigned __int128)xoshiro_next(s) * range;
    uint64_t low = (uint64_t)m;
    if (low < range) {
        uint64_t floor = -range % range;      /* 2^64 mod range */
        while (low < floor) {
            m = (unsigned __int128)xoshiro_next(s) * range;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

static inline void swap_u32(uint32_t *x, uint32_t *y)
{
    uint32_t t = *x;
    *x = *y;
    *y = t;
}

static inline void swap_u64(uint64_t *x, uint64_t *y)
{
    uint64_t t = *x;
    *x = *y;
    *y = t;
}

int mfx_shuffle(void *items, size_t n, int itemsize, const uint64_t seed[4])
{
    if (itemsize != 4 && itemsize != 8)
        return -1;
    uint64_t s[4] = {seed[0], seed[1], seed[2], seed[3]};
    if (!(s[0] | s[1] | s[2] | s[3]))
        s[0] = 1;                    /* the one state xoshiro cannot leave */
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)bounded_draw(s, i);
        if (itemsize == 4)
            swap_u32((uint32_t *)items + (i - 1), (uint32_t *)items + j);
        else
            swap_u64((uint64_t *)items + (i - 1), (uint64_t *)items + j);
    }
    return 0;
}

MFX_KERNEL_TABLE(chase) = {
    {
        .name = "chase_ptr",
        .group = "chase",
        .isa = "",
        .fn = chase_ptr,
        .footprint = chase_footprint,
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 8, .write_fixed = 0,
        .ops_per_iter = 1,
        .op = "load",
        .doc = "dependent loads along a pointer chain linked by link_chain",
    },
    {
        .name = "chase_ptr_inc",
        .group = "chase",
        .isa = "",
        .fn = chase_ptr_inc,
        .footprint = chase_inc_footprint,
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 16, .write_fixed = 8,
        .ops_per_iter = 1,
        .op = "load",
        .doc = "pointer chase that also increments each element's second word (needs NPAD >= 1)",
    },
    {0},
};
