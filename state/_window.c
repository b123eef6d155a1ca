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

static PyObject *scan(PyObject *it, PyObject *key, long long first, long long last, long long time_from,
                      long long time_to)
{
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
    return scan(it, key, first, last, time_from, time_to);
}

/* ---- a plain RocksDB window store's put and single-key fetch ----------------------------------- */

static PyObject *str_engine, *str_db, *str_put, *str_delete, *str_retain_duplicates, *str_seqnum, *str_interval,
    *str_observed, *str_retention, *str_min_live, *str_max_segment, *str_is_open, *str_scan_iterator;

static inline long long floordiv(long long a, long long b)
{
    long long q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* store.<name> as a C long long; -1 with an exception on failure (*ok = 0) */
static long long get_ll(PyObject *store, PyObject *name, int *ok)
{
    PyObject *v = PyObject_GetAttr(store, name);
    if (v == NULL) {
        *ok = 0;
        return -1;
    }
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred())
        *ok = 0;
    return r;
}

static int set_ll(PyObject *store, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = PyObject_SetAttr(store, name, v);
    Py_DECREF(v);
    return rc;
}

/* an exact int >= 0 that fits a long long, in *out; 0 when not (the Python path decides) */
static int plain_time(PyObject *v, long long *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return overflow == 0 && *out >= 0;
}

static PyObject *call_fallback(PyObject *const *args, Py_ssize_t nargs)
{
    /* the Python method, as fallback(store, *rest) */
    return PyObject_Vectorcall(args[0], args + 1, nargs - 1, NULL);
}

static PyObject *put_window(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "put_window() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *store = args[1], *key = args[2], *value = args[3];
    long long ws;
    if (!PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)) || !plain_time(args[4], &ws))
        return call_fallback(args, nargs);
    PyObject *engine = PyObject_GetAttr(store, str_engine);
    if (engine == NULL)
        return NULL;
    PyObject *db = PyObject_GetAttr(engine, str_db);
    Py_DECREF(engine);
    if (db == NULL)
        return NULL;
    PyObject *result = NULL;
    if (db == Py_None) { /* closed, or bulk loading: the engine's own path */
        Py_DECREF(db);
        return call_fallback(args, nargs);
    }
    PyObject *retain_obj = PyObject_GetAttr(store, str_retain_duplicates);
    int retain = retain_obj == NULL ? -1 : PyObject_IsTrue(retain_obj);
    Py_XDECREF(retain_obj);
    if (retain < 0)
        goto out;
    if (retain && value == Py_None) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    int ok = 1;
    long long interval = get_ll(store, str_interval, &ok);
    long long observed = get_ll(store, str_observed, &ok);
    long long retention = get_ll(store, str_retention, &ok);
    long long min_live = get_ll(store, str_min_live, &ok);
    long long max_segment = get_ll(store, str_max_segment, &ok);
    long long seqnum = retain ? get_ll(store, str_seqnum, &ok) : 0;
    if (!ok)
        goto out;
    long long seg = floordiv(ws, interval);
    /* segments to drop, or an expired record: the Python path (it logs, counts and drops) */
    if ((ws > observed && floordiv(ws - retention, interval) > min_live) || seg < min_live) {
        Py_DECREF(db);
        return call_fallback(args, nargs);
    }
    if (retain) {
        seqnum = (seqnum + 1) & 0x7FFFFFFF;
        if (set_ll(store, str_seqnum, seqnum) < 0)
            goto out;
    }
    if (ws > observed && set_ll(store, str_observed, ws) < 0)
        goto out;
    if (seg > max_segment && set_ll(store, str_max_segment, seg) < 0)
        goto out;
    Py_ssize_t klen = PyBytes_GET_SIZE(key);
    PyObject *changelog_key = PyBytes_FromStringAndSize(NULL, klen + 12);
    PyObject *stored = PyBytes_FromStringAndSize(NULL, 8 + klen + 12);
    if (changelog_key == NULL || stored == NULL) {
        Py_XDECREF(changelog_key);
        Py_XDECREF(stored);
        goto out;
    }
    unsigned char *c = (unsigned char *)PyBytes_AS_STRING(changelog_key);
    memcpy(c, PyBytes_AS_STRING(key), klen);
    put_be64(c + klen, (uint64_t)ws);
    c[klen + 8] = (unsigned char)(seqnum >> 24);
    c[klen + 9] = (unsigned char)(seqnum >> 16);
    c[klen + 10] = (unsigned char)(seqnum >> 8);
    c[klen + 11] = (unsigned char)seqnum;
    unsigned char *st = (unsigned char *)PyBytes_AS_STRING(stored);
    put_be64(st, (uint64_t)seg);
    memcpy(st + 8, c, klen + 12);
    PyObject *r = value == Py_None ? PyObject_CallMethodOneArg(db, str_delete, stored)
                                   : PyObject_CallMethodObjArgs(db, str_put, stored, value, NULL);
    Py_DECREF(stored);
    if (r == NULL) {
        Py_DECREF(changelog_key);
        goto out;
    }
    Py_DECREF(r);
    result = changelog_key;
