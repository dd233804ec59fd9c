/* ring_copy: copy SIZE-byte buffers round a ring of COUNT buffers, PASSES
 * times (buffer i -> buffer i+1), then print the copy bandwidth.
 *
 *     cc -O2 -o ring_copy ring_copy.c
 *     ./ring_copy SIZE [COUNT [PASSES]]        e.g. ./ring_copy 48M 8 4
 *
 * SIZE takes K, M or G (binary).  Every copy is one call of libc's memcpy
 * with a size only known at run time, so glibc chooses its path (vector
 * loop, rep movsb or non-temporal stores) by its thresholds; the buffers
 * are filled with memset once.  See examples/README.md for what
 * `memfx tune` should find on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K': case 'k': v <<= 10; end++; break;
    case 'M': case 'm': v <<= 20; end++; break;
    case 'G': case 'g': v <<= 30; end++; break;
    }
    if (end == s || *end != '\0' || v == 0) {
        fprintf(stderr, "ring_copy: bad size %s\n", s);
        exit(2);
    }
    return (size_t)v;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: ring_copy SIZE [COUNT [PASSES]]\n");
        return 2;
    }
    size_t size = parse_size(argv[1]);
    long count = argc > 2 ? atol(argv[2]) : 8;
    long passes = argc > 3 ? atol(argv[3]) : 4;
    if (count < 2 || passes < 1) {
        fprintf(stderr, "ring_copy: COUNT must be >= 2 and PASSES >= 1\n");
        return 2;
    }
    char **ring = calloc((size_t)count, sizeof *ring);
    if (!ring)
        return 1;
    for (long i = 0; i < count; i++) {
        ring[i] = malloc(size);
        if (!ring[i]) {
            fprintf(stderr, "ring_copy: cannot allocate %ld x %zu bytes\n", count, size);
            return 1;
        }
        memset(ring[i], (int)(i + 1), size);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long p = 0; p < passes; p++)
        for (long i = 0; i < count; i++)
            memcpy(ring[(i + 1) % count], ring[i], size);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double bytes = (double)size * (double)count * (double)passes;
    /* the checksum keeps the copies from being optimised away */
    unsigned sum = 0;
    for (long i = 0; i < count; i++)
        sum += (unsigned char)ring[i][size / 2];
    printf("%zu bytes x %ld buffers x %ld passes: %.2f GB/s (checksum %u)\n",
           size, count, passes, bytes / s / 1e9, sum);
    for (long i = 0; i < count; i++)
        free(ring[i]);
    free(ring);
    return 0;
}
