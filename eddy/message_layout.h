/*
 * The field layout of confluent_kafka.Message, shared by the C modules that build or read
 * Message objects directly (eddy/_messages.c readers, replication/_records.c decoder).
 *
 * eddy/messages.py finds the layout by probing constructor-built messages and verifies it before
 * any module is given it (set_message_layout); every module keeps its own copy, set the same way.
 */
#ifndef EDDY_MESSAGE_LAYOUT_H
#define EDDY_MESSAGE_LAYOUT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SET_MESSAGE_LAYOUT_DOC \
"set_message_layout(type, background, topic, value, key, headers, offset, timestamp, partition,\n"\
"                   leader_epoch, tstype) -> None; set_message_layout(None) -> None\n\n"\
"Let decode_messages fill `type` objects directly: byte offsets of the object pointer fields\n"\
"(topic, value, key, headers: NULL for None), the int64 fields (offset, timestamp) and the int32\n"\
"fields (partition, leader_epoch, timestamp type), and `background`, the bytes after the object\n"\
"header of an object whose listed fields are all zero. None switches it off."

/* ---- filling confluent_kafka.Message objects directly ----------------------------------------
 *
 * Calling the Message type (tp_new + tp_init, which parses ten arguments and a timestamp tuple)
 * is most of what decoding a record costs. confluent_kafka's own consumer allocates a Message
 * with tp_alloc and sets its fields; eddy/messages.py discovers where those fields are (probing
 * Messages built by the constructor), checks that messages built here are byte-identical to
 * constructor-built ones, and only then hands the layout over with set_message_layout. Without
 * a layout (or for any other type) the decoder calls the type and the readers answer None.
 */
typedef struct {
    PyTypeObject *type; /* NULL: no layout, call the type */
    Py_ssize_t body_size; /* tp_basicsize - sizeof(PyObject) */
    PyObject *background; /* bytes: the body of a message whose fields below are all zero */
    Py_ssize_t topic, value, key, headers; /* PyObject * (NULL for None) */
    Py_ssize_t offset, timestamp;          /* int64 */
    Py_ssize_t partition, leader_epoch, tstype; /* int32 */
} MessageLayout;

static inline void layout_clear(MessageLayout *L)
{
    Py_CLEAR(L->type);
    Py_CLEAR(L->background);
}

static inline PyObject *layout_set(MessageLayout *L, PyObject *args)
{
    PyObject *type;
    Py_buffer bg;
    Py_ssize_t offs[9];
    if (PyTuple_GET_SIZE(args) == 1 && PyTuple_GET_ITEM(args, 0) == Py_None) {
        layout_clear(L);
        Py_RETURN_NONE;
    }
    if (!PyArg_ParseTuple(args, "Oy*nnnnnnnnn:set_message_layout", &type, &bg, &offs[0], &offs[1],
                          &offs[2], &offs[3], &offs[4], &offs[5], &offs[6], &offs[7], &offs[8]))
        return NULL;
    PyObject *result = NULL;
    char *used = NULL;
    PyObject *copy = NULL;
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "set_message_layout: type must be a type");
        goto done;
    }
    PyTypeObject *tp = (PyTypeObject *)type;
    Py_ssize_t size = tp->tp_basicsize;
    if (tp->tp_itemsize != 0 || tp->tp_alloc == NULL || size <= (Py_ssize_t)sizeof(PyObject) ||
        bg.len != size - (Py_ssize_t)sizeof(PyObject)) {
        PyErr_Format(PyExc_ValueError,
                     "set_message_layout: background must be %zd bytes for a fixed-size type",
                     size - (Py_ssize_t)sizeof(PyObject));
        goto done;
    }
    used = PyMem_Calloc((size_t)size, 1);
    if (used == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < 9; i++) {
        Py_ssize_t width = i < 6 ? 8 : 4;
        Py_ssize_t off = offs[i];
        if (off < (Py_ssize_t)sizeof(PyObject) || off > size - width || off % width != 0) {
            PyErr_Format(PyExc_ValueError, "set_message_layout: field %d at offset %zd is outside "
                         "the object or misaligned", i, off);
            goto done;
        }
        for (Py_ssize_t b = off; b < off + width; b++) {
            if (used[b]) {
                PyErr_Format(PyExc_ValueError, "set_message_layout: field %d overlaps another", i);
                goto done;
            }
            used[b] = 1;
        }
    }
    copy = PyBytes_FromStringAndSize(bg.buf, bg.len);
    if (copy == NULL)
        goto done;
    layout_clear(L);
    Py_INCREF(type);
    L->type = tp;
    L->body_size = bg.len;
    L->background = copy;
    copy = NULL;
    L->topic = offs[0];
    L->value = offs[1];
    L->key = offs[2];
    L->headers = offs[3];
    L->offset = offs[4];
    L->timestamp = offs[5];
    L->partition = offs[6];
    L->leader_epoch = offs[7];
    L->tstype = offs[8];
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(used);
    Py_XDECREF(copy);
    PyBuffer_Release(&bg);
    return result;
}

/* Stores a reference the caller owns (stolen); None is stored as NULL, as the constructor does. */
static inline void layout_put_obj(char *base, Py_ssize_t off, PyObject *obj)
{
    if (obj == Py_None) {
        Py_DECREF(obj);
        obj = NULL;
    }
    memcpy(base + off, &obj, sizeof(obj));
}

/* A message of L->type; steals key, value and headers (also on failure). */
static inline PyObject *layout_message(const MessageLayout *L, PyObject *topic, int32_t partition, int64_t offset, PyObject *key,
                                PyObject *value, PyObject *headers, int32_t leader_epoch,
                                int64_t timestamp, int32_t tstype)
{
    PyTypeObject *tp = L->type;
    PyObject *m = tp->tp_alloc(tp, 0);
    if (m == NULL) {
        Py_DECREF(key);
        Py_DECREF(value);
        Py_DECREF(headers);
        return NULL;
    }
    char *base = (char *)m;
    memcpy(base + sizeof(PyObject), PyBytes_AS_STRING(L->background), (size_t)L->body_size);
    Py_INCREF(topic);
    layout_put_obj(base, L->topic, topic);
    layout_put_obj(base, L->key, key);
    layout_put_obj(base, L->value, value);
    layout_put_obj(base, L->headers, headers);
    memcpy(base + L->offset, &offset, 8);
    memcpy(base + L->timestamp, &timestamp, 8);
    memcpy(base + L->partition, &partition, 4);
    memcpy(base + L->leader_epoch, &leader_epoch, 4);
    memcpy(base + L->tstype, &tstype, 4);
    return m;
}

static inline PyObject *layout_get_obj(PyObject *m, Py_ssize_t off)
{
    PyObject *obj;
    memcpy(&obj, (char *)m + off, sizeof(obj));
    return obj; /* borrowed; NULL for None */
}

static inline int32_t layout_get_i32(PyObject *m, Py_ssize_t off)
{
    int32_t v;
    memcpy(&v, (char *)m + off, sizeof(v));
    return v;
}

static inline int64_t layout_get_i64(PyObject *m, Py_ssize_t off)
{
    int64_t v;
    memcpy(&v, (char *)m + off, sizeof(v));
    return v;
}

#endif
