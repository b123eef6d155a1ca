/*
 * C accelerator of state/cache/kv.py's hot loop (optional: kv.py falls back to Python).
 *
 * increment_run is the common case of CachingKeyValueStore.update_many for a count: the key
 * is cached and its value is a big-endian signed 8-byte integer that does not overflow when
 * one (or the key's own increment: a table count's) is added, and whose entry already costs
 * what this write's record context does. That case calls no user code,
 * changes no entry size and so evicts nothing, which is why it can run here without the
 * clock: every effect is on the cache's own dicts and entries, done in the order the Python
 * loop does them. Any other key (a miss, another value, an overflow, a key or timestamp of an
 * unexpected type) stops the run; the Python loop handles that one key and calls back from the
 * next index.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

/* CacheEntry's type and the byte offsets of its __slots__ in an instance, read from the
 * slots' member descriptors by set_entry_layout. Writing a slot directly is what the
 * descriptor's __set__ does for a T_OBJECT_EX member (swap the pointer, drop the old value),
 * minus two attribute lookups per field. */
static PyTypeObject *entry_type = NULL;
static Py_ssize_t off_value, off_dirty, off_timestamp, off_old, off_size, off_metadata, off_headers;
static Py_ssize_t entry_overhead = -1;  /* ENTRY_OVERHEAD, set with the layout; -1: write_entry declines */
static PyObject *str_move_to_end = NULL;
/* a record context's attributes (read_record_context) and a consumed message's methods (context_size) */
static PyObject *str_metadata = NULL, *str_headers = NULL, *str_topic = NULL;
static PyObject *unknown_marker = NULL;  /* thread_cache.UNKNOWN, registered with set_entry_layout */

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* Whether a write's record context holds only atomic objects: no metadata, (topic, partition,
 * offset) of exact str/int/None, or an object the cyclic collector does not track, and no
 * headers (the empty tuple). Such an entry can be in no reference cycle (see write_entry);
 * headers can hold anything. The untracked object is a bulk run's lazy record context, its
 * consumed message: the log's decoder and eddy.messages.untrack_messages untrack every message
 * (they hold bytes, str, ints and header pairs), and an entry holding one would otherwise put
 * every entry of a bulk-written cache back under every full collection's scan. A dict can track
 * itself again later, so an untracked one is not taken as atomic. */
static int atomic_context(PyObject *metadata, PyObject *headers)
{
    if (!PyTuple_CheckExact(headers) || PyTuple_GET_SIZE(headers) != 0)
        return 0;
    if (metadata == Py_None)
        return 1;
    if (!PyTuple_Check(metadata) && !PyDict_Check(metadata) && PyObject_IS_GC(metadata)
        && !PyObject_GC_IsTracked(metadata))
        return 1;
    if (!PyTuple_CheckExact(metadata))
        return 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(metadata); k++) {
        PyObject *item = PyTuple_GET_ITEM(metadata, k);
        if (item != Py_None && !PyUnicode_CheckExact(item) && !PyLong_CheckExact(item))
            return 0;
    }
    return 1;
}

static PyObject *empty_headers = NULL;  /* () */
/* thread_cache.record_context_from, registered with set_entry_layout: (metadata, headers) of an
 * entry whose metadata is a consumed message standing for both */
static PyObject *context_from = NULL;

/* An entry left out of the cyclic collector (atomic fields only) that now holds a record
 * context that is not atomic goes back in. */
static inline void retrack(PyObject *entry, PyObject *metadata, PyObject *headers)
{
    if (!PyObject_GC_IsTracked(entry) && !atomic_context(metadata, headers))
        PyObject_GC_Track(entry);
}

/* The record context a write is made in: context.metadata and context.headers as new
 * references, (None, ()) when context is None. 0, or -1 with an error. */
static int read_record_context(PyObject *context, PyObject **metadata, PyObject **headers)
{
    if (context == Py_None) {
        *metadata = Py_NewRef(Py_None);
        *headers = Py_NewRef(empty_headers);
        return 0;
    }
    *metadata = PyObject_GetAttr(context, str_metadata);
    if (*metadata == NULL)
        return -1;
    *headers = PyObject_GetAttr(context, str_headers);
    if (*headers == NULL) {
        Py_CLEAR(*metadata);
        return -1;
    }
    return 0;
}

/* The length of a Java String of `text` (UTF-16 code units), what Kafka counts of a topic or a
 * header key (thread_cache._java_chars). */
static Py_ssize_t java_chars(PyObject *text)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (PyUnicode_KIND(text) == PyUnicode_4BYTE_KIND) {
        const Py_UCS4 *data = PyUnicode_4BYTE_DATA(text);
        Py_ssize_t len = n;
        for (Py_ssize_t k = 0; k < len; k++)
            n += data[k] > 0xFFFF;
    }
    return n;
}

/* thread_cache.context_size (the definition): the bytes Kafka counts for a write's record
 * context besides ENTRY_OVERHEAD's, or -1 with an error. */
static Py_ssize_t context_size(PyObject *metadata, PyObject *headers)
{
    PyObject *topic = NULL, *own_headers = NULL;
    Py_ssize_t size = 0;
    if (metadata == Py_None) {
        topic = NULL;
    } else if (PyTuple_CheckExact(metadata)) {
        topic = PyTuple_GET_SIZE(metadata) > 0 ? Py_NewRef(PyTuple_GET_ITEM(metadata, 0)) : NULL;
    } else {  /* a consumed message: its topic and its own headers */
        topic = PyObject_CallMethodNoArgs(metadata, str_topic);
        if (topic == NULL)
            return -1;
        own_headers = PyObject_CallMethodNoArgs(metadata, str_headers);
        if (own_headers == NULL)
            goto fail;
        headers = own_headers;
    }
    if (topic != NULL && topic != Py_None) {
        if (!PyUnicode_Check(topic)) {
            PyErr_Format(PyExc_TypeError, "a record context's topic must be a str, not %.100s", Py_TYPE(topic)->tp_name);
            goto fail;
        }
        size += java_chars(topic);
    }
    if (headers != Py_None) {
        int truth = PyObject_IsTrue(headers);
        if (truth < 0)
            goto fail;
        if (truth) {
            PyObject *seq = PySequence_Fast(headers, "record headers must be a sequence of (key, value) pairs");
            if (seq == NULL)
                goto fail;
            for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
                PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, k),
                                                 "a record header must be a (key, value) pair");
                if (pair == NULL || PySequence_Fast_GET_SIZE(pair) != 2) {
                    if (pair != NULL)
                        PyErr_Format(PyExc_TypeError, "a record header must be a (key, value) pair, not %R", pair);
                    Py_XDECREF(pair);
                    Py_DECREF(seq);
                    goto fail;
                }
                PyObject *hkey = PySequence_Fast_GET_ITEM(pair, 0), *hvalue = PySequence_Fast_GET_ITEM(pair, 1);
                Py_ssize_t len = 0;
                if (!PyUnicode_Check(hkey)) {
                    PyErr_Format(PyExc_TypeError, "a record header's key must be a str, not %R", hkey);
                    len = -1;
                } else if (hvalue != Py_None) {
                    len = PyObject_Length(hvalue);
                }
                if (len >= 0)
                    size += java_chars(hkey) + len;
                Py_DECREF(pair);
                if (len < 0) {
                    Py_DECREF(seq);
                    goto fail;
                }
            }
            Py_DECREF(seq);
        }
    }
    Py_XDECREF(topic);
    Py_XDECREF(own_headers);
    return size;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(own_headers);
    return -1;
}

/* Replaces a slot's value with a new reference (stolen). The previous value is dropped
 * after the store, as the slot descriptor does, so a finalizer it triggers sees the entry
 * already updated. */
static inline void slot_set(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject *prev = SLOT(obj, off);
    SLOT(obj, off) = value;
    Py_XDECREF(prev);
}

static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name);  /* borrowed */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)
        || ((PyDescrObject *)descr)->d_type != type) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member of that type",
                     type->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", type->tp_name, name);
        return -1;
    }
    *offset = member->offset;
    return 0;
}

