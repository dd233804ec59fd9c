/* call.c: the core's timed loop around a function given by its address. */
#ifndef MFX_CALL_H
#define MFX_CALL_H
#include <Python.h>

PyObject *mfx_py_time_call(PyObject *self, PyObject *args, PyObject *kwargs);

#endif
