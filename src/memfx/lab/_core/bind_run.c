/* memfx.lab._core: the kernel calls -- run(), team_run() and the checkers.
 * Every byte a call may touch (its row's footprint) is checked against the
 * buffers it is given first. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "core.h"
#include "binding.h"
#include "team.h"

/* ---- kernel calls ---- */

/* One buffer argument of run(): None, a buffer, or (src only) a Chain. */
struct region {
    const char *role;     /* "dst" or "src" */
    Py_buffer view;
    int held;
    ChainObject *chain;   /* borrowed; set when the argument is a Chain */
    char *addr;           /* buffer + offset, NULL for None */
    Py_ssize_t room;      /* bytes from addr to the end of the buffer */
};

static int acquire_region(struct region *r, const char *role, PyObject *obj, Py_ssize_t offset,
                          int writable)
{
    memset(r, 0, sizeof *r);
    r->role = role;
    if (obj == Py_None) {
        if (offset != 0) {
            PyErr_Format(PyExc_ValueError, "%s offset %zd without a %s buffer", role, offset, role);
            return -1;
        }
        return 0;
    }
    if (PyObject_TypeCheck(obj, &ChainType)) {
        r->chain = (ChainObject *)obj;
        obj = r->chain->buffer;
        writable = 1;   /* chase_ptr_inc writes each element's second word */
    }
    if (PyObject_GetBuffer(obj, &r->view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    r->held = 1;
    if (r->chain && ((char *)r->view.buf != r->chain->base ||
                     r->view.len - r->chain->offset < r->chain->n * r->chain->element)) {
        PyErr_Format(PyExc_ValueError, "the %s chain's buffer moved or shrank since it was linked", role);
        return -1;
    }
    if (offset < 0 || offset > r->view.len) {
        PyErr_Format(PyExc_ValueError, "%s offset %zd outside a buffer of %zd bytes", role, offset,
                     r->view.len);
        return -1;
    }
    r->addr = (char *)r->view.buf + offset;
    r->room = r->view.len - offset;
    return 0;
}

static void release_region(struct region *r)
{
    if (r->held)
        PyBuffer_Release(&r->view);
    r->held = 0;
}

/* Every byte the kernel may touch through r lies inside its buffer. */
static int check_extent(const struct mfx_kernel *k, const struct region *r, Py_ssize_t offset,
                        size_t bytes)
{
    if (bytes == 0)
        return 0;
    if (!r->addr) {
        PyErr_Format(PyExc_ValueError, "kernel %s needs a %s buffer of %zu bytes, got None", k->name,
                     r->role, bytes);
        return -1;
    }
    if (bytes > (size_t)r->room) {
        PyErr_Format(PyExc_ValueError,
                     "kernel %s touches %zu bytes from %s offset %zd, past the end of a "
                     "%zd-byte buffer",
                     k->name, bytes, r->role, offset, r->view.len);
        return -1;
    }
    return 0;
}

/* A chase starts on an element of a chain linked by link_chain. */
static int check_chain(const struct mfx_kernel *k, const struct region *r, Py_ssize_t offset,
                       size_t element_min)
{
    const ChainObject *c = r->chain;
    if (!c) {
        PyErr_Format(PyExc_ValueError, "kernel %s walks a pointer chain: src must come from link_chain",
                     k->name);
        return -1;
    }
    if ((size_t)c->element < element_min) {
        PyErr_Format(PyExc_ValueError, "kernel %s needs chain elements of at least %zu bytes, not %zd",
                     k->name, element_min, c->element);
        return -1;
    }
    Py_ssize_t rel = offset - c->offset;
    if (rel < 0 || rel % c->element || rel / c->element >= c->n) {
        PyErr_Format(PyExc_ValueError, "src offset %zd is not an element of the chain", offset);
        return -1;
    }
    return 0;
}

/* A walk that writes through its chain (chase_ptr_inc) must not leave it:
 * every next-pointer is checked before the call (the GIL stays held during
 * it, so no Python thread writes in between). */
static int check_chain_intact(const struct mfx_kernel *k, const struct region *r)
{
    const ChainObject *c = r->chain;
    if (!mfx_chain_intact((const char *)r->view.buf + c->offset, (size_t)c->n, (size_t)c->element)) {
        PyErr_Format(PyExc_ValueError,
                     "kernel %s: the chain was written since link_chain (a next-pointer leaves "
                     "it); link it again", k->name);
        return -1;
    }
    return 0;
}

static PyObject *chain_left(const struct mfx_kernel *k)
{
    return PyErr_Format(PyExc_ValueError,
                        "kernel %s left its chain (a fault): the chain was written since "
                        "link_chain; link it again", k->name);
}

/* How far `steps` steps of `step` bytes reach, saturating at SIZE_MAX. */
static size_t reach_of(unsigned long long steps, unsigned long long step)
{
    if (steps && step > SIZE_MAX / steps)
        return SIZE_MAX;
    return (size_t)(steps * step);
}

static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* run(kernel, dst, dst_off, src, src_off, size, value, count, aux, perf_fds, rdpmc_pages,
 *     chunks=1, first_chunk=0, dst_step=0, src_step=0)
 * -> (ticks, cpu_begin, cpu_end, result, counters)
 * counters: one (values..., time_enabled, time_running) delta tuple per leader fd.
 * chunks > 1: a stream through a working set larger than one sample (a DRAM
 * cell): the timed part is `count` calls of one iteration each, call i on
 * chunk c = (first_chunk + i) mod chunks, i.e. dst + c * dst_step and
 * src + c * src_step; every chunk's footprint is checked. */
PyObject *py_run(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"kernel", "dst", "dst_off", "src", "src_off", "size", "value",
                             "count", "aux", "perf_fds", "rdpmc_pages", "chunks",
                             "first_chunk", "dst_step", "src_step", NULL};
    Py_ssize_t index, dst_off, src_off, size;
    PyObject *dst_obj, *src_obj, *fds = Py_None, *pages_obj = Py_None;
    unsigned long long value, count, aux, chunks = 1, first_chunk = 0, dst_step = 0, src_step = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nOnOnnKKK|OOKKKK", kwlist, &index, &dst_obj,
                                     &dst_off, &src_obj, &src_off, &size, &value, &count, &aux,
                                     &fds, &pages_obj, &chunks, &first_chunk, &dst_step,
                                     &src_step))
        return NULL;
    const struct mfx_kernel *k = usable_kernel(index);
    if (!k)
        return NULL;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "negative size");
    if (chunks < 1 || first_chunk >= chunks)
        return PyErr_Format(PyExc_ValueError, "chunks must be >= 1 and first_chunk below it");

    int leader[2] = {-1, -1}, n_leaders = 0;
    if (fds != Py_None) {
        PyObject *seq = PySequence_Fast(fds, "perf_fds must be a sequence");
        if (!seq)
            return NULL;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && n_leaders < 2; i++)
            leader[n_leaders++] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        Py_DECREF(seq);
        if (PyErr_Occurred())
            return NULL;
    }

    struct region dst, src;
    if (acquire_region(&dst, "dst", dst_obj, dst_off, 1) < 0) {
        release_region(&dst);
        return NULL;
    }
    if (dst.chain) {
        release_region(&dst);
        return PyErr_Format(PyExc_TypeError, "a chain can only be a kernel's src");
    }
    if (acquire_region(&src, "src", src_obj, src_off, 0) < 0) {
        release_region(&src);
        release_region(&dst);
        return NULL;
    }
    struct mfx_args a = {dst.addr, src.addr, (size_t)size, value, chunks > 1 ? 1 : count, aux};
    struct mfx_footprint fp = {0, 0, 0, 0};
    k->footprint(&a, &fp);
    if (chunks > 1) {
        if (fp.chain_element_min) {
            release_region(&src);
            release_region(&dst);
            return PyErr_Format(PyExc_ValueError, "kernel %s: a chase cannot be split in chunks",
                                k->name);
        }
        /* the last chunk starts (chunks - 1) steps further on */
        if (fp.dst_bytes)
            fp.dst_bytes = add_sat(fp.dst_bytes, reach_of(chunks - 1, dst_step));
        if (fp.src_bytes)
            fp.src_bytes = add_sat(fp.src_bytes, reach_of(chunks - 1, src_step));
    }
    PerfPageObject *page_views[MFX_PERF_MAX];
    int n_pages = 0;
    if (check_extent(k, &dst, dst_off, fp.dst_bytes) < 0 ||
        check_extent(k, &src, src_off, fp.src_bytes) < 0 ||
        (fp.chain_element_min && check_chain(k, &src, src_off, fp.chain_element_min) < 0) ||
        (fp.chain_written && check_chain_intact(k, &src) < 0) ||
        acquire_pages(pages_obj, page_views, &n_pages) < 0) {
        release_region(&src);
        release_region(&dst);
        return NULL;
    }

    /* rdpmc right at the fences (bare metal; no pages in a VM) */
    uint64_t pmc_before[MFX_PERF_MAX], pmc_after[MFX_PERF_MAX];
    int pmc_ok = n_pages > 0;
    struct mfx_perf_sample before[2], after[2];
    uint64_t t0 = 0, t1 = 0, result = 0;
    uint32_t aux_begin, aux_end = 0;
    int perr = 0, faulted = 0, guarded = fp.chain_element_min && !fp.chain_written;
    sigjmp_buf walk;

    if (guarded)
        mfx_guard_install();
    /* a walk that writes through its chain keeps the GIL (see check_chain_intact) */
    PyThreadState *released = fp.chain_written ? NULL : PyEval_SaveThread();
    for (int i = 0; i < n_leaders && !perr; i++)
        perr = mfx_perf_read_group(leader[i], &before[i]);
    mfx_tsc_end(&aux_begin);
    for (int i = 0; i < n_pages && pmc_ok; i++)
        pmc_ok = mfx_perf_rdpmc(page_views[i]->page, &pmc_before[i]) == 0;
    if (sigsetjmp(walk, 0) != 0) {
        faulted = 1;          /* from the guard: the walk left its chain */
    } else {
        if (guarded)
            mfx_guard_arm(&walk);
        if (chunks > 1) {
            struct mfx_args c = a;
            uint64_t chunk = first_chunk;
            t0 = mfx_tsc_begin();
            for (unsigned long long i = 0; i < count; i++) {
                c.dst = a.dst ? (char *)a.dst + chunk * dst_step : NULL;
                c.src = a.src ? (const char *)a.src + chunk * src_step : NULL;
                result += k->fn(&c);
                if (++chunk == chunks)
                    chunk = 0;
            }
            t1 = mfx_tsc_end(&aux_end);
        } else {
            t0 = mfx_tsc_begin();
            result = k->fn(&a);
            t1 = mfx_tsc_end(&aux_end);
        }
        mfx_guard_arm(NULL);
    }
    for (int i = 0; i < n_pages && pmc_ok; i++)
        pmc_ok = mfx_perf_rdpmc(page_views[i]->page, &pmc_after[i]) == 0;
    for (int i = 0; i < n_leaders && !perr; i++)
        perr = mfx_perf_read_group(leader[i], &after[i]);
    if (released)
        PyEval_RestoreThread(released);
    if (guarded)
        mfx_guard_remove();

    release_pages(page_views, n_pages);
    release_region(&src);
    release_region(&dst);
    if (faulted)
        return chain_left(k);
    if (perr) {
        errno = -perr;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *counters = PyList_New(n_leaders + (n_pages > 0));
    for (int i = 0; counters && i < n_leaders; i++) {
        PyObject *t = PyTuple_New(after[i].n + 2);
        for (int j = 0; t && j < after[i].n; j++)
            PyTuple_SET_ITEM(t, j, PyLong_FromUnsignedLongLong(after[i].value[j] - before[i].value[j]));
        if (t) {
            PyTuple_SET_ITEM(t, after[i].n, PyLong_FromUnsignedLongLong(after[i].time_enabled - before[i].time_enabled));
            PyTuple_SET_ITEM(t, after[i].n + 1, PyLong_FromUnsignedLongLong(after[i].time_running - before[i].time_running));
        }
        PyList_SET_ITEM(counters, i, t);
    }
    if (counters && n_pages > 0) {
        /* one extra entry: rdpmc deltas in page order, or None when the
         * kernel refused user-space rdpmc for any of them */
        PyObject *t = Py_None;
        if (pmc_ok) {
            t = PyTuple_New(n_pages);
            for (int i = 0; t && i < n_pages; i++)
                PyTuple_SET_ITEM(t, i, PyLong_FromUnsignedLongLong(pmc_after[i] - pmc_before[i]));
        } else {
            Py_INCREF(t);
        }
        PyList_SET_ITEM(counters, n_leaders, t);
    }
    if (!counters)
        return NULL;
    return Py_BuildValue("(KIIKN)", (unsigned long long)(t1 - t0), aux_begin & 0xfff,
                         aux_end & 0xfff, (unsigned long long)result, counters);
}

