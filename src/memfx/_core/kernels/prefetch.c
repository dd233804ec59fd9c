/* Software prefetch kernels (seed 001, "Strong prefetch": on an UltraSPARC
 * IV+ a strong prefetch of address 0 trapped into the kernel; Drepper 6.3.2
 * "Average with Prefetch" for the distance).
 *
 * x86-64 has prefetcht0/t1/t2/nta (SSE) and prefetchw (PRFCHW / 3DNow!
 * prefetch).  None of them faults: the SDM (Vol. 2B, PREFETCHh) calls them
 * hints that do not change program behaviour, so a prefetch of NULL, of a
 * kernel or of a non-canonical address is architecturally a no-op -- what
 * it costs is what these kernels measure.  An aarch64 PRFM row would be one
 * more PF_INSN below.
 *
 * Target addresses are data: an array of 64-bit addresses that the lab wrote
 * into a buffer (valid lines, NULL, holes it mapped and unmapped itself).
 * The binding bounds only the array; the addresses in it are never
 * dereferenced, only prefetched.  Every kernel returns a checksum of the
 * addresses it prefetched, so a test can check the right ones were. */
#include <stdint.h>
#include "../core.h"

/* The target array and the cursor sit where the caller put them: any
 * alignment is valid (an x86 load of them is, and UBSan agrees with this type). */
typedef uint64_t __attribute__((aligned(1))) pf_u64;

#define PF_T0(p) __asm__ __volatile__("prefetcht0 (%0)" ::"r"(p) : "memory")
#define PF_T1(p) __asm__ __volatile__("prefetcht1 (%0)" ::"r"(p) : "memory")
#define PF_T2(p) __asm__ __volatile__("prefetcht2 (%0)" ::"r"(p) : "memory")
#define PF_NTA(p) __asm__ __volatile__("prefetchnta (%0)" ::"r"(p) : "memory")
#define PF_W(p) __asm__ __volatile__("prefetchw (%0)" ::"r"(p) : "memory")
/* The baseline: the same loop, the address kept live, no prefetch. */
#define PF_NONE(p) __asm__ __volatile__("" ::"r"(p) : "memory")

/* ---- throughput: independent prefetches of the targets in src ---------- */

/* dst: n = size / 8 target addresses, then one 8-byte cursor: count
 * prefetches, cycling through the targets from the cursor, which is written
 * back, so the next call goes on where this one stopped (a sample of a
 * target set larger than the caches never re-prefetches what the previous
 * sample just brought in).  Returns the sum of the addresses prefetched. */
#define PF_TPUT(NAME, PF)                                                        \
    static uint64_t NAME(const struct mfx_args *a)                               \
    {                                                                            \
        pf_u64 *t = (pf_u64 *)a->dst;                                        \
        size_t n = a->size / 8;                                                  \
        uint64_t left = a->count, sum = 0;                                       \
        if (n == 0)                                                              \
            return 0;                                                            \
        size_t i = (size_t)(t[n] % n);                                           \
        while (left) {                                                           \
            size_t run = n - i < left ? n - i : (size_t)left;                    \
            for (size_t k = 0; k < run; k++) {                                   \
                uint64_t p = t[i + k];                                           \
                PF(p);                                                           \
                sum += p;                                                        \
            }                                                                    \
            i += run;                                                            \
            if (i == n)                                                          \
                i = 0;                                                           \
            left -= run;                                                         \
        }                                                                        \
        t[n] = i;                                                                \
        return sum;                                                              \
    }

PF_TPUT(pf_tput_none, PF_NONE)
PF_TPUT(pf_tput_t0, PF_T0)
PF_TPUT(pf_tput_t1, PF_T1)
PF_TPUT(pf_tput_t2, PF_T2)
PF_TPUT(pf_tput_nta, PF_NTA)
PF_TPUT(pf_tput_w, PF_W)

/* The targets and the cursor after them. */
static void tput_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    if (a->size >= 8)   /* with no target the kernel touches nothing */
        f->dst_bytes = mfx_sat_add(a->size / 8 * 8, 8);
}

/* ---- latency: a prefetch whose address depends on a dependent load ------ */

/* src: a pointer chain (link_chain; kept small so it stays in L1); dst: n =
 * size / 8 target addresses and a cursor, as above.  Each of the count
 * steps loads the next element and prefetches target[i] + (element & 0):
 * the prefetch waits for the load, and a prefetch that holds the load port
 * or the page walker delays the next step.  The time per step minus the
 * baseline's is the prefetch's cost on the critical path. */
