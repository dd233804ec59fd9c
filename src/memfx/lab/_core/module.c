/* memfx.lab._core: the binding.  A method table that converts arguments and
 * results and turns errno into OSError; the logic lives in Python, the
 * kernels in kernels/.  Nothing here takes an address from Python:
 * buffers come as objects with the buffer protocol, and every byte a kernel
 * call may touch (its row's footprint) is checked against them first. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <structmember.h>
#include <cpuid.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "core.h"
#include "call.h"
#include "layout_shared.h"
#include "team.h"

#ifndef MFX_CFLAGS
#define MFX_CFLAGS "unknown"
#endif

static const struct mfx_kernel **kernels;
static Py_ssize_t n_kernels;

/* The field a row lacks (a NULL pointer, or ops_per_iter not > 0), or NULL
 * when it has every one: the binding calls fn and footprint without a
 * check, and reports the strings. */
static const char *missing_field(const struct mfx_kernel *k)
{
    if (!k->group)
        return ".group";
    if (!k->isa)
        return ".isa";
    if (!k->fn)
        return ".fn";
    if (!k->footprint)
        return ".footprint";
    if (!(k->ops_per_iter > 0))
        return ".ops_per_iter (> 0)";
    if (!k->op)
        return ".op";
    if (!k->doc)
        return ".doc";
    return NULL;
}

static int by_table_name(const void *x, const void *y)
{
    return strcmp((*(const struct mfx_kernel_table *const *)x)->name,
                  (*(const struct mfx_kernel_table *const *)y)->name);
}

/* Every row of every registered table, tables in name order (the kernel
 * indices do not depend on link order).  A row without a field the binding
 * relies on, or a name given twice, fails the import with ImportError
 * naming the row: nothing is ever called through a NULL pointer. */
static int collect_kernels(void)
{
    const struct mfx_kernel_table *const *registered;
    size_t nt = mfx_kernel_tables(&registered);
    const struct mfx_kernel_table **tables = PyMem_Calloc(nt ? nt : 1, sizeof *tables);
    if (!tables) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(tables, registered, nt * sizeof *tables);
    qsort(tables, nt, sizeof *tables, by_table_name);
    const struct mfx_kernel_table **owner = NULL;
    Py_ssize_t n = 0;
    for (size_t t = 0; t < nt; t++)
        for (const struct mfx_kernel *k = tables[t]->rows; k->name; k++)
            n++;
    kernels = PyMem_Calloc(n ? n : 1, sizeof *kernels);
    owner = PyMem_Calloc(n ? n : 1, sizeof *owner);
    if (!kernels || !owner) {
        PyErr_NoMemory();
        goto fail;
    }
    n = 0;
    for (size_t t = 0; t < nt; t++)
        for (const struct mfx_kernel *k = tables[t]->rows; k->name; k++) {
            const char *missing = missing_field(k);
            if (missing) {
                PyErr_Format(PyExc_ImportError,
                             "memfx.lab._core: kernel row %s (table %s, %s) has no %s; every row "
                             "needs one (struct mfx_kernel in core.h)",
                             k->name, tables[t]->name, tables[t]->file, missing);
                goto fail;
            }
            for (Py_ssize_t i = 0; i < n; i++)
                if (!strcmp(kernels[i]->name, k->name)) {
                    PyErr_Format(PyExc_ImportError,
                                 "memfx.lab._core: kernel row %s is defined twice (tables %s and %s)",
                                 k->name, owner[i]->name, tables[t]->name);
                    goto fail;
                }
            owner[n] = tables[t];
            kernels[n++] = k;
        }
    n_kernels = n;
    PyMem_Free(owner);
    PyMem_Free(tables);
    return 0;
fail:
    PyMem_Free(owner);
    PyMem_Free(tables);
    PyMem_Free(kernels);
    kernels = NULL;
    n_kernels = 0;
    return -1;
}

