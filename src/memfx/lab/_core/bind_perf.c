/* memfx.lab._core: the perf_event calls and the PerfPage object (a perf
 * event's mmap page, mapped here from a perf fd, the only pages run() reads
 * with rdpmc). */
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

/* ---- perf pages ---- */

/* Whether fd is a perf_event fd: rdpmc with the index of a page mapped from
 * anything else (a file with forged contents) faults, so only the pages the
 * kernel writes for a perf event are read. */
int is_perf_fd(int fd)
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

PyTypeObject PerfPageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "memfx.lab._core.PerfPage",
    .tp_basicsize = sizeof(PerfPageObject),
    .tp_dealloc = (destructor)perf_page_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a perf event's mmap page mapped by perf_map(); pass it in run()'s rdpmc_pages",
    .tp_methods = perf_page_methods,
};

/* perf_map(fd) -> PerfPage: the event's first mmap page, read-only. */
PyObject *py_perf_map(PyObject *self, PyObject *args)
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
int acquire_pages(PyObject *pages_obj, PerfPageObject **pages, int *n_pages)
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

void release_pages(PerfPageObject **pages, int n_pages)
{
    for (int i = 0; i < n_pages; i++) {
        pages[i]->in_use--;
        Py_DECREF(pages[i]);
    }
}

PyObject *py_perf_open(PyObject *self, PyObject *args)
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
PyObject *py_perf_probe(PyObject *self, PyObject *args)
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

PyObject *py_perf_ioctl(PyObject *self, PyObject *args)
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

PyObject *py_perf_read(PyObject *self, PyObject *args)
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
PyObject *py_perf_rdpmc(PyObject *self, PyObject *args)
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
