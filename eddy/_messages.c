/*
 * C passes over consumed confluent_kafka.Message objects (eddy/messages.py): they read the
 * messages' fields at the layout eddy/messages.py verified (message_layout.h) instead of calling
 * eight methods per message. Shared by the restore loop (state/restore.py), the stream task's
 * partition cut (streams/runtime/task_manager.py) and the engine's record path (streams/engine/).
 * Every function answers None when there is no layout or a message is of another type: the
 * caller then takes its Python path, which the tests compare these to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "message_layout.h"

static PyObject *empty_tuple, *minus_one;
static MessageLayout msg_layout;

PyDoc_STRVAR(set_message_layout_doc, SET_MESSAGE_LAYOUT_DOC);

static PyObject *set_message_layout(PyObject *self, PyObject *args)
{
    return layout_set(&msg_layout, args);
}

PyDoc_STRVAR(fill_message_doc,
"fill_message(topic, partition, offset, key, value, headers, leader_epoch, timestamp, tstype) -> Message\n\n"
"A message of the layout type with its fields set directly (what the decoder does): the layout's\n"
"verification compares it byte for byte to a constructor-built one. None without a layout.");

static PyObject *fill_message(PyObject *self, PyObject *args)
{
    PyObject *topic, *key, *value, *headers;
    int partition, leader_epoch, tstype;
    long long offset, timestamp;
    if (!PyArg_ParseTuple(args, "UiLOOOiLi:fill_message", &topic, &partition, &offset, &key, &value, &headers,
                          &leader_epoch, &timestamp, &tstype))
        return NULL;
    if (msg_layout.type == NULL)
        Py_RETURN_NONE;
    Py_INCREF(key);
    Py_INCREF(value);
    Py_INCREF(headers);
    return layout_message(&msg_layout, topic, partition, offset, key, value, headers, leader_epoch, timestamp,
                          tstype);
}

/* ---- consumed changelog messages to restore records ------------------------------------------ */

PyDoc_STRVAR(changelog_records_doc,
"changelog_records(messages, stamped=False) -> (topic, partition, [(key, value), ...]) or None\n\n"
"The restore's common case in one pass: the (key, value) pairs of consumed messages that all\n"
"come from one partition and all have a key, read from the fields of messages of the layout\n"
"type (set_message_layout); a None value (a tombstone) stays None. None when there is no\n"
"layout, the list is empty, a message is of another type, the messages span partitions, or\n"
"one has no key (null-key records and consumer events, which carry no key): the caller then\n"
"takes its general path.\n"
"With stamped (a timestamped store's changelog, Kafka's format), each value comes back as the\n"
"store keeps it: the record's timestamp (8 bytes, big-endian) in front of it, what\n"
"state.timestamped.restore_converter does; None also when a value is longer than 8 bytes and\n"
"already starts with its record's timestamp (the converter decides about that one).");

/* 8-byte big-endian */
static inline void put_be64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(u & 0xff);
        u >>= 8;
    }
}

