/* The layouts the Python side writes or reads beside the kernels, in one
 * place: the core exports every value here as _core.layout (module.c), and
 * the experiments read them from there (memfx.lab.lab.core_layout()), so
 * that neither side keeps a copy to drift.  Add a constant here and to
 * MFX_LAYOUT below, never to one side alone. */
#ifndef MFX_LAYOUT_SHARED_H
#define MFX_LAYOUT_SHARED_H

/* kernels/sharing.c: the shared area of a team's call (byte offsets) */
#define SH_MAX_THREADS 64
#define SH_HEADER 0
#define SH_BARRIER 128     /* u64: threads arrived */
#define SH_STOP 256        /* u64: thread 0 finished (writers of at_remote stop) */
#define SH_CPUS 512
#define SH_SLOTS 1024
#define SH_SLOT_BYTES 128
#define SH_COUNTERS 12288
#define SH_MAX_DISTANCE 65536
/* xchg tags each value with the thread (bits 40..) and the operation's
 * number (1..count): the variable ends holding some thread's last value. */
#define XCHG_TAG_SHIFT 40

/* kernels/storefwd.c: the shape table of an entry copy */
#define SF_MAX_MOVES 4
#define SF_SLOT_BYTES 64 /* an entry is at most 64 bytes */

/* name, value: what module.c exports */
#define MFX_LAYOUT(X)                                                                  \
    X(SH_MAX_THREADS) X(SH_HEADER) X(SH_BARRIER) X(SH_STOP) X(SH_CPUS) X(SH_SLOTS)     \
    X(SH_SLOT_BYTES) X(SH_COUNTERS) X(SH_MAX_DISTANCE) X(XCHG_TAG_SHIFT)               \
    X(SF_MAX_MOVES) X(SF_SLOT_BYTES)

#endif
