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
#include <stdint.h>
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

/* the Change type: a plain tuple subclass of two items (a NamedTuple: no __dict__) */
static int change_type_ok(PyObject *type_obj)
{
    return PyType_Check(type_obj) && PyType_IsSubtype((PyTypeObject *)type_obj, &PyTuple_Type)
           && ((PyTypeObject *)type_obj)->tp_basicsize == PyTuple_Type.tp_basicsize
           && ((PyTypeObject *)type_obj)->tp_itemsize == PyTuple_Type.tp_itemsize;
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
    if (!change_type_ok(type_obj)) {
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

/* INT64_VALUE: forward_flushed's value_deserialize for INT64 values (the 16-byte timestamped
 * value's last 8 bytes, big-endian signed; any other size is not decoded here) */
static PyObject *int64_value = NULL;

/* A timestamped store's value bytes (8-byte timestamp + the inner value's bytes) decoded by
 * inner_deserialize; None for None; NULL + error for anything else (shorter, not bytes). */
static PyObject *stamped_value(PyObject *fn, PyObject *data)
{
    if (data == Py_None)
        return Py_NewRef(Py_None);
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) < 8) {
        PyErr_SetString(PyExc_ValueError, "not a timestamped value's bytes");
        return NULL;
    }
    if (fn == int64_value) {
        if (PyBytes_GET_SIZE(data) != 16) {
            PyErr_SetString(PyExc_ValueError, "not a timestamped INT64's 16 bytes");
            return NULL;
        }
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data) + 8;
        uint64_t u = 0;
        for (int k = 0; k < 8; k++)
            u = (u << 8) | p[k];
        return PyLong_FromLongLong((long long)u);
    }
    return inner_value(fn, data, 8, PyBytes_GET_SIZE(data));
}

/* forward_flushed(changes, start, key_deserialize, value_deserialize, change_type, down, context) -> stop
 * A cached table's flush forwarded (streams/dsl/ops/table.py, attach_tuple_forwarder's Python
 * loop is the definition): for each (key, new, timestamp, old, metadata, headers) of the list
 * from `start`, context.metadata and context.headers set to the change's, then
 * down(key_deserialize(key), change_type(new value, old value), timestamp, headers), a value
 * being its bytes past the 8-byte timestamp through value_deserialize. Stops at the first
 * change it cannot decode (returns its index; the caller forwards that one in Python and calls
 * again after it) and returns len(changes) when done; an error of `down` is raised. The caller
 * puts the context back. */
static PyObject *forward_flushed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "forward_flushed() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *changes = args[0], *key_de = args[2], *value_de = args[3], *type_obj = args[4], *down = args[5];
    PyObject *context = args[6];
    static PyObject *str_metadata = NULL, *str_headers = NULL;
    if (str_metadata == NULL) {
        str_metadata = PyUnicode_InternFromString("metadata");
        str_headers = PyUnicode_InternFromString("headers");
        if (str_metadata == NULL || str_headers == NULL)
            return NULL;
    }
    if (!PyList_CheckExact(changes)) {
        PyErr_SetString(PyExc_TypeError, "forward_flushed() needs a list of changes");
        return NULL;
    }
    if (!change_type_ok(type_obj)) {
        PyErr_SetString(PyExc_TypeError, "forward_flushed() needs a tuple subclass without instance attributes");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0) {
        PyErr_Format(PyExc_ValueError, "forward_flushed() start must be >= 0, got %zd", i);
        return NULL;
    }
    for (; i < PyList_GET_SIZE(changes); i++) {
        PyObject *item = PyList_GET_ITEM(changes, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 6)
            break;
        Py_INCREF(item);  /* held while down runs */
        PyObject *key = PyObject_CallOneArg(key_de, PyTuple_GET_ITEM(item, 0));
        PyObject *new = key == NULL ? NULL : stamped_value(value_de, PyTuple_GET_ITEM(item, 1));
        PyObject *old = new == NULL ? NULL : stamped_value(value_de, PyTuple_GET_ITEM(item, 3));
        if (old == NULL) {  /* not decoded here: the caller's Python decides (its value or error) */
            Py_XDECREF(new);
            Py_XDECREF(key);
            Py_DECREF(item);
            PyErr_Clear();
            break;
        }
        PyObject *change = make_change((PyTypeObject *)type_obj, new, old);
        if (change == NULL) {
            Py_DECREF(key);
            Py_DECREF(item);
            return NULL;
        }
        PyObject *headers = PyTuple_GET_ITEM(item, 5);
        if (PyObject_SetAttr(context, str_metadata, PyTuple_GET_ITEM(item, 4)) < 0
            || PyObject_SetAttr(context, str_headers, headers) < 0) {
            Py_DECREF(change);
            Py_DECREF(key);
            Py_DECREF(item);
            return NULL;
        }
        PyObject *call[4] = {key, change, PyTuple_GET_ITEM(item, 2), headers};
        PyObject *r = PyObject_Vectorcall(down, call, 4, NULL);
        Py_DECREF(change);
        Py_DECREF(key);
        Py_DECREF(item);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    return PyLong_FromSsize_t(i);
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
    {"forward_flushed", (PyCFunction)(void (*)(void))forward_flushed, METH_FASTCALL,
     "forward_flushed(changes, start, key_deserialize, value_deserialize, change_type, down, context)\n--\n\n"
     "A cached table's flushed (key, new, timestamp, old, metadata, headers) bytes from\n"
     "changes[start:] decoded (values past their 8-byte timestamp) and forwarded as down(key,\n"
     "change_type(new, old), timestamp, headers) with context.metadata and context.headers set to\n"
     "the change's; returns the index of the first change it could not decode, or len.\n"
     "value_deserialize INT64_VALUE: a 16-byte value's last 8 bytes as a big-endian int64."},
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
    if (int64_value == NULL && (int64_value = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type)) == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddObjectRef(module, "INT64_VALUE", int64_value) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
