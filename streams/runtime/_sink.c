/* C accelerator of a sink's per-record work (SinkNode._sink in streams/engine/nodes.py) over
 * the embedded producer's queues: the stage streams/runtime/direct_sink.py offers when this
 * module is built and the producer's QueueView has the `untracked_entries` capability.
 *
 * Per value, DirectSink does the common path itself: the folded nodes' work (a flat_map_values'
 * values, a key selection), the two serializer calls, the murmur2 partition over the producer's
 * queue list, the untracked queue entry (what QueueView.append does), the kick and the poll every
 * POLL_EVERY records. Every other case goes to the one Python implementation before it has any
 * effect, so nothing is done twice and each uncommon case exists once, in Python:
 *
 *   sink(k, value, timestamp, headers)    the sink's own stage (SinkNode._sink): no queues for
 *                                         the topic, a None key, headers, a pending delivery
 *                                         failure, a serializer error (called while that error
 *                                         is handled, as an `except` clause would)
 *   send(key_bytes, value_bytes, timestamp, headers)
 *                                         the collector's send path for serialized bytes
 *                                         (RecordCollector.sender): a serializer result that is
 *                                         not bytes, a timestamp that is not a positive int, a
 *                                         queue whose callback is not the sinks' (produce() has
 *                                         not set it), no partitions
 *
 * Failures call the marker of the node they belong to (values_failed, selector_failed, failed),
 * innermost first, with the failing exception handled while they run (sys.exc_info() and
 * __context__ are as in Python).
 *
 * With a fixed `partition` in its namespace (and None serializers: it is given bytes) the same
 * stage queues a changelog's records (RecordCollector.partition_sender): the partition is the
 * given one (a partition the queues do not have goes to `send`), a None key is queued, and
 * `sink` and `send` are both the collector's send path to that partition.
 *
 * One deliberate difference: collector._since_poll is counted in a C variable while only the
 * user's functions (selector, serializers, values iterator) run, and written back before any
 * other call out and when the stage returns; nothing but the collector itself reads it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#include "../../eddy/murmur2.h"

/* interned attribute names */
static PyObject *str_topics, *str_error, *str_since_poll, *str_cb, *str_entries, *str_kick_at, *str_poll;
static PyObject *int_zero;

/* Where one __slots__ attribute of one exact type lives, learnt at first sight. The queue and
 * the view are __slots__ objects read four times a record; reading the slot directly skips the
 * generic attribute lookup, which is most of the cost of each read. */
typedef struct {
    PyTypeObject *type;   /* strong: the address cannot be reused while learnt; NULL: not learnt */
    unsigned int version; /* the type's version tag then: any change to the type forgets the slot */
    Py_ssize_t offset;
} Slot;

/* getattr(obj, name), through `slot` when obj's type is the one learnt and unchanged. */
static inline PyObject *slot_get(PyObject *obj, PyObject *name, Slot *slot)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (type == slot->type && (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && type->tp_version_tag == slot->version) {
        PyObject *v = *(PyObject **)((char *)obj + slot->offset);
        if (v != NULL)
            return Py_NewRef(v);
    } else if (type->tp_getattro == PyObject_GenericGetAttr) {
        /* a member descriptor is a data descriptor: generic getattr reads exactly this slot */
        PyObject *descr = _PyType_Lookup(type, name);
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
            ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
            (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
            Py_INCREF(type);
            Py_XSETREF(slot->type, type);
            slot->version = type->tp_version_tag;
            slot->offset = ((PyMemberDescrObject *)descr)->d_member->offset;
        }
    }
    return PyObject_GetAttr(obj, name); /* and the AttributeError of an empty slot */
}

typedef struct {
    PyObject_HEAD
    PyObject *collector, *producer, *view, *topic, *on_delivery, *kick;
    PyObject *key_serialize, *value_serialize, *sink, *send, *failed;
    PyObject *key_selector, *selector_failed, *values_fn, *values_failed; /* NULL when absent */
    PyObject *dict;
    Slot topics_slot, cb_slot, entries_slot, kick_at_slot;
    int same_serializer;
    long poll_every;
    Py_ssize_t partition; /* a fixed partition (a changelog's), or -1: murmur2 of the key */
    vectorcallfunc vectorcall;
} DirectSink;

