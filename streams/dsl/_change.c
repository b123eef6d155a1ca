/*
 * C accelerator of streams/dsl/change.py's ChangeSerde (optional: change.py falls back to its
 * Python functions, which stay the definition).
 *
 * Kafka's ChangedSerializer bytes: `old + 0x00`, `new + 0x01`, or `new length (4 bytes,
 * big-endian) + new + old + 0x02`. These are the serde's *unchecked* functions: for the common
 * case they return exactly what the Python functions return; anything else (an inner function
 * failing or giving no bytes, a value that is no 2-tuple, a malformed or odd input) raises, and
 * the caller then calls the Python function, whose result or error decides. So no error of the
 * serde's own is raised here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *inner_bytes(PyObject *fn, PyObject *value)  /* new ref: exact bytes, else NULL + error */
{
    PyObject *data = PyObject_CallOneArg(fn, value);
    if (data != NULL && !PyBytes_CheckExact(data)) {
        Py_DECREF(data);
        PyErr_SetString(PyExc_TypeError, "the inner serializer gave no bytes");
        return NULL;
    }
    return data;
}

/* serialize(inner_serialize, change) -> bytes or None */
static PyObject *change_serialize(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "serialize() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *fn = args[0], *change = args[1];
    if (change == Py_None)
        Py_RETURN_NONE;
    if (!PyTuple_Check(change) || PyTuple_GET_SIZE(change) != 2) {
        PyErr_SetString(PyExc_TypeError, "a Change is a (new, old) tuple");
        return NULL;
    }
    PyObject *new = PyTuple_GET_ITEM(change, 0), *old = PyTuple_GET_ITEM(change, 1);
    if (new == Py_None && old == Py_None) {
        PyErr_SetString(PyExc_ValueError, "a Change with neither a new nor an old value");
        return NULL;
    }
    if (new != Py_None && old != Py_None) {
        PyObject *nb = inner_bytes(fn, new);
        if (nb == NULL)
            return NULL;
        PyObject *ob = inner_bytes(fn, old);
        if (ob == NULL) {
            Py_DECREF(nb);
            return NULL;
        }
        Py_ssize_t n = PyBytes_GET_SIZE(nb), m = PyBytes_GET_SIZE(ob);
        if ((unsigned long long)n > 0xFFFFFFFFull) {  /* the 4-byte length cannot hold it */
            Py_DECREF(nb);
            Py_DECREF(ob);
            PyErr_SetString(PyExc_OverflowError, "the new value is too long for a Change");
            return NULL;
        }
        PyObject *out = PyBytes_FromStringAndSize(NULL, 4 + n + m + 1);
        if (out != NULL) {
            unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
            unsigned long long len = (unsigned long long)n;
            p[0] = (unsigned char)(len >> 24);
            p[1] = (unsigned char)(len >> 16);
            p[2] = (unsigned char)(len >> 8);
            p[3] = (unsigned char)len;
            memcpy(p + 4, PyBytes_AS_STRING(nb), n);
            memcpy(p + 4 + n, PyBytes_AS_STRING(ob), m);
            p[4 + n + m] = 2;
        }
        Py_DECREF(nb);
        Py_DECREF(ob);
        return out;
    }
    PyObject *one = new != Py_None ? new : old;
    PyObject *b = inner_bytes(fn, one);
    if (b == NULL)
        return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(b);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n + 1);
    if (out != NULL) {
        memcpy(PyBytes_AS_STRING(out), PyBytes_AS_STRING(b), n);
        PyBytes_AS_STRING(out)[n] = new != Py_None ? 1 : 0;
    }
    Py_DECREF(b);
    return out;
}

/* inner_deserialize(data[start:stop]) */
static PyObject *inner_value(PyObject *fn, PyObject *data, Py_ssize_t start, Py_ssize_t stop)
{
    PyObject *part = PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + start, stop - start);
    if (part == NULL)
        return NULL;
    PyObject *value = PyObject_CallOneArg(fn, part);
    Py_DECREF(part);
    return value;
}

static PyObject *make_change(PyTypeObject *type, PyObject *new, PyObject *old)  /* steals both */
{
    PyObject *change = type->tp_alloc(type, 2);
    if (change == NULL) {
        Py_DECREF(new);
        Py_DECREF(old);
        return NULL;
    }
    PyTuple_SET_ITEM(change, 0, new);
    PyTuple_SET_ITEM(change, 1, old);
    return change;
}

/* deserialize(inner_deserialize, change_type, data) -> Change or None */
static PyObject *change_deserialize(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "deserialize() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *fn = args[0], *type_obj = args[1], *data = args[2];
    if (data == Py_None)
        Py_RETURN_NONE;
    /* the Change type: a plain tuple subclass of two items (a NamedTuple: no __dict__) */
    if (!PyType_Check(type_obj) || !PyType_IsSubtype((PyTypeObject *)type_obj, &PyTuple_Type)
        || ((PyTypeObject *)type_obj)->tp_basicsize != PyTuple_Type.tp_basicsize
        || ((PyTypeObject *)type_obj)->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "deserialize() needs a tuple subclass without instance attributes");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)type_obj;
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) == 0) {
        PyErr_SetString(PyExc_ValueError, "not the bytes of a Change");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    unsigned char flag = p[n - 1];
    if (flag == 0 || flag == 1) {
        PyObject *value = inner_value(fn, data, 0, n - 1);
        if (value == NULL)
            return NULL;
        if (flag == 1)
            return make_change(type, value, Py_NewRef(Py_None));
        return make_change(type, Py_NewRef(Py_None), value);
    }
    if (flag == 2 && n >= 5) {
        unsigned long long len = ((unsigned long long)p[0] << 24) | ((unsigned long long)p[1] << 16)
                                 | ((unsigned long long)p[2] << 8) | p[3];
        if (len > (unsigned long long)(n - 5)) {  /* past the old value's end: the Python function decides */
            PyErr_SetString(PyExc_ValueError, "a Change's new value runs past its end");
            return NULL;
        }
        Py_ssize_t split = 4 + (Py_ssize_t)len;
        PyObject *new = inner_value(fn, data, 4, split);
        if (new == NULL)
            return NULL;
        PyObject *old = inner_value(fn, data, split, n - 1);
        if (old == NULL) {
            Py_DECREF(new);
            return NULL;
        }
        return make_change(type, new, old);
    }
    PyErr_SetString(PyExc_ValueError, "an unknown flag byte or too short");
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"serialize", (PyCFunction)(void (*)(void))change_serialize, METH_FASTCALL,
     "serialize(inner_serialize, change)\n--\n\n"
     "ChangeSerde's serialize for a (new, old) tuple, each present value by inner_serialize\n"
     "(which must give bytes); None for None. Raises for any other case (see the module doc)."},
    {"deserialize", (PyCFunction)(void (*)(void))change_deserialize, METH_FASTCALL,
     "deserialize(inner_deserialize, change_type, data)\n--\n\n"
     "ChangeSerde's deserialize of bytes into change_type(new, old), each present value by\n"
     "inner_deserialize; None for None. Raises for any other case (see the module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "streams.dsl._change",
    .m_doc = "C implementation of the unchecked functions of streams.dsl.change.ChangeSerde.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__change(void)
{
    return PyModule_Create(&module_def);
}
