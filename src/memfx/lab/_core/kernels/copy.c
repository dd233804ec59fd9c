/* Copy and set strategies: the ways compiled code and libc move or fill
 * `size` bytes, so the size at which one beats another can be measured on
 * the machine at hand (seed 002: the kernel thread that chose 256 bytes as
 * the `rep movsq` cut-off "semi-arbitrarily" and asked that someone revisit
 * it), plus the classic `a[i] += b[i]` loop for the 4K-aliasing sweep.
 *
 * One iteration = one call copying `size` bytes src -> dst (memcpy
 * semantics: the regions must not overlap; the Python side never builds an
 * overlapping pair) or setting `size` bytes of dst to the low byte of
 * `value`.  Every strategy is inline asm, inlined into the kernel's loop as
 * a compiler would inline a fixed strategy (GCC's -mmemcpy-strategy), so
 * the compiler cannot turn a hand-written loop into a call to memcpy; the
 * `libc` rows call glibc through a volatile function pointer so GCC cannot
 * inline or specialise the call.
 *
 * aux selects how consecutive calls relate (the seed's thread argues about
 * exactly this):
 *   0                  back to back: throughput
 *   MFX_COPY_SERIALISE lfence after each call: the next call does not start
 *                      before the previous one has executed (its stores may
 *                      still sit in the store buffer; Intel SDM Vol. 2A,
 *                      LFENCE)
 *   MFX_COPY_CHAIN     no fence; the next call's src and dst addresses
 *                      depend on the last byte the previous call wrote (a
 *                      load of dst[size-1], ANDed with zero in asm), so the
 *                      calls form a latency chain through store forwarding
 *   both bits          chain and lfence
 *
 * Vector strategies finish with vzeroupper once per kernel call (as
 * compiled code does at function exit), not per copy. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "../core.h"

#define MFX_COPY_SERIALISE 1u
#define MFX_COPY_CHAIN 2u

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define TARGET_AVX2 __attribute__((target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx512f")))

/* Byte 0x01 repeated: the 8-byte fill pattern is (value & 0xff) * this. */
#define BYTES_ONES 0x0101010101010101ull

/* ------------------------------------------------------------------ */
/* small pieces shared by several strategies                           */

/* Copy n < 16 bytes with two possibly overlapping moves of the largest
 * power-of-two width <= n (the usual libc small-size path). */
#define SMALL_COPY_LT16_ASM                                   \
    "cmp $8, %[n]\n\t"                                        \
    "jb 81f\n\t"                                              \
    "mov (%[s]), %[t0]\n\t"                                   \
    "mov -8(%[s],%[n]), %[t1]\n\t"                            \
    "mov %[t0], (%[d])\n\t"                                   \
    "mov %[t1], -8(%[d],%[n])\n\t"                            \
    "jmp 89f\n"                                               \
    "81:\n\t"                                                 \
    "cmp $4, %[n]\n\t"                                        \
    "jb 82f\n\t"                                              \
    "movl (%[s]), %k[t0]\n\t"                                 \
    "movl -4(%[s],%[n]), %k[t1]\n\t"                          \
    "movl %k[t0], (%[d])\n\t"                                 \
    "movl %k[t1], -4(%[d],%[n])\n\t"                          \
    "jmp 89f\n"                                               \
    "82:\n\t"                                                 \
    "cmp $2, %[n]\n\t"                                        \
    "jb 83f\n\t"                                              \
    "movzwl (%[s]), %k[t0]\n\t"                               \
    "movzwl -2(%[s],%[n]), %k[t1]\n\t"                        \
    "movw %w[t0], (%[d])\n\t"                                 \
    "movw %w[t1], -2(%[d],%[n])\n\t"                          \
    "jmp 89f\n"                                               \
    "83:\n\t"                                                 \
    "test %[n], %[n]\n\t"                                     \
    "jz 89f\n\t"                                              \
    "movzbl (%[s]), %k[t0]\n\t"                               \
    "movb %b[t0], (%[d])\n"                                   \
    "89:\n\t"

/* Set n < 16 bytes to the pattern in %[p] (8 copies of the byte). */
#define SMALL_SET_LT16_ASM                                    \
    "cmp $8, %[n]\n\t"                                        \
    "jb 81f\n\t"                                              \
    "mov %[p], (%[d])\n\t"                                    \
    "mov %[p], -8(%[d],%[n])\n\t"                             \
    "jmp 89f\n"                                               \
    "81:\n\t"                                                 \
    "cmp $4, %[n]\n\t"                                        \
    "jb 82f\n\t"                                              \
    "movl %k[p], (%[d])\n\t"                                  \
    "movl %k[p], -4(%[d],%[n])\n\t"                           \
    "jmp 89f\n"                                               \
    "82:\n\t"                                                 \
    "cmp $2, %[n]\n\t"                                        \
    "jb 83f\n\t"                                              \
    "movw %w[p], (%[d])\n\t"                                  \
    "movw %w[p], -2(%[d],%[n])\n\t"                           \
    "jmp 89f\n"                                               \
    "83:\n\t"                                                 \
    "test %[n], %[n]\n\t"                                     \
    "jz 89f\n\t"                                              \
    "movb %b[p], (%[d])\n"                                    \
    "89:\n\t"

ALWAYS_INLINE void small_copy_lt16(char *d, const char *s, size_t n)
{
    uint64_t t0, t1;
    __asm__ __volatile__(SMALL_COPY_LT16_ASM
                         : [t0] "=&r"(t0), [t1] "=&r"(t1)
                         : [d] "r"(d), [s] "r"(s), [n] "r"(n)
                         : "memory", "cc");
}