/* team_run(members, background=False)
 * members: a list of (cpu, index, dst, dst_off, src, src_off, size, value, count, aux,
 *                     delay_ticks), member 0 first (see team.c)
 * -> (release_tsc, [(tsc_start, tsc_end, cpu_start, cpu_end, switches, wait_ns or None,
 *                    calls, result), ...])
 * Every member's footprint is checked against its buffers, as in run(). */
PyObject *py_team_run(PyObject *self, PyObject *args)
{
    PyObject *list;
    int background = 0;
    if (!PyArg_ParseTuple(args, "O|p", &list, &background))
        return NULL;
    PyObject *seq = PySequence_Fast(list, "members must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > MFX_TEAM_MAX) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "a team has 1..%d members, not %zd", MFX_TEAM_MAX, n);
    }
    struct mfx_team_member *m = PyMem_Calloc((size_t)n, sizeof *m);
    struct region *regions = PyMem_Calloc((size_t)n * 2, sizeof *regions);
    PyObject *out = NULL, *copies = NULL;   /* copies: members given as lists */
    Py_ssize_t held = 0;
    int any_guarded = 0;
    if (!m || !regions) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t index, dst_off, src_off, size;
        PyObject *dst_obj, *src_obj;
        unsigned long long cpu, value, count, aux, delay, chunks = 1;
        /* PyArg_ParseTuple takes a tuple only (a list gave SystemError):
         * any other sequence is copied into one, kept until the call ends */
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item)) {
            if (!PySequence_Check(item) || PyUnicode_Check(item) || PyBytes_Check(item)) {
                PyErr_Format(PyExc_TypeError, "member %zd: a team member is a tuple, not %.50s",
                             i, Py_TYPE(item)->tp_name);
                goto done;
            }
            if (!copies && !(copies = PyList_New(0)))
                goto done;
            PyObject *copy = PySequence_Tuple(item);
            int kept = copy ? PyList_Append(copies, copy) : -1;
            Py_XDECREF(copy);
            if (kept < 0)
                goto done;
            item = copy;          /* alive: `copies` holds it */
        }
        if (!PyArg_ParseTuple(item, "KnOnOnnKKKK|K;a team member is "
                              "(cpu, index, dst, dst_off, src, src_off, size, value, count, aux, "
                              "delay_ticks[, chunks])", &cpu, &index, &dst_obj, &dst_off, &src_obj,
                              &src_off, &size, &value, &count, &aux, &delay, &chunks))
            goto done;
        if (chunks < 1 || (i == 0 && chunks != 1)) {
            PyErr_Format(PyExc_ValueError, "member %zd: chunks must be >= 1 (1 for member 0)", i);
            goto done;
        }
        const struct mfx_kernel *k = usable_kernel(index);
        if (!k)
            goto done;
        if (size < 0) {
            PyErr_Format(PyExc_ValueError, "member %zd: negative size", i);
            goto done;
        }
        struct region *dst = &regions[2 * i], *src = &regions[2 * i + 1];
        held = i + 1;
        if (acquire_region(dst, "dst", dst_obj, dst_off, 1) < 0)
            goto done;
        if (dst->chain) {
            PyErr_Format(PyExc_TypeError, "a chain can only be a kernel's src");
            goto done;
        }
        if (acquire_region(src, "src", src_obj, src_off, 0) < 0)
            goto done;
        struct mfx_args a = {dst->addr, src->addr, (size_t)size, value, count, aux};
        struct mfx_footprint fp = {0, 0, 0, 0};
        k->footprint(&a, &fp);
        /* the last chunk starts (chunks - 1) * size bytes further on */
        size_t reach = (chunks - 1) > SIZE_MAX / ((size_t)size ? (size_t)size : 1)
                           ? SIZE_MAX : (size_t)(chunks - 1) * (size_t)size;
        if (chunks > 1 && fp.chain_element_min) {
            PyErr_Format(PyExc_ValueError, "member %zd: a chase cannot be split in chunks", i);
            goto done;
        }
        if (fp.chain_written) {
            /* other members may write its chain while it walks: run() only */
            PyErr_Format(PyExc_ValueError, "member %zd: kernel %s writes through its chain and "
                         "runs alone (run), not in a team", i, k->name);
            goto done;
        }
        if (fp.chain_element_min && background && i > 0) {
            PyErr_Format(PyExc_ValueError, "member %zd: a background loader cannot walk a chain", i);
            goto done;
        }
        if (check_extent(k, dst, dst_off, fp.dst_bytes ? mfx_sat_add(fp.dst_bytes, reach) : 0) < 0 ||
            check_extent(k, src, src_off, fp.src_bytes ? mfx_sat_add(fp.src_bytes, reach) : 0) < 0 ||
            (fp.chain_element_min && check_chain(k, src, src_off, fp.chain_element_min) < 0))
            goto done;
        m[i].chunks = chunks;
        m[i].guarded = fp.chain_element_min != 0;
        any_guarded |= m[i].guarded;
        m[i].kernel = k;
        m[i].args = a;
        m[i].cpu = cpu;
        m[i].delay_ticks = delay;
    }
    uint64_t release = 0;
    int rc, err = 0;
    unsigned bad = 0;
    if (any_guarded)
        mfx_guard_install();
    Py_BEGIN_ALLOW_THREADS
    rc = mfx_team_run(m, (unsigned)n, background, &release, &err, &bad);
    Py_END_ALLOW_THREADS
    if (any_guarded)
        mfx_guard_remove();
    for (Py_ssize_t i = 0; rc == MFX_POOL_OK && i < n; i++)
        if (m[i].faulted) {
            chain_left(m[i].kernel);
            goto done;
        }
    if (rc == MFX_POOL_CPU) {
        PyErr_Format(PyExc_ValueError, "member %u: CPU %llu is out of range or given twice", bad,
                     (unsigned long long)m[bad].cpu);
        goto done;
    }
    if (rc == MFX_POOL_CREATE) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (rc != MFX_POOL_OK) {
        PyErr_Format(PyExc_ValueError, "team call failed (%d)", rc);
        goto done;
    }
    PyObject *rows = PyList_New(n);
    for (Py_ssize_t i = 0; rows && i < n; i++) {
        PyObject *wait = m[i].wait_ns == UINT64_MAX ? (Py_INCREF(Py_None), Py_None)
                                                    : PyLong_FromUnsignedLongLong(m[i].wait_ns);
        PyObject *row = Py_BuildValue("(KKIIKNKK)", (unsigned long long)m[i].tsc_start,
                                      (unsigned long long)m[i].tsc_end, m[i].cpu_start,
                                      m[i].cpu_end, (unsigned long long)m[i].switches, wait,
                                      (unsigned long long)m[i].calls,
                                      (unsigned long long)m[i].result);
        if (!row) {
            Py_CLEAR(rows);
            break;
        }
        PyList_SET_ITEM(rows, i, row);
    }
    if (rows)
        out = Py_BuildValue("(KN)", (unsigned long long)release, rows);