static PyObject *changelog_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 && nargs != 2) {
        PyErr_Format(PyExc_TypeError, "changelog_records() takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *msgs = args[0];
    int stamped = 0;
    if (nargs == 2) {
        stamped = PyObject_IsTrue(args[1]);
        if (stamped < 0)
            return NULL;
    }
    if (!PyList_Check(msgs)) {
        PyErr_Format(PyExc_TypeError, "changelog_records: messages must be a list, not %.100s",
                     Py_TYPE(msgs)->tp_name);
        return NULL;
    }
    PyTypeObject *type = msg_layout.type;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    if (type == NULL || n == 0)
        Py_RETURN_NONE;
    /* A copy: an allocation below can run a collection, and with it code that changes the layout. */
    const Py_ssize_t topic_off = msg_layout.topic, partition_off = msg_layout.partition;
    const Py_ssize_t key_off = msg_layout.key, value_off = msg_layout.value, ts_off = msg_layout.timestamp;
    Py_INCREF(type);
    PyObject *result = Py_None;
    PyObject *list = NULL;
    PyObject *topic = NULL;
    PyObject *first = PyList_GET_ITEM(msgs, 0);
    if (Py_TYPE(first) != type)
        goto none;
    topic = layout_get_obj(first, topic_off);
    if (topic == NULL || !PyUnicode_CheckExact(topic))
        goto none;
    Py_INCREF(topic);
    const int32_t partition = layout_get_i32(first, partition_off);
    /* Check everything before allocating anything. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        if (Py_TYPE(m) != type || layout_get_obj(m, key_off) == NULL ||
            layout_get_i32(m, partition_off) != partition)
            goto none;
        PyObject *t = layout_get_obj(m, topic_off);
        if (t != topic && (t == NULL || !PyUnicode_CheckExact(t) || PyUnicode_Compare(t, topic) != 0)) {
            if (PyErr_Occurred())
                goto fail;
            goto none;
        }
        if (stamped) {
            PyObject *v = layout_get_obj(m, value_off);
            if (v != NULL) {
                if (!PyBytes_CheckExact(v))
                    goto none;
                unsigned char stamp[8];
                put_be64(stamp, layout_get_i64(m, ts_off));
                if (PyBytes_GET_SIZE(v) > 8 && memcmp(PyBytes_AS_STRING(v), stamp, 8) == 0)
                    goto none; /* the old prefixed format, it seems: the converter decides */
            }
        }
    }
    list = PyList_New(n);
    if (list == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL)
            goto fail;
        /* Read after the allocation, and check again: nothing runs between here and the increfs. */
        if (i >= PyList_GET_SIZE(msgs)) {
            Py_DECREF(pair);
            goto none;
        }
        PyObject *m = PyList_GET_ITEM(msgs, i);
        PyObject *key = Py_TYPE(m) == type ? layout_get_obj(m, key_off) : NULL;
        if (key == NULL) {
            Py_DECREF(pair);
            goto none;
        }
        PyObject *value = layout_get_obj(m, value_off);
        if (value == NULL)
            value = Py_None;
        /* ours from here: stamping allocates, which may run a collection */
        Py_INCREF(key);
        Py_INCREF(value);
        if (stamped && value != Py_None) {
            const int64_t ts = layout_get_i64(m, ts_off);
            PyObject *out = PyBytes_CheckExact(value) ? PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(value) + 8)
                                                      : NULL;
            if (out == NULL) {
                Py_DECREF(key);
                Py_DECREF(value);
                Py_DECREF(pair);
                if (PyErr_Occurred())
                    goto fail;
                goto none; /* not bytes (checked above; changed since): the general path */
            }
            unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(out);
            put_be64(dst, ts);
            memcpy(dst + 8, PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
            Py_SETREF(value, out);
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyObject_GC_UnTrack(pair); /* bytes and None: never part of a cycle */
        PyList_SET_ITEM(list, i, pair);
    }
    result = Py_BuildValue("(OiN)", topic, (int)partition, list);
    list = NULL;
    goto done;
none:
    result = Py_None;
    Py_INCREF(result);
    goto done;
fail:
    result = NULL;
done:
    Py_XDECREF(list);
    Py_XDECREF(topic);
    Py_DECREF(type);
    return result;
}

/* ---- consumed messages to stream-processing rows --------------------------------------------- */


PyDoc_STRVAR(message_rows_doc,
"message_rows(messages) -> [(key, value, timestamp, headers, offset), ...] or None\n\n"
"What a stream task processes, one tuple per message: key, value, timestamp() [1], headers()\n"
"and offset() of each, read from the fields of messages of the layout type (set_message_layout);\n"
"headers() is called only when the headers field is empty (librdkafka's messages convert their\n"
"headers on that call). None when there is no layout or a message is of another type: the\n"
"caller then calls the methods.");

static PyObject *message_rows(PyObject *self, PyObject *msgs)
{
    if (!PyList_Check(msgs)) {
        PyErr_Format(PyExc_TypeError, "message_rows: messages must be a list, not %.100s", Py_TYPE(msgs)->tp_name);
        return NULL;
    }
    static PyObject *headers_name = NULL;
    if (headers_name == NULL && (headers_name = PyUnicode_InternFromString("headers")) == NULL)
        return NULL;
    PyTypeObject *type = msg_layout.type;
    if (type == NULL)
        Py_RETURN_NONE;
    const Py_ssize_t key_off = msg_layout.key, value_off = msg_layout.value, headers_off = msg_layout.headers;
    const Py_ssize_t ts_off = msg_layout.timestamp, offset_off = msg_layout.offset;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    for (Py_ssize_t i = 0; i < n; i++)
        if (Py_TYPE(PyList_GET_ITEM(msgs, i)) != type)
            Py_RETURN_NONE;
    Py_INCREF(type);
    PyObject *list = PyList_New(n);
    if (list == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PyList_GET_SIZE(msgs))
            goto none; /* the list shrank under a collection run by an allocation */
        PyObject *m = PyList_GET_ITEM(msgs, i);
        Py_INCREF(m);
        if (Py_TYPE(m) != type) {
            Py_DECREF(m);
            goto none;
        }
        PyObject *headers = layout_get_obj(m, headers_off);
        if (headers == NULL) {
            headers = PyObject_CallMethodNoArgs(m, headers_name);
            if (headers == NULL) {
                Py_DECREF(m);
                goto fail;
            }
        } else {
            Py_INCREF(headers);
        }
        PyObject *ts = PyLong_FromLongLong(layout_get_i64(m, ts_off));
        PyObject *offset = PyLong_FromLongLong(layout_get_i64(m, offset_off));
        PyObject *row = PyTuple_New(5);
        if (ts == NULL || offset == NULL || row == NULL) {
            Py_XDECREF(ts);
            Py_XDECREF(offset);
            Py_XDECREF(row);
            Py_DECREF(headers);
            Py_DECREF(m);
            goto fail;
        }
        PyObject *key = layout_get_obj(m, key_off);
        PyObject *value = layout_get_obj(m, value_off);
        if (key == NULL)
            key = Py_None;
        if (value == NULL)
            value = Py_None;
        Py_INCREF(key);
        Py_INCREF(value);
        PyTuple_SET_ITEM(row, 0, key);
        PyTuple_SET_ITEM(row, 1, value);
        PyTuple_SET_ITEM(row, 2, ts);
        PyTuple_SET_ITEM(row, 3, headers);
        PyTuple_SET_ITEM(row, 4, offset);
        if (headers == Py_None)
            PyObject_GC_UnTrack(row); /* bytes, ints and None: never part of a cycle */
        PyList_SET_ITEM(list, i, row);
        Py_DECREF(m);
    }
    Py_DECREF(type);
    return list;
