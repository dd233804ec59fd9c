/* Pointer-chase kernels: each load's address comes from the previous load,
 * so the time per step is the load-to-use latency of wherever the chain
 * lives (Drepper, "What every programmer should know about memory", 3.3.2). */
#include <stdio.h>
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
}

/* Two passes over the elements' first words: clear them, then link in
 * `order`, refusing an index out of range or seen before (its word is no
 * longer zero: a linked word holds a non-null address; the latest element's
 * word is written one step later, so it is compared directly).  n indices, each
 * below n and none twice, make one cycle through every element. */
int mfx_link_chain(char *base, size_t n, size_t element, const void *order, int order_itemsize,
                   int order_signed, char *msg, size_t msglen)
{
    if (n == 0 || element < 8 || element % 8) {
        snprintf(msg, msglen, "a chain needs at least one element of a multiple of 8 bytes");
        return -1;
    }
    for (size_t e = 0; e < n; e++)
        *(void **)(base + e * element) = NULL;
    uint64_t first = 0, prev = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t signed_e = (int64_t)i;
        if (order && order_itemsize == 4)
            signed_e = order_signed ? (int64_t)((const int32_t *)order)[i]
                                    : (int64_t)((const uint32_t *)order)[i];
        else if (order)
            signed_e = ((const int64_t *)order)[i];
        uint64_t e = (uint64_t)signed_e;
        if (e >= n) {
            if (order_signed || order_itemsize == 4)
                snprintf(msg, msglen, "chain order[%zu] = %lld is not an element index below %zu", i,
                         (long long)signed_e, n);
            else
                snprintf(msg, msglen, "chain order[%zu] = %llu is not an element index below %zu", i,
                         (unsigned long long)e, n);
            return -1;
        }
        if (*(void **)(base + e * element) != NULL || (i > 0 && e == prev)) {
            snprintf(msg, msglen, "chain order[%zu] = %llu repeats an element", i,
                     (unsigned long long)e);
            return -1;
        }
        if (i == 0)
            first = e;
        else
            *(void **)(base + prev * element) = base + e * element;
        prev = e;
    }
    *(void **)(base + prev * element) = base + first * element;
    return 0;
}

const struct mfx_kernel mfx_kernels_chase[] = {
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
