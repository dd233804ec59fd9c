/* Store-to-load forwarding kernels (seed 003, "A tale of two copies").
 *
 * A load that reads bytes an older, not yet committed store wrote can take
 * them straight from the store buffer ("store forwarding").  When it cannot
 * -- the load needs bytes from two stores, or more bytes than one store
 * wrote -- it waits until the stores reach L1 (Intel 64 and IA-32
 * Architectures Optimization Reference Manual, "Store Forwarding"; Agner Fog,
 * "The microarchitecture of Intel, AMD and VIA CPUs", store forwarding
 * stalls).  These kernels make that round trip the critical path.
 *
 * Three families:
 *
 *   sf_entry_{copy,append,regs}_w<W>  an S-byte entry copied with moves of
 *       W bytes whose offsets come from a shape table built in Python
 *       (store_forward.copy_shape), so the bytes each move covers are the
 *       ones Python computed and tests check.
 *   sf_fwd_s<S>_l<L>  one S-byte store at the start of a cache line, then
 *       one L-byte load at offset `aux`, whose result is the next store's
 *       data: a dependent store->load loop.
 *   sf_two_stores_16  the seed's exact shape: two 16-byte stores (second one
 *       at offset d) then one 16-byte load.
 *
 * All loops are inline asm, so the compiler can neither merge the moves nor
 * turn them into a memcpy call. */
#include <string.h>
#include "../core.h"
#include "../layout_shared.h"

/* ---------------------------------------------------------------------- */
/* Entry copies driven by a shape table                                    */

/* SF_MAX_MOVES, SF_SLOT_BYTES: layout_shared.h */

/* The shape table in the src buffer: n, then n (offset, width) pairs.
 * Packed: the same layout (no padding either way), but the table may sit
 * at any address. */
struct __attribute__((packed)) sf_move {
    uint32_t offset, width;
};
struct __attribute__((packed)) sf_shape {
    uint32_t n;
    struct sf_move move[SF_MAX_MOVES];
};
_Static_assert(sizeof(struct sf_shape) == 4 + 8 * SF_MAX_MOVES, "shape table layout");

/* Offsets of the moves, or -1 when the table does not describe a copy of
 * exactly `size` bytes with `width`-byte moves (the Python side validated it
 * already; this keeps a bad table from writing outside the slot). */
static int sf_read_shape(const struct mfx_args *a, uint32_t width, uint64_t off[SF_MAX_MOVES])
{
    const struct sf_shape *sh = (const struct sf_shape *)a->src;
    uint32_t end = 0;
    if (!sh || sh->n > SF_MAX_MOVES || a->size > SF_SLOT_BYTES || a->aux < SF_SLOT_BYTES)
        return -1;
    for (uint32_t k = 0; k < SF_MAX_MOVES; k++)
        off[k] = 0;
    for (uint32_t k = 0; k < sh->n; k++) {
        const struct sf_move *m = &sh->move[k];
        if (m->width != width || m->offset + m->width > a->size)
            return -1;
        off[k] = m->offset;
        if (m->offset + m->width > end)
            end = m->offset + m->width;
    }
    if (end != a->size)
        return -1;
    return (int)sh->n;
}

/* One move's load into data register k from base register p, and its store
 * from register k to base q, per move width.  Offsets live in registers
 * o0..o3.  GPR widths use the [d0]..[d3] operands; vector widths use
 * xmm/ymm/zmm 0..3. */
#define MOVE_ADDR(p, k) "(%[" p "],%[o" #k "])"
#define LD_1(k, p) "movzbl " MOVE_ADDR(p, k) ",%k[d" #k "]\n\t"
#define ST_1(k, q) "movb %b[d" #k "]," MOVE_ADDR(q, k) "\n\t"
#define LD_2(k, p) "movzwl " MOVE_ADDR(p, k) ",%k[d" #k "]\n\t"
#define ST_2(k, q) "movw %w[d" #k "]," MOVE_ADDR(q, k) "\n\t"
#define LD_4(k, p) "movl " MOVE_ADDR(p, k) ",%k[d" #k "]\n\t"
#define ST_4(k, q) "movl %k[d" #k "]," MOVE_ADDR(q, k) "\n\t"
#define LD_8(k, p) "movq " MOVE_ADDR(p, k) ",%q[d" #k "]\n\t"
#define ST_8(k, q) "movq %q[d" #k "]," MOVE_ADDR(q, k) "\n\t"
#define LD_16(k, p) "movdqu " MOVE_ADDR(p, k) ",%%xmm" #k "\n\t"
#define ST_16(k, q) "movdqu %%xmm" #k "," MOVE_ADDR(q, k) "\n\t"
#define LD_32(k, p) "vmovdqu " MOVE_ADDR(p, k) ",%%ymm" #k "\n\t"
#define ST_32(k, q) "vmovdqu %%ymm" #k "," MOVE_ADDR(q, k) "\n\t"
#define LD_64(k, p) "vmovdqu64 " MOVE_ADDR(p, k) ",%%zmm" #k "\n\t"
#define ST_64(k, q) "vmovdqu64 %%zmm" #k "," MOVE_ADDR(q, k) "\n\t"