static PyObject *set_entry_layout(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 4) {
        PyErr_Format(PyExc_TypeError, "set_entry_layout() takes 1 to 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *type_obj = args[0];
    Py_ssize_t overhead = -1;
    if (nargs >= 2) {
        overhead = PyLong_AsSsize_t(args[1]);
        if (overhead == -1 && PyErr_Occurred())
            return NULL;
        if (overhead < 0) {
            PyErr_Format(PyExc_ValueError, "set_entry_layout() overhead must be >= 0, got %zd", overhead);
            return NULL;
        }
    }
    if (!PyType_Check(type_obj)) {
        PyErr_Format(PyExc_TypeError, "set_entry_layout() wants the CacheEntry type, got %R", type_obj);
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)type_obj;
    /* Slots are written directly below, so the type must not intercept attribute access. */
    if (type->tp_setattro != PyObject_GenericSetAttr || type->tp_getattro != PyObject_GenericGetAttr) {
        PyErr_Format(PyExc_TypeError, "%s customizes attribute access; its slots cannot be written directly",
                     type->tp_name);
        return NULL;
    }
    Py_ssize_t value, dirty, timestamp, old, size, metadata, headers;
    if (slot_offset(type, "value", &value) < 0 || slot_offset(type, "dirty", &dirty) < 0
        || slot_offset(type, "timestamp", &timestamp) < 0 || slot_offset(type, "old", &old) < 0
        || slot_offset(type, "size", &size) < 0 || slot_offset(type, "metadata", &metadata) < 0
        || slot_offset(type, "headers", &headers) < 0)
        return NULL;
    if (empty_headers == NULL && (empty_headers = PyTuple_New(0)) == NULL)
        return NULL;
    Py_INCREF(type);
    Py_XSETREF(entry_type, type);
    off_value = value;
    off_dirty = dirty;
    off_timestamp = timestamp;
    off_old = old;
    off_size = size;
    off_metadata = metadata;
    off_headers = headers;
    if (nargs >= 2)  /* else the overhead registered before stays */
        entry_overhead = overhead;
    if (nargs >= 3) {
        Py_INCREF(args[2]);
        Py_XSETREF(unknown_marker, args[2]);
    }
    if (nargs == 4) {
        Py_INCREF(args[3]);
        Py_XSETREF(context_from, args[3]);
    }
    Py_RETURN_NONE;
}

static inline PyObject *seq_item(PyObject *seq, Py_ssize_t i)  /* borrowed, NULL past the end */
{
    /* Sizes are re-read on every key: a finalizer run by a decref could in theory shrink a list. */
    if (PyList_CheckExact(seq))
        return i < PyList_GET_SIZE(seq) ? PyList_GET_ITEM(seq, i) : NULL;
    return i < PyTuple_GET_SIZE(seq) ? PyTuple_GET_ITEM(seq, i) : NULL;
}

/* The value packed as update_many's fn would: big-endian, two's complement. */
static inline int64_t load_be64(const unsigned char *p)
{
    uint64_t u = 0;
    for (int k = 0; k < 8; k++)
        u = (u << 8) | p[k];
    return (int64_t)u;
}

static inline void store_be64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int k = 7; k >= 0; k--) {
        p[k] = (unsigned char)(u & 0xFF);
        u >>= 8;
    }
}

/* One hot key, entry known to be hot: the Python loop's effects in its order. Returns 0, or -1
 * with an exception set (the effects before the failing step stay done, as in Python). */
static int increment_one(PyObject *entries_move_to_end, PyObject *dirty, PyObject *key,
                         PyObject *entry, PyObject *value, int is_dirty, int64_t new_count,
                         PyObject *timestamp, int stamped, int64_t stamp, PyObject *metadata, PyObject *headers)
{
    /* stamped: a timestamped store's value, the 8-byte timestamp (`stamp`) before the count */
    PyObject *packed = PyBytes_FromStringAndSize(NULL, stamped ? 16 : 8);
    if (packed == NULL)
        return -1;
    if (stamped) {
        store_be64((unsigned char *)PyBytes_AS_STRING(packed), stamp);
        store_be64((unsigned char *)PyBytes_AS_STRING(packed) + 8, new_count);
    } else {
        store_be64((unsigned char *)PyBytes_AS_STRING(packed), new_count);
    }
    if (is_dirty) {
        /* re-dirtied: moves to the end of the write order. Python's `if key in dirty: del`;
         * one lookup instead of two, the key being there in all but theory. */
        if (PyDict_DelItem(dirty, key) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
                Py_DECREF(packed);
                return -1;
            }
            PyErr_Clear();
        }
    } else {
        /* a clean entry holds the store's value: it becomes the old value the flush hands on */
        Py_INCREF(value);
        slot_set(entry, off_old, value);
        Py_INCREF(Py_True);
        slot_set(entry, off_dirty, Py_True);
    }
    if (PyDict_SetItem(dirty, key, Py_None) < 0) {
        Py_DECREF(packed);
        return -1;
    }
    slot_set(entry, off_value, packed);
    Py_INCREF(timestamp);
    slot_set(entry, off_timestamp, timestamp);
    slot_set(entry, off_metadata, Py_NewRef(metadata));
    slot_set(entry, off_headers, Py_NewRef(headers));
    retrack(entry, metadata, headers);
    PyObject *r = PyObject_Vectorcall(entries_move_to_end, &key, 1, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *increment_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 6 || nargs > 11) {
        PyErr_Format(PyExc_TypeError, "increment_run() takes 6 to 11 arguments (%zd given)", nargs);
        return NULL;
    }
    /* what each write costs the cache besides its key and value: the named cache's overhead and
     * the run's record context (the hot case keeps an entry's size); by default ENTRY_OVERHEAD,
     * a write without a record context */
    Py_ssize_t entry_cost = nargs > 10 ? PyLong_AsSsize_t(args[10]) : entry_overhead;
    if (entry_cost == -1 && PyErr_Occurred())
        return NULL;
    if (entry_cost < 0) {
        PyErr_Format(PyExc_ValueError, "increment_run() entry_cost must be >= 0, got %zd", entry_cost);
        return NULL;
    }
    /* each key's own increment, a signed byte (a table count's +1, -1 or 0), else one for all */
    PyObject *increments = nargs > 9 ? args[9] : Py_None;
    if (increments != Py_None && !PyBytes_CheckExact(increments)) {
        PyErr_SetString(PyExc_TypeError, "increment_run() increments must be bytes or None");
        return NULL;
    }
    int stamped = nargs > 6 ? PyObject_IsTrue(args[6]) : 0;
    if (stamped < 0)
        return NULL;
    /* the record context of the writes: metadatas[i] (a bulk run's consumed message, standing
     * for its metadata and headers), or the context's, which no step of the run can change */
    PyObject *context = nargs > 7 ? args[7] : Py_None, *metadatas = nargs > 8 ? args[8] : Py_None;
    if (metadatas != Py_None && !PyList_CheckExact(metadatas)) {
        PyErr_SetString(PyExc_TypeError, "increment_run() metadatas must be a list or None");
        return NULL;
    }
    PyObject *entries = args[0], *dirty = args[1], *keys = args[2], *timestamps = args[3];
    if (entry_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "increment_run() before set_entry_layout()");
        return NULL;
    }
    /* Exact types only: a subclass could override lookups or move_to_end with Python code. */
    if (!PyODict_CheckExact(entries)) {
        PyErr_Format(PyExc_TypeError, "increment_run() entries must be an OrderedDict, got %.100s",
                     Py_TYPE(entries)->tp_name);
        return NULL;
    }
    if (!PyDict_CheckExact(dirty)) {
        PyErr_Format(PyExc_TypeError, "increment_run() dirty must be a dict, got %.100s",
                     Py_TYPE(dirty)->tp_name);
        return NULL;
    }
    if (!(PyList_CheckExact(keys) || PyTuple_CheckExact(keys))
        || !(PyList_CheckExact(timestamps) || PyTuple_CheckExact(timestamps))) {
        PyErr_SetString(PyExc_TypeError, "increment_run() keys and timestamps must be lists or tuples");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[4]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0) {
        PyErr_Format(PyExc_ValueError, "increment_run() start must be >= 0, got %zd", start);
        return NULL;
    }
    PyObject *newest = args[5];
    Py_INCREF(newest);
    int64_t newest_ms = 0;
    int newest_ok = 0;  /* the stream time must be a plain int64 to be compared here */
    if (PyLong_CheckExact(newest)) {
        int overflow;
        newest_ms = PyLong_AsLongLongAndOverflow(newest, &overflow);
        newest_ok = !overflow;  /* an exact int cannot fail otherwise */
    }

    Py_ssize_t i = start, hits = 0;
    PyObject *last = NULL, *error = NULL, *move_to_end = NULL, *metadata = NULL, *headers = NULL;
    if (!newest_ok)
        goto done;
    if (metadatas != Py_None) {
        headers = Py_NewRef(empty_headers);
    } else if (read_record_context(context, &metadata, &headers) < 0) {
        goto fail;
    }
    /* the bound method once per run; OrderedDict offers no C API for it */
    move_to_end = PyObject_GetAttr(entries, str_move_to_end);
    if (move_to_end == NULL)
        goto fail;
    for (;; i++) {
        PyObject *key = seq_item(keys, i), *ts_obj = seq_item(timestamps, i);
        if (key == NULL || ts_obj == NULL)
            break;
        /* exact bytes: hashing and comparing run no Python code; exact int: compared here */
        if (!PyBytes_CheckExact(key) || !PyLong_CheckExact(ts_obj))
            break;
        int overflow;
        int64_t ts = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
        if (overflow)
            break;
        PyObject *entry = PyDict_GetItemWithError(entries, key);  /* borrowed */
        if (entry == NULL) {
            if (PyErr_Occurred())
                goto fail;
            break;  /* a miss: read-through and fn in Python */
        }
        if (!Py_IS_TYPE(entry, entry_type))
            break;
        PyObject *value = SLOT(entry, off_value), *dirty_flag = SLOT(entry, off_dirty);
        if (value == NULL || !PyBytes_CheckExact(value) || PyBytes_GET_SIZE(value) != (stamped ? 16 : 8))
            break;  /* None (a cached delete), another size, unset: fn decides */
        if (dirty_flag != Py_True && dirty_flag != Py_False)
            break;
        /* the same size after this write (its record context costs what the entry's did), so
         * nothing to evict; else the Python loop resizes it */
        PyObject *size_obj = SLOT(entry, off_size);
        if (size_obj == NULL || !PyLong_CheckExact(size_obj)
            || PyLong_AsSsize_t(size_obj) != PyBytes_GET_SIZE(key) + PyBytes_GET_SIZE(value) + entry_cost) {
            PyErr_Clear();  /* (an int out of range cannot be an entry's size here) */
            break;
        }
        int64_t increment = 1;
        if (increments != Py_None) {
            if (i >= PyBytes_GET_SIZE(increments))
                break;
            increment = (int8_t)PyBytes_AS_STRING(increments)[i];
        }
        const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(value);
        int64_t stamp = stamped ? load_be64(bytes) : 0;
        int64_t count = load_be64(stamped ? bytes + 8 : bytes);
        if ((increment > 0 && count > INT64_MAX - increment)
            || (increment < 0 && count < INT64_MIN - increment))
            break;  /* the sum overflows int64: fn decides */
        /* From here the key is updated, so its timestamp counts and it is a hit, as in Python
         * even if a step below fails. */
        if (ts > newest_ms) {
            newest_ms = ts;
            Py_INCREF(ts_obj);
            Py_SETREF(newest, ts_obj);
        }
        hits++;
        /* Strong references for the update: dropping an old value could run a finalizer. */
        Py_INCREF(key);
        Py_INCREF(entry);
        Py_INCREF(value);
        /* the entry's timestamp: the record's, or (stamped) max(the value's, the record's) */
        PyObject *entry_ts;
        if (stamped && stamp > ts) {
            entry_ts = PyLong_FromLongLong(stamp);
            if (entry_ts == NULL) {
                Py_DECREF(value);
                Py_DECREF(entry);
                Py_DECREF(key);
                goto fail;
            }
        } else {
            stamp = ts;
            entry_ts = Py_NewRef(ts_obj);
        }
        PyObject *write_metadata = metadata;
        if (metadatas != Py_None) {
            write_metadata = i < PyList_GET_SIZE(metadatas) ? PyList_GET_ITEM(metadatas, i) : Py_None;
        }
        int rc = increment_one(move_to_end, dirty, key, entry, value, dirty_flag == Py_True, count + increment,
                               entry_ts, stamped, stamp, write_metadata, headers);
        if (rc == 0) {
            PyObject *written = SLOT(entry, off_value);
            Py_XINCREF(written);
            Py_XSETREF(last, written);
        }
        Py_DECREF(entry_ts);
        Py_DECREF(value);
        Py_DECREF(entry);
        Py_DECREF(key);
        if (rc < 0)
            goto fail;
    }
    goto done;

