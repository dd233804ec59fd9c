/* Run-time ISA checks: kernels declare what they need and are only called
 * when the CPU and the OS support it (the build targets baseline x86-64 only). */
#include <cpuid.h>
#include <string.h>
#include "core.h"

static int cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit)
{
    unsigned r[4] = {0, 0, 0, 0};
    if (__get_cpuid_max(leaf & 0x80000000u, 0) < leaf)
        return 0;
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
    return (r[reg] >> bit) & 1;
}

enum { EAX, EBX, ECX, EDX };

int mfx_isa_supported(const char *isa)
{
    if (!isa || !*isa)
        return 1;
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the wider state. */
    if (!strcmp(isa, "sse2")) return __builtin_cpu_supports("sse2");
    if (!strcmp(isa, "avx")) return __builtin_cpu_supports("avx");
    if (!strcmp(isa, "avx2")) return __builtin_cpu_supports("avx2");
    if (!strcmp(isa, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(isa, "avx512bw")) return __builtin_cpu_supports("avx512bw");
    if (!strcmp(isa, "avx512vl")) return __builtin_cpu_supports("avx512vl");
    /* Intel SDM Vol. 2A, CPUID leaf 07H: EBX[9] ERMS, EDX[4] FSRM;
     * sub-leaf 1 EAX[10] FZRM, EAX[11] FSRS, EAX[12] FSRC. */
    if (!strcmp(isa, "erms")) return cpuid_bit(7, 0, EBX, 9);
    if (!strcmp(isa, "fsrm")) return cpuid_bit(7, 0, EDX, 4);
    if (!strcmp(isa, "clflushopt")) return cpuid_bit(7, 0, EBX, 23);
    if (!strcmp(isa, "clwb")) return cpuid_bit(7, 0, EBX, 24);
    if (!strcmp(isa, "prefetchw")) return cpuid_bit(0x80000001u, 0, ECX, 8);
    if (!strcmp(isa, "sse4.1")) return __builtin_cpu_supports("sse4.1");
    return 0;
}
