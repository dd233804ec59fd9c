/* memfx._core: the binding.  A method table that converts arguments and
 * results and turns errno into OSError; the logic lives in Python. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <cpuid.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "core.h"

extern const struct mfx_kernel *const mfx_kernel_tables[];
int mfx_perf_open(uint32_t type, uint64_t config, int group_fd, int pinned_cpu_only);
int mfx_perf_rdpmc(const volatile struct perf_event_mmap_page *pc, uint64_t *value);
uint64_t mfx_add_chain(uint64_t n);
int mfx_fill_check(mfx_kernel_fn fn, uint64_t value, uint64_t aux, uint64_t count,
                   uint64_t src_word, unsigned expect, size_t max_size, size_t max_offset,
                   long long fail[5]);

#ifndef MFX_CFLAGS
#define MFX_CFLAGS "unknown"
#endif

static const struct mfx_kernel **kernels;
static Py_ssize_t n_kernels;

static int collect_kernels(void)
{
    Py_ssize_t n = 0;
    for (int t = 0; mfx_kernel_tables[t]; t++)
        for (const struct mfx_kernel *k = mfx_kernel_tables[t]; k->name; k++)
            n++;
    kernels = PyMem_Calloc(n ? n : 1, sizeof *kernels);
    if (!kernels)
        return -1;
    n = 0;
    for (int t = 0; mfx_kernel_tables[t]; t++)
        for (const struct mfx_kernel *k = mfx_kernel_tables[t]; k->name; k++)
            kernels[n++] = k;
    n_kernels = n;
    return 0;
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

/* Resolve an optional buffer argument to an address; view released by caller. */
static int get_region(PyObject *obj, Py_ssize_t offset, size_t need, int writable,
                      Py_buffer *view, char **addr)
{
    *addr = NULL;
    if (obj == Py_None)
        return 0;
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (offset < 0 || (size_t)offset + need > (size_t)view->len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "region [%zd, +%zu) outside buffer of %zd bytes",
                     offset, need, view->len);
        return -1;
    }
    *addr = (char *)view->buf + offset;
    return 1;
}

/* run(kernel, dst, dst_off, src, src_off, size, value, count, aux, perf_fds)
 * -> (ticks, cpu_begin, cpu_end, result, counters)
 * counters: one (values..., time_enabled, time_running) delta tuple per leader fd. */
static PyObject *py_run(PyObject *self, PyObject *args)
{
    Py_ssize_t index, dst_off, src_off, size;
    PyObject *dst_obj, *src_obj, *fds = Py_None, *pages_obj = Py_None;
    unsigned long long value, count, aux;
    if (!PyArg_ParseTuple(args, "nOnOnnKKK|OO", &index, &dst_obj, &dst_off, &src_obj, &src_off,
                          &size, &value, &count, &aux, &fds, &pages_obj))
        return NULL;
    const struct mfx_kernel *k = usable_kernel(index);
    if (!k)
        return NULL;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "negative size");

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

    /* rdpmc_pages: addresses of perf_event mmap pages of hardware counters;
     * read with rdpmc right at the fences (bare metal; None in a VM). */
    const volatile struct perf_event_mmap_page *pages[MFX_PERF_MAX];
    int n_pages = 0;
    if (pages_obj != Py_None) {
        PyObject *seq = PySequence_Fast(pages_obj, "rdpmc_pages must be a sequence");
        if (!seq)
            return NULL;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && n_pages < MFX_PERF_MAX; i++)
            pages[n_pages++] = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(seq, i));
        Py_DECREF(seq);
        if (PyErr_Occurred())
            return NULL;
    }
    uint64_t pmc_before[MFX_PERF_MAX], pmc_after[MFX_PERF_MAX];
    int pmc_ok = n_pages > 0;

    Py_buffer dview, sview;
    char *dst, *src;
    /* Regions are checked for `size` bytes; chase/aux kernels may reach
     * further inside the same buffer, which the caller built. */
    int dheld = get_region(dst_obj, dst_off, (size_t)size, 1, &dview, &dst);
    if (dheld < 0)
        return NULL;
    int sheld = get_region(src_obj, src_off, (size_t)size, 0, &sview, &src);
    if (sheld < 0) {
        if (dheld)
            PyBuffer_Release(&dview);
        return NULL;
    }
    struct mfx_args a = {dst, src, (size_t)size, value, count, aux};
    struct mfx_perf_sample before[2], after[2];
    uint64_t t0, t1, result;
    uint32_t aux_begin, aux_end;
    int perr = 0;

    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < n_leaders && !perr; i++)
        perr = mfx_perf_read_group(leader[i], &before[i]);
    mfx_tsc_end(&aux_begin);
    for (int i = 0; i < n_pages && pmc_ok; i++)
        pmc_ok = mfx_perf_rdpmc(pages[i], &pmc_before[i]) == 0;
    t0 = mfx_tsc_begin();
    result = k->fn(&a);
    t1 = mfx_tsc_end(&aux_end);
    for (int i = 0; i < n_pages && pmc_ok; i++)
        pmc_ok = mfx_perf_rdpmc(pages[i], &pmc_after[i]) == 0;
    for (int i = 0; i < n_leaders && !perr; i++)
        perr = mfx_perf_read_group(leader[i], &after[i]);
    Py_END_ALLOW_THREADS

    if (dheld)
        PyBuffer_Release(&dview);
    if (sheld)
        PyBuffer_Release(&sview);
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