fail:
    /* Handed back, not raised: the caller must still learn how far the run got. */
    {
        PyObject *type, *tb;
        PyErr_Fetch(&type, &error, &tb);
        PyErr_NormalizeException(&type, &error, &tb);
        if (tb != NULL && error != NULL)
            PyException_SetTraceback(error, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
    }
done:
    Py_XDECREF(move_to_end);
    Py_XDECREF(metadata);
    Py_XDECREF(headers);
    {
        PyObject *result = Py_BuildValue("(nnNNN)", i, hits, newest,
                                         last != NULL ? last : Py_NewRef(Py_None),
                                         error != NULL ? error : Py_NewRef(Py_None));
        return result;
    }
}

/* NamedCache's write of a dirty entry (thread_cache.write_entry_py, the definition): the
 * entry made or rewritten in place and made MRU, the key moved to the end of the write
 * order; returns the size change. Only exact bytes keys (hashing and comparing them runs no
 * Python code), None or exact bytes values, and a cached entry of the registered type with an
 * exact int size and a bool dirty flag; any other case returns None before doing anything,
 * and the caller writes through the Python definition. */
static PyObject *write_entry_impl(PyObject *entries, PyObject *dirty, PyObject *key, PyObject *value,
                                  PyObject *timestamp, PyObject *old, PyObject *metadata, PyObject *headers,
                                  Py_ssize_t overhead, Py_ssize_t context_bytes)
{
    /* context_bytes: context_size(metadata, headers) when the caller has it, else -1 */
    if (entry_type == NULL || overhead < 0 || !PyODict_CheckExact(entries) || !PyDict_CheckExact(dirty)
        || !PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)))
        Py_RETURN_NONE;
    if (context_bytes < 0 && (context_bytes = context_size(metadata, headers)) < 0)
        return NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(key) + (value == Py_None ? 0 : PyBytes_GET_SIZE(value)) + overhead
                      + context_bytes;
    PyObject *entry = PyDict_GetItemWithError(entries, key);  /* borrowed */
    Py_ssize_t delta;
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        PyObject *size_obj = PyLong_FromSsize_t(size);
        if (size_obj == NULL)
            return NULL;
        /* CacheEntry(value, True, timestamp, size, old): its __init__ only sets the slots */
        PyObject *made = entry_type->tp_alloc(entry_type, 0);
        if (made == NULL) {
            Py_DECREF(size_obj);
            return NULL;
        }
        SLOT(made, off_value) = Py_NewRef(value);
        SLOT(made, off_dirty) = Py_NewRef(Py_True);
        SLOT(made, off_timestamp) = Py_NewRef(timestamp);
        SLOT(made, off_size) = size_obj;
        SLOT(made, off_old) = Py_NewRef(old);
        SLOT(made, off_metadata) = Py_NewRef(metadata);
        SLOT(made, off_headers) = Py_NewRef(headers);
        /* An entry holding only atomic objects (bytes, None, bools, ints, the bare UNKNOWN
         * marker, a record context of those) can be in no reference cycle: the cyclic
         * collector need not scan it, as CPython untracks such tuples and dicts. The cache
         * keeps many long-lived entries, and every full collection would scan them all. */
        if (PyLong_CheckExact(timestamp)
            && (old == Py_None || PyBytes_CheckExact(old) || Py_IS_TYPE(old, &PyBaseObject_Type))
            && atomic_context(metadata, headers))
            PyObject_GC_UnTrack(made);
        int rc = PyObject_SetItem(entries, key, made);
        Py_DECREF(made);
        if (rc < 0)
            return NULL;
        delta = size;
    } else {
        PyObject *size_was = SLOT(entry, off_size), *flag = SLOT(entry, off_dirty);
        if (!Py_IS_TYPE(entry, entry_type) || size_was == NULL || !PyLong_CheckExact(size_was)
            || (flag != Py_True && flag != Py_False) || SLOT(entry, off_value) == NULL)
            Py_RETURN_NONE;
        Py_ssize_t was = PyLong_AsSsize_t(size_was);
        if (was == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        PyObject *size_obj = PyLong_FromSsize_t(size);
        if (size_obj == NULL)
            return NULL;
        delta = size - was;
        Py_INCREF(entry);  /* held while old values are dropped */
        if (flag == Py_False) {
            /* a clean entry holds the store's value: it becomes the old value */
            slot_set(entry, off_old, Py_NewRef(SLOT(entry, off_value)));
            slot_set(entry, off_dirty, Py_NewRef(Py_True));
        }
        slot_set(entry, off_value, Py_NewRef(value));
        slot_set(entry, off_timestamp, Py_NewRef(timestamp));
        slot_set(entry, off_size, size_obj);
        slot_set(entry, off_metadata, Py_NewRef(metadata));
        slot_set(entry, off_headers, Py_NewRef(headers));
        retrack(entry, metadata, headers);
        Py_DECREF(entry);
        PyObject *call_args[2] = {entries, key};
        PyObject *r = PyObject_VectorcallMethod(str_move_to_end, call_args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    /* `if key in dirty: del dirty[key]` then `dirty[key] = None`: to the end of the write order.
     * The membership test first: a key written for the first time since a flush (the common
     * case when keys outnumber the cache) is not there, and a failed delete would make and drop
     * a KeyError. */
    int in_dirty = PyDict_Contains(dirty, key);
    if (in_dirty < 0 || (in_dirty && PyDict_DelItem(dirty, key) < 0))
        return NULL;
    if (PyDict_SetItem(dirty, key, Py_None) < 0)
        return NULL;
    return PyLong_FromSsize_t(delta);
}

static PyObject *write_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 && nargs != 8 && nargs != 9) {
        PyErr_Format(PyExc_TypeError, "write_entry() takes 6, 8 or 9 arguments (%zd given)", nargs);
        return NULL;
    }
    if (empty_headers == NULL)
        Py_RETURN_NONE;  /* no layout yet: declined */
    Py_ssize_t overhead = entry_overhead;
    if (nargs == 9) {
        overhead = PyLong_AsSsize_t(args[8]);
        if (overhead == -1 && PyErr_Occurred())
            return NULL;
        if (overhead < 0) {
            PyErr_Format(PyExc_ValueError, "write_entry() overhead must be >= 0, got %zd", overhead);
            return NULL;
        }
    }
    return write_entry_impl(args[0], args[1], args[2], args[3], args[4], args[5], nargs >= 8 ? args[6] : Py_None,
                            nargs >= 8 ? args[7] : empty_headers, overhead, -1);
}

