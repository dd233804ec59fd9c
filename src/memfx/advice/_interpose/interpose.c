/* memfx tune: an LD_PRELOAD interposer that counts the calls and bytes of
 * memcpy, memmove, memset and their _FORTIFY_SOURCE (__*_chk) forms per size
 * bucket, and forwards every call to the next definition (glibc's, chosen
 * by its ifunc resolver exactly as without the interposer).
 *
 * Buckets: powers of two (bucket k holds the sizes whose bit length is k:
 * 0 for size 0, k for 2^(k-1) .. 2^k - 1), and, when MEMFX_TUNE_EDGES names
 * up to MAX_EDGES ascending sizes e_0 < e_1 < ..., "edge" buckets: edge
 * bucket j holds the sizes s with e_(j-1) <= s < e_j (glibc switches path at
 * s >= threshold, so a threshold given as an edge splits exactly there).
 *
 * Thread-safe without locks or allocation, in static tables: each of the
 * first N_SLOTS threads that calls claims a table of its own (one atomic
 * increment, then plain relaxed stores that only it makes: a lock-prefixed
 * add per counter cost ~80 cycles a call, 300 % on a loop of 256-byte
 * copies); later threads share one more table with relaxed atomic adds.
 * At exit (a destructor) each process appends one block of text to
 * the file named by MEMFX_TUNE_PROFILE with a single write(2) on an O_APPEND
 * descriptor, so the processes of a command each leave their own block.
 * The name is a path in memfx's private (0700) directory, opened here: a
 * descriptor number passed down would by then be the program's own file in
 * some process, so nothing is written to a descriptor this code did not open.
 *
 *     memfx-tune-profile 1
 *     pid 1234
 *     edges 2112 4096
 *     pow2 memcpy 12 100 409600        (function, bucket, calls, bytes)
 *     edge memcpy 1 100 409600
 *     end
 *
 * A forked child starts from zero (pthread_atfork), so nothing is counted
 * twice.  Built for the baseline ISA with the core (setup.py).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum { F_MEMCPY, F_MEMMOVE, F_MEMSET, F_MEMCPY_CHK, F_MEMMOVE_CHK, F_MEMSET_CHK, N_FUNCS };
static const char *const func_names[N_FUNCS] = {
    "memcpy", "memmove", "memset", "__memcpy_chk", "__memmove_chk", "__memset_chk",
};

#define N_POW2 65
#define MAX_EDGES 32

struct cell { uint64_t calls, bytes; };

#define N_SLOTS 64

struct table {
    struct cell pow2[N_FUNCS][N_POW2];
    struct cell edge[N_FUNCS][MAX_EDGES + 1];
};
/* slots[0 .. N_SLOTS-1]: one thread each; slots[N_SLOTS]: shared, atomic */
static struct table slots[N_SLOTS + 1];
static unsigned next_slot;
/* 1 + this thread's slot; 0 until its first call */
static __thread unsigned my_slot __attribute__((tls_model("initial-exec")));
static size_t edges[MAX_EDGES];
static int n_edges;

typedef void *(*copy_fn)(void *, const void *, size_t);
typedef void *(*set_fn)(void *, int, size_t);
typedef void *(*copy_chk_fn)(void *, const void *, size_t, size_t);
typedef void *(*set_chk_fn)(void *, int, size_t, size_t);

static void *real[N_FUNCS];
static int resolving;        /* set while dlsym runs: its own calls take the fallbacks */

/* ---- fallbacks for calls made before (or while) the real functions are
 * resolved: plain byte loops through volatile pointers, so the compiler
 * cannot turn them back into calls of the functions being defined here. */

static void *fallback_copy(void *dst, const void *src, size_t n)
{
    volatile unsigned char *d = dst;
    const volatile unsigned char *s = src;
    if (d < s) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        for (size_t i = n; i > 0; i--)
            d[i - 1] = s[i - 1];
    }
    return dst;
}

