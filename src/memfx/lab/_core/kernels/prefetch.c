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

/* ---- repeated: one address, prefetches back to back ------------------- */

/* dst: one 8-byte target address, loaded once and kept in a register; count
 * prefetches of it, eight per loop trip.  The plain loop a probe writes: the
 * prefetches are nearly all it issues, so what a target costs beyond an L1
 * line is not hidden behind other work.  pf_tput_* spends a load and an add
 * on each prefetch, about as long as the page walk a prefetch of a
 * not-present page starts (no TLB entry is kept for one: SDM Vol. 3A,
 * 4.10.2.2), so there that walk overlaps the loop and looks free.  The
 * baseline runs the same trips without the prefetches.  Returns count times
 * the address (the sum of the addresses prefetched). */
#define PF_REP(NAME, PF)                                                         \
    static uint64_t NAME(const struct mfx_args *a)                               \
    {                                                                            \
        if (a->size < 8)                                                         \
            return 0;                                                            \
        uint64_t p = *(const pf_u64 *)a->dst;                                    \
        uint64_t trips = a->count / 8, rest = a->count % 8;                      \
        for (uint64_t k = 0; k < trips; k++) {                                   \
            PF(p); PF(p); PF(p); PF(p); PF(p); PF(p); PF(p); PF(p);              \
        }                                                                        \
        for (uint64_t k = 0; k < rest; k++)                                      \
            PF(p);                                                               \
        return p * a->count;                                                     \
    }

PF_REP(pf_rep_none, PF_NONE)
PF_REP(pf_rep_t0, PF_T0)
PF_REP(pf_rep_t1, PF_T1)
PF_REP(pf_rep_t2, PF_T2)
PF_REP(pf_rep_nta, PF_NTA)
PF_REP(pf_rep_w, PF_W)

/* The address, read once. */
static void rep_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    if (a->size >= 8)
        f->dst_bytes = 8;
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
 * vs weak prefetch.  Every prefetch stays inside the region.  Returns the
 * sum over the visits of (prefetched address - base) * (loaded address -
 * base), i.e. stride^2 * i * j (i = element loaded, j = element
 * prefetched), computed from the pointers handed to the two instructions, so
 * a test can check that the prefetch went d elements ahead; the baseline
 * does the same arithmetic without the prefetch. */
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
            const char *pa = base + (size_t)j * stride;                          \
            const char *la = base + (size_t)i * stride;                          \
            PF(pa);                                                              \
            uint64_t v;                                                          \
            __asm__ __volatile__("mov (%1), %0" : "=r"(v) : "r"(la) : "memory"); \
            acc += v;                                                            \
            /* from the very pointers the prefetch and the load were given */    \
            check += (uint64_t)(pa - base) * (uint64_t)(la - base);              \
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

/* ---- TLB priming: a dependent walk over pages in random order ----------- */

/* src: a region of n = size / value pages (value = the page size, 4096);
 * dst: n uint32 page indices (the visiting order, a permutation), then an
 * 8-byte cursor (written back, as above).  Step k loads one word of page
 * order[i] at an address that depends on the previous load (v & 0 added),
 * so the loads are serialised and the out-of-order core cannot run ahead to
 * the next page by itself; the prefetch of page order[(i + d) mod n] (d =
 * (int64)aux, -1 = the page just visited, the control) waits for the same
 * load (its address has v & 0 added) and so starts that page's walk and
 * line fill d steps before the load that needs it -- if
 * the CPU does not drop a prefetch whose translation is missing (seed 001's
 * strong vs weak prefetch).  With independent loads (pf_stride_*) the core
 * overlaps the page walks itself and a prefetch has nothing to add: a
 * 4 KiB-stride sum measured 6 ns per page here with or without it.
 * Returns the sum of (prefetched - base) * (loaded - base) over the steps,
 * from the pointers the two instructions were given.  Each index is taken
 * mod n, so whatever the table holds, every load stays inside the region. */
typedef uint32_t __attribute__((aligned(1))) pf_u32;