none:
    Py_DECREF(list);
    Py_DECREF(type);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(list);
    Py_DECREF(type);
    return NULL;
}

PyDoc_STRVAR(keyed_run_doc,
"keyed_run(messages, start, key_check, value_check) -> (keys, timestamps, stop) or None\n\n"
"The keys and timestamps of messages[start:stop], read from the fields of messages of the layout\n"
"type (set_message_layout): the longest stretch from `start` in which every message has a key,\n"
"a value, a timestamp >= 0, no headers (a run's messages stand for their record contexts, which\n"
"then all cost a cache the same: their topic's), and passes key_check(key) and value_check(value)\n"
"without an Exception. `stop` is the first message that does not (len(messages) when all do);\n"
"a check's Exception is cleared (the caller processes that message on its own), any other\n"
"BaseException propagates. None when there is no layout. A stream task whose stage takes runs\n"
"of raw keys uses this instead of message_rows: no row is built for a message it takes.");

static PyObject *keyed_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "keyed_run expects 4 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *msgs = args[0], *key_check = args[2], *value_check = args[3];
    if (!PyList_Check(msgs)) {
        PyErr_Format(PyExc_TypeError, "keyed_run: messages must be a list, not %.100s", Py_TYPE(msgs)->tp_name);
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0) {
        PyErr_Format(PyExc_ValueError, "keyed_run: start must be >= 0, not %zd", start);
        return NULL;
    }
    PyTypeObject *type = msg_layout.type;
    if (type == NULL)
        Py_RETURN_NONE;
    /* A copy: the checks run Python code, and with it possibly code that changes the layout. */
    const Py_ssize_t key_off = msg_layout.key, value_off = msg_layout.value, ts_off = msg_layout.timestamp,
                     headers_off = msg_layout.headers;
    Py_INCREF(type);
    PyObject *keys = PyList_New(0), *timestamps = PyList_New(0);
    Py_ssize_t i = start;
    if (keys == NULL || timestamps == NULL)
        goto fail;
    /* The list is re-read on every step: a check can run any code, even code that edits it. */
    for (; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        if (Py_TYPE(m) != type)
            break;
        PyObject *key = layout_get_obj(m, key_off);
        PyObject *value = layout_get_obj(m, value_off);
        int64_t ts = layout_get_i64(m, ts_off);
        /* A None value is the stage's to skip and count (an aggregation drops it): not taken. */
        if (key == NULL || value == NULL || ts < 0)
            break;
        PyObject *headers = layout_get_obj(m, headers_off);
        if (headers != NULL && (!PyList_CheckExact(headers) || PyList_GET_SIZE(headers) > 0))
            break;  /* processed on its own, its headers in the record context */
        Py_INCREF(m); /* keeps key and value alive through the checks */
        PyObject *checked = PyObject_CallOneArg(key_check, key);
        if (checked != NULL) {
            Py_DECREF(checked);
            checked = PyObject_CallOneArg(value_check, value);
            if (checked != NULL)
                Py_DECREF(checked);
        }
        if (checked == NULL) {
            Py_DECREF(m);
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                goto fail;
            PyErr_Clear(); /* the caller processes message i alone, where its handler decides */
            break;
        }
        PyObject *ts_obj = PyLong_FromLongLong(ts);
        int rc = ts_obj == NULL ? -1 : PyList_Append(keys, key);
        if (rc == 0)
            rc = PyList_Append(timestamps, ts_obj);
        Py_XDECREF(ts_obj);
        Py_DECREF(m);
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(type);
    return Py_BuildValue("(NNn)", keys, timestamps, i);
fail:
    Py_XDECREF(keys);
    Py_XDECREF(timestamps);
    Py_DECREF(type);
    return NULL;
}