static void *fallback_set(void *dst, int c, size_t n)
{
    volatile unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)c;
    return dst;
}

static void resolve_all(void)
{
    if (__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL))
        return;                             /* dlsym re-entered us: fall back */
    for (int f = 0; f < N_FUNCS; f++) {
        if (__atomic_load_n(&real[f], __ATOMIC_ACQUIRE) == NULL) {
            void *p = dlsym(RTLD_NEXT, func_names[f]);
            __atomic_store_n(&real[f], p, __ATOMIC_RELEASE);
        }
    }
    __atomic_store_n(&resolving, 0, __ATOMIC_RELEASE);
}

static inline void *target(int f)
{
    void *p = __atomic_load_n(&real[f], __ATOMIC_ACQUIRE);
    if (__builtin_expect(p == NULL, 0)) {
        resolve_all();
        p = __atomic_load_n(&real[f], __ATOMIC_ACQUIRE);
    }
    return p;
}

/* ---- counting ------------------------------------------------------ */

static inline int pow2_bucket(size_t n)
{
    return n == 0 ? 0 : 64 - __builtin_clzll((unsigned long long)n);
}

static inline void bump_own(struct cell *c, size_t n)
{
    /* only this thread writes the cell; relaxed stores keep the exit-time
     * reader well defined and compile to plain adds */
    __atomic_store_n(&c->calls, __atomic_load_n(&c->calls, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&c->bytes, __atomic_load_n(&c->bytes, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline void bump_shared(struct cell *c, size_t n)
{
    __atomic_fetch_add(&c->calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->bytes, (uint64_t)n, __ATOMIC_RELAXED);
}

static unsigned claim_slot(void)
{
    unsigned k = __atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED);
    my_slot = 1 + (k < N_SLOTS ? k : N_SLOTS);
    return my_slot;
}

static inline void count(int f, size_t n)
{
    unsigned s = my_slot;
    if (__builtin_expect(s == 0, 0))
        s = claim_slot();
    struct table *t = &slots[s - 1];
    int j = -1;
    if (n_edges) {
        j = 0;
        while (j < n_edges && edges[j] <= n)
            j++;
    }
    if (__builtin_expect(s <= N_SLOTS, 1)) {
        bump_own(&t->pow2[f][pow2_bucket(n)], n);
        if (j >= 0)
            bump_own(&t->edge[f][j], n);
    } else {
        bump_shared(&t->pow2[f][pow2_bucket(n)], n);
        if (j >= 0)
            bump_shared(&t->edge[f][j], n);
    }
}

/* ---- the interposed functions ------------------------------------- */

EXPORT void *memcpy(void *dst, const void *src, size_t n)
{
    count(F_MEMCPY, n);
    copy_fn fn = (copy_fn)target(F_MEMCPY);
    return fn ? fn(dst, src, n) : fallback_copy(dst, src, n);
}

EXPORT void *memmove(void *dst, const void *src, size_t n)
{
    count(F_MEMMOVE, n);
    copy_fn fn = (copy_fn)target(F_MEMMOVE);
    return fn ? fn(dst, src, n) : fallback_copy(dst, src, n);
}

EXPORT void *memset(void *dst, int c, size_t n)
{
    count(F_MEMSET, n);
    set_fn fn = (set_fn)target(F_MEMSET);
    return fn ? fn(dst, c, n) : fallback_set(dst, c, n);
}

EXPORT void *__memcpy_chk(void *dst, const void *src, size_t n, size_t dst_len)
{
    count(F_MEMCPY_CHK, n);
    copy_chk_fn fn = (copy_chk_fn)target(F_MEMCPY_CHK);
    if (fn)
        return fn(dst, src, n, dst_len);
    if (n > dst_len)
        abort();                            /* what glibc's check does */
    return fallback_copy(dst, src, n);
}

EXPORT void *__memmove_chk(void *dst, const void *src, size_t n, size_t dst_len)
{
    count(F_MEMMOVE_CHK, n);
    copy_chk_fn fn = (copy_chk_fn)target(F_MEMMOVE_CHK);
    if (fn)
        return fn(dst, src, n, dst_len);
    if (n > dst_len)
        abort();
    return fallback_copy(dst, src, n);
}

EXPORT void *__memset_chk(void *dst, int c, size_t n, size_t dst_len)
{
    count(F_MEMSET_CHK, n);
    set_chk_fn fn = (set_chk_fn)target(F_MEMSET_CHK);
    if (fn)
        return fn(dst, c, n, dst_len);
    if (n > dst_len)
        abort();
    return fallback_set(dst, c, n);
}

/* ---- start, fork and exit ------------------------------------------- */

static void clear_tables(void)
{
    /* in a forked child: it is a copy of one thread, which keeps its slot */
    fallback_set(slots, 0, sizeof slots);
}

static void parse_edges(const char *text)
{
    /* "2112,4096,..." ascending; anything malformed ends the list there */
    n_edges = 0;
    while (text && *text && n_edges < MAX_EDGES) {
        size_t v = 0;
        int digits = 0;
        while (*text >= '0' && *text <= '9') {
            v = v * 10 + (size_t)(*text - '0');
            text++;
            digits++;
        }
        if (!digits || (n_edges && v <= edges[n_edges - 1]))
            break;
        edges[n_edges++] = v;
        if (*text != ',')
            break;
        text++;
    }
}

__attribute__((constructor)) static void memfx_tune_start(void)
{
    parse_edges(getenv("MEMFX_TUNE_EDGES"));
    resolve_all();
    pthread_atfork(NULL, NULL, clear_tables);
}

struct out { char buf[1 << 16]; size_t len; };
static struct out out;

static void put(const char *s)
{
    while (*s && out.len < sizeof out.buf)
        out.buf[out.len++] = *s++;
}

static void put_u64(uint64_t v)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i && out.len < sizeof out.buf)
        out.buf[out.len++] = tmp[--i];
}

static void put_cells(const char *kind, int f, int n_buckets, int edge)
{
    for (int b = 0; b < n_buckets; b++) {
        uint64_t calls = 0, bytes = 0;
        for (int s = 0; s <= N_SLOTS; s++) {
            struct cell *c = edge ? &slots[s].edge[f][b] : &slots[s].pow2[f][b];
            calls += __atomic_load_n(&c->calls, __ATOMIC_RELAXED);
            bytes += __atomic_load_n(&c->bytes, __ATOMIC_RELAXED);
        }
        if (!calls)
            continue;
        put(kind); put(" "); put(func_names[f]); put(" ");
        put_u64((uint64_t)b); put(" ");
        put_u64(calls); put(" ");
        put_u64(bytes); put("\n");
    }
}

__attribute__((destructor)) static void memfx_tune_finish(void)
{
    const char *path = getenv("MEMFX_TUNE_PROFILE");
    if (!path || !*path)
        return;
    out.len = 0;
    put("memfx-tune-profile 1\npid ");
    put_u64((uint64_t)getpid());
    put("\nedges");
    for (int j = 0; j < n_edges; j++) {
        put(" ");
        put_u64(edges[j]);
    }
    put("\n");
    for (int f = 0; f < N_FUNCS; f++)
        put_cells("pow2", f, N_POW2, 0);
    for (int f = 0; f < N_FUNCS && n_edges; f++)
        put_cells("edge", f, n_edges + 1, 1);
    put("end\n");
    /* no symlink followed, and only a regular file written: a FIFO or a
     * device put in its place must neither block this exit nor get the text
     * (O_NONBLOCK: open of a FIFO without a reader fails at once) */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                  0600);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    size_t done = 0;
    while (done < out.len) {
        ssize_t w = write(fd, out.buf + done, out.len - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    close(fd);
}
