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

static PyObject *str_db, *str_put, *str_delete, *str_seqnum, *str_observed, *str_min_live, *str_max_segment,
    *str_is_open;

static inline long long floordiv(long long a, long long b)
{
    long long q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* The mutable state of a store lives in its instance dict (plain attributes, no descriptor of
 * those names on the store classes): read and written there directly. */
static int dict_ll(PyObject *dict, PyObject *name, long long *out)
{
    PyObject *v = PyDict_GetItemWithError(dict, name);
    if (v == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_AttributeError, "window store has no attribute %R", name);
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int dict_set_ll(PyObject *dict, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = PyDict_SetItem(dict, name, v);
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

/* the Python method: fallback(store, a, b, c) */
static PyObject *call_fallback(PyObject *fallback, PyObject *store, PyObject *a, PyObject *b, PyObject *c)
{
    PyObject *call_args[4] = {store, a, b, c};
    return PyObject_Vectorcall(fallback, call_args, 4, NULL);
}

/* fallback(store, *args[first_rest:], **keywords): the Python method, for a call the C form does
 * not take as it stands (keyword arguments, another number of arguments) */
static PyObject *fallback_as_called(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t first_rest,
                                    const char *name)
{
    if (nargs < first_rest) {
        PyErr_Format(PyExc_TypeError, "%s() needs its %zd bound arguments", name, first_rest);
        return NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t npos = 1 + nargs - first_rest;
    PyObject *small[16];
    PyObject **call_args = npos + nkw <= 16 ? small : PyMem_Malloc((npos + nkw) * sizeof(PyObject *));
    if (call_args == NULL)
        return PyErr_NoMemory();
    call_args[0] = args[1];
    for (Py_ssize_t i = first_rest; i < nargs + nkw; i++)
        call_args[1 + i - first_rest] = args[i];
    PyObject *r = PyObject_Vectorcall(args[0], call_args, npos, kwnames);
    if (call_args != small)
        PyMem_Free(call_args);
    return r;
}

/* put_window(fallback, store, engine, segment_interval_ms, retention_ms, retain_duplicates, key, value,
 * window_start): SegmentedWindowStore.put_for_changelog (fallback) of a plain key-first store on a
 * RocksDB engine, for the common case: plain arguments, an open engine out of bulk loading, a
 * live segment and no segment to drop. Any other case goes to fallback, unchanged. */
static PyObject *put_window(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 9 || kwnames != NULL)
        return fallback_as_called(args, nargs, kwnames, 6, "put_window");
    PyObject *fallback = args[0], *store = args[1], *engine = args[2];
    PyObject *key = args[6], *value = args[7];
    long long interval = PyLong_AsLongLong(args[3]), retention = PyLong_AsLongLong(args[4]);
    int retain = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || retain < 0)
        return NULL;
    if (interval <= 0) {
        PyErr_SetString(PyExc_ValueError, "put_window(): the segment interval must be positive");
        return NULL;
    }
    long long ws;
    if (!PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)) || !plain_time(args[8], &ws))
        return call_fallback(fallback, store, key, value, args[8]);
    if (retain && value == Py_None) /* not kept among duplicates, but logged: the rule's own path */
        return call_fallback(fallback, store, key, value, args[8]);
    PyObject *engine_dict = PyObject_GenericGetDict(engine, NULL);
    if (engine_dict == NULL)
        return NULL;
    PyObject *db = PyDict_GetItemWithError(engine_dict, str_db);
    Py_XINCREF(db);
    Py_DECREF(engine_dict);
    if (db == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return call_fallback(fallback, store, key, value, args[8]);
    }
    if (db == Py_None) { /* closed, or bulk loading: the engine's own path */
        Py_DECREF(db);
        return call_fallback(fallback, store, key, value, args[8]);
    }
    PyObject *result = NULL;
    PyObject *dict = PyObject_GenericGetDict(store, NULL);
    if (dict == NULL)
        goto out;
    long long observed, min_live, max_segment, seqnum = 0;
    if (dict_ll(dict, str_observed, &observed) < 0 || dict_ll(dict, str_min_live, &min_live) < 0
        || dict_ll(dict, str_max_segment, &max_segment) < 0 || (retain && dict_ll(dict, str_seqnum, &seqnum) < 0))
        goto out;
    long long seg = floordiv(ws, interval);
    /* segments to drop, or an expired record: the Python path (it logs, counts and drops) */
    if ((ws > observed && floordiv(ws - retention, interval) > min_live) || seg < min_live) {
        result = call_fallback(fallback, store, key, value, args[8]);
        goto out;
    }
    if (retain) {
        seqnum = (seqnum + 1) & 0x7FFFFFFF;
        if (dict_set_ll(dict, str_seqnum, seqnum) < 0)
            goto out;
    }
    if (ws > observed && dict_set_ll(dict, str_observed, ws) < 0)
        goto out;
    if (seg > max_segment && dict_set_ll(dict, str_max_segment, seg) < 0)
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
    PyObject *r;
    if (value == Py_None) {
        r = PyObject_CallMethodOneArg(db, str_delete, stored);
    } else {
        PyObject *call_args[4] = {NULL, db, stored, value}; /* a free slot before self: the offset flag's */
        r = PyObject_VectorcallMethod(str_put, call_args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_DECREF(stored);
    if (r == NULL) {
        Py_DECREF(changelog_key);
        goto out;
    }
    Py_DECREF(r);
    result = changelog_key;
out:
    Py_XDECREF(dict);
    Py_DECREF(db);
    return result;
}

/* fetch_window(fallback, store, engine, scan_iterator, segment_interval_ms, retention_ms, key, time_from,
 * time_to): SegmentedWindowStore.fetch_values (fallback) of a plain key-first store on a RocksDB
 * engine, for plain arguments and an open engine; any other case goes to fallback. */
static PyObject *fetch_window(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 9 || kwnames != NULL)
        return fallback_as_called(args, nargs, kwnames, 6, "fetch_window");
    PyObject *fallback = args[0], *store = args[1], *engine = args[2], *scan_iterator = args[3], *key = args[6];
    long long interval = PyLong_AsLongLong(args[4]), retention = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (interval <= 0) {
        PyErr_SetString(PyExc_ValueError, "fetch_window(): the segment interval must be positive");
        return NULL;
    }
    long long time_from, time_to;
    if (!PyBytes_CheckExact(key) || !plain_time(args[7], &time_from) || !plain_time(args[8], &time_to))
        return call_fallback(fallback, store, key, args[7], args[8]);
    PyObject *engine_dict = PyObject_GenericGetDict(engine, NULL);
    if (engine_dict == NULL)
        return NULL;
    PyObject *is_open = PyDict_GetItemWithError(engine_dict, str_is_open);
    int open = is_open == NULL ? (PyErr_Occurred() ? -1 : 0) : PyObject_IsTrue(is_open);
    Py_DECREF(engine_dict);
    if (open < 0)
        return NULL;
    if (!open)
        return call_fallback(fallback, store, key, args[7], args[8]);
    PyObject *dict = PyObject_GenericGetDict(store, NULL);
    if (dict == NULL)
        return NULL;
    long long observed, min_live;
    int rc = dict_ll(dict, str_observed, &observed) < 0 || dict_ll(dict, str_min_live, &min_live) < 0;
    Py_DECREF(dict);
    if (rc)
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
    PyObject *it = PyObject_CallNoArgs(scan_iterator);
    if (it == NULL)
        return NULL;
    PyObject *found = scan(it, key, first, last, time_from, time_to);
    Py_DECREF(it);
    return found;
}

/* ---- a typed window store's put and fetch_values over such a store ---------------------------- */

/* typed_put(fallback, store, key_bytes, value_bytes, wrapped_put, key, value, window_start[, timestamp]):
 * TypedWindowStore.put (fallback): the key and value through their serializers' C forms, then
 * wrapped_put(key bytes, value bytes, window_start, timestamp); a serializer's Exception hands the
 * whole put to fallback (whose checked forms raise the typed error), before anything is written. */
static PyObject *typed_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if ((nargs != 8 && nargs != 9) || kwnames != NULL)
        return fallback_as_called(args, nargs, kwnames, 5, "typed_put");
    PyObject *key = args[5], *value = args[6];
    PyObject *kb = PyObject_CallOneArg(args[2], key);
    if (kb == NULL)
        goto serializer_failed;
    PyObject *vb = value == Py_None ? Py_NewRef(Py_None) : PyObject_CallOneArg(args[3], value);
    if (vb == NULL) {
        Py_DECREF(kb);
        goto serializer_failed;
    }
    PyObject *call_args[4] = {kb, vb, args[7], nargs == 9 ? args[8] : Py_None};
    PyObject *r = PyObject_Vectorcall(args[4], call_args, 4, NULL);
    Py_DECREF(kb);
    Py_DECREF(vb);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
serializer_failed:
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyErr_Clear();
    return fallback_as_called(args, nargs, NULL, 5, "typed_put");
}