/* ---- the stream task's record path ---------------------------------------------------------- */

/* The fields dispatch_run and merge_dispatch read, copied once per call: the functions they call
 * run Python code, and with it possibly code that changes the layout. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t key, value, timestamp, headers, offset;
} RecordFields;

static PyObject *headers_name, *metadata_name, *current_node_name, *stream_time_name, *popleft_name;

static int record_names(void)
{
    if (headers_name == NULL) {
        headers_name = PyUnicode_InternFromString("headers");
        metadata_name = PyUnicode_InternFromString("metadata");
        current_node_name = PyUnicode_InternFromString("current_node");
        stream_time_name = PyUnicode_InternFromString("stream_time");
        popleft_name = PyUnicode_InternFromString("popleft");
        if (!headers_name || !metadata_name || !current_node_name || !stream_time_name || !popleft_name)
            return -1;
    }
    return 0;
}

/* Whether m is the common record: of the layout type, no headers, a timestamp >= 0, a key and a
 * value the checks take (None stays None). 1: *k and *v are new references, *ts is set; 0: not
 * taken (a check's Exception is cleared: the caller's Python route decides); -1: an error. */
static int take_record(const RecordFields *f, PyObject *m, PyObject *key_check, PyObject *value_check,
                       PyObject **k, PyObject **v, int64_t *ts)
{
    if (Py_TYPE(m) != f->type)
        return 0;
    *ts = layout_get_i64(m, f->timestamp);
    if (*ts < 0 || layout_get_obj(m, f->headers) != NULL)
        return 0;
    Py_INCREF(m); /* keeps its fields alive through the calls */
    /* librdkafka's messages hold their headers unconverted until headers() is called */
    PyObject *h = PyObject_CallMethodNoArgs(m, headers_name);
    if (h == NULL)
        goto fail;
    Py_DECREF(h);
    if (h != Py_None)
        goto not_taken;
    PyObject *key = layout_get_obj(m, f->key), *value = layout_get_obj(m, f->value);
    *k = key == NULL ? Py_NewRef(Py_None) : PyObject_CallOneArg(key_check, key);
    if (*k == NULL)
        goto check_failed;
    *v = value == NULL ? Py_NewRef(Py_None) : PyObject_CallOneArg(value_check, value);
    if (*v == NULL) {
        Py_CLEAR(*k);
        goto check_failed;
    }
    Py_DECREF(m);
    return 1;
check_failed:
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        goto fail;
    PyErr_Clear(); /* the caller processes the message alone: its serde's errors decide */
not_taken:
    Py_DECREF(m);
    return 0;
fail:
    Py_DECREF(m);
    return -1;
}

/* Sets context.metadata = (topic, partition, offset of m), raises times[0] (the partition time,
 * *partition_time its value) and engine.stream_time (*stream_time) to ts, and calls
 * fn(k, v, ts, ()). Steals k and v. 0, or -1 with an exception (from fn: it propagates). */