ALWAYS_INLINE void small_set_lt16(char *d, uint64_t p, size_t n)
{
    __asm__ __volatile__(SMALL_SET_LT16_ASM : : [d] "r"(d), [p] "r"(p), [n] "r"(n)
                         : "memory", "cc");
}

/* Tail of n & 7 bytes after a quad-word copy: 4, 2, 1 bytes as needed
 * (what GCC emits after `rep movsq` for a run-time length). */
ALWAYS_INLINE void tail_copy_lt8(char *d, const char *s, size_t n)
{
    uint64_t t;
    __asm__ __volatile__(
        "test $4, %b[n]\n\t"
        "jz 1f\n\t"
        "movl (%[s]), %k[t]\n\t"
        "movl %k[t], (%[d])\n\t"
        "add $4, %[s]\n\t"
        "add $4, %[d]\n"
        "1:\n\t"
        "test $2, %b[n]\n\t"
        "jz 2f\n\t"
        "movzwl (%[s]), %k[t]\n\t"
        "movw %w[t], (%[d])\n\t"
        "add $2, %[s]\n\t"
        "add $2, %[d]\n"
        "2:\n\t"
        "test $1, %b[n]\n\t"
        "jz 3f\n\t"
        "movzbl (%[s]), %k[t]\n\t"
        "movb %b[t], (%[d])\n"
        "3:\n\t"
        : [t] "=&r"(t), [d] "+r"(d), [s] "+r"(s)
        : [n] "r"(n)
        : "memory", "cc");
}

ALWAYS_INLINE void tail_set_lt8(char *d, uint64_t p, size_t n)
{
    __asm__ __volatile__(
        "test $4, %b[n]\n\t"
        "jz 1f\n\t"
        "movl %k[p], (%[d])\n\t"
        "add $4, %[d]\n"
        "1:\n\t"
        "test $2, %b[n]\n\t"
        "jz 2f\n\t"
        "movw %w[p], (%[d])\n\t"
        "add $2, %[d]\n"
        "2:\n\t"
        "test $1, %b[n]\n\t"
        "jz 3f\n\t"
        "movb %b[p], (%[d])\n"
        "3:\n\t"
        : [d] "+r"(d)
        : [p] "r"(p), [n] "r"(n)
        : "memory", "cc");
}

/* ------------------------------------------------------------------ */
/* copy strategies                                                     */

/* `rep movsb`: the whole copy in one string instruction (fast with ERMS,
 * and for short lengths with FSRM; Intel SDM Vol. 1, 7.3.9.3). */