/* collector._since_poll while this call counts it (see the module comment) */
typedef struct {
    long since;
    int loaded; /* since holds the attribute's value (plus what was counted since) */
    int dirty;  /* since differs from the attribute */
} Run;

/* Write the count back (before calling out, and at the end). Keeps a pending exception. */
static int flush_since(DirectSink *s, Run *r)
{
    r->loaded = 0;
    if (!r->dirty)
        return 0;
    r->dirty = 0;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *n = PyLong_FromLong(r->since);
    int rc = n == NULL ? -1 : PyObject_SetAttr(s->collector, str_since_poll, n);
    Py_XDECREF(n);
    if (type != NULL) {
        if (rc < 0)
            PyErr_Clear(); /* the pending exception is the one the caller propagates */
        PyErr_Restore(type, value, tb);
    }
    return rc;
}

/* Call fn(*args) as the body of an `except` clause handling the pending exception: that
 * exception is the handled one while fn runs, so fn sees it in sys.exc_info() and whatever fn
 * raises gets it as __context__, as in the template. `reraise`: on success the pending
 * exception is raised again (`marker(); raise`); otherwise the clause ends and it is dropped.
 * The handled exception lives in the thread state's current exc_info item; it is swapped in
 * and back exactly as the interpreter does for an except block (the public
 * PyErr_SetHandledException would leave a lower frame's exception in the current item). */
static PyObject *call_in_except(PyObject *fn, PyObject *const *args, size_t nargs, int reraise)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    _PyErr_StackItem *item = PyThreadState_Get()->exc_info;
    PyObject *outer = item->exc_value; /* the item's reference moves here for the call */
    Py_XINCREF(value);
    item->exc_value = value;
    PyObject *res = PyObject_Vectorcall(fn, args, nargs, NULL);
    item = PyThreadState_Get()->exc_info;
    PyObject *ours = item->exc_value;
    item->exc_value = outer;
    Py_XDECREF(ours);
    if (res != NULL && reraise) {
        PyErr_Restore(type, value, tb);
        return res;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return res;
}

/* `except BaseException: marker(); raise`. Always -1, with an exception set. */
static int call_marker(PyObject *marker)
{
    PyObject *res = call_in_except(marker, NULL, 0, 1);
    Py_XDECREF(res);
    return -1;
}

/* `collector._since_poll += 1; if collector._since_poll >= POLL_EVERY: collector._since_poll = 0;
 * producer.poll(0)`, counting in r while no one else can look (see the module comment). */
static int count_send(DirectSink *s, Run *r)
{
    if (!r->loaded) {
        PyObject *v = PyObject_GetAttr(s->collector, str_since_poll);
        if (v == NULL)
            return -1;
        int overflow = 1;
        long x = PyLong_CheckExact(v) ? PyLong_AsLongAndOverflow(v, &overflow) : 0;
        if (overflow || x >= LONG_MAX - 1) {
            /* not a plain int: the template's object arithmetic, once */
            PyObject *one = PyLong_FromLong(1);
            PyObject *n = one == NULL ? NULL : PyNumber_Add(v, one);
            Py_XDECREF(one);
            Py_DECREF(v);
            if (n == NULL || PyObject_SetAttr(s->collector, str_since_poll, n) < 0) {
                Py_XDECREF(n);
                return -1;
            }
            PyObject *limit = PyLong_FromLong(s->poll_every);
            int due = limit == NULL ? -1 : PyObject_RichCompareBool(n, limit, Py_GE);
            Py_XDECREF(limit);
            Py_DECREF(n);
            if (due <= 0)
                return due;
            goto poll;
        }
        Py_DECREF(v);
        r->since = x;
        r->loaded = 1;
    }
    r->since += 1;
    r->dirty = 1;
    if (r->since < s->poll_every)
        return 0;
poll:
    r->dirty = 0;
    r->loaded = 0;
    if (PyObject_SetAttr(s->collector, str_since_poll, int_zero) < 0)
        return -1;
    PyObject *args[2] = {s->producer, int_zero};
    PyObject *res = PyObject_VectorcallMethod(str_poll, args, 2, NULL);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}