int mfx_verify_copy_kernel(const struct mfx_kernel *k, size_t max_size, unsigned max_misalign,
                           int all_pairs, uint64_t aux, uint64_t count, const char *as_group,
                           long size_skew, char *msg, size_t msglen);

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
    if (max_size < 0)
        return PyErr_Format(PyExc_ValueError, "negative max_size");
    char msg[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mfx_verify_copy_kernel(kernels[index], (size_t)max_size, max_misalign, all_pairs, aux,
                                count, as_group, size_skew, msg, sizeof msg);
    Py_END_ALLOW_THREADS
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
    if (stride <= 0)
        return PyErr_Format(PyExc_ValueError, "stride must be positive");
    Py_buffer v;
    char *p;
    if (get_region(obj, off, (size_t)len, 1, &v, &p) < 0)
        return NULL;
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
    if (max_size < 0 || max_offset < 1 || expect > 255)
        return PyErr_Format(PyExc_ValueError, "need max_size >= 0, max_offset >= 1, expect < 256");
    long long fail[5] = {0, 0, 0, 0, 0};
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = mfx_fill_check(k->fn, value, aux, count, src_word, expect, (size_t)max_size,
                       (size_t)max_offset, fail);
    Py_END_ALLOW_THREADS
    if (r < 0)
        return PyErr_NoMemory();
    if (r == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLLL)", fail[0], fail[1], fail[2], fail[3], fail[4]);
}

static PyMethodDef methods[] = {
    {"fill_check", py_fill_check, METH_VARARGS,
     "fill_check(index, value, aux, count, src_word, expect, max_size, max_offset) -> None or "
     "(size, offset, index, expected, got): byte-exact check of a fill kernel"},
    {"kernels", py_kernels, METH_NOARGS, "kernels() -> list of kernel table rows as dicts"},
    {"run", py_run, METH_VARARGS,
     "run(index, dst, dst_off, src, src_off, size, value, count, aux, perf_fds=None, "
     "rdpmc_pages=None) -> (ticks, cpu_begin, cpu_end, result, counter_deltas[+rdpmc deltas])"},
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
    {"address", py_address, METH_VARARGS, "address(buffer) -> int"},
    {"touch", py_touch, METH_VARARGS, "touch(buf, offset, length, stride)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core",
                                       "memfx C core: kernels, timing, perf_event", -1, methods};

PyMODINIT_FUNC PyInit__core(void)
{
    if (collect_kernels() < 0)
        return PyErr_NoMemory();
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    PyObject *info = Py_BuildValue("{s:s,s:s}", "compiler", "gcc " __VERSION__, "cflags", MFX_CFLAGS);
    if (!info || PyModule_AddObject(m, "build_info", info) < 0)
        return NULL;
    return m;
}