ALWAYS_INLINE void copy_rep_movsb_body(char *d, const char *s, size_t n)
{
    __asm__ __volatile__("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

/* `rep movsq` for n / 8 quad words, then the tail: GCC's rep_8byte. */
ALWAYS_INLINE void copy_rep_movsq_body(char *d, const char *s, size_t n)
{
    size_t q = n >> 3;
    __asm__ __volatile__("rep movsq" : "+D"(d), "+S"(s), "+c"(q) : : "memory");
    tail_copy_lt8(d, s, n & 7);
}

/* The 4 x 8-byte load/store loop of the thread (sync_regs after the
 * patch), then 8-byte moves, then a 4/2/1 tail. */
ALWAYS_INLINE void copy_gpr_unrolled_body(char *d, const char *s, size_t n)
{
    uint64_t t0, t1, t2, t3;
    __asm__ __volatile__(
        "cmp $32, %[n]\n\t"
        "jb 2f\n"
        "1:\n\t"
        "mov (%[s]), %[t0]\n\t"
        "mov 8(%[s]), %[t1]\n\t"
        "mov 16(%[s]), %[t2]\n\t"
        "mov 24(%[s]), %[t3]\n\t"
        "mov %[t0], (%[d])\n\t"
        "mov %[t1], 8(%[d])\n\t"
        "mov %[t2], 16(%[d])\n\t"
        "mov %[t3], 24(%[d])\n\t"
        "add $32, %[s]\n\t"
        "add $32, %[d]\n\t"
        "sub $32, %[n]\n\t"
        "cmp $32, %[n]\n\t"
        "jae 1b\n"
        "2:\n\t"
        "cmp $8, %[n]\n\t"
        "jb 3f\n\t"
        "mov (%[s]), %[t0]\n\t"
        "mov %[t0], (%[d])\n\t"
        "add $8, %[s]\n\t"
        "add $8, %[d]\n\t"
        "sub $8, %[n]\n\t"
        "jmp 2b\n"
        "3:\n\t"
        : [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [t3] "=&r"(t3),
          [d] "+r"(d), [s] "+r"(s), [n] "+r"(n)
        :
        : "memory", "cc");
    tail_copy_lt8(d, s, n);
}

/* Vector loop, width W: n < W goes to a narrower path; otherwise the last
 * vector is loaded first, 4 vectors per iteration while more than 4W
 * remain, then single vectors while more than W remain, and the last
 * vector is stored at the very end (overlapping the previous store: no
 * scalar tail; the usual libc technique). */
#define VEC_COPY_LOOP_ASM(LD, ST, W, R0, R1, R2, R3, RL)       \
    LD " -" #W "(%[s],%[n]), " RL "\n\t"                        \
    "lea -" #W "(%[d],%[n]), %[e]\n\t"                          \
    "cmp $4*" #W ", %[n]\n\t"                                   \
    "jbe 2f\n"                                                  \
    "1:\n\t"                                                    \
    LD " (%[s]), " R0 "\n\t"                                    \
    LD " " #W "(%[s]), " R1 "\n\t"                              \
    LD " 2*" #W "(%[s]), " R2 "\n\t"                            \
    LD " 3*" #W "(%[s]), " R3 "\n\t"                            \
    ST " " R0 ", (%[d])\n\t"                                    \
    ST " " R1 ", " #W "(%[d])\n\t"                              \
    ST " " R2 ", 2*" #W "(%[d])\n\t"                            \
    ST " " R3 ", 3*" #W "(%[d])\n\t"                            \
    "add $4*" #W ", %[s]\n\t"                                   \
    "add $4*" #W ", %[d]\n\t"                                   \
    "sub $4*" #W ", %[n]\n\t"                                   \
    "cmp $4*" #W ", %[n]\n\t"                                   \
    "ja 1b\n"                                                   \
    "2:\n\t"                                                    \
    "cmp $" #W ", %[n]\n\t"                                     \
    "jbe 3f\n\t"                                                \
    LD " (%[s]), " R0 "\n\t"                                    \
    ST " " R0 ", (%[d])\n\t"                                    \
    "add $" #W ", %[s]\n\t"                                     \
    "add $" #W ", %[d]\n\t"                                     \
    "sub $" #W ", %[n]\n\t"                                     \
    "jmp 2b\n"                                                  \
    "3:\n\t"                                                    \
    ST " " RL ", (%[e])\n\t"

#define VEC_COPY_OPERANDS                                        \
    : [d] "+r"(d), [s] "+r"(s), [n] "+r"(n), [e] "=&r"(e)        \
    :                                                            \
    : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4"

/* Two overlapping 16-byte moves cover 16 <= n <= 32.  MOV is movdqu in
 * SSE code and vmovdqu in AVX code: legacy-SSE instructions after 256/512-bit
 * ones would pay the SSE/AVX transition cost (Intel Optimization Reference
 * Manual, "Mixing AVX code with SSE code"). */
#define COPY_16_TO_32(MOV, d, s, n)                                        \
    __asm__ __volatile__(                                                  \
        MOV " (%[s]), %%xmm0\n\t"                                          \
        MOV " -16(%[s],%[n]), %%xmm1\n\t"                                  \
        MOV " %%xmm0, (%[d])\n\t"                                          \
        MOV " %%xmm1, -16(%[d],%[n])\n\t"                                  \
        : : [d] "r"(d), [s] "r"(s), [n] "r"(n) : "memory", "xmm0", "xmm1")

ALWAYS_INLINE void copy_sse_body(char *d, const char *s, size_t n)
{
    char *e;
    if (n < 16) {
        small_copy_lt16(d, s, n);
        return;
    }
    __asm__ __volatile__(VEC_COPY_LOOP_ASM("movdqu", "movdqu", 16, "%%xmm0", "%%xmm1",
                                           "%%xmm2", "%%xmm3", "%%xmm4")
                         VEC_COPY_OPERANDS);
}

ALWAYS_INLINE TARGET_AVX2 void copy_avx2_body(char *d, const char *s, size_t n)
{
    char *e;
    if (n < 32) {
        if (n >= 16)
            COPY_16_TO_32("vmovdqu", d, s, n);
        else
            small_copy_lt16(d, s, n);
        return;
    }
    __asm__ __volatile__(VEC_COPY_LOOP_ASM("vmovdqu", "vmovdqu", 32, "%%ymm0", "%%ymm1",
                                           "%%ymm2", "%%ymm3", "%%ymm4")
                         VEC_COPY_OPERANDS);
}

ALWAYS_INLINE TARGET_AVX512 void copy_avx512_body(char *d, const char *s, size_t n)
{
    char *e;
    if (n < 64) {
        if (n >= 32)
            __asm__ __volatile__(
                "vmovdqu (%[s]), %%ymm0\n\t"
                "vmovdqu -32(%[s],%[n]), %%ymm1\n\t"
                "vmovdqu %%ymm0, (%[d])\n\t"
                "vmovdqu %%ymm1, -32(%[d],%[n])\n\t"
                : : [d] "r"(d), [s] "r"(s), [n] "r"(n) : "memory", "xmm0", "xmm1");
        else if (n >= 16)
            COPY_16_TO_32("vmovdqu", d, s, n);
        else
            small_copy_lt16(d, s, n);
        return;
    }
    __asm__ __volatile__(VEC_COPY_LOOP_ASM("vmovdqu64", "vmovdqu64", 64, "%%zmm0", "%%zmm1",
                                           "%%zmm2", "%%zmm3", "%%zmm4")
                         VEC_COPY_OPERANDS);
}

/* Non-temporal stores: plain stores for the 0..15 head bytes that align
 * dst to 16, then movntdq 4 x 16 bytes per iteration (whole lines through
 * the write-combining buffers), 16-byte NT stores, a plain tail that does
 * not overlap the NT stores, and sfence so the weakly ordered NT stores are
 * ordered before anything after the call (Intel SDM Vol. 1, 10.4.6.2).
 * Below 64 bytes it is the small path plus the sfence (the experiments
 * time it from nt_min_size up only). */
ALWAYS_INLINE void copy_nt_body(char *d, const char *s, size_t n)
{
    if (n < 64) {
        if (n >= 16) {
            /* 16..63: up to four overlapping 16-byte moves */
            __asm__ __volatile__(
                "movdqu (%[s]), %%xmm0\n\t"
                "movdqu -16(%[s],%[n]), %%xmm1\n\t"
                "cmp $32, %[n]\n\t"
                "jbe 1f\n\t"
                "movdqu 16(%[s]), %%xmm2\n\t"
                "movdqu -32(%[s],%[n]), %%xmm3\n\t"
                "movdqu %%xmm2, 16(%[d])\n\t"
                "movdqu %%xmm3, -32(%[d],%[n])\n"
                "1:\n\t"
                "movdqu %%xmm0, (%[d])\n\t"
                "movdqu %%xmm1, -16(%[d],%[n])\n\t"
                : : [d] "r"(d), [s] "r"(s), [n] "r"(n)
                : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3");
        } else {
            small_copy_lt16(d, s, n);
        }
        __asm__ __volatile__("sfence" ::: "memory");
        return;
    }
    /* head: up to 15 bytes so that dst becomes 16-byte aligned */
    size_t head = (size_t)(-(uintptr_t)d) & 15;
    small_copy_lt16(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t tail = n & 15;
    __asm__ __volatile__(
        "cmp $64, %[n]\n\t"
        "jb 2f\n"
        "1:\n\t"
        "movdqu (%[s]), %%xmm0\n\t"
        "movdqu 16(%[s]), %%xmm1\n\t"
        "movdqu 32(%[s]), %%xmm2\n\t"
        "movdqu 48(%[s]), %%xmm3\n\t"
        "movntdq %%xmm0, (%[d])\n\t"
        "movntdq %%xmm1, 16(%[d])\n\t"
        "movntdq %%xmm2, 32(%[d])\n\t"
        "movntdq %%xmm3, 48(%[d])\n\t"
        "add $64, %[s]\n\t"
        "add $64, %[d]\n\t"
        "sub $64, %[n]\n\t"
        "cmp $64, %[n]\n\t"
        "jae 1b\n"
        "2:\n\t"
        "cmp $16, %[n]\n\t"
        "jb 3f\n\t"
        "movdqu (%[s]), %%xmm0\n\t"
        "movntdq %%xmm0, (%[d])\n\t"
        "add $16, %[s]\n\t"
        "add $16, %[d]\n\t"
        "sub $16, %[n]\n\t"
        "jmp 2b\n"
        "3:\n\t"
        : [d] "+r"(d), [s] "+r"(s), [n] "+r"(n)
        :
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3");
    small_copy_lt16(d, s, tail);
    __asm__ __volatile__("sfence" ::: "memory");
}

/* glibc's memcpy/memset, called through volatile pointers so GCC neither
 * inlines nor specialises them: what a library call really costs. */
static void *(*volatile libc_memcpy)(void *, const void *, size_t) = memcpy;
static void *(*volatile libc_memset)(void *, int, size_t) = memset;

/* ------------------------------------------------------------------ */
/* set strategies                                                      */

ALWAYS_INLINE void set_rep_stosb_body(char *d, uint64_t p, size_t n)
{
    __asm__ __volatile__("rep stosb" : "+D"(d), "+c"(n) : "a"(p) : "memory");
}

ALWAYS_INLINE void set_rep_stosq_body(char *d, uint64_t p, size_t n)
{
    size_t q = n >> 3;
    __asm__ __volatile__("rep stosq" : "+D"(d), "+c"(q) : "a"(p) : "memory");
    tail_set_lt8(d, p, n & 7);
}

ALWAYS_INLINE void set_gpr_unrolled_body(char *d, uint64_t p, size_t n)
{
    __asm__ __volatile__(
        "cmp $32, %[n]\n\t"
        "jb 2f\n"
        "1:\n\t"
        "mov %[p], (%[d])\n\t"
        "mov %[p], 8(%[d])\n\t"
        "mov %[p], 16(%[d])\n\t"
        "mov %[p], 24(%[d])\n\t"
        "add $32, %[d]\n\t"
        "sub $32, %[n]\n\t"
        "cmp $32, %[n]\n\t"
        "jae 1b\n"
        "2:\n\t"
        "cmp $8, %[n]\n\t"
        "jb 3f\n\t"
        "mov %[p], (%[d])\n\t"
        "add $8, %[d]\n\t"
        "sub $8, %[n]\n\t"
        "jmp 2b\n"
        "3:\n\t"
        : [d] "+r"(d), [n] "+r"(n)
        : [p] "r"(p)
        : "memory", "cc");
    tail_set_lt8(d, p, n);
}

/* Vector fill, width W, pattern already in register V: 4 stores per
 * iteration while more than 4W remain, single stores while more than W
 * remain, the last vector stored at the very end (overlapping). */
#define VEC_SET_LOOP_ASM(ST, W, V)                               \
    "lea -" #W "(%[d],%[n]), %[e]\n\t"                          \
    "cmp $4*" #W ", %[n]\n\t"                                   \
    "jbe 2f\n"                                                  \
    "1:\n\t"                                                    \
    ST " " V ", (%[d])\n\t"                                     \
    ST " " V ", " #W "(%[d])\n\t"                               \
    ST " " V ", 2*" #W "(%[d])\n\t"                             \
    ST " " V ", 3*" #W "(%[d])\n\t"                             \
    "add $4*" #W ", %[d]\n\t"                                   \
    "sub $4*" #W ", %[n]\n\t"                                   \
    "cmp $4*" #W ", %[n]\n\t"                                   \
    "ja 1b\n"                                                   \
    "2:\n\t"                                                    \
    "cmp $" #W ", %[n]\n\t"                                     \
    "jbe 3f\n\t"                                                \
    ST " " V ", (%[d])\n\t"                                     \
    "add $" #W ", %[d]\n\t"                                     \
    "sub $" #W ", %[n]\n\t"                                     \
    "jmp 2b\n"                                                  \
    "3:\n\t"                                                    \
    ST " " V ", (%[e])\n\t"

#define VEC_SET_OPERANDS                                         \
    : [d] "+r"(d), [n] "+r"(n), [e] "=&r"(e)                     \
    : [p] "r"(p)                                                 \
    : "memory", "cc", "xmm0"

/* 16 <= n <= 32 with two overlapping 16-byte stores, VEX-encoded (only
 * the AVX strategies use it; see COPY_16_TO_32). */
ALWAYS_INLINE TARGET_AVX2 void set_16_to_32_vex(char *d, uint64_t p, size_t n)
{
    __asm__ __volatile__(
        "vmovq %[p], %%xmm0\n\t"
        "vpbroadcastq %%xmm0, %%xmm0\n\t"
        "vmovdqu %%xmm0, (%[d])\n\t"
        "vmovdqu %%xmm0, -16(%[d],%[n])\n\t"
        : : [d] "r"(d), [p] "r"(p), [n] "r"(n) : "memory", "xmm0");
}

ALWAYS_INLINE void set_sse_body(char *d, uint64_t p, size_t n)
{
    char *e;
    if (n < 16) {
        small_set_lt16(d, p, n);
        return;
    }
    __asm__ __volatile__("movq %[p], %%xmm0\n\t"
                         "punpcklqdq %%xmm0, %%xmm0\n\t"
                         VEC_SET_LOOP_ASM("movdqu", 16, "%%xmm0")
                         VEC_SET_OPERANDS);
}

ALWAYS_INLINE TARGET_AVX2 void set_avx2_body(char *d, uint64_t p, size_t n)
{
    char *e;
    if (n < 32) {
        if (n >= 16)
            set_16_to_32_vex(d, p, n);
        else
            small_set_lt16(d, p, n);
        return;
    }
    __asm__ __volatile__("vmovq %[p], %%xmm0\n\t"
                         "vpbroadcastq %%xmm0, %%ymm0\n\t"
                         VEC_SET_LOOP_ASM("vmovdqu", 32, "%%ymm0")
                         VEC_SET_OPERANDS);
}

ALWAYS_INLINE TARGET_AVX512 void set_avx512_body(char *d, uint64_t p, size_t n)
{
    char *e;
    if (n < 64) {
        if (n >= 32)
            __asm__ __volatile__(
                "vmovq %[p], %%xmm0\n\t"
                "vpbroadcastq %%xmm0, %%ymm0\n\t"
                "vmovdqu %%ymm0, (%[d])\n\t"
                "vmovdqu %%ymm0, -32(%[d],%[n])\n\t"
                : : [d] "r"(d), [p] "r"(p), [n] "r"(n) : "memory", "xmm0");
        else if (n >= 16)
            set_16_to_32_vex(d, p, n);
        else
            small_set_lt16(d, p, n);
        return;
    }
    __asm__ __volatile__("vpbroadcastq %[p], %%zmm0\n\t"
                         VEC_SET_LOOP_ASM("vmovdqu64", 64, "%%zmm0")
                         VEC_SET_OPERANDS);
}

ALWAYS_INLINE void set_nt_body(char *d, uint64_t p, size_t n)
{
    if (n < 64) {
        if (n >= 16)
            __asm__ __volatile__(
                "movq %[p], %%xmm0\n\t"
                "punpcklqdq %%xmm0, %%xmm0\n\t"
                "movdqu %%xmm0, (%[d])\n\t"
                "movdqu %%xmm0, -16(%[d],%[n])\n\t"
                "cmp $32, %[n]\n\t"
                "jbe 1f\n\t"
                "movdqu %%xmm0, 16(%[d])\n\t"
                "movdqu %%xmm0, -32(%[d],%[n])\n"
                "1:\n\t"
                : : [d] "r"(d), [p] "r"(p), [n] "r"(n) : "memory", "cc", "xmm0");
        else
            small_set_lt16(d, p, n);
        __asm__ __volatile__("sfence" ::: "memory");
        return;
    }
    size_t head = (size_t)(-(uintptr_t)d) & 15;
    small_set_lt16(d, p, head);
    d += head;
    n -= head;
    size_t tail = n & 15;
    __asm__ __volatile__(
        "movq %[p], %%xmm0\n\t"
        "punpcklqdq %%xmm0, %%xmm0\n\t"
        "cmp $64, %[n]\n\t"
        "jb 2f\n"
        "1:\n\t"
        "movntdq %%xmm0, (%[d])\n\t"
        "movntdq %%xmm0, 16(%[d])\n\t"
        "movntdq %%xmm0, 32(%[d])\n\t"
        "movntdq %%xmm0, 48(%[d])\n\t"
        "add $64, %[d]\n\t"
        "sub $64, %[n]\n\t"
        "cmp $64, %[n]\n\t"
        "jae 1b\n"
        "2:\n\t"
        "cmp $16, %[n]\n\t"
        "jb 3f\n\t"
        "movntdq %%xmm0, (%[d])\n\t"
        "add $16, %[d]\n\t"
        "sub $16, %[n]\n\t"
        "jmp 2b\n"
        "3:\n\t"
        : [d] "+r"(d), [n] "+r"(n)
        : [p] "r"(p)
        : "memory", "cc", "xmm0");
    small_set_lt16(d, p, tail);
    __asm__ __volatile__("sfence" ::: "memory");
}

/* ------------------------------------------------------------------ */
/* the kernel loops: one per strategy, every timing mode inside         */

/* The fence-free dependency: the last byte written, ANDed with zero in
 * asm (the CPU cannot know the result is zero; the compiler cannot see
 * it), becomes an offset added to the next call's addresses. */
ALWAYS_INLINE uintptr_t chain_link(const char *d, size_t n)
{
    uintptr_t t = 0;
    if (n)
        __asm__ __volatile__("movzbl -1(%[d],%[n]), %k[t]\n\t"
                             "and $0, %k[t]"
                             : [t] "=r"(t) : [d] "r"(d), [n] "r"(n) : "memory", "cc");
    return t;
}

#define LFENCE() __asm__ __volatile__("lfence" ::: "memory")
#define VZEROUPPER() __asm__ __volatile__("vzeroupper" ::: "memory")
#define NOTHING() ((void)0)

/* CALL uses d, s (copy) or p (set), n. */
#define MODE_LOOPS(CALL)                                                   \
    const uint64_t count = a->count; /* a local: "memory" clobbers do not reload it */ \
    switch (a->aux & (MFX_COPY_SERIALISE | MFX_COPY_CHAIN)) {                \
    case 0:                                                                \
        for (uint64_t i = 0; i < count; i++) {                               \
            CALL;                                                          \
        }                                                                  \
        break;                                                             \
    case MFX_COPY_SERIALISE:                                               \
        for (uint64_t i = 0; i < count; i++) {                               \
            CALL;                                                          \
            LFENCE();                                                      \
        }                                                                  \
        break;                                                             \
    case MFX_COPY_CHAIN:                                                   \
        for (uint64_t i = 0; i < count; i++) {                               \
            CALL;                                                          \
            uintptr_t dep = chain_link(d, n);                              \
            d += dep;                                                      \
            s += dep;                                                      \
        }                                                                  \
        break;                                                             \
    default:                                                               \
        for (uint64_t i = 0; i < count; i++) {                               \
            CALL;                                                          \
            uintptr_t dep = chain_link(d, n);                              \
            d += dep;                                                      \
            s += dep;                                                      \
            LFENCE();                                                      \
        }                                                                  \
        break;                                                             \
    }

#define COPY_KERNEL(NAME, ATTR, CALL, FINISH)                               \
    ATTR static uint64_t NAME(const struct mfx_args *a)                    \
    {                                                                      \
        char *d = a->dst;                                                  \
        const char *s = a->src;                                            \
        size_t n = a->size;                                                \
        MODE_LOOPS(CALL)                                                   \
        FINISH();                                                          \
        return (uint64_t)(uintptr_t)d + (n ? (unsigned char)d[n - 1] : 0);  \
    }

#define SET_KERNEL(NAME, ATTR, CALL, FINISH)                                \
    ATTR static uint64_t NAME(const struct mfx_args *a)                    \
    {                                                                      \
        char *d = a->dst;                                                  \
        const char *s = d; /* only moved by the chain, unused */           \
        size_t n = a->size;                                                \
        uint64_t p = (a->value & 0xff) * BYTES_ONES;                       \
        MODE_LOOPS(CALL)                                                   \
        (void)s;                                                           \
        FINISH();                                                          \
        return (uint64_t)(uintptr_t)d + (n ? (unsigned char)d[n - 1] : 0);  \
    }

COPY_KERNEL(copy_rep_movsb, , copy_rep_movsb_body(d, s, n), NOTHING)
COPY_KERNEL(copy_rep_movsq, , copy_rep_movsq_body(d, s, n), NOTHING)
COPY_KERNEL(copy_gpr_unrolled, , copy_gpr_unrolled_body(d, s, n), NOTHING)
COPY_KERNEL(copy_sse, , copy_sse_body(d, s, n), NOTHING)
COPY_KERNEL(copy_avx2, TARGET_AVX2, copy_avx2_body(d, s, n), VZEROUPPER)
COPY_KERNEL(copy_avx512, TARGET_AVX512, copy_avx512_body(d, s, n), VZEROUPPER)
COPY_KERNEL(copy_nt, , copy_nt_body(d, s, n), NOTHING)

static uint64_t copy_libc(const struct mfx_args *a)
{
    char *d = a->dst;
    const char *s = a->src;
    size_t n = a->size;
    void *(*fn)(void *, const void *, size_t) = libc_memcpy;
    MODE_LOOPS(fn(d, s, n))
    return (uint64_t)(uintptr_t)d + (n ? (unsigned char)d[n - 1] : 0);
}

SET_KERNEL(set_rep_stosb, , set_rep_stosb_body(d, p, n), NOTHING)
SET_KERNEL(set_rep_stosq, , set_rep_stosq_body(d, p, n), NOTHING)
SET_KERNEL(set_gpr_unrolled, , set_gpr_unrolled_body(d, p, n), NOTHING)
SET_KERNEL(set_sse, , set_sse_body(d, p, n), NOTHING)
SET_KERNEL(set_avx2, TARGET_AVX2, set_avx2_body(d, p, n), VZEROUPPER)
SET_KERNEL(set_avx512, TARGET_AVX512, set_avx512_body(d, p, n), VZEROUPPER)
SET_KERNEL(set_nt, , set_nt_body(d, p, n), NOTHING)

static uint64_t set_libc(const struct mfx_args *a)
{
    char *d = a->dst;
    const char *s = d;
    size_t n = a->size;
    int byte = (int)(a->value & 0xff);
    void *(*fn)(void *, int, size_t) = libc_memset;
    MODE_LOOPS(fn(d, byte, n))
    (void)s;
    return (uint64_t)(uintptr_t)d + (n ? (unsigned char)d[n - 1] : 0);
}

/* The classic load/store loop `a[i] += b[i]` (a = dst, b = src) over
 * size / 8 uint64 elements, the remaining size % 8 bytes added bytewise.
 * With (a - b) mod 4096 small and positive, a later iteration's load of b
 * matches an earlier, still pending store to a in address bits 11:0, and
 * the load waits for nothing: 4K aliasing (Intel Optimization Reference
 * Manual, "4K Aliasing"). */
ALWAYS_INLINE void rmw_add_body(char *d, const char *s, size_t n)
{
    size_t q = n >> 3;
    uint64_t t;
    __asm__ __volatile__(
        "test %[q], %[q]\n\t"
        "jz 2f\n"
        "1:\n\t"
        "mov (%[s]), %[t]\n\t"
        "add %[t], (%[d])\n\t"
        "add $8, %[s]\n\t"
        "add $8, %[d]\n\t"
        "dec %[q]\n\t"
        "jnz 1b\n"
        "2:\n\t"
        "test $7, %[n]\n\t"
        "jz 4f\n\t"
        "and $7, %[n]\n"
        "3:\n\t"
        "movzbl (%[s]), %k[t]\n\t"
        "add %b[t], (%[d])\n\t"
        "inc %[s]\n\t"
        "inc %[d]\n\t"
        "dec %[n]\n\t"
        "jnz 3b\n"
        "4:\n\t"
        : [t] "=&r"(t), [d] "+r"(d), [s] "+r"(s), [q] "+r"(q), [n] "+r"(n)
        :
        : "memory", "cc");
}

COPY_KERNEL(rmw_add_loop, , rmw_add_body(d, s, n), NOTHING)

/* Footprints: one call touches [dst, dst + size) and, copying or adding,
 * [src, src + size); the timing modes (aux) change no address (the chain
 * adds a dependent zero), and the result reads dst[size - 1]. */
static void copy_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    f->dst_bytes = a->size;
    f->src_bytes = a->size;
}

static void set_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    f->dst_bytes = a->size;
}

MFX_KERNEL_TABLE(copy) = {
    {
        .name = "copy_rep_movsb", .group = "copy", .isa = "",
        .fn = copy_rep_movsb, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "rep movsb of size bytes (aux: 1 lfence per call, 2 address chain)",
    },
    {
        .name = "copy_rep_movsq", .group = "copy", .isa = "",
        .fn = copy_rep_movsq, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "rep movsq of size/8 quad words plus a 4/2/1-byte tail (GCC rep_8byte)",
    },
    {
        .name = "copy_gpr_unrolled", .group = "copy", .isa = "",
        .fn = copy_gpr_unrolled, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "4 x 8-byte load/store loop, then 8-byte moves, then a 4/2/1 tail",
    },
    {
        .name = "copy_sse", .group = "copy", .isa = "sse2",
        .fn = copy_sse, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "16-byte movdqu loop (4 per iteration), overlapping last vector",
    },
    {
        .name = "copy_avx2", .group = "copy", .isa = "avx2",
        .fn = copy_avx2, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "32-byte vmovdqu loop (4 per iteration), overlapping last vector",
    },
    {
        .name = "copy_avx512", .group = "copy", .isa = "avx512f",
        .fn = copy_avx512, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "64-byte vmovdqu64 loop (4 per iteration), overlapping last vector",
    },
    {
        .name = "copy_libc", .group = "copy", .isa = "",
        .fn = copy_libc, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "glibc memcpy through a volatile function pointer",
    },
    {
        .name = "copy_nt", .group = "copy", .isa = "sse2",
        .fn = copy_nt, .footprint = copy_footprint,
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "movntdq non-temporal stores (dst aligned to 16) + sfence per call",
    },
    {
        .name = "set_rep_stosb", .group = "set", .isa = "",
        .fn = set_rep_stosb, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "rep stosb of size bytes with the low byte of value",
    },
    {
        .name = "set_rep_stosq", .group = "set", .isa = "",
        .fn = set_rep_stosq, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "rep stosq of size/8 quad words plus a 4/2/1-byte tail (GCC rep_8byte)",
    },
    {
        .name = "set_gpr_unrolled", .group = "set", .isa = "",
        .fn = set_gpr_unrolled, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "4 x 8-byte store loop, then 8-byte stores, then a 4/2/1 tail",
    },
    {
        .name = "set_sse", .group = "set", .isa = "sse2",
        .fn = set_sse, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "16-byte movdqu store loop (4 per iteration), overlapping last vector",
    },
    {
        .name = "set_avx2", .group = "set", .isa = "avx2",
        .fn = set_avx2, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "32-byte vmovdqu store loop (4 per iteration), overlapping last vector",
    },
    {
        .name = "set_avx512", .group = "set", .isa = "avx512f",
        .fn = set_avx512, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "64-byte vmovdqu64 store loop (4 per iteration), overlapping last vector",
    },
    {
        .name = "set_libc", .group = "set", .isa = "",
        .fn = set_libc, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "glibc memset through a volatile function pointer",
    },
    {
        .name = "set_nt", .group = "set", .isa = "sse2",
        .fn = set_nt, .footprint = set_footprint,
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "movntdq non-temporal stores (dst aligned to 16) + sfence per call",
    },
    {
        .name = "rmw_add_loop", .group = "rmw", .isa = "",
        .fn = rmw_add_loop, .footprint = copy_footprint,
        .read_per_byte = 2, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,
        .ops_per_iter = 1, .op = "call",
        .doc = "a[i] += b[i] over size/8 uint64 elements (a = dst, b = src), bytewise tail",
    },
    {0},
};

/* ------------------------------------------------------------------ */
/* byte-exact verification                                             */

#define VERIFY_GUARD 64
#define VERIFY_POISON 0xC3

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Check kernel k (group copy, set or rmw) for every size 0..max_size and
 * misalignments 0..max_misalign-1 of src and dst relative to a 64-byte
 * boundary: every src misalignment with a dst misalignment that rotates
 * with the size (so all pairs are met across sizes), or every pair when
 * all_pairs is set.  Each call is checked byte by byte against the
 * reference result, with VERIFY_GUARD poisoned bytes on both sides of
 * the destination that must stay untouched and a source that must stay
 * unchanged.  The kernel runs `count` times with the given aux (timing
 * mode), exactly as timed.  as_group (NULL = the row's group) and
 * size_skew (bytes added to the size the kernel is told) exist so that
 * tests can show the checks fail on a wrong kernel.  Returns 0, -1 with
 * a message in msg, or -2 (and a message) when the row's footprint for a
 * call does not fit the checker's buffers (mfx_fits): nothing is called. */
int mfx_verify_copy_kernel(const struct mfx_kernel *k, size_t max_size, unsigned max_misalign,
                           int all_pairs, uint64_t aux, uint64_t count, const char *as_group,
                           long size_skew, char *msg, size_t msglen)
{
    enum { COPY, SET, RMW } kind;
    const char *group = as_group && *as_group ? as_group : k->group;
    if (!strcmp(group, "copy"))
        kind = COPY;
    else if (!strcmp(group, "set"))
        kind = SET;
    else if (!strcmp(group, "rmw"))
        kind = RMW;
    else {
        snprintf(msg, msglen, "%s: group %s has no verifier", k->name, group);
        return -1;
    }
    if (max_misalign < 1 || max_misalign > 64 || count < 1 || size_skew < -1 || size_skew > 32) {
        snprintf(msg, msglen, "misalignments must be 1..64, count >= 1, size_skew -1..32");
        return -1;
    }
    size_t span = max_size + 64 + 2 * VERIFY_GUARD + 32;
    unsigned char *src = aligned_alloc(64, (span + 63) / 64 * 64);
    unsigned char *dst = aligned_alloc(64, (span + 63) / 64 * 64);
    unsigned char *orig = malloc(span);
    unsigned char *want = malloc(span);
    /* span poison bytes, then span + 64 bytes of the rmw start pattern */
    unsigned char *poison = malloc(2 * span + 64);
    int rc = -1;
    if (!src || !dst || !orig || !want || !poison) {
        snprintf(msg, msglen, "out of memory");
        goto out;
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < span; i++)
        src[i] = (unsigned char)(xorshift(&x) >> 24);
    memcpy(orig, src, span);
    memset(poison, VERIFY_POISON, span);
    for (size_t i = 0; i < span + 64; i++)
        poison[span + i] = (unsigned char)(i * 7);
    for (size_t n = 0; n <= max_size; n++) {
        for (unsigned si = 0; si < max_misalign; si++) {
            unsigned first = all_pairs ? 0 : (si * 37u + (unsigned)n * 11u) % max_misalign;
            unsigned last = all_pairs ? max_misalign : first + 1;
            for (unsigned di = first; di < last; di++) {
                unsigned char *d = dst + VERIFY_GUARD + di;
                const unsigned char *s = src + VERIFY_GUARD + si;
                /* the destination: poison around, a known pattern inside (rmw adds to it) */
                memset(dst, VERIFY_POISON, span);
                uint8_t value = (uint8_t)(0x5A + n + si);
                if (value == VERIFY_POISON)
                    value ^= 0xFF;
                if (kind == RMW)
                    memcpy(d, poison + span + di, n);
                /* size_skew != 0 only in the verifier's own tests: the kernel is told a
                 * wrong size so that the checks must fail */
                size_t told = (size_skew < 0 && n == 0) ? 0 : (size_t)((long)n + size_skew);
                struct mfx_args args = {d, s, told, 0x1234567890ABCD00ull | value, count, aux};
                size_t room = (span + 63) / 64 * 64;
                if (!mfx_fits(k, &args, room - (size_t)(d - dst), room - (size_t)(s - src))) {
                    snprintf(msg, msglen, "kernel %s with size %zu, count %llu, aux %llu reaches "
                             "past the checker's buffers", k->name, told,
                             (unsigned long long)count, (unsigned long long)aux);
                    rc = -2;
                    goto out;
                }
                k->fn(&args);
                /* reference */
                if (kind == COPY)
                    memcpy(want, s, n);
                else if (kind == SET)
                    memset(want, value, n);
                else {
                    memcpy(want, poison + span + di, n);
                    size_t q = n / 8 * 8;
                    for (uint64_t c = 0; c < count; c++) {
                        for (size_t i = 0; i < q; i += 8) {
                            uint64_t w, b;
                            memcpy(&w, want + i, 8);
                            memcpy(&b, s + i, 8);
                            w += b;
                            memcpy(want + i, &w, 8);
                        }
                        for (size_t i = q; i < n; i++)
                            want[i] = (unsigned char)(want[i] + s[i]);
                    }
                }
                const char *what = NULL;
                size_t at = 0, before = (size_t)(d - dst), after = span - before - n;
                if (memcmp(dst, poison, before))
                    what = "wrote before the destination";
                else if (memcmp(d, want, n)) {
                    for (at = 0; at < n && d[at] == want[at]; at++)
                        ;
                    what = "wrong byte in the destination";
                } else if (memcmp(d + n, poison, after))
                    what = "wrote past the destination";
                if (what) {
                    snprintf(msg, msglen,
                             "%s: %s (size %zu, src misalignment %u, dst misalignment %u, "
                             "aux %llu, count %llu, byte %zu)",
                             k->name, what, n, si, di, (unsigned long long)aux,
                             (unsigned long long)count, at);
                    goto out;
                }
            }
        }
        if (memcmp(src, orig, span)) {
            snprintf(msg, msglen, "%s: modified the source (size %zu)", k->name, n);
            goto out;
        }
    }
    rc = 0;
out:
    free(src);
    free(dst);
    free(orig);
    free(want);
    free(poison);
    return rc;
}