/* One record (key, value) of the sink: 0 when done, -1 with an exception set and the markers
 * of the failing nodes (selector_failed, failed) already called. */
static int sink_value(DirectSink *s, Run *r, PyObject *key, PyObject *value, PyObject *ts, PyObject *headers)
{
    PyObject *k, *queues = NULL, *key_bytes = NULL, *value_bytes = NULL, *queue = NULL, *entries = NULL,
             *kick_at = NULL, *res;
    int rc = -1;

    if (s->key_selector != NULL) {
        PyObject *args[2] = {key, value};
        k = PyObject_Vectorcall(s->key_selector, args, 2, NULL);
        if (k == NULL) {
            flush_since(s, r);
            return call_marker(s->selector_failed);
        }
    } else {
        k = Py_NewRef(key);
    }

    /* queues = view.topics.get(topic), then the cases that are the sink's own stage's (it
     * marks its own failures) */
    PyObject *topics = slot_get(s->view, str_topics, &s->topics_slot);
    if (topics == NULL)
        goto done;
    if (!PyDict_CheckExact(topics)) {
        Py_DECREF(topics);
        goto sink;
    }
    queues = PyDict_GetItemWithError(topics, s->topic);
    Py_XINCREF(queues); /* the user's serializers may let the sender thread replace it */
    Py_DECREF(topics);
    if (queues == NULL && PyErr_Occurred())
        goto done;
    if (queues == NULL || (k == Py_None && s->partition < 0) || !PyList_CheckExact(queues))
        goto sink;
    int has_headers = PyObject_IsTrue(headers);
    if (has_headers < 0)
        goto done;
    if (has_headers)
        goto sink;
    PyObject *error = PyObject_GetAttr(s->collector, str_error);
    if (error == NULL)
        goto done;
    Py_DECREF(error);
    if (error != Py_None) /* only compared: the collector still holds it */
        goto sink;

    /* a None serializer: the stage is given bytes (a changelog's records) */
    key_bytes = s->key_serialize == Py_None ? Py_NewRef(k) : PyObject_Vectorcall(s->key_serialize, &k, 1, NULL);
    if (key_bytes == NULL)
        goto serialize_failed;
    if (s->value_serialize == Py_None) {
        value_bytes = Py_NewRef(value);
    } else if (value == k && s->same_serializer) {
        value_bytes = Py_NewRef(key_bytes);
    } else if (value == Py_None) {
        value_bytes = Py_NewRef(Py_None);
    } else {
        value_bytes = PyObject_Vectorcall(s->value_serialize, &value, 1, NULL);
        if (value_bytes == NULL)
            goto serialize_failed;
    }

    /* from here anything unusual is the collector's send path's */
    if ((!PyBytes_CheckExact(key_bytes) && !(key_bytes == Py_None && s->partition >= 0)) ||
        (value_bytes != Py_None && !PyBytes_CheckExact(value_bytes)))
        goto send;
    if (!PyLong_CheckExact(ts) || _PyLong_Sign(ts) <= 0) /* 0 (now), negative, not an int */
        goto send;
    Py_ssize_t n = PyList_GET_SIZE(queues); /* read now: the list may have grown meanwhile */
    if (n <= 0)
        goto send;
    size_t partition;
    if (s->partition >= 0) {
        if (s->partition >= n)
            goto send;
        partition = (size_t)s->partition;
    } else {
        partition = eddy_murmur2_partition((const uint8_t *)PyBytes_AS_STRING(key_bytes),
                                           (size_t)PyBytes_GET_SIZE(key_bytes), (size_t)n);
    }
    queue = Py_NewRef(PyList_GET_ITEM(queues, (Py_ssize_t)partition));

    PyObject *cb = slot_get(queue, str_cb, &s->cb_slot);
    if (cb == NULL)
        goto failed;
    int ours = cb == s->on_delivery;
    Py_DECREF(cb);
    if (!ours)
        goto send;
    entries = slot_get(queue, str_entries, &s->entries_slot);
    if (entries == NULL)
        goto failed;
    if (!PyList_CheckExact(entries))
        goto send;
    /* what the view's append does (its untracked_entries capability): bytes, None and an int
     * cannot form a cycle, so the tuple is untracked (queued records are many) */
    PyObject *entry = PyTuple_New(4);
    if (entry == NULL)
        goto failed;
    PyTuple_SET_ITEM(entry, 0, Py_NewRef(key_bytes));
    PyTuple_SET_ITEM(entry, 1, Py_NewRef(value_bytes));
    PyTuple_SET_ITEM(entry, 2, Py_NewRef(ts));
    PyTuple_SET_ITEM(entry, 3, Py_NewRef(Py_None));
    PyObject_GC_UnTrack(entry);
    int appended = PyList_Append(entries, entry);
    Py_DECREF(entry);
    if (appended < 0)
        goto failed;
    Py_ssize_t length = PyList_GET_SIZE(entries);

    kick_at = slot_get(queue, str_kick_at, &s->kick_at_slot);
    if (kick_at == NULL)
        goto failed;
    int kick;
    if (PyLong_CheckExact(kick_at)) {
        int overflow;
        long long at = PyLong_AsLongLongAndOverflow(kick_at, &overflow);
        if (at == -1 && PyErr_Occurred())
            goto failed;
        kick = overflow > 0 ? 0 : overflow < 0 ? 1 : (long long)length >= at;
    } else {
        PyObject *len_obj = PyLong_FromSsize_t(length);
        if (len_obj == NULL)
            goto failed;
        kick = PyObject_RichCompareBool(len_obj, kick_at, Py_GE);
        Py_DECREF(len_obj);
        if (kick < 0)
            goto failed;
    }
    if (kick) {
        flush_since(s, r);
        res = PyObject_Vectorcall(s->kick, &queue, 1, NULL);
        if (res == NULL)
            goto failed;
        Py_DECREF(res);
    }
    if (count_send(s, r) < 0)
        goto failed;
    rc = 0;
    goto done;

serialize_failed:
    /* `except Exception: sink(k, value, timestamp, headers)` (the sink's own stage serializes
     * again with the checked serializers, whose error names the sink); a BaseException that is
     * not an Exception is the sink's failure */
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        goto failed;
    flush_since(s, r);
    {
        PyObject *args[4] = {k, value, ts, headers};
        res = call_in_except(s->sink, args, 4, 0);
    }
    if (res == NULL)
        goto done; /* the sink's stage called the marker */
    Py_DECREF(res);
    rc = 0;
    goto done;

failed:
    flush_since(s, r);
    call_marker(s->failed);
    goto done;

sink:
    flush_since(s, r);
    {
        PyObject *args[4] = {k, value, ts, headers};
        res = PyObject_Vectorcall(s->sink, args, 4, NULL);
    }
    if (res != NULL) {
        Py_DECREF(res);
        rc = 0;
    }
    goto done;

send:
    flush_since(s, r);
    {
        PyObject *args[4] = {key_bytes, value_bytes, ts, headers};
        res = PyObject_Vectorcall(s->send, args, 4, NULL);
    }
    if (res == NULL)
        goto failed;
    Py_DECREF(res);
    rc = 0;
    goto done;

done:
    Py_DECREF(k);
    Py_XDECREF(queues);
    Py_XDECREF(key_bytes);
    Py_XDECREF(value_bytes);
    Py_XDECREF(queue);
    Py_XDECREF(entries);
    Py_XDECREF(kick_at);
    return rc;
}

