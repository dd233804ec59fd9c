/* memfx.lab._core: the Chain object -- a pointer chain linked in C inside a
 * caller's buffer (link_chain), and the shuffle that orders it. */
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

/* ---- pointer chains ---- */

/* A chain linked in C inside a caller's buffer (link_chain).  It holds an
 * export of the buffer for its whole life, so the buffer cannot be resized,
 * closed or unmapped under it (a bytearray shrunk and regrown at the same
 * address would pass an address check with its pointers gone); run()
 * re-acquires it and refuses it if it moved or shrank all the same.  Python
 * can still write the buffer's bytes, so a walk that only reads through the
 * chain runs under the fault guard (guard.c) and one that writes through
 * it is checked whole first (mfx_chain_intact). */

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

PyTypeObject ChainType = {
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
PyObject *py_shuffle(PyObject *self, PyObject *args)
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

PyObject *py_link_chain(PyObject *self, PyObject *args)
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