/* typed_fetch(fallback, store, key_bytes, read_values, decode, key, time_from, time_to):
 * TypedWindowStore.fetch_values (fallback): the key through its serializer's C form, the range
 * read with read_values (the bytes store's fetch_values) and each value decoded with decode (None:
 * values are bytes); a serializer's or decoder's Exception hands the whole fetch to fallback
 * (whose checked forms raise the typed error). */
static PyObject *typed_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 8 || kwnames != NULL)
        return fallback_as_called(args, nargs, kwnames, 5, "typed_fetch");
    PyObject *decode = args[4];
    PyObject *kb = PyObject_CallOneArg(args[2], args[5]);
    if (kb == NULL)
        goto failed;
    PyObject *call_args[3] = {kb, args[6], args[7]};
    PyObject *found = PyObject_Vectorcall(args[3], call_args, 3, NULL);
    Py_DECREF(kb);
    if (found == NULL)
        return NULL; /* the store's own error */
    if (decode == Py_None || !PyList_CheckExact(found) || PyList_GET_SIZE(found) == 0)
        return found;
    Py_ssize_t n = PyList_GET_SIZE(found);
    PyObject *result = PyList_New(n);
    if (result == NULL) {
        Py_DECREF(found);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(found, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "typed_fetch(): the store's records must be (window start, value) pairs");
            Py_DECREF(result);
            Py_DECREF(found);
            return NULL;
        }
        PyObject *decoded = PyObject_CallOneArg(decode, PyTuple_GET_ITEM(pair, 1));
        if (decoded == NULL) {
            Py_DECREF(result);
            Py_DECREF(found);
            goto failed;
        }
        PyObject *out = PyTuple_Pack(2, PyTuple_GET_ITEM(pair, 0), decoded);
        Py_DECREF(decoded);
        if (out == NULL) {
            Py_DECREF(result);
            Py_DECREF(found);
            return NULL;
        }
        PyList_SET_ITEM(result, i, out);
    }
    Py_DECREF(found);
    return result;