/* All loads first, then all stores, in ascending offset order: what
 * compilers emit for a small fixed-size copy (and memmove-safe). */
#define LOADS_1(W, p) LD_##W(0, p)
#define LOADS_2(W, p) LOADS_1(W, p) LD_##W(1, p)
#define LOADS_3(W, p) LOADS_2(W, p) LD_##W(2, p)
#define LOADS_4(W, p) LOADS_3(W, p) LD_##W(3, p)
#define STORES_1(W, q) ST_##W(0, q)
#define STORES_2(W, q) STORES_1(W, q) ST_##W(1, q)
#define STORES_3(W, q) STORES_2(W, q) ST_##W(2, q)
#define STORES_4(W, q) STORES_3(W, q) ST_##W(3, q)
#define COPY(W, N, p, q) LOADS_##N(W, p) STORES_##N(W, q)

#define ENTRY_OPERANDS                                                              \
    [d0] "=&r"(d0), [d1] "=&r"(d1), [d2] "=&r"(d2), [d3] "=&r"(d3)
#define ENTRY_INPUTS                                                                \
    [a] "r"(slot_a), [b] "r"(slot_b), [c] "r"(slot_c), [o0] "r"(off[0]),            \
        [o1] "r"(off[1]), [o2] "r"(off[2]), [o3] "r"(off[3])
#define ENTRY_CLOBBERS "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3"

/* Copy kernel: ping-pong A -> B -> A ...  Each copy's loads read what the
 * previous copy's stores wrote, so one entry costs one store->load round
 * trip; the shape decides whether that round trip forwards. */
#define PINGPONG(W, N, TAIL)                                                        \
    do {                                                                            \
        if (pairs)                                                                  \
            __asm__ __volatile__("1:\n\t" COPY(W, N, "a", "b") COPY(W, N, "b", "a")  \
                                 "dec %[n]\n\t"                                     \
                                 "jnz 1b\n\t" TAIL                                  \
                                 : [n] "+r"(pairs), ENTRY_OPERANDS                  \
                                 : ENTRY_INPUTS                                     \
                                 : ENTRY_CLOBBERS);                                 \
        if (odd)                                                                    \
            __asm__ __volatile__(COPY(W, N, "a", "b") TAIL                          \
                                 : ENTRY_OPERANDS                                   \
                                 : ENTRY_INPUTS                                     \
                                 : ENTRY_CLOBBERS);                                 \
    } while (0)

/* Append kernel: the seed's benchmark loop.  The constant entry A is copied
 * to a temporary B, then B to the destination C; nothing depends on the
 * previous iteration except through B's memory. */
#define APPEND(W, N, TAIL)                                                          \
    __asm__ __volatile__("1:\n\t" COPY(W, N, "a", "b") COPY(W, N, "b", "c")          \
                         "dec %[n]\n\t"                                             \
                         "jnz 1b\n\t" TAIL                                          \
                         : [n] "+r"(count), ENTRY_OPERANDS                          \
                         : ENTRY_INPUTS                                             \
                         : ENTRY_CLOBBERS)

/* Registers kernel: the seed's fix.  The entry is loaded into registers once
 * and stored to C with the same moves every iteration; nothing reads it back. */
#define REGS(W, N, TAIL)                                                            \
    __asm__ __volatile__(LOADS_##N(W, "a") "1:\n\t" STORES_##N(W, "c")             \
                         "dec %[n]\n\t"                                             \
                         "jnz 1b\n\t" TAIL                                          \
                         : [n] "+r"(count), ENTRY_OPERANDS                          \
                         : ENTRY_INPUTS                                             \
                         : ENTRY_CLOBBERS)