static PyObject *py_kernels(PyObject *self, PyObject *noargs)
{
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; list && i < n_kernels; i++) {
        const struct mfx_kernel *k = kernels[i];
        PyObject *row = Py_BuildValue(
            "{s:n,s:s,s:s,s:s,s:d,s:d,s:d,s:d,s:d,s:s,s:s,s:O}", "index", i, "name", k->name,
            "group", k->group, "isa", k->isa, "read_per_byte", k->read_per_byte,
            "write_per_byte", k->write_per_byte, "read_fixed", k->read_fixed, "write_fixed",
            k->write_fixed, "ops_per_iter", k->ops_per_iter, "op", k->op, "doc", k->doc,
            "supported", mfx_isa_supported(k->isa) ? Py_True : Py_False);
        if (!row || PyList_Append(list, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(row);
    }
    return list;
}

/* The kernel at `index`, or NULL with IndexError / RuntimeError set when
 * there is none or this CPU lacks the instructions it needs. */
static const struct mfx_kernel *usable_kernel(Py_ssize_t index)
{
    if (index < 0 || index >= n_kernels) {
        PyErr_Format(PyExc_IndexError, "no kernel %zd", index);
        return NULL;
    }
    const struct mfx_kernel *k = kernels[index];
    if (!mfx_isa_supported(k->isa)) {
        PyErr_Format(PyExc_RuntimeError, "kernel %s needs %s, which this CPU lacks", k->name, k->isa);
        return NULL;
    }
    return k;
}

/* ---- pointer chains ---- */

/* A chain linked in C inside a caller's buffer (link_chain).  It holds an
 * export of the buffer for its whole life, so the buffer cannot be resized,
 * closed or unmapped under it (a bytearray shrunk and regrown at the same
 * address would pass an address check with its pointers gone); run()
 * re-acquires it and refuses it if it moved or shrank all the same.  Python
 * can still write the buffer's bytes, so a walk that only reads through the
 * chain runs under the fault guard (guard.c) and one that writes through
 * it is checked whole first (mfx_chain_intact). */
typedef struct {
    PyObject_HEAD
    PyObject *buffer;
    Py_buffer export;    /* held from link_chain to dealloc */
    char *base;          /* the buffer's address when the chain was linked */
    Py_ssize_t offset;   /* of element 0 in the buffer */
    Py_ssize_t element;  /* bytes per element */
    Py_ssize_t n;        /* elements */
} ChainObject;

static void chain_dealloc(ChainObject *c)
{
    if (c->buffer)
        PyBuffer_Release(&c->export);
    Py_XDECREF(c->buffer);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *chain_address(ChainObject *c, void *closure)
{
    return PyLong_FromVoidPtr(c->base + c->offset);
}

static PyMemberDef chain_members[] = {
    {"buffer", T_OBJECT, offsetof(ChainObject, buffer), READONLY, "the buffer holding the chain"},
    {"offset", T_PYSSIZET, offsetof(ChainObject, offset), READONLY, "byte offset of element 0"},
    {"element_bytes", T_PYSSIZET, offsetof(ChainObject, element), READONLY, "bytes per element"},
    {"elements", T_PYSSIZET, offsetof(ChainObject, n), READONLY, "elements in the cycle"},
    {NULL},
};

static PyGetSetDef chain_getset[] = {
    {"address", (getter)chain_address, NULL, "address of element 0 (for reports)", NULL},
    {NULL},
};

static PyTypeObject ChainType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "memfx.lab._core.Chain",
    .tp_basicsize = sizeof(ChainObject),
    .tp_dealloc = (destructor)chain_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a cyclic pointer chain linked by link_chain(); pass it as run()'s src",
    .tp_members = chain_members,
    .tp_getset = chain_getset,
};

/* link_chain(buffer, offset, element_bytes, elements, order=None) -> Chain
 * order: None (address order) or a contiguous array of `elements` int32 or
 * int64 element indices, each used once. */
static PyObject *py_shuffle(PyObject *self, PyObject *args)
{
    PyObject *obj;
    unsigned long long w[4];
    if (!PyArg_ParseTuple(args, "OKKKK", &obj, &w[0], &w[1], &w[2], &w[3]))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    const char *fmt = view.format ? view.format : "B";
    char code = fmt[strlen(fmt) ? strlen(fmt) - 1 : 0];
    if ((view.itemsize != 4 && view.itemsize != 8) || !code || !strchr("iIlLqQnN", code)) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "shuffle needs a writable array of int32 or int64");
    }
    uint64_t seed[4] = {w[0], w[1], w[2], w[3]};
    size_t n = (size_t)(view.len / view.itemsize);
    int itemsize = (int)view.itemsize;
    Py_BEGIN_ALLOW_THREADS
    mfx_shuffle(view.buf, n, itemsize, seed);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *py_link_chain(PyObject *self, PyObject *args)
{
    PyObject *obj, *order_obj = Py_None;
    Py_ssize_t offset, element, n;
    if (!PyArg_ParseTuple(args, "Onnn|O", &obj, &offset, &element, &n, &order_obj))
        return NULL;
    if (element < 8 || element % 8 || n < 1 || offset < 0)
        return PyErr_Format(PyExc_ValueError,
                            "a chain needs elements >= 1, element_bytes a multiple of 8, offset >= 0");
    Py_buffer view, order;
    const void *order_items = NULL;
    int itemsize = 0, is_signed = 0;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (offset > view.len || n > (view.len - offset) / element) {
        PyErr_Format(PyExc_ValueError, "a chain of %zd x %zd bytes at offset %zd does not fit in %zd bytes",
                     n, element, offset, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    if (order_obj != Py_None) {
        if (PyObject_GetBuffer(order_obj, &order, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        const char *fmt = order.format ? order.format : "B";
        char code = fmt[strlen(fmt) ? strlen(fmt) - 1 : 0];
        itemsize = (int)order.itemsize;
        if ((itemsize != 4 && itemsize != 8) || !code || !strchr("iIlLqQnN", code) ||
            order.len / itemsize != n) {
            PyErr_Format(PyExc_ValueError, "order must be %zd int32 or int64 element indices", n);
            PyBuffer_Release(&order);
            PyBuffer_Release(&view);
            return NULL;
        }
        order_items = order.buf;
        is_signed = strchr("ilqn", code) != NULL;   /* code is not NUL here */
    }
    char msg[200];
    int rc;
    char *base = (char *)view.buf;
    Py_BEGIN_ALLOW_THREADS
    rc = mfx_link_chain(base + offset, (size_t)n, (size_t)element, order_items, itemsize, is_signed,
                        msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (order_items)
        PyBuffer_Release(&order);
    if (rc < 0) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "%s", msg);
    }
    ChainObject *c = PyObject_New(ChainObject, &ChainType);
    if (!c) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_INCREF(obj);
    c->buffer = obj;
    c->export = view;
    c->base = base;
    c->offset = offset;
    c->element = element;
    c->n = n;
    return (PyObject *)c;
}

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

/* ---- perf pages ---- */

/* Whether fd is a perf_event fd: rdpmc with the index of a page mapped from
 * anything else (a file with forged contents) faults, so only the pages the
 * kernel writes for a perf event are read. */
static int is_perf_fd(int fd)
{
    char link[64], target[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0)
        return 0;
    target[n] = 0;
    return strcmp(target, "anon_inode:[perf_event]") == 0;
}

/* A perf event's mmap page, mapped by the binding itself from a perf fd
 * (perf_map); run() reads only these with rdpmc. */
typedef struct {
    PyObject_HEAD
    void *page;          /* NULL once closed */
    size_t length;
    Py_ssize_t in_use;   /* run() calls reading it now (the GIL is released there) */
} PerfPageObject;

static PyTypeObject PerfPageType;

static void perf_page_unmap(PerfPageObject *p)
{
    if (p->page)
        munmap(p->page, p->length);
    p->page = NULL;
}

static void perf_page_dealloc(PerfPageObject *p)
{
    perf_page_unmap(p);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *perf_page_close(PerfPageObject *p, PyObject *noargs)
{
    if (p->in_use)
        return PyErr_Format(PyExc_BufferError, "the perf page is being read by a kernel call");
    perf_page_unmap(p);
    Py_RETURN_NONE;
}

static PyMethodDef perf_page_methods[] = {
    {"close", (PyCFunction)perf_page_close, METH_NOARGS, "unmap the page"},
    {NULL},
};

static PyTypeObject PerfPageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "memfx.lab._core.PerfPage",
    .tp_basicsize = sizeof(PerfPageObject),
    .tp_dealloc = (destructor)perf_page_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a perf event's mmap page mapped by perf_map(); pass it in run()'s rdpmc_pages",
    .tp_methods = perf_page_methods,
};

/* perf_map(fd) -> PerfPage: the event's first mmap page, read-only. */
static PyObject *py_perf_map(PyObject *self, PyObject *args)
{
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd))
        return NULL;
    if (!is_perf_fd(fd))
        return PyErr_Format(PyExc_ValueError, "fd %d is not a perf_event fd", fd);
    size_t length = (size_t)sysconf(_SC_PAGESIZE);
    void *page = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    PerfPageObject *p = PyObject_New(PerfPageObject, &PerfPageType);
    if (!p) {
        munmap(page, length);
        return NULL;
    }
    p->page = page;
    p->length = length;
    p->in_use = 0;
    return (PyObject *)p;
}

/* rdpmc_pages: PerfPage objects (perf_map), open; each is marked in use
 * until release_pages. */
static int acquire_pages(PyObject *pages_obj, PerfPageObject **pages, int *n_pages)
{
    *n_pages = 0;
    if (pages_obj == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(pages_obj, "rdpmc_pages must be a sequence");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MFX_PERF_MAX) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "at most %d rdpmc pages", MFX_PERF_MAX);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(m, &PerfPageType)) {
            PyErr_SetString(PyExc_TypeError, "rdpmc pages must be PerfPage objects (perf_map)");
            goto fail;
        }
        PerfPageObject *p = (PerfPageObject *)m;
        if (!p->page) {
            PyErr_Format(PyExc_ValueError, "rdpmc page %zd is closed", i);
            goto fail;
        }
        Py_INCREF(p);
        p->in_use++;
        pages[(*n_pages)++] = p;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    for (int i = 0; i < *n_pages; i++) {
        pages[i]->in_use--;
        Py_DECREF(pages[i]);
    }
    *n_pages = 0;
    return -1;
}

