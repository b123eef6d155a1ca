/* Kafka's murmur2 key hash (Utils.murmur2) in C: the optional accelerator of eddy/murmur2.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "murmur2.h"

/* The hash itself lives in murmur2.h, shared with streams/runtime/_sink.c. */
static int32_t kafka_murmur2(const uint8_t *data, Py_ssize_t length)
{
    return eddy_murmur2(data, (size_t)length);
}

PyDoc_STRVAR(murmur2_doc, "murmur2(data) -> int: Kafka's Utils.murmur2 of a bytes-like object, as a signed 32-bit int.");

static PyObject *py_murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int32_t h = kafka_murmur2((const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong(h);
}

PyDoc_STRVAR(partition_doc, "murmur2_partition(key, num_partitions) -> int: (murmur2(key) & 0x7fffffff) % n.");

static PyObject *py_partition(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*n:murmur2_partition", &view, &n))
        return NULL;
    if (n <= 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "murmur2_partition: num_partitions must be positive, got %zd", n);
        return NULL;
    }
    int32_t h = kafka_murmur2((const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t((Py_ssize_t)((uint32_t)h & 0x7fffffffu) % n);
}

static PyMethodDef methods[] = {
    {"murmur2", py_murmur2, METH_O, murmur2_doc},
    {"murmur2_partition", py_partition, METH_VARARGS, partition_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, .m_name = "eddy._murmur2", .m_doc = "Kafka's murmur2 key hash in C.", .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__murmur2(void) { return PyModule_Create(&module_def); }