/* ------------------------------------------------------------------------------------------
 * A named cache's operations (thread_cache.NamedCache / ThreadCache, the definitions): the
 * lookup of a read, the read-through and dirty writes with their size accounting, and the
 * eviction loop. The NamedCache and its owner are read and written through their attributes
 * (any types: sizes and counters with Python's number protocol), so these take every case of
 * the loop; the write functions decline (None, nothing done) the keys and values write_entry
 * declines. A dirty eldest entry is evicted by NamedCache.evict_eldest itself (its flush runs
 * the listener: Python either way). */
static PyObject *str_entries, *str_dirty, *str_owner, *str_size_bytes, *str_total_bytes, *str_max_bytes,
    *str_evictions, *str_hits, *str_misses, *str_evict_eldest, *str_write_through, *str_context,
    *str_entry_overhead, *str_range_index, *str_add;
static PyObject *one = NULL;

/* NamedCache's type and its slots' offsets (set_named_layout): its fields read and written
 * directly, as the slot descriptors would, instead of through attribute lookups. */
static PyTypeObject *named_type = NULL;
#define NAMED_FIELDS 10
static PyObject **named_names[NAMED_FIELDS] = {&str_entries, &str_dirty, &str_owner, &str_size_bytes, &str_hits,
                                               &str_misses, &str_evictions, &str_context, &str_entry_overhead,
                                               &str_range_index};
static Py_ssize_t named_offsets[NAMED_FIELDS];

static inline Py_ssize_t named_offset(PyObject *obj, PyObject *name)
{
    if (named_type == NULL || !Py_IS_TYPE(obj, named_type))
        return -1;
    for (int i = 0; i < NAMED_FIELDS; i++)
        if (*named_names[i] == name)
            return SLOT(obj, named_offsets[i]) != NULL ? named_offsets[i] : -1;
    return -1;
}

static PyObject *get_attr(PyObject *obj, PyObject *name)  /* new reference */
{
    Py_ssize_t off = named_offset(obj, name);
    return off >= 0 ? Py_NewRef(SLOT(obj, off)) : PyObject_GetAttr(obj, name);
}

static PyObject *set_named_layout(PyObject *self, PyObject *type_obj)
{
    if (!PyType_Check(type_obj)) {
        PyErr_Format(PyExc_TypeError, "set_named_layout() wants the NamedCache type, got %R", type_obj);
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)type_obj;
    if (type->tp_setattro != PyObject_GenericSetAttr || type->tp_getattro != PyObject_GenericGetAttr) {
        PyErr_Format(PyExc_TypeError, "%s customizes attribute access; its slots cannot be read directly",
                     type->tp_name);
        return NULL;
    }
    Py_ssize_t offsets[NAMED_FIELDS];
    for (int i = 0; i < NAMED_FIELDS; i++)
        if (slot_offset(type, PyUnicode_AsUTF8(*named_names[i]), &offsets[i]) < 0)
            return NULL;
    memcpy(named_offsets, offsets, sizeof offsets);
    Py_INCREF(type);
    Py_XSETREF(named_type, type);
    Py_RETURN_NONE;
}

static int attr_add(PyObject *obj, PyObject *name, PyObject *delta, int subtract)
{
    Py_ssize_t off = named_offset(obj, name);
    if (off >= 0) {
        PyObject *now = subtract ? PyNumber_Subtract(SLOT(obj, off), delta) : PyNumber_Add(SLOT(obj, off), delta);
        if (now == NULL)
            return -1;
        slot_set(obj, off, now);
        return 0;
    }
    PyObject *was = PyObject_GetAttr(obj, name);
    if (was == NULL)
        return -1;
    PyObject *now = subtract ? PyNumber_Subtract(was, delta) : PyNumber_Add(was, delta);
    Py_DECREF(was);
    if (now == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, now);
    Py_DECREF(now);
    return rc;
}

/* owner._total_bytes (+ extra) > owner.max_bytes: 1, 0, or -1 with an exception */
static int over_budget(PyObject *owner, PyObject *extra)
{
    PyObject *total = PyObject_GetAttr(owner, str_total_bytes);
    if (total == NULL)
        return -1;
    if (extra != NULL) {
        PyObject *sum = PyNumber_Add(total, extra);
        Py_DECREF(total);
        if (sum == NULL)
            return -1;
        total = sum;
    }
    PyObject *max = PyObject_GetAttr(owner, str_max_bytes);
    if (max == NULL) {
        Py_DECREF(total);
        return -1;
    }
    int over = PyObject_RichCompareBool(total, max, Py_GT);
    Py_DECREF(total);
    Py_DECREF(max);
    return over;
}

/* ThreadCache._maybe_evict(named): while the owner is over its budget and the named cache holds
 * entries, evict its eldest: a clean one here (NamedCache.evict_eldest's accounting), a dirty
 * one (or one this does not read) by evict_eldest itself. */