#define PF_PAGES(NAME, PF)                                                       \
    static uint64_t NAME(const struct mfx_args *a)                               \
    {                                                                            \
        const char *base = (const char *)a->src;                                 \
        size_t stride = (size_t)a->value;                                        \
        if (stride < 8 || stride % 8)                                            \
            return 0;                                                            \
        int64_t n = (int64_t)(a->size / stride), d = (int64_t)a->aux;            \
        if (n == 0)                                                              \
            return 0;                                                            \
        const pf_u32 *order = (const pf_u32 *)a->dst;                            \
        pf_u64 *cursor = (pf_u64 *)((char *)a->dst + (size_t)n * 4);             \
        d %= n;                                                                  \
        if (d < 0)                                                               \
            d += n;                                                              \
        int64_t i = (int64_t)(*cursor % (uint64_t)n), j = (i + d) % n;           \
        uint64_t check = 0, v = 0;                                               \
        for (uint64_t k = 0; k < a->count; k++) {                                \
            const char *la = base + (size_t)(order[i] % (uint64_t)n) * stride;   \
            const char *next = base + (size_t)(order[j] % (uint64_t)n) * stride; \
            uint64_t pa;                                                         \
            __asm__ __volatile__("and $0, %0\n\t"                                \
                                 "add %1, %0\n\t"                                \
                                 "mov (%0), %0"                                  \
                                 : "+&r"(v)                                      \
                                 : "r"(la)                                       \
                                 : "memory", "cc");                              \
            /* the prefetch waits for this step's load: without that, the */     \
            /* core issues the prefetches of the steps in its window early, */    \
            /* and even a prefetch "behind" ran ahead (5x faster here) */        \
            __asm__ __volatile__("mov %1, %0\n\t"                                \
                                 "and $0, %0\n\t"                                \
                                 "add %2, %0"                                    \
                                 : "=&r"(pa)                                     \
                                 : "r"(v), "r"(next)                             \
                                 : "cc");                                        \
            PF(pa);                                                              \
            check += (pa - (uint64_t)(uintptr_t)base) * (uint64_t)(la - base);   \
            if (++i == n)                                                        \
                i = 0;                                                           \
            if (++j == n)                                                        \
                j = 0;                                                           \
        }                                                                        \
        __asm__ __volatile__("" ::"r"(v));                                       \
        *cursor = (uint64_t)i;                                                   \
        return check;                                                            \
    }

PF_PAGES(pf_pages_none, PF_NONE)
PF_PAGES(pf_pages_t0, PF_T0)

/* The pages, and the order table with its cursor. */
static void pages_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t stride = (size_t)a->value;
    if (stride < 8 || stride % 8)
        return;
    size_t n = a->size / stride;
    if (n == 0)
        return;
    f->src_bytes = n * stride;
    f->dst_bytes = mfx_sat_add(n > SIZE_MAX / 4 ? SIZE_MAX : n * 4, 8);
}

#define TPUT_ROW(NAME, ISA, DOC)                                                 \
    {                                                                            \
        .name = #NAME, .group = "prefetch", .isa = ISA, .fn = NAME,              \
        .footprint = tput_footprint,                                             \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 8,                \
        .write_fixed = 0, .ops_per_iter = 1, .op = "prefetch", .doc = DOC,       \
    }
#define REP_ROW(NAME, ISA, DOC)                                                  \
    {                                                                            \
        .name = #NAME, .group = "prefetch", .isa = ISA, .fn = NAME,              \
        .footprint = rep_footprint,                                              \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 0,                \
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

MFX_KERNEL_TABLE(prefetch) = {
    TPUT_ROW(pf_tput_none, "", "baseline: read each target address, no prefetch"),
    TPUT_ROW(pf_tput_t0, "", "prefetcht0 of each target address, independent"),
    TPUT_ROW(pf_tput_t1, "", "prefetcht1 of each target address, independent"),
    TPUT_ROW(pf_tput_t2, "", "prefetcht2 of each target address, independent"),
    TPUT_ROW(pf_tput_nta, "", "prefetchnta of each target address, independent"),
    TPUT_ROW(pf_tput_w, "prefetchw", "prefetchw of each target address, independent"),
    REP_ROW(pf_rep_none, "", "baseline: the repeated loop's trips, the address in a register, no prefetch"),
    REP_ROW(pf_rep_t0, "", "prefetcht0 of one address in a register, 8 per loop trip"),
    REP_ROW(pf_rep_t1, "", "prefetcht1 of one address in a register, 8 per loop trip"),
    REP_ROW(pf_rep_t2, "", "prefetcht2 of one address in a register, 8 per loop trip"),
    REP_ROW(pf_rep_nta, "", "prefetchnta of one address in a register, 8 per loop trip"),
    REP_ROW(pf_rep_w, "prefetchw", "prefetchw of one address in a register, 8 per loop trip"),
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
    {
        .name = "pf_pages_none", .group = "prefetch", .isa = "", .fn = pf_pages_none,
        .footprint = pages_footprint,
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 12, .write_fixed = 0,
        .ops_per_iter = 1, .op = "page",
        .doc = "dependent load of one word per page (value bytes), pages in the order dst gives",
    },
    {
        .name = "pf_pages_t0", .group = "prefetch", .isa = "", .fn = pf_pages_t0,
        .footprint = pages_footprint,
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 12, .write_fixed = 0,
        .ops_per_iter = 1, .op = "page",
        .doc = "dependent page walk with a prefetcht0 of the page aux steps ahead in dst's order",
    },
    {0},
};