static int call_record(const RecordFields *f, PyObject *m, PyObject *k, PyObject *v, int64_t ts, PyObject *fn,
                       PyObject *ctx, PyObject *engine, PyObject *topic, PyObject *partition, PyObject *times,
                       int64_t *partition_time, int64_t *stream_time)
{
    PyObject *ts_obj = PyLong_FromLongLong(ts);
    PyObject *offset_obj = PyLong_FromLongLong(layout_get_i64(m, f->offset));
    PyObject *metadata = ts_obj && offset_obj ? PyTuple_Pack(3, topic, partition, offset_obj) : NULL;
    Py_XDECREF(offset_obj);
    int rc = metadata == NULL ? -1 : PyObject_SetAttr(ctx, metadata_name, metadata);
    Py_XDECREF(metadata);
    if (rc == 0 && ts > *partition_time) {
        *partition_time = ts;
        Py_INCREF(ts_obj);
        rc = PyList_SetItem(times, 0, ts_obj);
    }
    if (rc == 0 && ts > *stream_time) {
        *stream_time = ts;
        rc = PyObject_SetAttr(engine, stream_time_name, ts_obj);
    }
    PyObject *r = NULL;
    if (rc == 0) {
        PyObject *call_args[4] = {k, v, ts_obj, empty_tuple};
        r = PyObject_Vectorcall(fn, call_args, 4, NULL);
    }
    Py_DECREF(k);
    Py_DECREF(v);
    Py_XDECREF(ts_obj);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* engine.stream_time as an int64 (-1 with an exception set on failure) */
static int64_t engine_stream_time(PyObject *engine)
{
    PyObject *st = PyObject_GetAttr(engine, stream_time_name);
    int64_t stream_time = st == NULL ? -1 : PyLong_AsLongLong(st);
    Py_XDECREF(st);
    return stream_time;
}

PyDoc_STRVAR(dispatch_run_doc,
"dispatch_run(messages, start, key_check, value_check, fn, context, first, engine, topic, partition, times) -> stop\n\n"
"A stream task's per-record loop over messages[start:] of one partition, read from the fields of\n"
"messages of the layout type (set_message_layout): for each message with no headers and a\n"
"timestamp >= 0 whose key and value deserialize (key_check/value_check, None for None) it sets\n"
"context.current_node = first (once) and context.metadata = (topic, partition, offset), raises\n"
"times[0] (the partition time) and engine.stream_time to the timestamp, and calls\n"
"fn(key, value, timestamp, ()). Returns the index of the first message it did not take\n"
"(len(messages) when it took all), which the caller processes on its own; a deserializer's\n"
"Exception is cleared for that. An exception from fn propagates, context.metadata naming its\n"
"record. None when there is no layout.");

static PyObject *dispatch_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "dispatch_run expects 11 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *msgs = args[0], *key_check = args[2], *value_check = args[3], *fn = args[4];
    PyObject *ctx = args[5], *first = args[6], *engine = args[7], *topic = args[8], *partition = args[9];
    PyObject *times = args[10];
    if (!PyList_Check(msgs) || !PyList_Check(times) || PyList_GET_SIZE(times) != 1) {
        PyErr_SetString(PyExc_TypeError, "dispatch_run: messages must be a list and times a list of one int");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0) {
        PyErr_Format(PyExc_ValueError, "dispatch_run: start must be >= 0, not %zd", start);
        return NULL;
    }
    if (record_names() < 0)
        return NULL;
    if (msg_layout.type == NULL)
        Py_RETURN_NONE;
    const RecordFields f = {msg_layout.type, msg_layout.key, msg_layout.value, msg_layout.timestamp,
                            msg_layout.headers, msg_layout.offset};
    Py_INCREF(f.type);
    int64_t partition_time = PyLong_AsLongLong(PyList_GET_ITEM(times, 0));
    int64_t stream_time = engine_stream_time(engine);
    if (PyErr_Occurred() || PyObject_SetAttr(ctx, current_node_name, first) < 0) {
        Py_DECREF(f.type);
        return NULL;
    }
    Py_ssize_t i = start;
    /* The list is re-read on every step: fn can run any code, even code that edits it. */
    for (; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        PyObject *k, *v;
        int64_t ts;
        Py_INCREF(m);
        int taken = take_record(&f, m, key_check, value_check, &k, &v, &ts);
        int rc = taken <= 0 ? taken : call_record(&f, m, k, v, ts, fn, ctx, engine, topic, partition, times,
                                                  &partition_time, &stream_time);
        Py_DECREF(m);
        if (rc < 0)
            goto fail;
        if (taken == 0)
            break;
    }
    Py_DECREF(f.type);
    return PyLong_FromSsize_t(i);
fail:
    Py_DECREF(f.type);
    return NULL;
}

#define MERGE_MAX_QUEUES 64

PyDoc_STRVAR(merge_dispatch_doc,
"merge_dispatch(queues, routes, context, engine, max_records, stop_when_empty, counts, lasts, current) -> int or None\n\n"
"A stream task's loop over several partitions' buffered messages: dispatch_run's per-record\n"
"work (for the common record; routes[i] = (key_check, value_check, fn, first, topic, partition,\n"
"times) of queues[i], a deque) with the partition of each record chosen as\n"
"streams.runtime.partition_group.PartitionGroup.runs does, record by record: the queue whose\n"
"head has the lowest timestamp (the message's own), the first queue on a tie. A record is\n"
"popped from its queue once it deserialized; context.current_node is set to the route's first\n"
"node when the queue changes. counts[i] counts the records popped from queues[i] and lasts[i]\n"
"is the last of them that went through (fn returned); current[0] is the queue of the record in\n"
"hand, -1 when none (an exception from fn propagates with it and context.metadata naming the\n"
"record).\n"
"Stops after max_records, when every queue is empty, or, with stop_when_empty, when a record\n"
"leaves its queue empty while another queue still held records: returns -1. Returns i when the\n"
"head of queues[i] is not the common record (left in its queue, for the caller's Python route).\n"
"None, before taking anything, when there is no layout, a head is not of the layout type, or\n"
"there are more than 64 queues: the caller then takes its Python path.");