static void release_pages(PerfPageObject **pages, int n_pages)
{
    for (int i = 0; i < n_pages; i++) {
        pages[i]->in_use--;
        Py_DECREF(pages[i]);
    }
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
static PyObject *py_run(PyObject *self, PyObject *args)
{
    Py_ssize_t index, dst_off, src_off, size;
    PyObject *dst_obj, *src_obj, *fds = Py_None, *pages_obj = Py_None;
    unsigned long long value, count, aux, chunks = 1, first_chunk = 0, dst_step = 0, src_step = 0;
    if (!PyArg_ParseTuple(args, "nOnOnnKKK|OOKKKK", &index, &dst_obj, &dst_off, &src_obj,
                          &src_off, &size, &value, &count, &aux, &fds, &pages_obj, &chunks,
                          &first_chunk, &dst_step, &src_step))
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
static PyObject *py_team_run(PyObject *self, PyObject *args)
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
static PyObject *py_verify_copy(PyObject *self, PyObject *args)
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
    rc = mfx_verify_copy_kernel(kernels[index], (size_t)max_size, max_misalign, all_pairs, aux,
                                count, as_group, size_skew, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (rc == -2)
        return PyErr_Format(PyExc_ValueError, "%s", msg);
    if (rc)
        return PyUnicode_FromString(msg);
    Py_RETURN_NONE;
}

static PyObject *py_add_chain(PyObject *self, PyObject *args)
{
    unsigned long long n;
    if (!PyArg_ParseTuple(args, "K", &n))
        return NULL;
    uint64_t ticks;
    Py_BEGIN_ALLOW_THREADS
    ticks = mfx_add_chain(n);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(ticks);
}

static PyObject *py_rdtsc(PyObject *self, PyObject *noargs)
{
    return PyLong_FromUnsignedLongLong(mfx_tsc_begin());
}

static PyObject *py_cpu_id(PyObject *self, PyObject *noargs)
{
    return PyLong_FromUnsignedLong(mfx_cpu_id());
}

/* TSC frequency calibrated against CLOCK_MONOTONIC_RAW over `ms` milliseconds. */
static PyObject *py_tsc_hz(PyObject *self, PyObject *args)
{
    double ms = 50.0;
    if (!PyArg_ParseTuple(args, "|d", &ms))
        return NULL;
    struct timespec a, b;
    uint64_t t0, t1;
    double ns;
    Py_BEGIN_ALLOW_THREADS
    clock_gettime(CLOCK_MONOTONIC_RAW, &a);
    t0 = mfx_tsc_begin();
    do {
        clock_gettime(CLOCK_MONOTONIC_RAW, &b);
        ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    } while (ns < ms * 1e6);
    t1 = mfx_tsc_begin();
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble((double)(t1 - t0) * 1e9 / ns);
}

static PyObject *py_cpuid(PyObject *self, PyObject *args)
{
    unsigned leaf, sub = 0, r[4];
    if (!PyArg_ParseTuple(args, "I|I", &leaf, &sub))
        return NULL;
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
    return Py_BuildValue("(IIII)", r[0], r[1], r[2], r[3]);
}

static PyObject *py_isa_supported(PyObject *self, PyObject *args)
{
    const char *isa;
    if (!PyArg_ParseTuple(args, "s", &isa))
        return NULL;
    return PyBool_FromLong(mfx_isa_supported(isa));
}

static PyObject *py_perf_open(PyObject *self, PyObject *args)
{
    unsigned type;
    unsigned long long config;
    int group_fd = -1;
    if (!PyArg_ParseTuple(args, "IK|i", &type, &config, &group_fd))
        return NULL;
    int fd = mfx_perf_open(type, config, group_fd, 0);
    if (fd < 0) {
        errno = -fd;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(fd);
}

/* errno of opening (type, config) for this thread, 0 when it works. */
static PyObject *py_perf_probe(PyObject *self, PyObject *args)
{
    unsigned type;
    unsigned long long config;
    if (!PyArg_ParseTuple(args, "IK", &type, &config))
        return NULL;
    int fd = mfx_perf_open(type, config, -1, 0);
    if (fd >= 0) {
        close(fd);
        return PyLong_FromLong(0);
    }
    return PyLong_FromLong(-fd);
}

static PyObject *py_perf_ioctl(PyObject *self, PyObject *args)
{
    int fd;
    const char *what;
    if (!PyArg_ParseTuple(args, "is", &fd, &what))
        return NULL;
    unsigned long req;
    if (!strcmp(what, "enable")) req = PERF_EVENT_IOC_ENABLE;
    else if (!strcmp(what, "disable")) req = PERF_EVENT_IOC_DISABLE;
    else if (!strcmp(what, "reset")) req = PERF_EVENT_IOC_RESET;
    else return PyErr_Format(PyExc_ValueError, "unknown perf ioctl %s", what);
    if (ioctl(fd, req, PERF_IOC_FLAG_GROUP) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *py_perf_read(PyObject *self, PyObject *args)
{
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd))
        return NULL;
    struct mfx_perf_sample s;
    int err = mfx_perf_read_group(fd, &s);
    if (err) {
        errno = -err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *t = PyTuple_New(s.n + 2);
    for (int j = 0; t && j < s.n; j++)
        PyTuple_SET_ITEM(t, j, PyLong_FromUnsignedLongLong(s.value[j]));
    if (t) {
        PyTuple_SET_ITEM(t, s.n, PyLong_FromUnsignedLongLong(s.time_enabled));
        PyTuple_SET_ITEM(t, s.n + 1, PyLong_FromUnsignedLongLong(s.time_running));
    }
    return t;
}

/* perf_rdpmc(fd) -> value read in user space through the event's mmap page,
 * or None when the kernel does not allow rdpmc for it (software events,
 * VMs): the hardware path for bare metal. */
static PyObject *py_perf_rdpmc(PyObject *self, PyObject *args)
{
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd))
        return NULL;
    if (!is_perf_fd(fd))
        return PyErr_Format(PyExc_ValueError, "fd %d is not a perf_event fd", fd);
    long page = sysconf(_SC_PAGESIZE);
    void *pc = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, 0);
    if (pc == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    uint64_t v;
    int ok = mfx_perf_rdpmc(pc, &v);
    munmap(pc, page);
    if (ok < 0)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *py_address(PyObject *self, PyObject *args)
{
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "O", &obj))
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *r = PyLong_FromVoidPtr(v.buf);
    PyBuffer_Release(&v);
    return r;
}

/* touch(buf, offset, length, stride): write-access one byte every `stride`
 * bytes so every page is faulted in with one fault (a read first would map
 * the shared zero page and fault again on the write).  An atomic add of 0 is
 * a single write access that keeps the contents. */
static PyObject *py_touch(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t off, len, stride;
    if (!PyArg_ParseTuple(args, "Onnn", &obj, &off, &len, &stride))
        return NULL;
    if (stride <= 0 || len < 0)
        return PyErr_Format(PyExc_ValueError, "touch needs stride > 0 and length >= 0");
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_WRITABLE) < 0)
        return NULL;
    if (off < 0 || off > v.len || len > v.len - off) {
        PyErr_Format(PyExc_ValueError, "region [%zd, +%zd) outside a buffer of %zd bytes", off, len,
                     v.len);
        PyBuffer_Release(&v);
        return NULL;
    }
    char *p = (char *)v.buf + off;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < len; i += stride)
        __atomic_fetch_add(p + i, 0, __ATOMIC_RELAXED);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
}