#define BY_MOVES(BODY, W, TAIL)                                                     \
    switch (n_moves) {                                                              \
    case 1: BODY(W, 1, TAIL); break;                                                \
    case 2: BODY(W, 2, TAIL); break;                                                \
    case 3: BODY(W, 3, TAIL); break;                                                \
    case 4: BODY(W, 4, TAIL); break;                                                \
    default: break;                                                                 \
    }

#define ENTRY_PROLOGUE(W)                                                           \
    uint64_t off[SF_MAX_MOVES];                                                     \
    int n_moves = sf_read_shape(a, W, off);                                         \
    char *slot_a = (char *)a->dst, *slot_b = slot_a + a->aux,                       \
         *slot_c = slot_a + 2 * a->aux;                                             \
    uint64_t count = a->count, pairs = count / 2, odd = count & 1, result;          \
    uint64_t d0, d1, d2, d3;                                                        \
    (void)pairs;                                                                    \
    (void)odd;                                                                      \
    if (n_moves < 0)                                                                \
        return UINT64_MAX;                                                          \
    if (!count)                                                                     \
        return 0;

/* The result reads the first bytes the copy produced, so it is used. */
#define ENTRY_RESULT(slot)                                                          \
    result = 0;                                                                     \
    memcpy(&result, slot, a->size < 8 ? a->size : 8);                               \
    return result;

#define ENTRY_KERNELS(W, ATTR, TAIL)                                                \
    static ATTR uint64_t sf_entry_copy_w##W(const struct mfx_args *a)               \
    {                                                                               \
        ENTRY_PROLOGUE(W)                                                           \
        BY_MOVES(PINGPONG, W, TAIL)                                                 \
        ENTRY_RESULT(slot_b)                                                        \
    }                                                                               \
    static ATTR uint64_t sf_entry_append_w##W(const struct mfx_args *a)             \
    {                                                                               \
        ENTRY_PROLOGUE(W)                                                           \
        BY_MOVES(APPEND, W, TAIL)                                                   \
        ENTRY_RESULT(slot_c)                                                        \
    }                                                                               \
    static ATTR uint64_t sf_entry_regs_w##W(const struct mfx_args *a)               \
    {                                                                               \
        ENTRY_PROLOGUE(W)                                                           \
        BY_MOVES(REGS, W, TAIL)                                                     \
        ENTRY_RESULT(slot_c)                                                        \
    }

#define NO_ATTR
#define ATTR_AVX __attribute__((target("avx")))
#define ATTR_AVX512 __attribute__((target("avx512f")))
/* vzeroupper after 256/512-bit code avoids SSE/AVX transition penalties in
 * whatever runs next (Intel optimization manual, "AVX-SSE transitions"). */
#define VZ "vzeroupper\n\t"

ENTRY_KERNELS(1, NO_ATTR, "")
ENTRY_KERNELS(2, NO_ATTR, "")
ENTRY_KERNELS(4, NO_ATTR, "")
ENTRY_KERNELS(8, NO_ATTR, "")
ENTRY_KERNELS(16, NO_ATTR, "")
ENTRY_KERNELS(32, ATTR_AVX, VZ)
ENTRY_KERNELS(64, ATTR_AVX512, VZ)

/* ---------------------------------------------------------------------- */
/* The forwarding matrix: one store, one load, dependent through the data   */

/* Store templates (from %[v] for general registers, from xmm0/ymm0/zmm0
 * for vectors) and load templates (into the same register), by encoding:
 * G general registers, X SSE, V VEX, E EVEX.  A kernel's encoding is that
 * of its widest access; 16-byte accesses use SSE only in kernels whose
 * widest access is 16 bytes. */