static PyObject *merge_dispatch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "merge_dispatch expects 9 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *queues = args[0], *routes = args[1], *ctx = args[2], *engine = args[3];
    PyObject *counts = args[6], *lasts = args[7], *current = args[8];
    if (!PyList_Check(queues) || !PyList_Check(routes) || !PyList_Check(counts) || !PyList_Check(lasts)
        || !PyList_Check(current) || PyList_GET_SIZE(current) != 1) {
        PyErr_SetString(PyExc_TypeError, "merge_dispatch: queues, routes, counts, lasts and current must be lists");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(queues);
    if (PyList_GET_SIZE(routes) != n || PyList_GET_SIZE(counts) != n || PyList_GET_SIZE(lasts) != n) {
        PyErr_SetString(PyExc_ValueError, "merge_dispatch: routes, counts and lasts must match the queues");
        return NULL;
    }
    Py_ssize_t max_records = PyLong_AsSsize_t(args[4]);
    if (max_records == -1 && PyErr_Occurred())
        return NULL;
    int stop_when_empty = PyObject_IsTrue(args[5]);
    if (stop_when_empty < 0 || record_names() < 0)
        return NULL;
    if (msg_layout.type == NULL || n > MERGE_MAX_QUEUES)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *route = PyList_GET_ITEM(routes, i);
        if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != 7 || !PyList_Check(PyTuple_GET_ITEM(route, 6))
            || PyList_GET_SIZE(PyTuple_GET_ITEM(route, 6)) != 1) {
            PyErr_SetString(PyExc_TypeError, "merge_dispatch: a route is (key_check, value_check, fn, first, "
                                             "topic, partition, [partition time])");
            return NULL;
        }
    }
    const RecordFields f = {msg_layout.type, msg_layout.key, msg_layout.value, msg_layout.timestamp,
                            msg_layout.headers, msg_layout.offset};
    Py_INCREF(f.type);
    Py_INCREF(queues);
    Py_INCREF(routes);
    int64_t partition_times[MERGE_MAX_QUEUES];
    Py_ssize_t taken_counts[MERGE_MAX_QUEUES];
    PyObject *result = NULL;
    Py_ssize_t emitted = 0, in_hand = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        partition_times[i] = PyLong_AsLongLong(PyList_GET_ITEM(PyTuple_GET_ITEM(PyList_GET_ITEM(routes, i), 6), 0));
        taken_counts[i] = 0;
    }
    int64_t stream_time = engine_stream_time(engine);
    if (PyErr_Occurred())
        goto done;
    /* every head of the layout type before anything is taken (their timestamps order them) */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *q = PyList_GET_ITEM(queues, i);
        Py_ssize_t len = PyObject_Length(q);
        if (len < 0)
            goto done;
        if (len == 0)
            continue;
        PyObject *head = PySequence_GetItem(q, 0);
        if (head == NULL)
            goto done;
        int other = Py_TYPE(head) != f.type;
        Py_DECREF(head);
        if (other) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    while (emitted < max_records) {
        /* Kafka's choice: the lowest head timestamp, the first queue on a tie. The queues are read
         * afresh every step: fn runs Python code (a task closed under it clears its queues). */
        Py_ssize_t best = -1, live = 0;
        int64_t best_ts = 0;
        PyObject *head = NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *q = PyList_GET_ITEM(queues, i);
            Py_ssize_t len = PyObject_Length(q);
            if (len < 0) {
                Py_XDECREF(head);
                goto done;
            }
            if (len == 0)
                continue;
            PyObject *h = PySequence_GetItem(q, 0);
            if (h == NULL) {
                Py_XDECREF(head);
                goto done;
            }
            live++;
            if (Py_TYPE(h) != f.type) { /* a message of another kind came in: the Python path */
                Py_DECREF(h);
                Py_XDECREF(head);
                result = Py_NewRef(Py_None);
                goto done;
            }
            int64_t ts = layout_get_i64(h, f.timestamp);
            if (best < 0 || ts < best_ts) {
                Py_XDECREF(head);
                head = h;
                best = i;
                best_ts = ts;
            } else {
                Py_DECREF(h);
            }
        }
        if (best < 0)
            break;
        PyObject *route = PyList_GET_ITEM(routes, best);
        PyObject *k, *v;
        int64_t ts;
        int taken = take_record(&f, head, PyTuple_GET_ITEM(route, 0), PyTuple_GET_ITEM(route, 1), &k, &v, &ts);
        if (taken <= 0) {
            Py_DECREF(head);
            if (taken == 0)
                result = PyLong_FromSsize_t(best);
            goto done;
        }
        PyObject *q = PyList_GET_ITEM(queues, best);
        PyObject *popped = PyObject_CallMethodNoArgs(q, popleft_name);
        if (popped != head) { /* the checks ran Python code that changed the queue: not ours to take */
            Py_XDECREF(popped);
            Py_DECREF(k);
            Py_DECREF(v);
            Py_DECREF(head);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "merge_dispatch: a queue changed while its head was checked");
            goto done;
        }
        Py_DECREF(popped);
        taken_counts[best]++;
        emitted++;
        PyObject *best_obj = PyLong_FromSsize_t(best);
        if (best_obj == NULL || PyList_SetItem(current, 0, best_obj) < 0) {
            Py_DECREF(k);
            Py_DECREF(v);
            Py_DECREF(head);
            goto done;
        }
        if (best != in_hand) {
            in_hand = best;
            if (PyObject_SetAttr(ctx, current_node_name, PyTuple_GET_ITEM(route, 3)) < 0) {
                Py_DECREF(k);
                Py_DECREF(v);
                Py_DECREF(head);
                goto done;
            }
        }
        int rc = call_record(&f, head, k, v, ts, PyTuple_GET_ITEM(route, 2), ctx, engine, PyTuple_GET_ITEM(route, 4),
                             PyTuple_GET_ITEM(route, 5), PyTuple_GET_ITEM(route, 6), &partition_times[best],
                             &stream_time);
        if (rc == 0) {
            rc = PyList_SetItem(lasts, best, head); /* steals head */
            if (rc == 0) {
                Py_INCREF(minus_one);
                rc = PyList_SetItem(current, 0, minus_one); /* nothing in hand */
            }
        } else {
            Py_DECREF(head);
        }
        if (rc < 0)
            goto done;
        if (stop_when_empty && live > 1) {
            Py_ssize_t len = PyObject_Length(q);
            if (len < 0)
                goto done;
            if (len == 0)
                break;
        }
    }
    result = Py_NewRef(minus_one);