static int evict_loop(PyObject *named, PyObject *owner, PyObject *entries)
{
    for (;;) {
        int over = over_budget(owner, NULL);
        if (over <= 0)
            return over;
        Py_ssize_t n = PyObject_Length(entries);
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        PyObject *key = NULL, *entry = NULL;
        if (entry_type != NULL && PyODict_CheckExact(entries)) {
            PyObject *it = PyObject_GetIter(entries);  /* an OrderedDict iterates eldest first */
            if (it == NULL)
                return -1;
            key = PyIter_Next(it);
            Py_DECREF(it);
            if (key == NULL && PyErr_Occurred())
                return -1;
            if (key != NULL) {
                entry = PyDict_GetItemWithError(entries, key);  /* borrowed */
                if (entry == NULL && PyErr_Occurred()) {
                    Py_DECREF(key);
                    return -1;
                }
            }
        }
        if (entry != NULL && Py_IS_TYPE(entry, entry_type) && SLOT(entry, off_dirty) == Py_False
            && SLOT(entry, off_size) != NULL) {
            PyObject *size = Py_NewRef(SLOT(entry, off_size));
            /* popitem(last=False): the eldest key removed, then the sizes and the count */
            int rc = PyObject_DelItem(entries, key);
            if (rc == 0)
                rc = attr_add(named, str_size_bytes, size, 1);
            if (rc == 0)
                rc = attr_add(owner, str_total_bytes, size, 1);
            if (rc == 0)
                rc = attr_add(named, str_evictions, one, 0);
            Py_DECREF(size);
            Py_DECREF(key);
            if (rc < 0)
                return -1;
            continue;
        }
        Py_XDECREF(key);
        PyObject *r = PyObject_CallMethodNoArgs(named, str_evict_eldest);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
}

/* named.entries and named.owner (new references), or -1 */
static int named_parts(PyObject *named, PyObject **entries, PyObject **owner)
{
    *entries = get_attr(named, str_entries);
    if (*entries == NULL)
        return -1;
    *owner = get_attr(named, str_owner);
    if (*owner == NULL) {
        Py_CLEAR(*entries);
        return -1;
    }
    return 0;
}

static PyObject *maybe_evict(PyObject *self, PyObject *named)
{
    PyObject *entries, *owner;
    if (named_parts(named, &entries, &owner) < 0)
        return NULL;
    int rc = evict_loop(named, owner, entries);
    Py_DECREF(entries);
    Py_DECREF(owner);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* lookup(named, key): NamedCache.lookup_py */
static PyObject *lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "lookup() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *named = args[0], *key = args[1];
    PyObject *entries = get_attr(named, str_entries);
    if (entries == NULL)
        return NULL;
    PyObject *entry;
    if (PyDict_Check(entries)) {
        entry = PyDict_GetItemWithError(entries, key);  /* borrowed */
        if (entry == NULL && PyErr_Occurred()) {
            Py_DECREF(entries);
            return NULL;
        }
        Py_XINCREF(entry);
    } else {
        entry = PyObject_CallMethod(entries, "get", "O", key);
        if (entry == NULL) {
            Py_DECREF(entries);
            return NULL;
        }
        if (entry == Py_None)
            Py_CLEAR(entry);
    }
    if (entry == NULL) {
        Py_DECREF(entries);
        if (attr_add(named, str_misses, one, 0) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *call_args[2] = {entries, key};
    PyObject *r = NULL;
    if (attr_add(named, str_hits, one, 0) == 0)
        r = PyObject_VectorcallMethod(str_move_to_end, call_args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(entries);
    if (r == NULL) {
        Py_DECREF(entry);
        return NULL;
    }
    Py_DECREF(r);
    return entry;
}

static inline int takes_key_value(PyObject *key, PyObject *value)
{
    return entry_type != NULL && entry_overhead >= 0 && PyBytes_CheckExact(key)
           && (value == Py_None || PyBytes_CheckExact(value));
}

/* named.entry_overhead, or -1 with an error */
static Py_ssize_t named_overhead(PyObject *named)
{
    PyObject *obj = get_attr(named, str_entry_overhead);
    if (obj == NULL)
        return -1;
    Py_ssize_t overhead = PyLong_AsSsize_t(obj);
    Py_DECREF(obj);
    if (overhead < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "a named cache's entry_overhead must be >= 0, got %zd", overhead);
    return PyErr_Occurred() ? -1 : overhead;
}

/* thread_cache.entry_size: what an entry of key and value written in a record context of
 * `context` bytes costs in a named cache of `overhead` (a new int), or NULL with an error */
static PyObject *entry_size(PyObject *key, PyObject *value, Py_ssize_t overhead, Py_ssize_t context)
{
    return PyLong_FromSsize_t(PyBytes_GET_SIZE(key) + (value == Py_None ? 0 : PyBytes_GET_SIZE(value)) + overhead
                              + context);
}

/* The rule of put_clean_py and put_dirty_py: an entry an empty named cache cannot take under the
 * budget would be evicted, alone, at once. 1, 0, or -1 with an error. */
static int cannot_keep(PyObject *entries, PyObject *owner, PyObject *size_obj)
{
    return PyDict_GET_SIZE(entries) == 0 ? over_budget(owner, size_obj) : 0;
}

/* The named cache and its owner grown by `delta` bytes, then the eviction loop: 0 or -1 */
static int grow(PyObject *named, PyObject *owner, PyObject *entries, PyObject *delta)
{
    if (attr_add(named, str_size_bytes, delta, 0) < 0 || attr_add(owner, str_total_bytes, delta, 0) < 0)
        return -1;
    return evict_loop(named, owner, entries);
}

/* A key about to be written into `named`'s entries, added to its range index when it keeps one
 * and the key is not cached yet (RangeIndex.add, as put_clean_py and put_dirty_py do): 0, or -1
 * with an error */
static int index_key(PyObject *named, PyObject *key, PyObject *entries)
{
    PyObject *index = get_attr(named, str_range_index);
    if (index == NULL)
        return -1;
    int cached = index == Py_None ? 1 : PyDict_Contains(entries, key);
    PyObject *r = Py_None;
    if (cached == 0) {
        PyObject *call_args[3] = {index, key, entries};
        r = PyObject_VectorcallMethod(str_add, call_args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_XDECREF(r);
    }
    Py_DECREF(index);
    return cached < 0 || r == NULL ? -1 : 0;
}

/* put_clean(named, key, value, timestamp): NamedCache.put_clean_py; True, or None declined */
static PyObject *put_clean(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "put_clean() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *named = args[0], *key = args[1], *value = args[2], *timestamp = args[3];
    if (!takes_key_value(key, value) || unknown_marker == NULL)
        Py_RETURN_NONE;
    PyObject *entries, *owner, *size_obj = NULL;
    if (named_parts(named, &entries, &owner) < 0)
        return NULL;
    if (!PyODict_CheckExact(entries)) {
        Py_DECREF(entries);
        Py_DECREF(owner);
        Py_RETURN_NONE;
    }
    int contains = PyDict_Contains(entries, key);
    if (contains < 0)
        goto fail;
    if (contains) {
        PyObject *call_args[2] = {entries, key};
        PyObject *r = PyObject_VectorcallMethod(str_move_to_end, call_args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        goto done;
    }
    Py_ssize_t overhead = named_overhead(named);
    if (overhead < 0)
        goto fail;
    size_obj = entry_size(key, value, overhead, 0);  /* a read-through has no record context */
    if (size_obj == NULL)
        goto fail;
    int over = cannot_keep(entries, owner, size_obj);
    if (over < 0)
        goto fail;
    if (over) {  /* inserted and evicted at once: counted, nothing kept */
        if (attr_add(named, str_evictions, one, 0) < 0)
            goto fail;
        goto done;
    }
    if (index_key(named, key, entries) < 0)
        goto fail;
    PyObject *made = entry_type->tp_alloc(entry_type, 0);
    if (made == NULL)
        goto fail;
    SLOT(made, off_value) = Py_NewRef(value);
    SLOT(made, off_dirty) = Py_NewRef(Py_False);
    SLOT(made, off_timestamp) = Py_NewRef(timestamp);
    SLOT(made, off_size) = Py_NewRef(size_obj);
    SLOT(made, off_old) = Py_NewRef(unknown_marker);
    SLOT(made, off_metadata) = Py_NewRef(Py_None);
    SLOT(made, off_headers) = Py_NewRef(empty_headers);
    if (PyLong_CheckExact(timestamp))  /* atomic fields only: see write_entry */
        PyObject_GC_UnTrack(made);
    int rc = PyObject_SetItem(entries, key, made);
    Py_DECREF(made);
    if (rc < 0 || grow(named, owner, entries, size_obj) < 0)
        goto fail;
done:
    Py_XDECREF(size_obj);
    Py_DECREF(entries);
    Py_DECREF(owner);
    Py_RETURN_TRUE;
fail:
    Py_XDECREF(size_obj);
    Py_DECREF(entries);
    Py_DECREF(owner);
    return NULL;
}

/* put_dirty(named, key, value, timestamp, old): NamedCache.put_dirty_py; True, or None declined */
static PyObject *put_dirty(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "put_dirty() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *named = args[0], *key = args[1], *value = args[2], *timestamp = args[3], *old = args[4];
    if (!takes_key_value(key, value))
        Py_RETURN_NONE;
    PyObject *entries, *owner, *dirty = NULL, *delta = NULL;
    if (named_parts(named, &entries, &owner) < 0)
        return NULL;
    if (!PyODict_CheckExact(entries)) {
        Py_DECREF(entries);
        Py_DECREF(owner);
        Py_RETURN_NONE;
    }
    Py_ssize_t overhead = named_overhead(named);
    if (overhead < 0)
        goto fail;
    PyObject *metadata, *headers;
    {
        PyObject *context = get_attr(named, str_context);
        if (context == NULL)
            goto fail;
        int rc = read_record_context(context, &metadata, &headers);
        Py_DECREF(context);
        if (rc < 0)
            goto fail;
    }
    Py_ssize_t context_bytes = context_size(metadata, headers);
    if (context_bytes < 0) {
        Py_DECREF(metadata);
        Py_DECREF(headers);
        goto fail;
    }
    if (PyDict_GET_SIZE(entries) == 0) {
        PyObject *size_obj = entry_size(key, value, overhead, context_bytes);
        int over = size_obj == NULL ? -1 : cannot_keep(entries, owner, size_obj);
        if (over <= 0)
            Py_XDECREF(size_obj);
        if (over) {
            Py_DECREF(metadata);
            Py_DECREF(headers);
            if (over < 0)
                goto fail;
            /* it would be evicted, alone, at once: written through */
            PyObject *call_args[6] = {named, key, value, timestamp, old, size_obj};
            PyObject *r = PyObject_VectorcallMethod(str_write_through, call_args,
                                                    6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_DECREF(size_obj);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
            goto done;
        }
    }
    if (index_key(named, key, entries) < 0) {
        Py_DECREF(metadata);
        Py_DECREF(headers);
        goto fail;
    }
    dirty = get_attr(named, str_dirty);
    if (dirty != NULL)
        delta = write_entry_impl(entries, dirty, key, value, timestamp, old, metadata, headers, overhead, context_bytes);
    Py_DECREF(metadata);
    Py_DECREF(headers);
    if (delta == NULL)
        goto fail;
    if (delta == Py_None) {  /* declined, nothing done */
        Py_DECREF(delta);
        Py_DECREF(dirty);
        Py_DECREF(entries);
        Py_DECREF(owner);
        Py_RETURN_NONE;
    }
    int nonzero = PyObject_IsTrue(delta);
    if (nonzero < 0)
        goto fail;
    if (nonzero ? grow(named, owner, entries, delta) < 0 : evict_loop(named, owner, entries) < 0)
        goto fail;
done:
    Py_XDECREF(delta);
    Py_XDECREF(dirty);
    Py_DECREF(entries);
    Py_DECREF(owner);
    Py_RETURN_TRUE;
fail:
    Py_XDECREF(delta);
    Py_XDECREF(dirty);
    Py_DECREF(entries);
    Py_DECREF(owner);
    return NULL;
}

/* take_dirty(entries, dirty, entry_tuple_type, flushed, tombstones) -> bool: NamedCache._take_dirty's
 * loop (the Python loop is the definition): for each key of `dirty` in order, append
 * entry_tuple_type(key, value, timestamp, old, metadata, headers) of its entry to `flushed` (and the key to
 * `tombstones` when the value is None) and mark the entry clean. False, having done nothing,
 * when an entry is missing or not of the registered type (the Python loop then runs). */
static PyObject *take_dirty(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "take_dirty() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *entries = args[0], *dirty = args[1], *type_obj = args[2], *flushed = args[3], *tombstones = args[4];
    if (entry_type == NULL || !PyODict_CheckExact(entries) || !PyDict_CheckExact(dirty)
        || !PyList_CheckExact(flushed) || !PyList_CheckExact(tombstones) || !PyType_Check(type_obj)
        || !PyType_IsSubtype((PyTypeObject *)type_obj, &PyTuple_Type)
        || ((PyTypeObject *)type_obj)->tp_basicsize != PyTuple_Type.tp_basicsize)
        Py_RETURN_FALSE;
    PyTypeObject *type = (PyTypeObject *)type_obj;
    Py_ssize_t pos = 0;
    PyObject *key, *ignored;
    /* every entry checked first: the loop below then cannot stop half way for a type */
    while (PyDict_Next(dirty, &pos, &key, &ignored)) {
        if (!PyBytes_CheckExact(key))
            Py_RETURN_FALSE;
        PyObject *entry = PyDict_GetItemWithError(entries, key);
        if (entry == NULL) {
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_FALSE;
        }
        if (!Py_IS_TYPE(entry, entry_type) || SLOT(entry, off_value) == NULL || SLOT(entry, off_timestamp) == NULL
            || SLOT(entry, off_old) == NULL || SLOT(entry, off_metadata) == NULL || SLOT(entry, off_headers) == NULL)
            Py_RETURN_FALSE;
    }
    pos = 0;
    while (PyDict_Next(dirty, &pos, &key, &ignored)) {
        PyObject *entry = PyDict_GetItemWithError(entries, key);  /* borrowed; checked above */
        if (entry == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, key);
            return NULL;
        }
        PyObject *value = SLOT(entry, off_value);
        PyObject *item = type->tp_alloc(type, 6);
        if (item == NULL)
            return NULL;
        PyTuple_SET_ITEM(item, 0, Py_NewRef(key));
        PyTuple_SET_ITEM(item, 1, Py_NewRef(value));
        PyTuple_SET_ITEM(item, 2, Py_NewRef(SLOT(entry, off_timestamp)));
        PyObject *old = SLOT(entry, off_old), *stamp = SLOT(entry, off_timestamp);
        PyTuple_SET_ITEM(item, 3, Py_NewRef(old));
        PyObject *metadata = SLOT(entry, off_metadata), *headers = SLOT(entry, off_headers), *pair = NULL;
        if (metadata != Py_None && !PyTuple_CheckExact(metadata)) {  /* a consumed message */
            /* record_context_from reads the message only: the dirty dict stays as it is */
            pair = context_from == NULL ? NULL : PyObject_CallFunctionObjArgs(context_from, metadata, headers, NULL);
            if (pair == NULL || !PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
                if (pair != NULL || !PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "take_dirty(): no record context for an entry's metadata");
                Py_XDECREF(pair);
                Py_DECREF(item);
                return NULL;
            }
            metadata = PyTuple_GET_ITEM(pair, 0);
            headers = PyTuple_GET_ITEM(pair, 1);
        }
        PyTuple_SET_ITEM(item, 4, Py_NewRef(metadata));
        PyTuple_SET_ITEM(item, 5, Py_NewRef(headers));
        Py_XDECREF(pair);  /* metadata and headers stay alive in item */
        /* Atomic fields only (as write_entry's entries): in no cycle, so left out of the cyclic
         * collector. A big flush's entries live while its listener runs; tracked, they would be
         * promoted to the oldest generation and trigger its full collections. */
        if ((value == Py_None || PyBytes_CheckExact(value)) && PyLong_CheckExact(stamp)
            && (old == Py_None || PyBytes_CheckExact(old) || Py_IS_TYPE(old, &PyBaseObject_Type))
            && atomic_context(metadata, headers))
            PyObject_GC_UnTrack(item);
        int rc = PyList_Append(flushed, item);
        Py_DECREF(item);
        if (rc < 0)
            return NULL;
        slot_set(entry, off_dirty, Py_NewRef(Py_False));
        if (value == Py_None && PyList_Append(tombstones, key) < 0)
            return NULL;
    }
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------------------------------
 * CachingKeyValueStore.get / put / replace (state/cache/kv.py, the definitions) in one C call:
 * bound to each store as its `get`, `put` and `replace`. The hot case only (an open store, exact bytes key and value,
 * an int timestamp); anything else is handed to the Python definition, registered with
 * set_store_definitions, which does the checks and raises the typed errors. */
static PyObject *str_named, *str_probe, *str_is_open, *str_cache, *str_lock, *str_acquire, *str_release,
    *str_reader, *str_get, *str_read_key, *str_read_value, *str_put_clean, *str_put_dirty, *str_owner_thread;
static PyObject *store_get_py = NULL, *store_put_py = NULL, *store_replace_py = NULL;

static PyObject *set_store_definitions(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "set_store_definitions(get, put, replace) takes three callables");
        return NULL;
    }
    Py_XSETREF(store_get_py, Py_NewRef(args[0]));
    Py_XSETREF(store_put_py, Py_NewRef(args[1]));
    Py_XSETREF(store_replace_py, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* The store's named cache (new reference) when the store is open, else NULL without an error
 * (the caller hands the call to the Python definition); NULL with an error on failure. */
static PyObject *open_named(PyObject *store)
{
    PyObject *named = PyObject_GetAttr(store, str_named);
    if (named == NULL)
        return NULL;
    if (named == Py_None) {
        Py_DECREF(named);
        return NULL;
    }
    PyObject *probe = PyObject_GetAttr(store, str_probe);
    PyObject *is_open = probe == NULL ? NULL : PyObject_GetAttr(probe, str_is_open);
    Py_XDECREF(probe);
    int open = is_open == NULL ? -1 : PyObject_IsTrue(is_open);
    Py_XDECREF(is_open);
    if (open <= 0) {
        Py_DECREF(named);
        return NULL;
    }
    return named;
}

static PyObject *lock_call(PyObject *lock, PyObject *name)
{
    return PyObject_VectorcallMethod(name, &lock, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* store.<_cache>.lock acquired (new reference to the lock), or NULL with an error */
static PyObject *acquire_lock(PyObject *store)
{
    PyObject *cache = PyObject_GetAttr(store, str_cache);
    if (cache == NULL)
        return NULL;
    PyObject *lock = PyObject_GetAttr(cache, str_lock);
    Py_DECREF(cache);
    if (lock == NULL)
        return NULL;
    PyObject *r = lock_call(lock, str_acquire);
    if (r == NULL) {
        Py_DECREF(lock);
        return NULL;
    }
    Py_DECREF(r);
    return lock;
}

/* releases the lock (and drops the reference), keeping a pending exception */
static int release_lock(PyObject *lock)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = lock_call(lock, str_release);
    Py_DECREF(lock);
    if (r == NULL) {
        if (type != NULL) {  /* the operation's own error is the one raised */
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
        }
        return -1;
    }
    Py_DECREF(r);
    PyErr_Restore(type, value, tb);
    return type != NULL ? -1 : 0;
}

/* cached_get's read with the store's named cache open and its lock held: the value (a new
 * reference, None when absent) or NULL with an error. */
static PyObject *get_held(PyObject *store, PyObject *named, PyObject *key)
{
    PyObject *lookup_args[2] = {named, key};
    PyObject *entry = lookup(NULL, lookup_args, 2);
    if (entry == NULL)
        return NULL;
    if (entry != Py_None) {
        PyObject *result = Py_IS_TYPE(entry, entry_type) && SLOT(entry, off_value) != NULL
                           ? Py_NewRef(SLOT(entry, off_value)) : PyObject_GetAttrString(entry, "value");
        Py_DECREF(entry);
        return result;
    }
    Py_DECREF(entry);
    PyObject *reader = PyObject_GetAttr(store, str_reader);
    if (reader == NULL)
        return NULL;
    PyObject *value = PyObject_VectorcallMethod(str_get, (PyObject *[]){reader, key},
                                                2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(reader);
    if (value == NULL)
        return NULL;
    /* another thread's read (an interactive query's) caches nothing, as the definition */
    PyObject *owner = PyObject_GetAttr(store, str_owner_thread);
    if (owner == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    unsigned long owner_ident = owner == Py_None ? 0 : PyLong_AsUnsignedLong(owner);
    int unowned = owner == Py_None;  /* not opened yet: nobody's reads are cached */
    Py_DECREF(owner);
    if (owner_ident == (unsigned long)-1 && PyErr_Occurred()) {
        Py_DECREF(value);
        return NULL;
    }
    if (unowned || owner_ident != PyThread_get_thread_ident())
        return value;
    if (value != Py_None) {
        PyObject *put_args[4] = {named, key, value, NULL};
        PyObject *minus_one = PyLong_FromLong(-1);
        if (minus_one == NULL) {
            Py_DECREF(value);
            return NULL;
        }
        put_args[3] = minus_one;
        PyObject *r = put_clean(NULL, put_args, 4);
        if (r == Py_None) {  /* declined: the method runs the Python definition */
            Py_DECREF(r);
            r = PyObject_VectorcallMethod(str_put_clean, put_args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        }
        Py_DECREF(minus_one);
        if (r == NULL) {
            Py_DECREF(value);
            return NULL;
        }
        Py_DECREF(r);
    }
    /* after put_clean: a flush it caused wrote other keys (this one was not cached) */
    if (PyObject_SetAttr(store, str_read_key, key) < 0 || PyObject_SetAttr(store, str_read_value, value) < 0) {
        Py_DECREF(value);
        return NULL;
    }
    return value;
}

/* cached_put's write with the store's named cache open and its lock held: 0, or -1 with an
 * error. */
static int put_held(PyObject *store, PyObject *named, PyObject *key, PyObject *value, PyObject *timestamp)
{
    PyObject *read_key = PyObject_GetAttr(store, str_read_key);
    if (read_key == NULL)
        return -1;
    int same = read_key == Py_None ? 0 : PyObject_RichCompareBool(key, read_key, Py_EQ);
    Py_DECREF(read_key);
    if (same < 0)
        return -1;
    PyObject *old = same ? PyObject_GetAttr(store, str_read_value) : Py_NewRef(unknown_marker);
    if (old == NULL)
        return -1;
    if (PyObject_SetAttr(store, str_read_key, Py_None) < 0) {
        Py_DECREF(old);
        return -1;
    }
    PyObject *put_args[5] = {named, key, value, timestamp, old};
    PyObject *r = put_dirty(NULL, put_args, 5);
    if (r == Py_None) {  /* declined: the method runs the Python definition */
        Py_DECREF(r);
        r = PyObject_VectorcallMethod(str_put_dirty, put_args, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_DECREF(old);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The hot case of a write: an exact bytes key, a bytes or None value and an int timestamp. */
static inline int hot_write(PyObject *key, PyObject *value, PyObject *timestamp)
{
    return PyBytes_CheckExact(key) && (value == Py_None || PyBytes_CheckExact(value)) && PyLong_CheckExact(timestamp)
           && unknown_marker != NULL;
}

static PyObject *cached_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0 && store_get_py != NULL)  /* the definition's */
        return PyObject_Vectorcall(store_get_py, args, nargs, kwnames);
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "cached_get() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *store = args[0], *key = args[1];
    if (store_get_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cached_get() before set_store_definitions()");
        return NULL;
    }
    PyObject *named = PyBytes_CheckExact(key) ? open_named(store) : NULL;
    if (named == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Vectorcall(store_get_py, args, 2, NULL);
    }
    PyObject *lock = acquire_lock(store);
    if (lock == NULL) {
        Py_DECREF(named);
        return NULL;
    }
    PyObject *result = get_held(store, named, key);
    Py_DECREF(named);
    if (release_lock(lock) < 0)
        Py_CLEAR(result);
    return result;
}

static PyObject *cached_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0 && store_put_py != NULL)  /* the definition's */
        return PyObject_Vectorcall(store_put_py, args, nargs, kwnames);
    if (nargs < 3 || nargs > 4) {
        PyErr_Format(PyExc_TypeError, "cached_put() takes 3 or 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *store = args[0], *key = args[1], *value = args[2], *timestamp = nargs == 4 ? args[3] : Py_None;
    if (store_put_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cached_put() before set_store_definitions()");
        return NULL;
    }
    PyObject *named = hot_write(key, value, timestamp) ? open_named(store) : NULL;
    if (named == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Vectorcall(store_put_py, args, nargs, NULL);
    }
    PyObject *lock = acquire_lock(store);
    if (lock == NULL) {
        Py_DECREF(named);
        return NULL;
    }
    int rc = put_held(store, named, key, value, timestamp);
    Py_DECREF(named);
    if (release_lock(lock) < 0 || rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* cached_replace(store, key, value, timestamp): CachingKeyValueStore.replace (the definition:
 * its get then its put, returning what the get read) with the named cache opened and the lock
 * taken once; any case but the hot one is the definition's. */
static PyObject *cached_replace(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "cached_replace() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *store = args[0], *key = args[1], *value = args[2], *timestamp = args[3];
    if (store_replace_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cached_replace() before set_store_definitions()");
        return NULL;
    }
    PyObject *named = hot_write(key, value, timestamp) ? open_named(store) : NULL;
    if (named == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Vectorcall(store_replace_py, args, 4, NULL);
    }
    PyObject *lock = acquire_lock(store);
    if (lock == NULL) {
        Py_DECREF(named);
        return NULL;
    }
    PyObject *read = get_held(store, named, key);
    int rc = read == NULL ? -1 : put_held(store, named, key, value, timestamp);
    Py_DECREF(named);
    if (release_lock(lock) < 0 || rc < 0) {
        Py_XDECREF(read);
        return NULL;
    }
    return read;
}

static PyMethodDef module_methods[] = {
    {"set_entry_layout", (PyCFunction)(void (*)(void))set_entry_layout, METH_FASTCALL,
     "set_entry_layout(entry_type, overhead=None, unknown=None, record_context_from=None)\n--\n\n"
     "Registers CacheEntry: checks that value, dirty, timestamp, size, old, metadata and headers\n"
     "are writable object slots of that type and keeps their offsets for increment_run and\n"
     "write_entry, the bookkeeping bytes of an entry (ENTRY_OVERHEAD; until it is given\n"
     "write_entry declines every write), the UNKNOWN marker, and the function take_dirty turns\n"
     "a consumed message's record context with. Raises TypeError otherwise."},
    {"take_dirty", (PyCFunction)(void (*)(void))take_dirty, METH_FASTCALL,
     "take_dirty(entries, dirty, entry_tuple_type, flushed, tombstones)\n--\n\n"
     "NamedCache._take_dirty's loop in C: each dirty key's entry_tuple_type(key, value,\n"
     "timestamp, old, metadata, headers) appended to flushed (a None value's key to tombstones too), the entry\n"
     "marked clean. Returns False, having done nothing, for an entry it does not take."},
    {"write_entry", (PyCFunction)(void (*)(void))write_entry, METH_FASTCALL,
     "write_entry(entries, dirty, key, value, timestamp, old, metadata=None, headers=(), overhead=None)\n--\n\n"
     "state.cache.thread_cache.write_entry_py's write in C: returns the size change, or None\n"
     "(having done nothing) for a case it does not take (see the function's comment)."},
    {"increment_run", (PyCFunction)(void (*)(void))increment_run, METH_FASTCALL,
     "increment_run(entries, dirty, keys, timestamps, start, newest, stamped=False, context=None,\n"
     "              metadatas=None, increments=None, entry_cost=ENTRY_OVERHEAD)\n--\n\n"
     "CachingKeyValueStore.update_many's hot case for keys[start:] with an int64 add-one fn:\n"
     "while the key is cached with an 8-byte value that does not overflow, and its entry's size\n"
     "is its key's and value's bytes plus entry_cost (the named cache's entry overhead and the\n"
     "run's record context size: the write keeps the size), write value + 1\n"
     "(value + increments[i], a signed byte, when increments is bytes) as update_many does\n"
     "(dirty order, old value, timestamp, record context, LRU order). The record context:\n"
     "metadatas[i] and no headers when metadatas is a list, else context's metadata and\n"
     "headers (none when context is None). With stamped, the value is 16 bytes (timestamp,\n"
     "int64): the int64 gets its increment added and the timestamp, as the entry's, becomes\n"
     "max(its own, the record's). Stops at the first key\n"
     "that is not that case, or at once if newest is not an int64.\n"
     "Returns (stop, hits, newest, last_value, error): stop is the index of the first key not\n"
     "updated (len when all were), hits the keys updated plus the failed one, newest the\n"
     "largest of newest and their timestamps, last_value the last value written (None if\n"
     "none) and error None or the exception a key's update failed with (not raised, so the\n"
     "caller can account for the keys done before it)."},
    {"lookup", (PyCFunction)(void (*)(void))lookup, METH_FASTCALL,
     "lookup(named, key)\n--\n\nstate.cache.thread_cache.lookup_py in C: the entry (made MRU, a hit) or None (a miss)."},
    {"put_clean", (PyCFunction)(void (*)(void))put_clean, METH_FASTCALL,
     "put_clean(named, key, value, timestamp)\n--\n\nstate.cache.thread_cache.put_clean_py in C: True, or None\n"
     "(having done nothing) for a key or value write_entry declines."},
    {"put_dirty", (PyCFunction)(void (*)(void))put_dirty, METH_FASTCALL,
     "put_dirty(named, key, value, timestamp, old)\n--\n\nstate.cache.thread_cache.put_dirty_py in C: True, or\n"
     "None (having done nothing) for a case write_entry declines."},
    {"set_named_layout", (PyCFunction)set_named_layout, METH_O,
     "set_named_layout(named_cache_type)\n--\n\nRegisters NamedCache: its entries, dirty, owner, size_bytes, hits,\n"
     "misses, evictions and context slots are then read and written directly. Raises TypeError if they are not\n"
     "writable object slots of that type."},
    {"maybe_evict", (PyCFunction)maybe_evict, METH_O,
     "maybe_evict(named)\n--\n\nstate.cache.thread_cache.maybe_evict_py in C: evicts the named cache's eldest\n"
     "entries while its owner is over budget (a dirty one by named.evict_eldest())."},
    {"set_store_definitions", (PyCFunction)(void (*)(void))set_store_definitions, METH_FASTCALL,
     "set_store_definitions(get, put, replace)\n--\n\nRegisters CachingKeyValueStore's Python get, put and replace:\n"
     "cached_get, cached_put and cached_replace hand them every case they do not take."},
    {"cached_get", (PyCFunction)(void (*)(void))cached_get, METH_FASTCALL | METH_KEYWORDS,
     "cached_get(store, key)\n--\n\nCachingKeyValueStore.get (the Python definition) in C for an open store and\n"
     "a bytes key; any other case is the definition's."},
    {"cached_put", (PyCFunction)(void (*)(void))cached_put, METH_FASTCALL | METH_KEYWORDS,
     "cached_put(store, key, value, timestamp=None)\n--\n\nCachingKeyValueStore.put (the Python definition) in\n"
     "C for an open store, a bytes key, a bytes or None value and an int timestamp; any other case is the\n"
     "definition's."},
    {"cached_replace", (PyCFunction)(void (*)(void))cached_replace, METH_FASTCALL,
     "cached_replace(store, key, value, timestamp)\n--\n\nCachingKeyValueStore.replace (the Python definition:\n"
     "get, then put) in C for an open store, a bytes key, a bytes or None value and an int timestamp; any\n"
     "other case is the definition's."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "state.cache._cache",
    .m_doc = "C implementation of the hot loops of state.cache.kv.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__cache(void)
{
    if (str_move_to_end == NULL) {
        str_move_to_end = PyUnicode_InternFromString("move_to_end");
        str_entries = PyUnicode_InternFromString("entries");
        str_dirty = PyUnicode_InternFromString("dirty");
        str_owner = PyUnicode_InternFromString("owner");
        str_size_bytes = PyUnicode_InternFromString("size_bytes");
        str_total_bytes = PyUnicode_InternFromString("_total_bytes");
        str_max_bytes = PyUnicode_InternFromString("max_bytes");
        str_evictions = PyUnicode_InternFromString("evictions");
        str_hits = PyUnicode_InternFromString("hits");
        str_misses = PyUnicode_InternFromString("misses");
        str_evict_eldest = PyUnicode_InternFromString("evict_eldest");
        str_write_through = PyUnicode_InternFromString("write_through");
        str_context = PyUnicode_InternFromString("context");
        str_entry_overhead = PyUnicode_InternFromString("entry_overhead");
        str_range_index = PyUnicode_InternFromString("range_index");
        str_add = PyUnicode_InternFromString("add");
        str_topic = PyUnicode_InternFromString("topic");
        str_headers = PyUnicode_InternFromString("headers");
        str_metadata = PyUnicode_InternFromString("metadata");
        one = PyLong_FromLong(1);
        str_named = PyUnicode_InternFromString("_named");
        str_probe = PyUnicode_InternFromString("_probe");
        str_is_open = PyUnicode_InternFromString("is_open");
        str_cache = PyUnicode_InternFromString("_cache");
        str_lock = PyUnicode_InternFromString("lock");
        str_acquire = PyUnicode_InternFromString("acquire");
        str_release = PyUnicode_InternFromString("release");
        str_reader = PyUnicode_InternFromString("_reader");
        str_get = PyUnicode_InternFromString("get");
        str_read_key = PyUnicode_InternFromString("_read_key");
        str_read_value = PyUnicode_InternFromString("_read_value");
        str_owner_thread = PyUnicode_InternFromString("_owner_thread");
        str_put_clean = PyUnicode_InternFromString("put_clean");
        str_put_dirty = PyUnicode_InternFromString("put_dirty");
        if (str_named == NULL || str_probe == NULL || str_is_open == NULL || str_cache == NULL || str_lock == NULL
            || str_acquire == NULL || str_release == NULL || str_reader == NULL || str_get == NULL
            || str_read_key == NULL || str_read_value == NULL || str_put_clean == NULL || str_put_dirty == NULL
            || str_owner_thread == NULL)
            return NULL;
        if (str_move_to_end == NULL || str_entries == NULL || str_dirty == NULL || str_owner == NULL
            || str_size_bytes == NULL || str_total_bytes == NULL || str_max_bytes == NULL || str_evictions == NULL
            || str_hits == NULL || str_misses == NULL || str_evict_eldest == NULL || str_write_through == NULL
            || str_context == NULL || str_entry_overhead == NULL || str_topic == NULL || str_headers == NULL
            || str_metadata == NULL || str_range_index == NULL || str_add == NULL || one == NULL)
            return NULL;
    }
    return PyModule_Create(&module_def);
}