#define ST_G_1 "movb %b[v],(%[st])\n\t"
#define ST_G_2 "movw %w[v],(%[st])\n\t"
#define ST_G_4 "movl %k[v],(%[st])\n\t"
#define ST_G_8 "movq %q[v],(%[st])\n\t"
#define LD_G_1 "movzbl (%[ld]),%k[v]\n\t"
#define LD_G_2 "movzwl (%[ld]),%k[v]\n\t"
#define LD_G_4 "movl (%[ld]),%k[v]\n\t"
#define LD_G_8 "movq (%[ld]),%q[v]\n\t"
#define ST_X_16 "movdqu %%xmm0,(%[st])\n\t"
#define LD_X_16 "movdqu (%[ld]),%%xmm0\n\t"
#define ST_V_16 "vmovdqu %%xmm0,(%[st])\n\t"
#define LD_V_16 "vmovdqu (%[ld]),%%xmm0\n\t"
#define ST_V_32 "vmovdqu %%ymm0,(%[st])\n\t"
#define LD_V_32 "vmovdqu (%[ld]),%%ymm0\n\t"
#define ST_E_16 ST_V_16
#define LD_E_16 LD_V_16
#define ST_E_32 ST_V_32
#define LD_E_32 LD_V_32
#define ST_E_64 "vmovdqu64 %%zmm0,(%[st])\n\t"
#define LD_E_64 "vmovdqu64 (%[ld]),%%zmm0\n\t"

/* Moves between the register classes (zero-extending into the vector), for
 * pairs whose store and load sizes live in different classes; the move is
 * on the dependency chain, the same for every offset of the pair. */
#define TO_VEC_X "movq %q[v],%%xmm0\n\t"
#define TO_GPR_X "movq %%xmm0,%q[v]\n\t"
#define TO_VEC_V "vmovq %q[v],%%xmm0\n\t"
#define TO_GPR_V "vmovq %%xmm0,%q[v]\n\t"
#define TO_VEC_E TO_VEC_V
#define TO_GPR_E TO_GPR_V
#define VZ_X ""
#define VZ_V VZ
#define VZ_E VZ
#define ATTR_G
#define ATTR_X
#define ATTR_V ATTR_AVX
#define ATTR_E ATTR_AVX512
#define ISA_G ""
#define ISA_X "sse2"
#define ISA_V "avx"
#define ISA_E "avx512f"

#define FWD_FN(S, L, ENC, PRE, STORE, LOAD, CONV, POST)                               \
    static ATTR_##ENC uint64_t sf_fwd_s##S##_l##L(const struct mfx_args *a)          \
    {                                                                               \
        char *st = (char *)a->dst;                                                  \
        const char *ld = st + a->aux;                                               \
        uint64_t v = a->value, n = a->count;                                        \
        if (!n)                                                                     \
            return 0;                                                               \
        __asm__ __volatile__(PRE "1:\n\t" STORE LOAD CONV "dec %[n]\n\t"            \
                                 "jnz 1b\n\t" POST                                  \
                             : [v] "+r"(v), [n] "+r"(n)                             \
                             : [st] "r"(st), [ld] "r"(ld)                           \
                             : "memory", "cc", "xmm0");                             \
        return v;                                                                   \
    }

