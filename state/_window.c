/*
 * C accelerator of state/window.py's single-key fetch (optional: window.py falls back to Python).
 *
 * scan_key(it, key, first_segment, last_segment, time_from, time_to) reads, with the RocksDB
 * iterator `it` (rocksdict's: seek/key/value/next; key() is None where it is not valid), the
 * records of `key` in the window store's layout (8-byte BE segment id + key + 8-byte BE window
 * start + 4-byte BE sequence number) whose window start lies in [time_from, time_to], segment
 * by segment, and returns them as a list of (window start, value) in key order: what
 * SegmentedWindowStore's Python loop over RocksDBKeyValueStore.scan returns. One seek per
 * segment; a stored key of another length within the bounds belongs to another key (see
 * window.py) and is skipped.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *str_seek, *str_key, *str_value, *str_next;

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static int64_t get_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static PyObject *call0(PyObject *obj, PyObject *name)
{
    return PyObject_CallMethodNoArgs(obj, name);
}

static PyObject *scan_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "scan_key() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *it = args[0], *key = args[1];
    if (!PyBytes_CheckExact(key)) {
        PyErr_Format(PyExc_TypeError, "scan_key(): key must be bytes, got %.100s", Py_TYPE(key)->tp_name);
        return NULL;
    }
    long long first = PyLong_AsLongLong(args[2]);
    long long last = PyLong_AsLongLong(args[3]);
    long long time_from = PyLong_AsLongLong(args[4]);
    long long time_to = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t klen = PyBytes_GET_SIZE(key);
    Py_ssize_t total = 8 + klen + 12;
    unsigned char buf[128];  /* the two bounds, side by side */
    unsigned char *lo = total <= (Py_ssize_t)sizeof(buf) / 2 ? buf : PyMem_Malloc(2 * total);
    if (lo == NULL)
        return PyErr_NoMemory();
    unsigned char *up = lo + total;
    PyObject *found = PyList_New(0);
    if (found == NULL)
        goto fail;
    memcpy(lo + 8, PyBytes_AS_STRING(key), klen);
    put_be64(lo + 8 + klen, (uint64_t)time_from);
    memset(lo + 16 + klen, 0, 4);
    memcpy(up + 8, PyBytes_AS_STRING(key), klen);
    put_be64(up + 8 + klen, (uint64_t)time_to);
    up[16 + klen] = 0x7f;
    memset(up + 17 + klen, 0xff, 3);
    /* where the previous segment's scan stopped is where a seek to this one would land: no seek */
    int positioned = 0;
    for (long long seg = first; seg <= last; seg++) {
        PyObject *r;
        put_be64(lo, (uint64_t)seg);
        put_be64(up, (uint64_t)seg);
        if (!positioned) {
            /* a fresh bytes object each seek: the iterator may keep the one it was given */
            PyObject *seek_key = PyBytes_FromStringAndSize((const char *)lo, total);
            if (seek_key == NULL)
                goto fail;
            r = PyObject_CallMethodOneArg(it, str_seek, seek_key);
            Py_DECREF(seek_key);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
        }
        positioned = 0;
        for (;;) {
            /* key() is None where the iterator is not valid (rocksdict): no valid() call */
            PyObject *k = call0(it, str_key);
            if (k == NULL)
                goto fail;
            if (k == Py_None) {  /* nothing after: no later segment holds a record either */
                Py_DECREF(k);
                goto done;
            }
            if (!PyBytes_Check(k)) {
                PyErr_Format(PyExc_TypeError, "scan_key(): the iterator's key is %.100s, not bytes",
                             Py_TYPE(k)->tp_name);
                Py_DECREF(k);
                goto fail;
            }
            Py_ssize_t n = PyBytes_GET_SIZE(k);
            const unsigned char *kp = (const unsigned char *)PyBytes_AS_STRING(k);
            /* k > upper (byte order, a longer key with upper as its prefix being greater) ends it */
            int c = memcmp(kp, up, n < total ? n : total);
            if (c > 0 || (c == 0 && n > total)) {
                if (seg < last) {
                    /* at or past the next segment's lower bound: the seek there lands here */
                    put_be64(lo, (uint64_t)(seg + 1));
                    c = memcmp(kp, lo, n < total ? n : total);
                    positioned = c > 0 || (c == 0 && n >= total);
                }
                Py_DECREF(k);
                break;
            }
            if (n == total) {
                PyObject *v = call0(it, str_value);
                if (v == NULL) {
                    Py_DECREF(k);
                    goto fail;
                }
                PyObject *ts = PyLong_FromLongLong(get_be64(kp + 8 + klen));
                Py_DECREF(k);
                if (ts == NULL) {
                    Py_DECREF(v);
                    goto fail;
                }
                PyObject *pair = PyTuple_New(2);
                if (pair == NULL) {
                    Py_DECREF(ts);
                    Py_DECREF(v);
                    goto fail;
                }
                PyTuple_SET_ITEM(pair, 0, ts);
                PyTuple_SET_ITEM(pair, 1, v);
                int err = PyList_Append(found, pair);
                Py_DECREF(pair);
                if (err < 0)
                    goto fail;
            } else {
                Py_DECREF(k);
            }
            r = call0(it, str_next);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
        }
    }
done:
    if (lo != buf)
        PyMem_Free(lo);
    return found;
fail:
    if (lo != buf)
        PyMem_Free(lo);
    Py_XDECREF(found);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan_key", (PyCFunction)(void (*)(void))scan_key, METH_FASTCALL,
     "scan_key(it, key, first_segment, last_segment, time_from, time_to) -> [(window start, value)]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "state._window", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__window(void)
{
    str_seek = PyUnicode_InternFromString("seek");
    str_key = PyUnicode_InternFromString("key");
    str_value = PyUnicode_InternFromString("value");
    str_next = PyUnicode_InternFromString("next");
    if (!str_seek || !str_key || !str_value || !str_next)
        return NULL;
    return PyModule_Create(&module);
}
