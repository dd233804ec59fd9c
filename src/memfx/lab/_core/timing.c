/* Core-cycle estimate: a chain of dependent register-register adds runs at
 * one add per core cycle (Agner Fog's instruction tables: ADD r,r latency 1),
 * so n adds / ticks = core cycles per TSC tick.  Register operands, not
 * immediates: Golden Cove-class cores fold `add reg, imm` chains at rename
 * and run several of them per TSC tick (docs/machine-notes.md). */
#include "core.h"

uint64_t mfx_add_chain(uint64_t n)
{
    uint64_t x = 0, one = 1, iters = (n + 99) / 100; /* callers pass multiples of 100 */
    uint64_t t0 = mfx_tsc_begin();
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ __volatile__(
            ".rept 100\n\tadd %1, %0\n\t.endr" : "+r"(x) : "r"(one));
    }
    uint64_t t1 = mfx_tsc_end(0);
    __asm__ __volatile__("" ::"r"(x));
    return t1 - t0;
}