done:
    for (Py_ssize_t i = 0; regions && i < 2 * held; i++)
        release_region(&regions[i]);
    PyMem_Free(regions);
    PyMem_Free(m);
    Py_XDECREF(copies);
    Py_DECREF(seq);
    return out;
}

/* The checkers run with the GIL released and cannot be interrupted, so what
 * one call may do is bounded: about max_size^2 / 2 bytes per placement and
 * pass, for every placement (offsets, misalignment pairs) and pass (count).
 * The checks memfx makes stay 32x below the bound. */
#define CHECK_MAX_COUNT 1024
#define CHECK_MAX_BYTES 17179869184.0    /* 2^34 */

static int check_work(Py_ssize_t max_size, double placements, unsigned long long count)
{
    double work = ((double)max_size + 1) * ((double)max_size + 1) / 2 * placements * (double)count;
    if (count > CHECK_MAX_COUNT || work > CHECK_MAX_BYTES) {
        PyErr_Format(PyExc_ValueError, "a check of max_size %zd x %.0f placements x count %llu is "
                     "too long to run uninterruptibly (count <= %d, about 2^34 bytes in all)",
                     max_size, placements, count, CHECK_MAX_COUNT);
        return -1;
    }
    return 0;
}

/* verify_copy(index, max_size, max_misalign, all_pairs=False, aux=0, count=1,
 *             as_group=None, size_skew=0) -> None, or the first mismatch as a
 * message (kernels/copy.c). */
