/* binding.h: what the binding's files share.  module.c holds the kernel
 * list and the method table; bind_chain.c the Chain object; bind_perf.c the
 * perf_event calls and the PerfPage object; bind_run.c the kernel calls
 * (run, team_run, the checkers); call.c time_call.  Nothing here is an API
 * beyond the module: every name is the binding's own. */
#ifndef MFX_BINDING_H
#define MFX_BINDING_H
#include <Python.h>
#include "core.h"

/* module.c */
const struct mfx_kernel *usable_kernel(Py_ssize_t index);
const struct mfx_kernel *kernel_row(Py_ssize_t index);

/* bind_chain.c */
typedef struct {
    PyObject_HEAD
    PyObject *buffer;
    Py_buffer export;    /* held from link_chain to dealloc */
    char *base;          /* the buffer's address when the chain was linked */
    Py_ssize_t offset;   /* of element 0 in the buffer */
    Py_ssize_t element;  /* bytes per element */
    Py_ssize_t n;        /* elements */
} ChainObject;
extern PyTypeObject ChainType;
PyObject *py_shuffle(PyObject *self, PyObject *args);
PyObject *py_link_chain(PyObject *self, PyObject *args);

/* bind_perf.c */
typedef struct {
    PyObject_HEAD
    void *page;          /* NULL once closed */
    size_t length;
    Py_ssize_t in_use;   /* run() calls reading it now (the GIL is released there) */
} PerfPageObject;
extern PyTypeObject PerfPageType;
int is_perf_fd(int fd);
int acquire_pages(PyObject *pages_obj, PerfPageObject **pages, int *n_pages);
void release_pages(PerfPageObject **pages, int n_pages);
PyObject *py_perf_map(PyObject *self, PyObject *args);
PyObject *py_perf_open(PyObject *self, PyObject *args);
PyObject *py_perf_probe(PyObject *self, PyObject *args);
PyObject *py_perf_ioctl(PyObject *self, PyObject *args);
PyObject *py_perf_read(PyObject *self, PyObject *args);
PyObject *py_perf_rdpmc(PyObject *self, PyObject *args);

/* bind_run.c */
PyObject *py_run(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *py_team_run(PyObject *self, PyObject *args);
PyObject *py_verify_copy(PyObject *self, PyObject *args);
PyObject *py_fill_check(PyObject *self, PyObject *args);
PyObject *py_footprint(PyObject *self, PyObject *args);

#endif
