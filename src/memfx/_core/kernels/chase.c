/* Pointer-chase kernels: each load's address comes from the previous load,
 * so the time per step is the load-to-use latency of wherever the chain
 * lives (Drepper, "What every programmer should know about memory", 3.3.2). */
#include "../core.h"

/* Follow `count` links starting at src; the chain is built in Python. */
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

const struct mfx_kernel mfx_kernels_chase[] = {
    {"chase_ptr", "chase", "", chase_ptr, 0, 0, 8, 0, 1, "load",
     "dependent loads along a pointer chain built by the caller"},
    {"chase_ptr_inc", "chase", "", chase_ptr_inc, 0, 0, 16, 8, 1, "load",
     "pointer chase that also increments each element's second word (needs NPAD >= 1)"},
    {0},
};