out:
    Py_DECREF(db);
    return result;
}

static PyObject *fetch_window(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "fetch_window() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *store = args[1], *key = args[2];
    long long time_from, time_to;
    if (!PyBytes_CheckExact(key) || !plain_time(args[3], &time_from) || !plain_time(args[4], &time_to))
        return call_fallback(args, nargs);
    PyObject *engine = PyObject_GetAttr(store, str_engine);
    if (engine == NULL)
        return NULL;
    PyObject *is_open = PyObject_GetAttr(engine, str_is_open);
    Py_DECREF(engine);
    if (is_open == NULL)
        return NULL;
    int open = PyObject_IsTrue(is_open);
    Py_DECREF(is_open);
    if (open < 0)
        return NULL;
    if (!open)
        return call_fallback(args, nargs);
    int ok = 1;
    long long interval = get_ll(store, str_interval, &ok);
    long long observed = get_ll(store, str_observed, &ok);
    long long retention = get_ll(store, str_retention, &ok);
    long long min_live = get_ll(store, str_min_live, &ok);
    if (!ok)
        return NULL;
    /* nothing at or before observed - retention (actual_from); nothing starts after observed */
    if (time_from < observed - retention + 1)
        time_from = observed - retention + 1;
    if (time_to > observed)
        time_to = observed;
    if (time_from > time_to)
        return PyList_New(0);
    long long first = floordiv(time_from, interval), last = floordiv(time_to, interval);
    if (first < min_live)
        first = min_live;
    PyObject *scan_iterator = PyObject_GetAttr(store, str_scan_iterator);
    if (scan_iterator == NULL)
        return NULL;
    PyObject *it = scan_iterator == Py_None ? NULL : PyObject_CallNoArgs(scan_iterator);
    Py_DECREF(scan_iterator);
    if (it == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return call_fallback(args, nargs);
    }
    PyObject *found = scan(it, key, first, last, time_from, time_to);
    Py_DECREF(it);
    return found;
}

static PyMethodDef methods[] = {
    {"scan_key", (PyCFunction)(void (*)(void))scan_key, METH_FASTCALL,
     "scan_key(it, key, first_segment, last_segment, time_from, time_to) -> [(window start, value)]"},
    {"put_window", (PyCFunction)(void (*)(void))put_window, METH_FASTCALL,
     "put_window(fallback, store, key, value, window_start) -> changelog key or None"},
    {"fetch_window", (PyCFunction)(void (*)(void))fetch_window, METH_FASTCALL,
     "fetch_window(fallback, store, key, time_from, time_to) -> [(window start, value)]"},
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
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(str_engine, "_engine");
    INTERN(str_db, "_db");
    INTERN(str_put, "put");
    INTERN(str_delete, "delete");
    INTERN(str_retain_duplicates, "retain_duplicates");
    INTERN(str_seqnum, "_seqnum");
    INTERN(str_interval, "segment_interval_ms");
    INTERN(str_observed, "observed_stream_time");
    INTERN(str_retention, "retention_ms");
    INTERN(str_min_live, "_min_live_segment");
    INTERN(str_max_segment, "_max_segment");
    INTERN(str_is_open, "is_open");
    INTERN(str_scan_iterator, "_scan_iterator");
#undef INTERN
    return PyModule_Create(&module);
}