/* fill_check(index, value, aux, count, src_word, expect, max_size, max_offset)
 * -> None when the kernel wrote `expect` to every byte of the region and
 * nothing else, for every size 0..max_size and dst offset 0..max_offset-1
 * (see kernels/fill.c); else (size, offset, index, expected, got). */
static PyObject *py_fill_check(PyObject *self, PyObject *args)
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
static PyObject *py_footprint(PyObject *self, PyObject *args)
{
    Py_ssize_t index, size;
    unsigned long long count, aux, dst_address = 0;
    if (!PyArg_ParseTuple(args, "nnKK|K", &index, &size, &count, &aux, &dst_address))
        return NULL;
    if (index < 0 || index >= n_kernels)
        return PyErr_Format(PyExc_IndexError, "no kernel %zd", index);
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "negative size");
    struct mfx_args a = {(void *)(uintptr_t)dst_address, NULL, (size_t)size, 0, count, aux};
    struct mfx_footprint fp = {0, 0, 0, 0};
    kernels[index]->footprint(&a, &fp);
    /* saturated extents come back as PY_SSIZE_T_MAX: larger than any buffer */
    size_t cap = (size_t)PY_SSIZE_T_MAX;
    return Py_BuildValue("(nnn)", (Py_ssize_t)(fp.dst_bytes < cap ? fp.dst_bytes : cap),
                         (Py_ssize_t)(fp.src_bytes < cap ? fp.src_bytes : cap),
                         (Py_ssize_t)fp.chain_element_min);
}