/* The end of a call: write the count back. Its failure is a failure of the sink's body. */
static int finish(DirectSink *s, Run *r)
{
    if (flush_since(s, r) == 0)
        return 0;
    return call_marker(s->failed);
}

/* stage(key, value, timestamp, headers), or with values_fn stage(key, line, timestamp, headers) */
static PyObject *sink_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    DirectSink *s = (DirectSink *)self;
    if (PyVectorcall_NARGS(nargsf) != 4 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a sink stage takes 4 positional arguments (key, value, timestamp, headers)");
        return NULL;
    }
    PyObject *key = args[0], *value = args[1], *ts = args[2], *headers = args[3];
    Run r = {0, 0, 0};
    if (s->values_fn == NULL) {
        if (sink_value(s, &r, key, value, ts, headers) < 0) {
            flush_since(s, &r);
            return NULL;
        }
        return finish(s, &r) < 0 ? NULL : Py_NewRef(Py_None);
    }

    /* `for value in values_fn(line)`: a list by index, re-reading its length each time as the
     * list iterator does; any other iterable lazily, one value processed before the next is
     * asked for */
    PyObject *values = PyObject_Vectorcall(s->values_fn, &value, 1, NULL);
    if (values == NULL)
        return call_marker(s->values_failed), NULL;
    if (PyList_CheckExact(values)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
            PyObject *v = Py_NewRef(PyList_GET_ITEM(values, i));
            int rc = sink_value(s, &r, key, v, ts, headers);
            Py_DECREF(v);
            if (rc < 0)
                goto fail;
        }
    } else {
        PyObject *it = PyObject_GetIter(values);
        if (it == NULL)
            goto fail;
        PyObject *v;
        while ((v = PyIter_Next(it)) != NULL) {
            int rc = sink_value(s, &r, key, v, ts, headers);
            Py_DECREF(v);
            if (rc < 0) {
                Py_DECREF(it);
                goto fail;
            }
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            goto fail;
    }
    Py_DECREF(values);
    if (flush_since(s, &r) < 0) {
        call_marker(s->failed);
        return call_marker(s->values_failed), NULL;
    }
    Py_RETURN_NONE;

fail:
    Py_DECREF(values);
    flush_since(s, &r);
    return call_marker(s->values_failed), NULL;
}