#define PF_LAT(NAME, PF)                                                         \
    static uint64_t NAME(const struct mfx_args *a)                               \
    {                                                                            \
        void *const *p = (void *const *)a->src;                                  \
        pf_u64 *t = (pf_u64 *)a->dst;                                        \
        size_t n = a->size / 8;                                                  \
        uint64_t sum = 0;                                                        \
        if (n == 0)                                                              \
            return 0;                                                            \
        size_t i = (size_t)(t[n] % n);                                           \
        for (uint64_t k = 0; k < a->count; k++) {                                \
            uint64_t addr;                                                       \
            __asm__ __volatile__("mov (%1), %1\n\t"                              \
                                 "mov %1, %0\n\t"                                \
                                 "and $0, %0\n\t"                                \
                                 "add %2, %0"                                    \
                                 : "=&r"(addr), "+r"(p)                          \
                                 : "rm"(t[i])                                    \
                                 : "memory", "cc");                              \
            PF(addr);                                                            \
            sum += addr;                                                         \
            if (++i == n)                                                        \
                i = 0;                                                           \
        }                                                                        \
        t[n] = i;                                                                \
        return sum;                                                              \
    }

PF_LAT(pf_lat_none, PF_NONE)
PF_LAT(pf_lat_t0, PF_T0)
PF_LAT(pf_lat_t1, PF_T1)
PF_LAT(pf_lat_t2, PF_T2)
PF_LAT(pf_lat_nta, PF_NTA)
PF_LAT(pf_lat_w, PF_W)

static void lat_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    if (a->size < 8)    /* with no target the kernel returns at once */
        return;
    f->dst_bytes = mfx_sat_add(a->size / 8 * 8, 8);
    f->src_bytes = 8;
    f->chain_element_min = 8;
}

/* ---- the seed's loop: a list walk prefetching next->next ---------------- */

/* src: an element (the list's head) of a cyclic chain (link_chain).  The walk reads the chain as a NULL-terminated list that
 * ends where it meets `src` again: at each node it loads next and the node
 * after it (next->next, NULL for the last two nodes of the list, as in the
 * seed's loop near the list's end) and prefetches that unguarded, guarded by
 * `if (nn)`, or not at all.  count = nodes visited; returns the node it
 * stopped at (a chase's resume point). */
#define PF_LIST(NAME, BODY)                                                      \
    static uint64_t NAME(const struct mfx_args *a)                               \
    {                                                                            \
        void *const *head = (void *const *)a->src;                               \
        void *const *p = head;                                                   \
        for (uint64_t k = 0; k < a->count; k++) {                                \
            void *const *next, *const *nn;                                       \
            /* asm loads: a chain may sit at any alignment the caller chose */   \
            __asm__ __volatile__("mov (%1), %0" : "=r"(next) : "r"(p) : "memory"); \
            __asm__ __volatile__("mov (%1), %0" : "=r"(nn) : "r"(next) : "memory"); \
            /* branch-free: the list "ends" where the cycle meets head */        \
            uintptr_t target = (next == head || nn == head) ? 0 : (uintptr_t)nn; \
            BODY;                                                                \
            p = next;                                                            \
        }                                                                        \
        return (uint64_t)(uintptr_t)p;                                           \
    }

PF_LIST(pf_list_none, { PF_NONE(target); })
PF_LIST(pf_list_unguarded, { PF_T0(target); })
PF_LIST(pf_list_guarded, {
    if (target)
        PF_T0(target);
})

static void list_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    (void)a;
    f->src_bytes = 8;
    f->chain_element_min = 8;
}

/* ---- strided sum with a prefetch d elements ahead ---------------------- */

/* src: a region of size bytes read at stride `value` bytes (n = size /
 * stride elements, one 8-byte load each, wrapping); a prefetch (t0) of
 * element (i + d) mod n, d = (int64)aux, which may be negative (a prefetch
 * behind: the control for "does a prefetch ahead prime the TLB").  count =
 * elements visited, from the cursor in dst (8 bytes, written back: the next
 * call goes on where this one stopped).  Drepper 6.3.2; seed 001's strong
 * vs weak prefetch.  Every prefetch stays inside the region.  Returns the sum of i * j over the
 * visits (i = element loaded, j = element prefetched), which depends on d,
 * so a test can check the distance; the baseline does the same arithmetic
 * without the prefetch. */