PyObject *py_verify_copy(PyObject *self, PyObject *args)
{
    Py_ssize_t index, max_size;
    unsigned max_misalign;
    int all_pairs = 0;
    unsigned long long aux = 0, count = 1;
    const char *as_group = NULL;
    long size_skew = 0;
    if (!PyArg_ParseTuple(args, "nnI|pKKzl", &index, &max_size, &max_misalign, &all_pairs, &aux,
                          &count, &as_group, &size_skew))
        return NULL;
    if (!usable_kernel(index))
        return NULL;
    /* the checker allocates about max_size bytes per buffer: keep the sums far from overflow */
    if (max_size < 0 || max_size > (Py_ssize_t)1 << 30)
        return PyErr_Format(PyExc_ValueError, "max_size must be 0..2^30");
    if (check_work(max_size, all_pairs ? (double)max_misalign * max_misalign : max_misalign,
                   count) < 0)
        return NULL;
    char msg[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mfx_verify_copy_kernel(usable_kernel(index), (size_t)max_size, max_misalign, all_pairs, aux,
                                count, as_group, size_skew, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (rc == -2)
        return PyErr_Format(PyExc_ValueError, "%s", msg);
    if (rc)
        return PyUnicode_FromString(msg);
    Py_RETURN_NONE;
}

/* fill_check(index, value, aux, count, src_word, expect, max_size, max_offset)
 * -> None when the kernel wrote `expect` to every byte of the region and
 * nothing else, for every size 0..max_size and dst offset 0..max_offset-1
 * (see kernels/fill.c); else (size, offset, index, expected, got). */
PyObject *py_fill_check(PyObject *self, PyObject *args)
{
    Py_ssize_t index, max_size, max_offset;
    unsigned long long value, aux, count, src_word;
    unsigned int expect;
    if (!PyArg_ParseTuple(args, "nKKKKInn", &index, &value, &aux, &count, &src_word, &expect,
                          &max_size, &max_offset))
        return NULL;
    const struct mfx_kernel *k = usable_kernel(index);
    if (!k)
        return NULL;
    if (max_size < 0 || max_size > (Py_ssize_t)1 << 30 || max_offset < 1 || max_offset > 1 << 20 ||
        expect > 255)
        return PyErr_Format(PyExc_ValueError,
                            "need max_size 0..2^30, max_offset 1..2^20, expect < 256");
    if (check_work(max_size, (double)max_offset, count) < 0)
        return NULL;
    long long fail[5] = {0, 0, 0, 0, 0};
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mfx_fill_check(k, value, aux, count, src_word, expect, (size_t)max_size,
                       (size_t)max_offset, fail);
    Py_END_ALLOW_THREADS
    if (r == -2)
        return PyErr_Format(PyExc_ValueError, "kernel %s with count %llu, aux %llu reaches past "
                            "the checker's buffer", k->name, count, aux);
    if (r < 0)
        return PyErr_NoMemory();
    if (r == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLLL)", fail[0], fail[1], fail[2], fail[3], fail[4]);
}

/* footprint(index, size, count, aux, dst_address=0): the row's footprint,
 * for tests and for callers sizing their buffers.  dst_address only
 * matters to kernels that align to it (rotating fills); it is used as a
 * number, never dereferenced. */
PyObject *py_footprint(PyObject *self, PyObject *args)
{
    Py_ssize_t index, size;
    unsigned long long count, aux, dst_address = 0;
    if (!PyArg_ParseTuple(args, "nnKK|K", &index, &size, &count, &aux, &dst_address))
        return NULL;
    const struct mfx_kernel *k = kernel_row(index);
    if (!k)
        return NULL;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "negative size");
    struct mfx_args a = {(void *)(uintptr_t)dst_address, NULL, (size_t)size, 0, count, aux};
    struct mfx_footprint fp = {0, 0, 0, 0};
    k->footprint(&a, &fp);
    /* saturated extents come back as PY_SSIZE_T_MAX: larger than any buffer */
    size_t cap = (size_t)PY_SSIZE_T_MAX;
    return Py_BuildValue("(nnn)", (Py_ssize_t)(fp.dst_bytes < cap ? fp.dst_bytes : cap),
                         (Py_ssize_t)(fp.src_bytes < cap ? fp.src_bytes : cap),
                         (Py_ssize_t)fp.chain_element_min);
}