/* ---- the type ------------------------------------------------------------------------------- */

static PyObject *ns_get(PyObject *ns, const char *name, int optional)
{
    PyObject *v = PyDict_GetItemString(ns, name);
    if (v == NULL) {
        PyErr_Format(PyExc_TypeError, "DirectSink: the namespace has no %s", name);
        return NULL;
    }
    if (optional && v == Py_None)
        return NULL;
    if (!optional && v != Py_None && strcmp(name, "topic") != 0 && strcmp(name, "collector") != 0 &&
        strcmp(name, "producer") != 0 && strcmp(name, "view") != 0 && !PyCallable_Check(v)) {
        PyErr_Format(PyExc_TypeError, "DirectSink: %s must be callable, not %.100s", name, Py_TYPE(v)->tp_name);
        return NULL;
    }
    return Py_NewRef(v);
}

static PyObject *sink_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *ns;
    if (!PyArg_ParseTuple(args, "O!:DirectSink", &PyDict_Type, &ns))
        return NULL;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "DirectSink takes no keyword arguments");
        return NULL;
    }
    DirectSink *s = (DirectSink *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->vectorcall = sink_call;
    struct {
        PyObject **field;
        const char *name;
        int optional;
    } fields[] = {
        {&s->collector, "collector", 0}, {&s->producer, "producer", 0}, {&s->view, "view", 0},
        {&s->topic, "topic", 0}, {&s->on_delivery, "on_delivery", 0}, {&s->kick, "kick", 0},
        {&s->key_serialize, "key_serialize", 0}, {&s->value_serialize, "value_serialize", 0},
        {&s->sink, "sink", 0}, {&s->send, "send", 0}, {&s->failed, "failed", 0},
        {&s->key_selector, "key_selector", 1}, {&s->selector_failed, "selector_failed", 1},
        {&s->values_fn, "values_fn", 1}, {&s->values_failed, "values_failed", 1},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        *fields[i].field = ns_get(ns, fields[i].name, fields[i].optional);
        if (*fields[i].field == NULL && PyErr_Occurred())
            goto fail;
    }
    if ((s->key_selector != NULL && s->selector_failed == NULL) || (s->values_fn != NULL && s->values_failed == NULL)) {
        PyErr_SetString(PyExc_TypeError, "DirectSink: a key_selector needs selector_failed, a values_fn values_failed");
        goto fail;
    }
    PyObject *same = PyDict_GetItemString(ns, "same_serializer");
    PyObject *every = PyDict_GetItemString(ns, "POLL_EVERY");
    if (same == NULL || every == NULL || !PyLong_Check(every)) {
        PyErr_SetString(PyExc_TypeError, "DirectSink: the namespace needs same_serializer and an int POLL_EVERY");
        goto fail;
    }
    if ((s->same_serializer = PyObject_IsTrue(same)) < 0)
        goto fail;
    s->poll_every = PyLong_AsLong(every);
    if (s->poll_every == -1 && PyErr_Occurred())
        goto fail;
    if (s->poll_every <= 0) {
        PyErr_Format(PyExc_ValueError, "DirectSink: POLL_EVERY must be positive, got %ld", s->poll_every);
        goto fail;
    }
    s->partition = -1;
    PyObject *partition = PyDict_GetItemString(ns, "partition");
    if (partition != NULL && partition != Py_None) {
        if (!PyLong_Check(partition) || (s->partition = PyLong_AsSsize_t(partition)) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "DirectSink: partition must be a non-negative int or None");
            goto fail;
        }
    }
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