static PyMethodDef methods[] = {
    {"fill_check", py_fill_check, METH_VARARGS,
     "fill_check(index, value, aux, count, src_word, expect, max_size, max_offset) -> None or "
     "(size, offset, index, expected, got): byte-exact check of a fill kernel"},
    {"kernels", py_kernels, METH_NOARGS, "kernels() -> list of kernel table rows as dicts"},
    {"run", py_run, METH_VARARGS,
     "run(index, dst, dst_off, src, src_off, size, value, count, aux, perf_fds=None, "
     "rdpmc_pages=None, chunks=1, first_chunk=0, dst_step=0, src_step=0) -> (ticks, "
     "cpu_begin, cpu_end, result, counter_deltas[+rdpmc deltas]); the row's footprint is "
     "checked against dst and src (ValueError); rdpmc_pages are PerfPage objects from "
     "perf_map; chunks > 1: count one-iteration calls, call i on chunk (first_chunk + i) mod "
     "chunks, dst and src advanced by chunk * dst_step / src_step"},
    {"team_run", py_team_run, METH_VARARGS,
     "team_run(members, background=False) -> (release_tsc, [(tsc_start, tsc_end, cpu_start, "
     "cpu_end, switches, wait_ns, calls, result), ...]): kernel rows on pinned threads started "
     "at one barrier; member = (cpu, index, dst, dst_off, src, src_off, size, value, count, aux, "
     "delay_ticks[, chunks])"},
    {"link_chain", py_link_chain, METH_VARARGS,
     "link_chain(buffer, offset, element_bytes, elements, order=None) -> Chain: a cyclic pointer "
     "chain through the elements in `order` (int32/int64 indices; None = address order)"},
    {"shuffle", py_shuffle, METH_VARARGS,
     "shuffle(array, s0, s1, s2, s3): Fisher-Yates in place over an int32/int64 array, "
     "xoshiro256** seeded with the four words"},
    {"footprint", py_footprint, METH_VARARGS,
     "footprint(index, size, count, aux, dst_address=0) -> (dst_bytes, src_bytes, "
     "chain_element_min): the bytes one call may touch"},
    {"add_chain", py_add_chain, METH_VARARGS, "add_chain(n) -> TSC ticks for n dependent adds"},
    {"verify_copy", py_verify_copy, METH_VARARGS,
     "verify_copy(index, max_size, max_misalign, all_pairs=False, aux=0, count=1) -> None or error"},
    {"rdtsc", py_rdtsc, METH_NOARGS, "fenced TSC read"},
    {"cpu_id", py_cpu_id, METH_NOARGS, "CPU id from rdtscp's TSC_AUX"},
    {"tsc_hz", py_tsc_hz, METH_VARARGS, "tsc_hz(ms=50) -> TSC Hz against CLOCK_MONOTONIC_RAW"},
    {"cpuid", py_cpuid, METH_VARARGS, "cpuid(leaf, subleaf=0) -> (eax, ebx, ecx, edx)"},
    {"isa_supported", py_isa_supported, METH_VARARGS, "isa_supported(name) -> bool"},
    {"perf_open", py_perf_open, METH_VARARGS, "perf_open(type, config, group_fd=-1) -> fd"},
    {"perf_probe", py_perf_probe, METH_VARARGS, "perf_probe(type, config) -> errno or 0"},
    {"perf_ioctl", py_perf_ioctl, METH_VARARGS, "perf_ioctl(fd, 'enable'|'disable'|'reset')"},
    {"perf_read", py_perf_read, METH_VARARGS, "perf_read(leader) -> (values..., enabled, running)"},
    {"perf_rdpmc", py_perf_rdpmc, METH_VARARGS, "perf_rdpmc(fd) -> value or None"},
    {"perf_map", py_perf_map, METH_VARARGS,
     "perf_map(fd) -> PerfPage: the perf event's mmap page (fd must be a perf_event fd)"},
    {"address", py_address, METH_VARARGS, "address(buffer) -> int"},
    {"touch", py_touch, METH_VARARGS, "touch(buf, offset, length, stride)"},
    {"time_call", (PyCFunction)(void (*)(void))mfx_py_time_call, METH_VARARGS | METH_KEYWORDS,
     "time_call(fn, kind, dst, src, size, count, value=0x5a) -> TSC ticks of count calls of the "
     "function at address fn (kind: copy, set, memcpy, memset)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core",
                                       "memfx C core: kernels, timing, perf_event", -1, methods};

PyMODINIT_FUNC PyInit__core(void)
{
    if (collect_kernels() < 0)
        return NULL;
    if (PyType_Ready(&ChainType) < 0)
        return NULL;
    if (PyType_Ready(&PerfPageType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&ChainType);
    if (PyModule_AddObject(m, "Chain", (PyObject *)&ChainType) < 0)
        return NULL;
    Py_INCREF(&PerfPageType);
    if (PyModule_AddObject(m, "PerfPage", (PyObject *)&PerfPageType) < 0)
        return NULL;
    /* layout_shared.h's constants, for the Python side to read, not copy */
    PyObject *layout = PyDict_New();
    if (!layout)
        return NULL;
#define MFX_EXPORT(name)                                                                \
    {                                                                                   \
        PyObject *v = PyLong_FromLongLong((long long)(name));                           \
        if (!v || PyDict_SetItemString(layout, #name, v) < 0)                           \
            return NULL;                                                                \
        Py_DECREF(v);                                                                   \
    }
    MFX_LAYOUT(MFX_EXPORT)
#undef MFX_EXPORT
    if (PyModule_AddObject(m, "layout", layout) < 0)
        return NULL;
    PyObject *info = Py_BuildValue("{s:s,s:s}", "compiler", "gcc " __VERSION__, "cflags", MFX_CFLAGS);
    if (!info || PyModule_AddObject(m, "build_info", info) < 0)
        return NULL;
    return m;
}