/* By register class of the store (first letter) and of the load (second). */
#define FWD_GG(S, L) FWD_FN(S, L, G, "", ST_G_##S, LD_G_##L, "", "")
#define FWD_GV(S, L, ENC)                                                             \
    FWD_FN(S, L, ENC, "", ST_G_##S, LD_##ENC##_##L, TO_GPR_##ENC, VZ_##ENC)
#define FWD_VG(S, L, ENC)                                                             \
    FWD_FN(S, L, ENC, TO_VEC_##ENC, ST_##ENC##_##S, LD_G_##L, TO_VEC_##ENC, VZ_##ENC)
#define FWD_VV(S, L, ENC)                                                             \
    FWD_FN(S, L, ENC, TO_VEC_##ENC, ST_##ENC##_##S, LD_##ENC##_##L, "",               \
           TO_GPR_##ENC VZ_##ENC)

FWD_GG(1, 1) FWD_GG(1, 2) FWD_GG(1, 4) FWD_GG(1, 8)
FWD_GV(1, 16, X) FWD_GV(1, 32, V) FWD_GV(1, 64, E)
FWD_GG(2, 1) FWD_GG(2, 2) FWD_GG(2, 4) FWD_GG(2, 8)
FWD_GV(2, 16, X) FWD_GV(2, 32, V) FWD_GV(2, 64, E)
FWD_GG(4, 1) FWD_GG(4, 2) FWD_GG(4, 4) FWD_GG(4, 8)
FWD_GV(4, 16, X) FWD_GV(4, 32, V) FWD_GV(4, 64, E)
FWD_GG(8, 1) FWD_GG(8, 2) FWD_GG(8, 4) FWD_GG(8, 8)
FWD_GV(8, 16, X) FWD_GV(8, 32, V) FWD_GV(8, 64, E)
FWD_VG(16, 1, X) FWD_VG(16, 2, X) FWD_VG(16, 4, X) FWD_VG(16, 8, X)
FWD_VV(16, 16, X) FWD_VV(16, 32, V) FWD_VV(16, 64, E)
FWD_VG(32, 1, V) FWD_VG(32, 2, V) FWD_VG(32, 4, V) FWD_VG(32, 8, V)
FWD_VV(32, 16, V) FWD_VV(32, 32, V) FWD_VV(32, 64, E)
FWD_VG(64, 1, E) FWD_VG(64, 2, E) FWD_VG(64, 4, E) FWD_VG(64, 8, E)
FWD_VV(64, 16, E) FWD_VV(64, 32, E) FWD_VV(64, 64, E)

/* The seed's shape: 16 bytes stored at 0 and at d = aux & 0xff, then 16
 * bytes loaded at (aux >> 8) & 0xff; the load feeds both next stores. */
static uint64_t sf_two_stores_16(const struct mfx_args *a)
{
    char *st = (char *)a->dst, *st2 = st + (a->aux & 0xff);
    const char *ld = st + ((a->aux >> 8) & 0xff);
    uint64_t v = a->value, n = a->count;
    if (!n)
        return 0;
    __asm__ __volatile__("movq %q[v],%%xmm0\n\t"
                         "1:\n\t"
                         "movdqu %%xmm0,(%[st])\n\t"
                         "movdqu %%xmm0,(%[st2])\n\t"
                         "movdqu (%[ld]),%%xmm0\n\t"
                         "dec %[n]\n\t"
                         "jnz 1b\n\t"
                         "movq %%xmm0,%q[v]\n\t"
                         : [v] "+r"(v), [n] "+r"(n)
                         : [st] "r"(st), [st2] "r"(st2), [ld] "r"(ld)
                         : "memory", "cc", "xmm0");
    return v;
}

/* ---------------------------------------------------------------------- */
/* Footprints.  Entry kernels: the shape table at src, and slots A = dst,
 * B = dst + aux (C = dst + 2 aux) of `size` bytes each.  Matrix kernels:
 * the S-byte store at dst and the L-byte load at dst + aux.  The seed's
 * shape: 16 bytes at dst, at dst + (aux & 0xff) and at dst + ((aux >> 8) & 0xff). */

static void sf_entry_two_slots_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    f->dst_bytes = mfx_sat_add(mfx_sat_u64(a->aux), a->size);
    f->src_bytes = sizeof(struct sf_shape);
}

static void sf_entry_three_slots_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t aux = mfx_sat_u64(a->aux);
    f->dst_bytes = mfx_sat_add(mfx_sat_add(aux, aux), a->size);
    f->src_bytes = sizeof(struct sf_shape);
}

#define FWD_FOOTPRINT(S, L)                                                             \
    static void sf_fwd_s##S##_l##L##_footprint(const struct mfx_args *a,               \
                                               struct mfx_footprint *f)                \
    {                                                                               \
        f->dst_bytes = mfx_max(S, mfx_sat_add(mfx_sat_u64(a->aux), L));              \
    }
#define FWD_FOOTPRINTS(S)                                                               \
    FWD_FOOTPRINT(S, 1) FWD_FOOTPRINT(S, 2) FWD_FOOTPRINT(S, 4) FWD_FOOTPRINT(S, 8)     \
    FWD_FOOTPRINT(S, 16) FWD_FOOTPRINT(S, 32) FWD_FOOTPRINT(S, 64)
FWD_FOOTPRINTS(1) FWD_FOOTPRINTS(2) FWD_FOOTPRINTS(4) FWD_FOOTPRINTS(8)
FWD_FOOTPRINTS(16) FWD_FOOTPRINTS(32) FWD_FOOTPRINTS(64)

static void sf_two_stores_16_footprint(const struct mfx_args *a, struct mfx_footprint *f)
{
    size_t second = (size_t)(a->aux & 0xff), load = (size_t)((a->aux >> 8) & 0xff);
    f->dst_bytes = mfx_max(second, load) + 16;
}

/* ---------------------------------------------------------------------- */
/* The table.  Entry rows: traffic is the entry's S bytes (size) per copy.
 * Matrix rows: S bytes stored and L loaded per round trip (fixed). */

