/* What the C probes share: context switches of the calling thread, and the
 * median of a sample. */
#ifndef MEMFX_PROBE_COMMON_H
#define MEMFX_PROBE_COMMON_H

#include <stdlib.h>
#include <sys/resource.h>

/* context switches of this thread so far: a sample during which another
 * task ran on the CPU is retaken (getrusage(2), RUSAGE_THREAD) */
static inline long switches(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nvcsw + ru.ru_nivcsw;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of v[0..n) (sorts v) */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