done:
    /* the counts, also when an exception propagates (the records before it went through) */
    {
        PyObject *et, *ev, *etb;
        PyErr_Fetch(&et, &ev, &etb);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (taken_counts[i] == 0)
                continue;
            Py_ssize_t before = PyLong_AsSsize_t(PyList_GET_ITEM(counts, i));
            PyObject *after = before == -1 && PyErr_Occurred() ? NULL : PyLong_FromSsize_t(before + taken_counts[i]);
            if (after == NULL || PyList_SetItem(counts, i, after) < 0) {
                if (et == NULL) { /* this error is the one to report */
                    PyErr_Fetch(&et, &ev, &etb);
                    Py_CLEAR(result);
                } else {
                    PyErr_Clear();
                }
            }
        }
        PyErr_Restore(et, ev, etb);
    }
    Py_DECREF(routes);
    Py_DECREF(queues);
    Py_DECREF(f.type);
    return result;
}

PyDoc_STRVAR(partition_runs_doc,
"partition_runs(messages) -> [((topic, partition), [message, ...]), ...] or None\n\n"
"The consumed messages cut into runs of consecutive messages of one partition (what\n"
"itertools.groupby over (topic(), partition()) gives), read from the fields of messages of the\n"
"layout type. None when there is no layout, or a message is of another type or has no topic.");

static PyObject *partition_runs(PyObject *self, PyObject *msgs)
{
    if (!PyList_Check(msgs)) {
        PyErr_Format(PyExc_TypeError, "partition_runs: messages must be a list, not %.100s", Py_TYPE(msgs)->tp_name);
        return NULL;
    }
    PyTypeObject *type = msg_layout.type;
    if (type == NULL)
        Py_RETURN_NONE;
    const Py_ssize_t topic_off = msg_layout.topic, partition_off = msg_layout.partition;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        PyObject *t = Py_TYPE(m) == type ? layout_get_obj(m, topic_off) : NULL;
        if (t == NULL || !PyUnicode_CheckExact(t))
            Py_RETURN_NONE;
    }
    PyObject *copy = PyList_GetSlice(msgs, 0, n); /* our own list: nothing can change it below */
    if (copy == NULL)
        return NULL;
    Py_INCREF(type);
    PyObject *runs = PyList_New(0);
    if (runs == NULL)
        goto fail;
    Py_ssize_t start = 0;
    while (start < n) {
        PyObject *first = PyList_GET_ITEM(copy, start);
        PyObject *topic = layout_get_obj(first, topic_off);
        int32_t partition = layout_get_i32(first, partition_off);
        Py_ssize_t end = start + 1;
        while (end < n) {
            PyObject *m = PyList_GET_ITEM(copy, end);
            if (layout_get_i32(m, partition_off) != partition)
                break;
            PyObject *t = layout_get_obj(m, topic_off);
            if (t != topic) {
                int eq = PyUnicode_Compare(t, topic) == 0;
                if (PyErr_Occurred())
                    goto fail;
                if (!eq)
                    break;
            }
            end++;
        }
        PyObject *slice = PyList_GetSlice(copy, start, end);
        PyObject *run = slice == NULL ? NULL : Py_BuildValue("((Oi)N)", topic, (int)partition, slice);
        if (run == NULL || PyList_Append(runs, run) < 0) {
            Py_XDECREF(run);
            goto fail;
        }
        Py_DECREF(run);
        start = end;
    }
    Py_DECREF(copy);
    Py_DECREF(type);
    return runs;