#define PF_STRIDE(NAME, PF)                                                      \
    static uint64_t NAME(const struct mfx_args *a)                               \
    {                                                                            \
        const char *base = (const char *)a->src;                                 \
        size_t stride = (size_t)a->value;                                        \
        if (stride < 8 || stride % 8)                                            \
            return 0;                                                            \
        int64_t n = (int64_t)(a->size / stride), d = (int64_t)a->aux;            \
        uint64_t check = 0, acc = 0;                                             \
        if (n == 0)                                                              \
            return 0;                                                            \
        d %= n;                                                                  \
        if (d < 0)                                                               \
            d += n;                                                              \
        pf_u64 *cursor = (pf_u64 *)a->dst;                                   \
        int64_t i = (int64_t)(*cursor % (uint64_t)n), j = (i + d) % n;           \
        for (uint64_t k = 0; k < a->count; k++) {                                \
            PF(base + (size_t)j * stride);                                       \
            uint64_t v;                                                          \
            __asm__ __volatile__("mov (%1), %0"                                  \
                                 : "=r"(v)                                       \
                                 : "r"(base + (size_t)i * stride)                \
                                 : "memory");                                    \
            acc += v;                                                            \
            check += (uint64_t)i * (uint64_t)j;                                  \
            if (++i == n)                                                        \
                i = 0;                                                           \
            if (++j == n)                                                        \
                j = 0;                                                           \
        }                                                                        \
        __asm__ __volatile__("" ::"r"(acc));                                     \
        *cursor = (uint64_t)i;                                                   \
        return check;                                                            \
    }

PF_STRIDE(pf_stride_none, PF_NONE)
PF_STRIDE(pf_stride_t0, PF_T0)

static void stride_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t stride = (size_t)a->value;
    f->dst_bytes = 8;
    if (stride >= 8 && stride % 8 == 0)
        f->src_bytes = a->size / stride * stride;
}

#define TPUT_ROW(NAME, ISA, DOC)                                                 \
    {                                                                            \
        .name = #NAME, .group = "prefetch", .isa = ISA, .fn = NAME,              \
        .footprint = tput_footprint,                                             \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 8,                \
        .write_fixed = 0, .ops_per_iter = 1, .op = "prefetch", .doc = DOC,       \
    }
#define LAT_ROW(NAME, ISA, DOC)                                                  \
    {                                                                            \
        .name = #NAME, .group = "prefetch", .isa = ISA, .fn = NAME,              \
        .footprint = lat_footprint,                                              \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 16,               \
        .write_fixed = 0, .ops_per_iter = 1, .op = "step", .doc = DOC,           \
    }
#define LIST_ROW(NAME, DOC)                                                      \
    {                                                                            \
        .name = #NAME, .group = "prefetch", .isa = "", .fn = NAME,               \
        .footprint = list_footprint,                                             \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 16,               \
        .write_fixed = 0, .ops_per_iter = 1, .op = "node", .doc = DOC,           \
    }

const struct mfx_kernel mfx_kernels_prefetch[] = {
    TPUT_ROW(pf_tput_none, "", "baseline: read each target address, no prefetch"),
    TPUT_ROW(pf_tput_t0, "", "prefetcht0 of each target address, independent"),
    TPUT_ROW(pf_tput_t1, "", "prefetcht1 of each target address, independent"),
    TPUT_ROW(pf_tput_t2, "", "prefetcht2 of each target address, independent"),
    TPUT_ROW(pf_tput_nta, "", "prefetchnta of each target address, independent"),
    TPUT_ROW(pf_tput_w, "prefetchw", "prefetchw of each target address, independent"),
    LAT_ROW(pf_lat_none, "", "baseline: dependent L1 chase, target address computed, no prefetch"),
    LAT_ROW(pf_lat_t0, "", "dependent L1 chase with a prefetcht0 of a target on each step"),
    LAT_ROW(pf_lat_t1, "", "dependent L1 chase with a prefetcht1 of a target on each step"),
    LAT_ROW(pf_lat_t2, "", "dependent L1 chase with a prefetcht2 of a target on each step"),
    LAT_ROW(pf_lat_nta, "", "dependent L1 chase with a prefetchnta of a target on each step"),
    LAT_ROW(pf_lat_w, "prefetchw", "dependent L1 chase with a prefetchw of a target on each step"),
    LIST_ROW(pf_list_none, "list walk, next->next computed, no prefetch"),
    LIST_ROW(pf_list_unguarded, "list walk prefetching next->next unguarded (NULL at the end)"),
    LIST_ROW(pf_list_guarded, "list walk prefetching next->next only when it is not NULL"),
    {
        .name = "pf_stride_none", .group = "prefetch", .isa = "", .fn = pf_stride_none,
        .footprint = stride_footprint,
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 8, .write_fixed = 0,
        .ops_per_iter = 1, .op = "load",
        .doc = "one 8-byte load per stride (value) over the region, no prefetch",
    },
    {
        .name = "pf_stride_t0", .group = "prefetch", .isa = "", .fn = pf_stride_t0,
        .footprint = stride_footprint,
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 8, .write_fixed = 0,
        .ops_per_iter = 1, .op = "load",
        .doc = "one 8-byte load per stride over the region, prefetcht0 aux elements ahead",
    },
    {0},
};