#define ENTRY_ROWS(W, ISA)                                                              \
    {                                                                                   \
        .name = "sf_entry_copy_w" #W, .group = "storefwd", .isa = ISA,                  \
        .fn = sf_entry_copy_w##W, .footprint = sf_entry_two_slots_footprint,            \
        .read_per_byte = 1, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,     \
        .ops_per_iter = 1, .op = "entry",                                               \
        .doc = "S-byte entry copied A->B->A with " #W "-byte moves of a shape table; "  \
               "each copy reads the previous one",                                      \
    },                                                                                  \
    {                                                                                   \
        .name = "sf_entry_append_w" #W, .group = "storefwd", .isa = ISA,                \
        .fn = sf_entry_append_w##W, .footprint = sf_entry_three_slots_footprint,        \
        .read_per_byte = 2, .write_per_byte = 2, .read_fixed = 0, .write_fixed = 0,     \
        .ops_per_iter = 1, .op = "entry",                                               \
        .doc = "seed loop: entry A copied to temp B then B to C with " #W "-byte moves", \
    },                                                                                  \
    {                                                                                   \
        .name = "sf_entry_regs_w" #W, .group = "storefwd", .isa = ISA,                  \
        .fn = sf_entry_regs_w##W, .footprint = sf_entry_three_slots_footprint,          \
        .read_per_byte = 0, .write_per_byte = 1, .read_fixed = 0, .write_fixed = 0,     \
        .ops_per_iter = 1, .op = "entry",                                               \
        .doc = "seed fix: entry held in registers, stored to C with " #W "-byte moves, " \
               "no reload",                                                             \
    }

#define FWD_ROW(S, L, ENC)                                                              \
    {                                                                                   \
        .name = "sf_fwd_s" #S "_l" #L, .group = "storefwd", .isa = ISA_##ENC,           \
        .fn = sf_fwd_s##S##_l##L, .footprint = sf_fwd_s##S##_l##L##_footprint,          \
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = L, .write_fixed = S,     \
        .ops_per_iter = 1, .op = "roundtrip",                                           \
        .doc = #S "-byte store then dependent " #L "-byte load at offset aux",          \
    }
#define FWD_ROWS_G(S)                                                                   \
    FWD_ROW(S, 1, G), FWD_ROW(S, 2, G), FWD_ROW(S, 4, G), FWD_ROW(S, 8, G),             \
        FWD_ROW(S, 16, X), FWD_ROW(S, 32, V), FWD_ROW(S, 64, E)

MFX_KERNEL_TABLE(storefwd) = {
    ENTRY_ROWS(1, ""),
    ENTRY_ROWS(2, ""),
    ENTRY_ROWS(4, ""),
    ENTRY_ROWS(8, ""),
    ENTRY_ROWS(16, "sse2"),
    ENTRY_ROWS(32, "avx"),
    ENTRY_ROWS(64, "avx512f"),
    FWD_ROWS_G(1),
    FWD_ROWS_G(2),
    FWD_ROWS_G(4),
    FWD_ROWS_G(8),
    FWD_ROW(16, 1, X), FWD_ROW(16, 2, X), FWD_ROW(16, 4, X), FWD_ROW(16, 8, X),
    FWD_ROW(16, 16, X), FWD_ROW(16, 32, V), FWD_ROW(16, 64, E),
    FWD_ROW(32, 1, V), FWD_ROW(32, 2, V), FWD_ROW(32, 4, V), FWD_ROW(32, 8, V),
    FWD_ROW(32, 16, V), FWD_ROW(32, 32, V), FWD_ROW(32, 64, E),
    FWD_ROW(64, 1, E), FWD_ROW(64, 2, E), FWD_ROW(64, 4, E), FWD_ROW(64, 8, E),
    FWD_ROW(64, 16, E), FWD_ROW(64, 32, E), FWD_ROW(64, 64, E),
    {
        .name = "sf_two_stores_16", .group = "storefwd", .isa = "sse2",
        .fn = sf_two_stores_16, .footprint = sf_two_stores_16_footprint,
        .read_per_byte = 0, .write_per_byte = 0, .read_fixed = 16, .write_fixed = 32,
        .ops_per_iter = 1, .op = "roundtrip",
        .doc = "16-byte stores at 0 and aux&0xff, then a dependent 16-byte load at (aux>>8)&0xff",
    },
    {0},
};
