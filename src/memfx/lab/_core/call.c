/* time_call: the core's timed loop around a function that is not one of its
 * kernels -- a function another compiler build made (advice's GCC strategy
 * check builds the same fixed-size copies with and without
 * -mmemcpy-strategy= into two shared objects).  The loop, the fences and the
 * TSC reads are the kernels' own (core.h), so both builds are timed by one
 * harness at one address, and only the function under test differs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include "core.h"
#include "call.h"

/* The signatures a timed function may have. */
enum mfx_call_kind { CALL_COPY, CALL_SET, CALL_MEMCPY, CALL_MEMSET };

typedef void (*copy_fn)(char *, const char *);
typedef void (*set_fn)(char *, int);
typedef void *(*memcpy_fn)(void *, const void *, size_t);
typedef void *(*memset_fn)(void *, int, size_t);

/* noinline and aligned: the loop is the same code at the same place for
 * every function it times. */
__attribute__((noinline, aligned(64)))
static uint64_t time_loop(uintptr_t fn, int kind, char *dst, const char *src, size_t size,
                          int value, uint64_t count)
{
    uint64_t t0 = mfx_tsc_begin();
    switch (kind) {
    case CALL_COPY:
        for (uint64_t i = 0; i < count; i++)
            ((copy_fn)fn)(dst, src);
        break;
    case CALL_SET:
        for (uint64_t i = 0; i < count; i++)
            ((set_fn)fn)(dst, value);
        break;
    case CALL_MEMCPY:
        for (uint64_t i = 0; i < count; i++)
            ((memcpy_fn)fn)(dst, src, size);
        break;
    default:
        for (uint64_t i = 0; i < count; i++)
            ((memset_fn)fn)(dst, value, size);
        break;
    }
    uint64_t t1 = mfx_tsc_end(0);
    return t1 - t0;
}

static int kind_of(const char *name)
{
    static const char *names[] = {"copy", "set", "memcpy", "memset"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

/* time_call(fn, kind, dst, src, size, count, value=0x5a) -> TSC ticks of
 * `count` calls.  fn: the address of a function with kind's signature
 * ("copy": f(dst, src), the size fixed in the function; "set": f(dst, value);
 * "memcpy"/"memset": the C library's).  The caller vouches for the address
 * (a wrong one crashes the process: only advice's child process calls this,
 * with symbols it looked up itself); the buffers are checked against size. */
PyObject *mfx_py_time_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fn", "kind", "dst", "src", "size", "count", "value", NULL};
    unsigned long long fn, count;
    const char *kind_name;
    Py_buffer dst, src;
    Py_ssize_t size;
    int value = 0x5a;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Ksw*y*nK|i", kwlist, &fn, &kind_name, &dst,
                                     &src, &size, &count, &value))
        return NULL;
    PyObject *result = NULL;
    int kind = kind_of(kind_name);
    if (kind < 0)
        PyErr_Format(PyExc_ValueError, "kind %s: one of copy, set, memcpy, memset", kind_name);
    else if (fn == 0)
        PyErr_SetString(PyExc_ValueError, "fn is a null address");
    else if (size < 0 || dst.len < size || ((kind == CALL_COPY || kind == CALL_MEMCPY)
                                            && src.len < size))
        PyErr_Format(PyExc_ValueError, "size %zd does not fit the buffers (%zd, %zd bytes)",
                     size, dst.len, src.len);
    else if (count == 0)
        PyErr_SetString(PyExc_ValueError, "count must be at least 1");
    else {
        uint64_t ticks;
        Py_BEGIN_ALLOW_THREADS
        ticks = time_loop((uintptr_t)fn, kind, (char *)dst.buf, (const char *)src.buf,
                          (size_t)size, value, count);
        Py_END_ALLOW_THREADS
        result = PyLong_FromUnsignedLongLong(ticks);
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    return result;
}