failed:
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyErr_Clear();
    return fallback_as_called(args, nargs, NULL, 5, "typed_fetch");
}

static PyMethodDef methods[] = {
    {"scan_key", (PyCFunction)(void (*)(void))scan_key, METH_FASTCALL,
     "scan_key(it, key, first_segment, last_segment, time_from, time_to) -> [(window start, value)]"},
    {"put_window", (PyCFunction)(void (*)(void))put_window, METH_FASTCALL | METH_KEYWORDS,
     "put_window(fallback, store, engine, segment_interval_ms, retention_ms, retain_duplicates, key, value, "
     "window_start) -> changelog key or None"},
    {"fetch_window", (PyCFunction)(void (*)(void))fetch_window, METH_FASTCALL | METH_KEYWORDS,
     "fetch_window(fallback, store, engine, scan_iterator, segment_interval_ms, retention_ms, key, time_from, "
     "time_to) -> [(window start, value)]"},
    {"typed_put", (PyCFunction)(void (*)(void))typed_put, METH_FASTCALL | METH_KEYWORDS,
     "typed_put(fallback, store, key_bytes, value_bytes, wrapped_put, key, value, window_start[, timestamp])"},
    {"typed_fetch", (PyCFunction)(void (*)(void))typed_fetch, METH_FASTCALL | METH_KEYWORDS,
     "typed_fetch(fallback, store, key_bytes, read_values, decode, key, time_from, time_to) -> [(window start, value)]"},
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
    INTERN(str_db, "_db");
    INTERN(str_put, "put");
    INTERN(str_delete, "delete");
    INTERN(str_seqnum, "_seqnum");
    INTERN(str_observed, "observed_stream_time");
    INTERN(str_min_live, "_min_live_segment");
    INTERN(str_max_segment, "_max_segment");
    INTERN(str_is_open, "is_open");
#undef INTERN
    return PyModule_Create(&module);
}