#define SINK_FIELDS(X)                                                                                      \
    X(collector) X(producer) X(view) X(topic) X(on_delivery) X(kick)                                       \
    X(key_serialize) X(value_serialize) X(sink) X(send) X(failed) X(key_selector) X(selector_failed)       \
    X(values_fn) X(values_failed) X(dict)

/* GC support: the stage holds the user's functions and the collector, which may refer back to it */
static int sink_traverse(DirectSink *s, visitproc visit, void *arg)
{
#define VISIT(f) Py_VISIT(s->f);
    SINK_FIELDS(VISIT)
    VISIT(topics_slot.type) VISIT(cb_slot.type) VISIT(entries_slot.type) VISIT(kick_at_slot.type)
#undef VISIT
    return 0;
}

static int sink_clear(DirectSink *s)
{
#define CLEAR(f) Py_CLEAR(s->f);
    SINK_FIELDS(CLEAR)
    CLEAR(topics_slot.type) CLEAR(cb_slot.type) CLEAR(entries_slot.type) CLEAR(kick_at_slot.type)
#undef CLEAR
    return 0;
}

static void sink_dealloc(DirectSink *s)
{
    PyObject_GC_UnTrack(s);
    sink_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject DirectSinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streams.runtime._sink.DirectSink",
    .tp_doc = "DirectSink(namespace): a sink's stage over the embedded producer's queues as one C callable,\n"
              "stage(key, value, timestamp, headers); see streams/runtime/direct_sink.py.",
    .tp_basicsize = sizeof(DirectSink),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = sink_new,
    .tp_dealloc = (destructor)sink_dealloc,
    .tp_free = PyObject_GC_Del,
    .tp_traverse = (traverseproc)sink_traverse,
    .tp_clear = (inquiry)sink_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(DirectSink, vectorcall),
    .tp_dictoffset = offsetof(DirectSink, dict), /* the stage's attributes (with_key_selector, ...) */
};

static PyMethodDef module_methods[] = {
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "streams.runtime._sink",
    .m_doc = "C accelerator of a sink's stage over the embedded producer's queues (streams.runtime.direct_sink).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__sink(void)
{
    struct {
        PyObject **where;
        const char *text;
    } names[] = {
        {&str_topics, "topics"}, {&str_error, "_error"}, {&str_since_poll, "_since_poll"}, {&str_cb, "cb"},
        {&str_entries, "entries"}, {&str_kick_at, "kick_at"}, {&str_poll, "poll"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (*names[i].where == NULL && (*names[i].where = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    if (int_zero == NULL && (int_zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    if (PyType_Ready(&DirectSinkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&DirectSinkType);
    if (PyModule_AddObject(m, "DirectSink", (PyObject *)&DirectSinkType) < 0) {
        Py_DECREF(&DirectSinkType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