fail:
    Py_XDECREF(runs);
    Py_DECREF(copy);
    Py_DECREF(type);
    return NULL;
}

PyDoc_STRVAR(untrack_messages_doc,
"untrack_messages(messages) -> None\n\n"
"Leave the consumed messages of the layout type to no cyclic garbage collection. Such a message\n"
"holds str, bytes, ints and a list of (str, bytes) header pairs: never part of a reference cycle.\n"
"The caches keep many of them alive (a bulk run's lazy record context), and every full\n"
"collection would scan each one; the log's decoder makes its messages untracked already.");

static PyObject *untrack_messages(PyObject *self, PyObject *msgs)
{
    if (!PyList_Check(msgs)) {
        PyErr_Format(PyExc_TypeError, "untrack_messages: messages must be a list, not %.100s", Py_TYPE(msgs)->tp_name);
        return NULL;
    }
    PyTypeObject *type = msg_layout.type;
    if (type == NULL || !PyType_IS_GC(type))
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        if (Py_TYPE(m) == type && PyObject_GC_IsTracked(m))
            PyObject_GC_UnTrack(m);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(payload_bytes_doc,
"payload_bytes(messages) -> (total, largest) or None\n\n"
"The key and value bytes of consumed messages (a None key or value counts 0): their sum and the\n"
"largest message's, read from the fields of messages of the layout type. None when there is no\n"
"layout, or a message is of another type or has a key or value that is not bytes.");

static PyObject *payload_bytes(PyObject *self, PyObject *msgs)
{
    PyTypeObject *type = msg_layout.type;
    if (type == NULL)
        Py_RETURN_NONE;
    PyObject *seq = PySequence_Fast(msgs, "payload_bytes: messages must be a sequence");
    if (seq == NULL)
        return NULL;
    const Py_ssize_t key_off = msg_layout.key, value_off = msg_layout.value;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    long long total = 0, largest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = items[i];
        if (Py_TYPE(m) != type) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
        PyObject *k = layout_get_obj(m, key_off), *v = layout_get_obj(m, value_off);
        if ((k != NULL && !PyBytes_CheckExact(k)) || (v != NULL && !PyBytes_CheckExact(v))) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
        long long size = (k == NULL ? 0 : PyBytes_GET_SIZE(k)) + (v == NULL ? 0 : PyBytes_GET_SIZE(v));
        total += size;
        if (size > largest)
            largest = size;
    }
    Py_DECREF(seq);
    return Py_BuildValue("(LL)", total, largest);
}

/* ---- module ------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"set_message_layout", set_message_layout, METH_VARARGS, set_message_layout_doc},
    {"fill_message", fill_message, METH_VARARGS, fill_message_doc},
    {"changelog_records", (PyCFunction)(void (*)(void))changelog_records, METH_FASTCALL, changelog_records_doc},
    {"message_rows", message_rows, METH_O, message_rows_doc},
    {"partition_runs", partition_runs, METH_O, partition_runs_doc},
    {"payload_bytes", payload_bytes, METH_O, payload_bytes_doc},
    {"untrack_messages", untrack_messages, METH_O, untrack_messages_doc},
    {"keyed_run", (PyCFunction)(void (*)(void))keyed_run, METH_FASTCALL, keyed_run_doc},
    {"dispatch_run", (PyCFunction)(void (*)(void))dispatch_run, METH_FASTCALL, dispatch_run_doc},
    {"merge_dispatch", (PyCFunction)(void (*)(void))merge_dispatch, METH_FASTCALL, merge_dispatch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "eddy._messages",
    .m_doc = "C passes over consumed confluent_kafka.Message objects (see eddy.messages).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__messages(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    empty_tuple = PyTuple_New(0);
    minus_one = PyLong_FromLong(-1);
    if (empty_tuple == NULL || minus_one == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
