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
#include "binding.h"
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
const struct mfx_kernel *usable_kernel(Py_ssize_t index)
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

/* The kernel at `index` whether or not this CPU can run it (its footprint
 * is arithmetic), or NULL with IndexError set. */
const struct mfx_kernel *kernel_row(Py_ssize_t index)
{
    if (index < 0 || index >= n_kernels) {
        PyErr_Format(PyExc_IndexError, "no kernel %zd", index);
        return NULL;
    }
    return kernels[index];
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

static PyMethodDef methods[] = {
    {"fill_check", py_fill_check, METH_VARARGS,
     "fill_check(index, value, aux, count, src_word, expect, max_size, max_offset) -> None or "
     "(size, offset, index, expected, got): byte-exact check of a fill kernel"},
    {"kernels", py_kernels, METH_NOARGS, "kernels() -> list of kernel table rows as dicts"},
    {"run", (PyCFunction)(void (*)(void))py_run, METH_VARARGS | METH_KEYWORDS,
     "run(kernel, dst, dst_off, src, src_off, size, value, count, aux, perf_fds=None, "
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
