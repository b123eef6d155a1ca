/*
 * Hot loops of replication/records.py in C: Kafka v2 record encode/decode, CRC-32C, and
 * decoding a whole fetch buffer straight into confluent_kafka.Message objects.
 *
 * records.py keeps a pure-Python implementation of every function here and uses it when this
 * module cannot be imported; tests check that both produce identical results. Every read of an
 * input buffer is bounds-checked: malformed bytes raise DecodeError(message, position,
 * base_offset) (a ValueError), which records.py turns into CorruptRecordError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <stdarg.h>
#include <stdio.h>

#include "../eddy/message_layout.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_SSE42_CRC 1
#endif

#define BATCH_HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CRC_START 21
#define MAGIC 2
#define TRANSACTIONAL_FLAG 0x10
#define CONTROL_FLAG 0x20
#define TIMESTAMP_TYPE_FLAG 0x08
#define COMPRESSION_MASK 0x07
/* smallest possible record: length, attributes, ts delta, offset delta, key len, value len, header count */
#define MIN_RECORD_SIZE 7

static PyObject *DecodeError;
static PyObject *empty_tuple;
static PyObject *latency_none; /* -1.0: confluent_kafka reports latency() None for it */
static PyObject *ts_type_ints[3];

/* ---- CRC-32C (Castagnoli), same values as the `crc32c` package ------------------------ */

static uint32_t crc_table[8][256];

static void crc_init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

/* slice-by-8 on the raw (not inverted) register */
static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                      ((uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) |
                      ((uint32_t)p[7] << 24);
        lo ^= crc;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
              crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef HAVE_SSE42_CRC
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

static int crc_hw_available = 0;

static uint32_t crc32c_update(uint32_t value, const uint8_t *p, size_t n)
{
    uint32_t crc = ~value;
#ifdef HAVE_SSE42_CRC
    if (crc_hw_available)
        return ~crc32c_hw(crc, p, n);
#endif
    return ~crc32c_sw(crc, p, n);
}

/* ---- errors ------------------------------------------------------------------------------ */

static void raise_decode(Py_ssize_t position, long long base_offset, const char *fmt, ...)
{
    char text[320];
    va_list va;
    va_start(va, fmt);
    vsnprintf(text, sizeof text, fmt, va);
    va_end(va);
    PyObject *args = Py_BuildValue("(snL)", text, position, base_offset);
    if (args != NULL) {
        PyErr_SetObject(DecodeError, args);
        Py_DECREF(args);
    }
}

/* ---- big-endian reads (callers check bounds) -------------------------------------------- */

static inline int64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* ---- varints ------------------------------------------------------------------------------ */

enum { VARINT_OK = 0, VARINT_TRUNCATED = -1, VARINT_TOO_LONG = -2 };

/* Zig-zag varint at *pos (< end). Up to 10 bytes, bits past 64 dropped as Kafka does. */
static inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t i = *pos;
    if (i >= end)
        return VARINT_TRUNCATED;
    uint8_t b = p[i++];
    if (b < 0x80) {
        *pos = i;
        *out = (int64_t)((b >> 1) ^ (-(int64_t)(b & 1)));
        return VARINT_OK;
    }
    uint64_t u = b & 0x7F;
    int shift = 7;
    for (;;) {
        if (i >= end)
            return VARINT_TRUNCATED;
        b = p[i++];
        u |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            break;
        shift += 7;
        if (shift > 63)
            return VARINT_TOO_LONG;
    }
    *pos = i;
    *out = (int64_t)((u >> 1) ^ (~(u & 1) + 1));
    return VARINT_OK;
}

static inline uint64_t zigzag(int64_t n) { return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63); }

static inline Py_ssize_t varint_size(uint64_t u)
{
    Py_ssize_t s = 1;
    while (u >= 0x80) {
        u >>= 7;
        s++;
    }
    return s;
}

static inline char *write_uvarint(char *out, uint64_t u)
{
    while (u >= 0x80) {
        *out++ = (char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *out++ = (char)u;
    return out;
}

/* ---- Record type -------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *offset;
    PyObject *timestamp;
    PyObject *key;
    PyObject *value;
    PyObject *headers;
} RecordObject;

static PyTypeObject RecordType;

/* Steals every reference. */
static PyObject *record_make(PyObject *offset, PyObject *timestamp, PyObject *key, PyObject *value,
                             PyObject *headers)
{
    RecordObject *r = PyObject_GC_New(RecordObject, &RecordType);
    if (r == NULL) {
        Py_DECREF(offset);
        Py_DECREF(timestamp);
        Py_DECREF(key);
        Py_DECREF(value);
        Py_DECREF(headers);
        return NULL;
    }
    r->offset = offset;
    r->timestamp = timestamp;
    r->key = key;
    r->value = value;
    r->headers = headers;
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

static PyObject *Record_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"offset", "timestamp", "key", "value", "headers", NULL};
    PyObject *offset, *timestamp, *key, *value, *headers = empty_tuple;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|O:Record", kwlist, &offset, &timestamp, &key,
                                     &value, &headers))
        return NULL;
    RecordObject *r = (RecordObject *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    Py_INCREF(offset);
    r->offset = offset;
    Py_INCREF(timestamp);
    r->timestamp = timestamp;
    Py_INCREF(key);
    r->key = key;
    Py_INCREF(value);
    r->value = value;
    Py_INCREF(headers);
    r->headers = headers;
    return (PyObject *)r;
}

static int Record_traverse(RecordObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->offset);
    Py_VISIT(self->timestamp);
    Py_VISIT(self->key);
    Py_VISIT(self->value);
    Py_VISIT(self->headers);
    return 0;
}

static int Record_clear(RecordObject *self)
{
    Py_CLEAR(self->offset);
    Py_CLEAR(self->timestamp);
    Py_CLEAR(self->key);
    Py_CLEAR(self->value);
    Py_CLEAR(self->headers);
    return 0;
}

static void Record_dealloc(RecordObject *self)
{
    PyObject_GC_UnTrack(self);
    Record_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Record_repr(RecordObject *self)
{
    PyObject *fields[5] = {self->offset, self->timestamp, self->key, self->value, self->headers};
    for (int i = 0; i < 5; i++) {
        if (fields[i] == NULL) {
            PyErr_SetString(PyExc_AttributeError, "Record has a deleted field");
            return NULL;
        }
    }
    return PyUnicode_FromFormat("Record(offset=%S, timestamp=%S, key=%R, value=%R, headers=%R)",
                                self->offset, self->timestamp, self->key, self->value, self->headers);
}

static PyObject *Record_richcompare(PyObject *a, PyObject *b, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(a, &RecordType) ||
        !PyObject_TypeCheck(b, &RecordType))
        Py_RETURN_NOTIMPLEMENTED;
    RecordObject *x = (RecordObject *)a, *y = (RecordObject *)b;
    PyObject *xs[5] = {x->offset, x->timestamp, x->key, x->value, x->headers};
    PyObject *ys[5] = {y->offset, y->timestamp, y->key, y->value, y->headers};
    int equal = 1;
    for (int i = 0; i < 5 && equal; i++) {
        if (xs[i] == NULL || ys[i] == NULL) {
            PyErr_SetString(PyExc_AttributeError, "Record has a deleted field");
            return NULL;
        }
        int r = PyObject_RichCompareBool(xs[i], ys[i], Py_EQ);
        if (r < 0)
            return NULL;
        equal = r;
    }
    if (op == Py_NE)
        equal = !equal;
    return PyBool_FromLong(equal);
}

static PyObject *Record_reduce(RecordObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->offset || !self->timestamp || !self->key || !self->value || !self->headers) {
        PyErr_SetString(PyExc_AttributeError, "Record has a deleted field");
        return NULL;
    }
    return Py_BuildValue("O(OOOOO)", (PyObject *)Py_TYPE(self), self->offset, self->timestamp,
                         self->key, self->value, self->headers);
}

static PyMethodDef Record_methods[] = {
    {"__reduce__", (PyCFunction)Record_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Record_members[] = {
    {"offset", T_OBJECT_EX, offsetof(RecordObject, offset), 0, "absolute offset"},
    {"timestamp", T_OBJECT_EX, offsetof(RecordObject, timestamp), 0, "timestamp (ms)"},
    {"key", T_OBJECT_EX, offsetof(RecordObject, key), 0, "key bytes or None"},
    {"value", T_OBJECT_EX, offsetof(RecordObject, value), 0, "value bytes or None"},
    {"headers", T_OBJECT_EX, offsetof(RecordObject, headers), 0,
     "tuple of (str, bytes | None)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replication._records.Record",
    .tp_basicsize = sizeof(RecordObject),
    .tp_dealloc = (destructor)Record_dealloc,
    .tp_repr = (reprfunc)Record_repr,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One decoded record with its absolute offset and timestamp.",
    .tp_traverse = (traverseproc)Record_traverse,
    .tp_clear = (inquiry)Record_clear,
    .tp_richcompare = Record_richcompare,
    .tp_methods = Record_methods,
    .tp_members = Record_members,
    .tp_new = Record_new,
};

/* ---- encoding ---------------------------------------------------------------------------- */

/* A bytes-like field: borrowed pointer, plus a Py_buffer when one had to be taken. */
typedef struct {
    const char *ptr;
    Py_ssize_t len; /* -1 for None */
    int has_view;
    Py_buffer view;
} Field;

static void field_release(Field *f)
{
    if (f->has_view) {
        PyBuffer_Release(&f->view);
        f->has_view = 0;
    }
}

/* None -> len -1; bytes/bytearray/buffer -> raw; str -> UTF-8 when allow_str. */
static int field_get(PyObject *obj, Field *f, int allow_str, const char *what, Py_ssize_t index)
{
    f->has_view = 0;
    if (obj == Py_None) {
        f->ptr = NULL;
        f->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        f->ptr = PyBytes_AS_STRING(obj);
        f->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (allow_str && PyUnicode_Check(obj)) {
        f->ptr = PyUnicode_AsUTF8AndSize(obj, &f->len);
        return f->ptr == NULL ? -1 : 0;
    }
    if (PyObject_CheckBuffer(obj) && !PyUnicode_Check(obj)) {
        if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0)
            return -1;
        f->has_view = 1;
        f->ptr = f->view.buf;
        f->len = f->view.len;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "record #%zd: %s must be bytes%s or None, not %.100s", index, what,
                 allow_str ? " or str" : "", Py_TYPE(obj)->tp_name);
    return -1;
}

typedef struct {
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
} OutBuf;

static int outbuf_reserve(OutBuf *o, Py_ssize_t need)
{
    if (need < 0 || o->len > PY_SSIZE_T_MAX - need) {
        PyErr_NoMemory();
        return -1;
    }
    if (o->len + need <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap > PY_SSIZE_T_MAX / 2 ? PY_SSIZE_T_MAX : o->cap * 2;
    if (cap < o->len + need)
        cap = o->len + need;
    char *nb = PyMem_Realloc(o->buf, (size_t)cap);
    if (nb == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = nb;
    o->cap = cap;
    return 0;
}

/* headers -> a tuple of pairs that nothing else can mutate while we encode; dicts give their
 * items. New ref or NULL. */
static PyObject *headers_seq(PyObject *headers, Py_ssize_t index)
{
    PyObject *items = PyDict_Check(headers) ? PyDict_Items(headers) : NULL;
    if (items != NULL) {
        PyObject *t = PyList_AsTuple(items);
        Py_DECREF(items);
        return t;
    }
    if (PyErr_Occurred())
        return NULL;
    PyObject *t = PySequence_Tuple(headers);
    if (t == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "record #%zd: headers must be a sequence of (key, value) pairs",
                     index);
    }
    return t;
}

/* Size (or, when out != NULL, bytes written, never past out_end) of the header section for
 * the pairs in the tuple seq. */
static int encode_headers(PyObject *seq, Py_ssize_t index, Py_ssize_t *size, char **out,
                          const char *out_end)
{
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    Py_ssize_t total = varint_size(zigzag(n));
    if (out) {
        if (out_end - *out < total)
            goto changed;
        *out = write_uvarint(*out, zigzag(n));
    }
    for (Py_ssize_t h = 0; h < n; h++) {
        PyObject *pair = items[h];
        PyObject *hk, *hv;
        if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) {
            hk = PyTuple_GET_ITEM(pair, 0);
            hv = PyTuple_GET_ITEM(pair, 1);
        } else if (PyList_CheckExact(pair) && PyList_GET_SIZE(pair) == 2) {
            hk = PyList_GET_ITEM(pair, 0);
            hv = PyList_GET_ITEM(pair, 1);
        } else {
            PyErr_Format(PyExc_TypeError, "record #%zd: header #%zd must be a (key, value) pair",
                         index, h);
            return -1;
        }
        /* own them: a list pair could change under us if a buffer export ran Python code */
        Py_INCREF(hk);
        Py_INCREF(hv);
        Field fk = {0}, fv = {0};
        int rc = -1;
        if (hk == Py_None) {
            PyErr_Format(PyExc_TypeError, "record #%zd: header #%zd has a None key", index, h);
            goto pair_done;
        }
        if (field_get(hk, &fk, 1, "header key", index) < 0)
            goto pair_done;
        if (!out && !PyUnicode_Check(hk)) {
            /* keys are decoded as UTF-8: refuse to write a batch no reader could decode */
            PyObject *text = PyUnicode_DecodeUTF8(fk.ptr, fk.len, "strict");
            if (text == NULL) {
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    PyErr_Format(PyExc_ValueError, "record #%zd: header #%zd key is not valid UTF-8",
                                 index, h);
                }
                goto pair_done;
            }
            Py_DECREF(text);
        }
        if (field_get(hv, &fv, 1, "header value", index) < 0)
            goto pair_done;
        Py_ssize_t pair_size = varint_size(zigzag(fk.len)) + fk.len +
                               (fv.len < 0 ? 1 : varint_size(zigzag(fv.len)) + fv.len);
        total += pair_size;
        if (out) {
            if (out_end - *out < pair_size) {
                PyErr_SetString(PyExc_RuntimeError, "record headers changed while being encoded");
                goto pair_done;
            }
            *out = write_uvarint(*out, zigzag(fk.len));
            if (fk.len)
                memcpy(*out, fk.ptr, (size_t)fk.len);
            *out += fk.len;
            if (fv.len < 0) {
                *(*out)++ = 1;
            } else {
                *out = write_uvarint(*out, zigzag(fv.len));
                if (fv.len)
                    memcpy(*out, fv.ptr, (size_t)fv.len);
                *out += fv.len;
            }
        }
        rc = 0;
    pair_done:
        field_release(&fk);
        field_release(&fv);
        Py_DECREF(hk);
        Py_DECREF(hv);
        if (rc < 0)
            return -1;
    }
    *size = total;
    return 0;
changed:
    PyErr_SetString(PyExc_RuntimeError, "record headers changed while being encoded");
    return -1;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, first_timestamp, reserve=0) -> (bytearray, max_timestamp)\n\n"
"The records section of a v2 batch for (key, value, timestamp[, headers]) tuples, offset\n"
"deltas 0..n-1, preceded by `reserve` zero bytes (room for the batch header). max_timestamp\n"
"is the largest record timestamp (first_timestamp when there are no records).");

static PyObject *encode_records(PyObject *self, PyObject *args)
{
    PyObject *records;
    long long first_ts;
    Py_ssize_t reserve = 0;
    if (!PyArg_ParseTuple(args, "OL|n:encode_records", &records, &first_ts, &reserve))
        return NULL;
    if (reserve < 0) {
        PyErr_SetString(PyExc_ValueError, "reserve must be >= 0");
        return NULL;
    }
    /* a tuple of our own: __index__ of a timestamp may run Python code that mutates a list */
    PyObject *seq = PySequence_Tuple(records);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    OutBuf o = {NULL, 0, 0};
    int64_t max_ts = first_ts;
    int have_max = 0;
    PyObject *result = NULL;

    if (outbuf_reserve(&o, reserve + n * 24 + 16) < 0)
        goto done;
    memset(o.buf, 0, (size_t)reserve);
    o.len = reserve;

    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = items[i], *key, *value, *tsobj, *headers = Py_None;
        PyObject *rseq = NULL;
        Py_ssize_t rn;
        if (PyTuple_CheckExact(rec)) {
            rseq = rec;
            Py_INCREF(rseq);
        } else {
            rseq = PySequence_Tuple(rec);
            if (rseq == NULL) {
                if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                    PyErr_Clear();
                    PyErr_Format(PyExc_TypeError,
                                 "record #%zd must be a (key, value, timestamp[, headers]) tuple", i);
                }
                goto done;
            }
        }
        rn = PyTuple_GET_SIZE(rseq);
        if (rn != 3 && rn != 4) {
            Py_DECREF(rseq);
            PyErr_Format(PyExc_TypeError,
                         "record #%zd must be (key, value, timestamp[, headers]), got %zd fields", i, rn);
            goto done;
        }
        PyObject **f = &PyTuple_GET_ITEM(rseq, 0);
        key = f[0];
        value = f[1];
        tsobj = f[2];
        if (rn == 4)
            headers = f[3];

        long long ts = PyLong_AsLongLong(tsobj);
        if (ts == -1 && PyErr_Occurred()) {
            Py_DECREF(rseq);
            goto done;
        }
        long long tsd;
        if (__builtin_sub_overflow(ts, first_ts, &tsd)) {
            Py_DECREF(rseq);
            PyErr_Format(PyExc_ValueError, "record #%zd: timestamp delta out of the 64-bit range", i);
            goto done;
        }
        if (!have_max || ts > max_ts) {
            max_ts = ts;
            have_max = 1;
        }

        Field fk, fv;
        if (field_get(key, &fk, 0, "key", i) < 0) {
            Py_DECREF(rseq);
            goto done;
        }
        if (field_get(value, &fv, 0, "value", i) < 0) {
            field_release(&fk);
            Py_DECREF(rseq);
            goto done;
        }
        PyObject *hseq = NULL;
        Py_ssize_t hsize = 1;
        int has_headers = headers != Py_None && PyObject_IsTrue(headers);
        if (has_headers < 0)
            goto record_fail;
        if (has_headers) {
            hseq = headers_seq(headers, i);
            if (hseq == NULL || encode_headers(hseq, i, &hsize, NULL, NULL) < 0)
                goto record_fail;
        }
        Py_ssize_t body = 1 + varint_size(zigzag(tsd)) + varint_size(zigzag(i));
        body += fk.len < 0 ? 1 : varint_size(zigzag(fk.len)) + fk.len;
        body += fv.len < 0 ? 1 : varint_size(zigzag(fv.len)) + fv.len;
        body += hsize;
        if (outbuf_reserve(&o, varint_size(zigzag(body)) + body) < 0)
            goto record_fail;
        {
            char *w = o.buf + o.len;
            char *body_start;
            w = write_uvarint(w, zigzag(body));
            body_start = w;
            *w++ = 0;
            w = write_uvarint(w, zigzag(tsd));
            w = write_uvarint(w, zigzag(i));
            if (fk.len < 0) {
                *w++ = 1;
            } else {
                w = write_uvarint(w, zigzag(fk.len));
                if (fk.len)
                    memcpy(w, fk.ptr, (size_t)fk.len);
                w += fk.len;
            }
            if (fv.len < 0) {
                *w++ = 1;
            } else {
                w = write_uvarint(w, zigzag(fv.len));
                if (fv.len)
                    memcpy(w, fv.ptr, (size_t)fv.len);
                w += fv.len;
            }
            if (hseq == NULL) {
                *w++ = 0;
            } else {
                Py_ssize_t written;
                /* same objects, same sizes: the reservation above covers this */
                if (encode_headers(hseq, i, &written, &w, body_start + body) < 0)
                    goto record_fail;
                if (written != hsize) {
                    PyErr_SetString(PyExc_RuntimeError, "record headers changed while encoding");
                    goto record_fail;
                }
            }
            if (w - body_start != body) {
                PyErr_SetString(PyExc_RuntimeError, "record size changed while encoding");
                goto record_fail;
            }
            o.len = w - o.buf;
        }
        Py_XDECREF(hseq);
        field_release(&fk);
        field_release(&fv);
        Py_DECREF(rseq);
        continue;
    record_fail:
        Py_XDECREF(hseq);
        field_release(&fk);
        field_release(&fv);
        Py_DECREF(rseq);
        goto done;
    }
    {
        PyObject *ba = PyByteArray_FromStringAndSize(o.buf, o.len);
        if (ba != NULL)
            result = Py_BuildValue("(NL)", ba, (long long)max_ts);
    }
done:
    PyMem_Free(o.buf);
    Py_DECREF(seq);
    return result;
}

/* ---- decoding ----------------------------------------------------------------------------- */

typedef struct {
    int64_t ts_delta;
    int64_t off_delta;
    Py_ssize_t key_pos, key_len; /* key_len < 0: null */
    Py_ssize_t value_pos, value_len;
    Py_ssize_t headers_pos;      /* first header, when header_count > 0 */
    int64_t header_count;
} RawRecord;

static const char *varint_error(int rc)
{
    return rc == VARINT_TOO_LONG ? "varint is longer than 10 bytes"
                                 : "record runs past the end of the batch";
}

#define READ_VARINT(dst)                                                                        \
    do {                                                                                        \
        int rc_ = read_varint(p, &pos, end, &(dst));                                            \
        if (rc_ != VARINT_OK) {                                                                 \
            *why = varint_error(rc_);                                                           \
            return -1;                                                                          \
        }                                                                                       \
    } while (0)

/* Validate and locate the fields of the record at *ppos. On error sets *why (static text) or
 * *bad_length (record length mismatch) and returns -1. */
static int parse_record(const uint8_t *p, Py_ssize_t *ppos, Py_ssize_t end, RawRecord *r,
                        const char **why, int64_t *length_out)
{
    Py_ssize_t pos = *ppos;
    int64_t length, klen, vlen;
    READ_VARINT(length);
    *length_out = length;
    Py_ssize_t body_start = pos;
    if (pos >= end) {
        *why = "record runs past the end of the batch";
        return -1;
    }
    pos++; /* record attributes: unused in v2 */
    READ_VARINT(r->ts_delta);
    READ_VARINT(r->off_delta);
    READ_VARINT(klen);
    if (klen < 0) {
        r->key_len = -1;
    } else {
        if (klen > end - pos) {
            *why = "record runs past the end of the batch";
            return -1;
        }
        r->key_pos = pos;
        r->key_len = (Py_ssize_t)klen;
        pos += (Py_ssize_t)klen;
    }
    READ_VARINT(vlen);
    if (vlen < 0) {
        r->value_len = -1;
    } else {
        if (vlen > end - pos) {
            *why = "record runs past the end of the batch";
            return -1;
        }
        r->value_pos = pos;
        r->value_len = (Py_ssize_t)vlen;
        pos += (Py_ssize_t)vlen;
    }
    READ_VARINT(r->header_count);
    if (r->header_count < 0) {
        *why = "negative header count";
        return -1;
    }
    r->headers_pos = pos;
    for (int64_t h = 0; h < r->header_count; h++) {
        int64_t hk, hv;
        READ_VARINT(hk);
        if (hk < 0) {
            *why = "null header key";
            return -1;
        }
        if (hk > end - pos) {
            *why = "record runs past the end of the batch";
            return -1;
        }
        pos += (Py_ssize_t)hk;
        READ_VARINT(hv);
        if (hv >= 0) {
            if (hv > end - pos) {
                *why = "record runs past the end of the batch";
                return -1;
            }
            pos += (Py_ssize_t)hv;
        }
    }
    if (length != (int64_t)(pos - body_start)) {
        *why = NULL; /* length mismatch: caller formats it */
        return -1;
    }
    *ppos = pos;
    return 0;
}

static inline PyObject *bytes_or_none(const uint8_t *p, Py_ssize_t at, Py_ssize_t len)
{
    if (len < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p + at, len);
}

/* Headers of a parsed record (already validated) as a tuple, or a list when as_list.
 * Returns NULL with *utf8_error set when a key is not UTF-8. */
static PyObject *build_headers(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, int64_t count,
                               int as_list, int *utf8_error)
{
    PyObject *out = as_list ? PyList_New((Py_ssize_t)count) : PyTuple_New((Py_ssize_t)count);
    if (out == NULL)
        return NULL;
    for (int64_t h = 0; h < count; h++) {
        int64_t hk = 0, hv = -1;
        /* parse_record validated this section; re-check anyway rather than trust it */
        if (read_varint(p, &pos, end, &hk) != VARINT_OK || hk < 0 || hk > end - pos) {
            PyErr_SetString(PyExc_SystemError, "header section changed after validation");
            Py_DECREF(out);
            return NULL;
        }
        PyObject *k = PyUnicode_DecodeUTF8((const char *)p + pos, (Py_ssize_t)hk, "strict");
        if (k == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                *utf8_error = 1;
            Py_DECREF(out);
            return NULL;
        }
        pos += (Py_ssize_t)hk;
        if (read_varint(p, &pos, end, &hv) != VARINT_OK || hv > end - pos) {
            Py_DECREF(k);
            Py_DECREF(out);
            PyErr_SetString(PyExc_SystemError, "header section changed after validation");
            return NULL;
        }
        PyObject *v = bytes_or_none(p, pos, hv < 0 ? -1 : (Py_ssize_t)hv);
        if (hv > 0)
            pos += (Py_ssize_t)hv;
        PyObject *pair = v ? PyTuple_Pack(2, k, v) : NULL;
        Py_DECREF(k);
        Py_XDECREF(v);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        if (as_list)
            PyList_SET_ITEM(out, (Py_ssize_t)h, pair);
        else
            PyTuple_SET_ITEM(out, (Py_ssize_t)h, pair);
    }
    return out;
}

/* base + delta as a Python int, exact even past 64 bits (as the pure-Python code computes it). */
static PyObject *add_to_long(int64_t base, int64_t delta)
{
    long long sum;
    if (!__builtin_add_overflow((long long)base, (long long)delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *s = NULL;
    if (a && b)
        s = PyNumber_Add(a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return s;
}

/* base + delta + 1, saturated to the int64 range */
static inline int64_t next_offset_sat(int64_t base, int32_t delta)
{
    long long s;
    if (__builtin_add_overflow((long long)base, (long long)delta + 1, &s))
        return delta >= 0 ? INT64_MAX : INT64_MIN;
    return s;
}

/* Raise the DecodeError for record #index of a batch. */
static void raise_record_error(Py_ssize_t position, int64_t base_offset, Py_ssize_t index,
                               const char *why, int64_t length)
{
    if (why != NULL)
        raise_decode(position, base_offset, "malformed record #%zd in batch: %s", index, why);
    else
        raise_decode(position, base_offset,
                     "malformed record #%zd in batch: record length %lld does not match its fields",
                     index, (long long)length);
}

/* A decoded record's parts, shared by the Record and Message builders. */
typedef struct {
    PyObject *key, *value, *headers; /* headers: tuple/list; NULL when empty and as None wanted */
} Parts;

static int build_parts(const uint8_t *p, Py_ssize_t end, const RawRecord *r, int for_message,
                       Parts *out, int *utf8_error)
{
    out->key = bytes_or_none(p, r->key_pos, r->key_len);
    out->value = out->key ? bytes_or_none(p, r->value_pos, r->value_len) : NULL;
    out->headers = NULL;
    if (out->value == NULL)
        goto fail;
    if (r->header_count == 0) {
        out->headers = for_message ? Py_None : empty_tuple;
        Py_INCREF(out->headers);
    } else {
        out->headers = build_headers(p, r->headers_pos, end, r->header_count, for_message, utf8_error);
        if (out->headers == NULL)
            goto fail;
    }
    return 0;
fail:
    Py_XDECREF(out->key);
    Py_XDECREF(out->value);
    return -1;
}

/* The records section [start, end) must lie inside the buffer; raises otherwise. */
static int check_records_range(Py_ssize_t start, Py_ssize_t end, Py_ssize_t len, long long base_offset)
{
    if (start < 0 || end < start || end > len) {
        raise_decode(-1, base_offset, "batch records [%zd, %zd) lie outside a buffer of %zd bytes",
                     start, end, len);
        return -1;
    }
    return 0;
}

/* Parse record #index at *pos, or raise its DecodeError. */
static inline int next_record(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, RawRecord *r,
                              long long index, long long base_offset)
{
    const char *why;
    int64_t length;
    if (parse_record(p, pos, end, r, &why, &length) < 0) {
        raise_record_error(-1, base_offset, (Py_ssize_t)index, why, length);
        return -1;
    }
    return 0;
}

/* The `count` records must fill their section exactly; raises otherwise. */
static int check_records_end(Py_ssize_t pos, Py_ssize_t end, long long count, long long base_offset)
{
    if (pos != end) {
        raise_decode(-1, base_offset, "batch has %zd bytes after its %lld records", end - pos, count);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(buf, base_offset, first_timestamp, count, start, end) -> list[Record]\n\n"
"Decode `count` records stored in buf[start:end] (the records section of one batch).\n"
"Raises DecodeError(message, position=-1, base_offset) on malformed bytes.");

static PyObject *decode_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long base_offset, first_ts, count;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*LLLnn:decode_records", &view, &base_offset, &first_ts, &count,
                          &start, &end))
        return NULL;
    PyObject *list = NULL;
    const uint8_t *p = view.buf;
    if (check_records_range(start, end, view.len, base_offset) < 0)
        goto done;
    Py_ssize_t max_records = (end - start) / MIN_RECORD_SIZE;
    Py_ssize_t prealloc = count < 0 ? 0 : (count < max_records ? (Py_ssize_t)count : max_records);
    list = PyList_New(prealloc);
    if (list == NULL)
        goto done;
    Py_ssize_t pos = start;
    for (long long i = 0; i < count; i++) {
        RawRecord r;
        if (next_record(p, &pos, end, &r, i, base_offset) < 0)
            goto fail;
        Parts parts;
        int utf8_error = 0;
        if (build_parts(p, end, &r, 0, &parts, &utf8_error) < 0) {
            if (utf8_error) {
                PyErr_Clear();
                raise_record_error(-1, base_offset, (Py_ssize_t)i, "header key is not valid UTF-8", 0);
            }
            goto fail;
        }
        PyObject *offset = add_to_long(base_offset, r.off_delta);
        PyObject *ts = offset ? add_to_long(first_ts, r.ts_delta) : NULL;
        if (ts == NULL) {
            Py_XDECREF(offset);
            Py_DECREF(parts.key);
            Py_DECREF(parts.value);
            Py_DECREF(parts.headers);
            goto fail;
        }
        PyObject *rec = record_make(offset, ts, parts.key, parts.value, parts.headers);
        if (rec == NULL)
            goto fail;
        if (i < prealloc) {
            PyList_SET_ITEM(list, (Py_ssize_t)i, rec);
        } else {
            int rc = PyList_Append(list, rec);
            Py_DECREF(rec);
            if (rc < 0)
                goto fail;
        }
    }
    if (check_records_end(pos, end, count, base_offset) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(list);
done:
    PyBuffer_Release(&view);
    return list;
}

PyDoc_STRVAR(null_key_indexes_doc,
"null_key_indexes(buf, base_offset, count, start, end) -> list[int]\n\n"
"Indexes (0-based, in batch order) of the records without a key among the `count` records\n"
"stored in buf[start:end], which are validated as decode_records validates them; nothing is\n"
"copied. Raises DecodeError(message, position=-1, base_offset) on malformed bytes.");

static PyObject *null_key_indexes(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long base_offset, count;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*LLnn:null_key_indexes", &view, &base_offset, &count, &start, &end))
        return NULL;
    PyObject *list = NULL;
    const uint8_t *p = view.buf;
    if (check_records_range(start, end, view.len, base_offset) < 0)
        goto done;
    list = PyList_New(0);
    if (list == NULL)
        goto done;
    Py_ssize_t pos = start;
    for (long long i = 0; i < count; i++) {
        RawRecord r;
        if (next_record(p, &pos, end, &r, i, base_offset) < 0)
            goto fail;
        if (r.header_count > 0) {
            /* header keys must be UTF-8, as decode_records requires (records with headers only) */
            int utf8_error = 0;
            PyObject *headers = build_headers(p, r.headers_pos, end, r.header_count, 0, &utf8_error);
            if (headers == NULL) {
                if (utf8_error) {
                    PyErr_Clear();
                    raise_record_error(-1, base_offset, (Py_ssize_t)i, "header key is not valid UTF-8", 0);
                }
                goto fail;
            }
            Py_DECREF(headers);
        }
        if (r.key_len < 0) {
            PyObject *index = PyLong_FromLongLong(i);
            int rc = index == NULL ? -1 : PyList_Append(list, index);
            Py_XDECREF(index);
            if (rc < 0)
                goto fail;
        }
    }
    if (check_records_end(pos, end, count, base_offset) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(list);
done:
    PyBuffer_Release(&view);
    return list;
}

/* ---- filling confluent_kafka.Message objects directly (layout: eddy/message_layout.h) ---- */

static MessageLayout msg_layout;

PyDoc_STRVAR(set_message_layout_doc, SET_MESSAGE_LAYOUT_DOC);

static PyObject *set_message_layout(PyObject *self, PyObject *args)
{
    return layout_set(&msg_layout, args);
}

/* ---- whole fetch buffers to Messages ---------------------------------------------------- */

typedef struct {
    int64_t producer_id, first_offset, last_offset;
} AbortedRange;

static int parse_aborted(PyObject *aborted, AbortedRange **out, Py_ssize_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (aborted == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(aborted, "aborted must be a sequence of (producer_id, first_offset, last_offset)");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    AbortedRange *ranges = PyMem_Calloc(n ? (size_t)n : 1, sizeof(AbortedRange));
    if (ranges == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long pid, first, last;
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "LLL", &pid, &first, &last)) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "aborted[%zd] must be a (producer_id, first_offset, last_offset) tuple of ints", i);
            }
            PyMem_Free(ranges);
            Py_DECREF(seq);
            return -1;
        }
        ranges[i].producer_id = pid;
        ranges[i].first_offset = first;
        ranges[i].last_offset = last;
    }
    Py_DECREF(seq);
    *out = ranges;
    *n_out = n;
    return 0;
}

PyDoc_STRVAR(decode_messages_doc,
"decode_messages(buf, topic, partition, min_offset, message_type, validate_crc=True,\n"
"                aborted=None, partial_tail=False) -> (list[Message], next_offset)\n\n"
"Decode every record of concatenated v2 batches into message_type(topic, partition, offset,\n"
"key, value, headers, None, (timestamp_type, timestamp), -1.0, leader_epoch) objects.\n"
"Control batches are skipped, as are records below min_offset and transactional batches of an\n"
"aborted (producer_id, first_offset, last_offset) range. next_offset is max(min_offset, the\n"
"next offset of the last batch walked). partial_tail=True stops quietly at a torn last batch\n"
"(a fetch response cut at its byte limit) instead of raising.");

/* Appends a new message to the list and drops the caller's reference. A consumed message holds
   only bytes, str, ints and tuples/lists of them, so it can never be part of a reference cycle;
   untracking it keeps the cyclic collector from rescanning the (up to queued.min.messages)
   messages a consumer keeps queued. */
static int message_append(PyObject *list, PyObject *msg)
{
    if (PyObject_IS_GC(msg) && PyObject_GC_IsTracked(msg))
        PyObject_GC_UnTrack(msg);
    int rc = PyList_Append(list, msg);
    Py_DECREF(msg);
    return rc;
}

static PyObject *decode_messages(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "topic", "partition", "min_offset", "message_type",
                             "validate_crc", "aborted", "partial_tail", NULL};
    Py_buffer view;
    PyObject *topic, *partition, *message_type, *aborted = Py_None;
    long long min_offset;
    int validate_crc = 1, partial_tail = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*OOLO|pOp:decode_messages", kwlist, &view, &topic,
                                     &partition, &min_offset, &message_type, &validate_crc, &aborted,
                                     &partial_tail))
        return NULL;
    AbortedRange *ranges = NULL;
    Py_ssize_t n_ranges = 0;
    PyObject *list = NULL, *result = NULL, *next_obj = NULL;
    /* A copy holding its own references: an allocation can run a collection, and with it other
       threads' Python code, which could replace the layout while this call uses it. */
    MessageLayout layout = msg_layout;
    int fast = layout.type != NULL && message_type == (PyObject *)layout.type;
    if (fast) {
        Py_INCREF(layout.type);
        Py_INCREF(layout.background);
    }
    const int holding = fast;
    if (parse_aborted(aborted, &ranges, &n_ranges) < 0)
        goto done;
    list = PyList_New(0);
    if (list == NULL)
        goto done;
    /* fill Messages directly when records.py verified this type's layout */
    int32_t partition32 = 0;
    if (fast) {
        int overflow = 0;
        long long part = PyLong_Check(partition) ? PyLong_AsLongLongAndOverflow(partition, &overflow) : -1;
        if (part == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (!PyLong_Check(partition) || overflow || part < INT32_MIN || part > INT32_MAX ||
            !PyUnicode_CheckExact(topic))
            fast = 0; /* let the constructor judge unusual arguments */
        else
            partition32 = (int32_t)part;
    }

    const uint8_t *p = view.buf;
    const Py_ssize_t buf_end = view.len;
    Py_ssize_t pos = 0;
    int have_next = 0;
    int64_t last_base = 0, last_delta = 0;

    while (pos < buf_end) {
        Py_ssize_t remaining = buf_end - pos;
        if (remaining < LOG_OVERHEAD) {
            if (partial_tail)
                break;
            raise_decode(pos, -1, "torn batch: %zd trailing bytes are less than a batch prefix", remaining);
            goto fail;
        }
        const uint8_t *b = p + pos;
        int64_t base_offset = be64(b);
        int32_t batch_length = be32(b + 8);
        if (batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD) {
            raise_decode(pos, base_offset, "batch length %d is smaller than a batch header", (int)batch_length);
            goto fail;
        }
        Py_ssize_t size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
        if (size > remaining) {
            if (partial_tail)
                break;
            raise_decode(pos, base_offset, "torn batch: %zd bytes declared, %zd present", size, remaining);
            goto fail;
        }
        int32_t leader_epoch = be32(b + 12);
        int magic = (int8_t)b[16];
        if (magic != MAGIC) {
            raise_decode(pos, base_offset, "unsupported magic %d (only v2 batches are written by Eddy)", magic);
            goto fail;
        }
        uint32_t stored_crc = (uint32_t)be32(b + 17);
        if (validate_crc) {
            uint32_t actual = crc32c_update(0, b + CRC_START, (size_t)(size - CRC_START));
            if (actual != stored_crc) {
                raise_decode(pos, base_offset, "CRC mismatch: stored 0x%08x, computed 0x%08x",
                             (unsigned)stored_crc, (unsigned)actual);
                goto fail;
            }
        }
        int attributes = be16(b + 21);
        if (attributes & COMPRESSION_MASK) {
            raise_decode(pos, base_offset, "compressed batches are not supported (codec %d)",
                         attributes & COMPRESSION_MASK);
            goto fail;
        }
        int32_t last_offset_delta = be32(b + 23);
        int64_t first_ts = be64(b + 27);
        int64_t max_ts = be64(b + 35);
        int64_t producer_id = be64(b + 43);
        int32_t count = be32(b + 57);
        have_next = 1;
        last_base = base_offset;
        last_delta = last_offset_delta;

        int skip = (attributes & CONTROL_FLAG) != 0;
        /* whole batch below the fetch position: nothing to deliver */
        if (!skip && next_offset_sat(base_offset, last_offset_delta) <= min_offset)
            skip = 1;
        if (!skip && (attributes & TRANSACTIONAL_FLAG)) {
            for (Py_ssize_t k = 0; k < n_ranges; k++) {
                if (ranges[k].producer_id == producer_id && ranges[k].first_offset <= base_offset &&
                    base_offset <= ranges[k].last_offset) {
                    skip = 1;
                    break;
                }
            }
        }
        if (skip) {
            pos += size;
            continue;
        }

        int log_append = (attributes & TIMESTAMP_TYPE_FLAG) != 0;
        PyObject *ts_type = ts_type_ints[log_append ? 2 : 1];
        PyObject *shared_ts = NULL; /* LogAppendTime: every record carries the batch's max timestamp */
        PyObject *epoch_obj = PyLong_FromLong(leader_epoch);
        if (epoch_obj == NULL)
            goto fail;
        if (log_append) {
            PyObject *t = PyLong_FromLongLong(max_ts);
            shared_ts = t ? PyTuple_Pack(2, ts_type, t) : NULL;
            Py_XDECREF(t);
            if (shared_ts == NULL) {
                Py_DECREF(epoch_obj);
                goto fail;
            }
        }
        Py_ssize_t rpos = pos + BATCH_HEADER_SIZE;
        Py_ssize_t end = pos + size;
        int batch_ok = 1;
        /* records of a batch often share a millisecond: share their (type, timestamp) tuple */
        PyObject *prev_ts = NULL;
        int64_t prev_ts_delta = 0;
        for (int32_t i = 0; i < count; i++) {
            RawRecord r;
            const char *why;
            int64_t length;
            if (parse_record(p, &rpos, end, &r, &why, &length) < 0) {
                raise_record_error(pos, base_offset, i, why, length);
                batch_ok = 0;
                break;
            }
            Parts parts;
            int utf8_error = 0;
            if (build_parts(p, end, &r, 1, &parts, &utf8_error) < 0) {
                if (utf8_error) {
                    PyErr_Clear();
                    raise_record_error(pos, base_offset, i, "header key is not valid UTF-8", 0);
                }
                batch_ok = 0;
                break;
            }
            long long off;
            PyObject *offset;
            int keep;
            int off_ok = !__builtin_add_overflow((long long)base_offset, (long long)r.off_delta, &off);
            if (off_ok)
                keep = off >= min_offset;
            else
                keep = r.off_delta > 0; /* overflowed upwards: above any int64 min_offset */
            if (!keep) {
                Py_DECREF(parts.key);
                Py_DECREF(parts.value);
                Py_DECREF(parts.headers);
                continue;
            }
            if (fast && off_ok && leader_epoch >= -1) {
                long long ts = max_ts;
                if (log_append || !__builtin_add_overflow((long long)first_ts, (long long)r.ts_delta, &ts)) {
                    PyObject *msg = layout_message(&layout, topic, partition32, off, parts.key, parts.value,
                                                   parts.headers, leader_epoch, ts, log_append ? 2 : 1);
                    if (msg == NULL || message_append(list, msg) < 0) {
                        batch_ok = 0;
                        break;
                    }
                    continue;
                }
            }
            offset = off_ok ? PyLong_FromLongLong(off) : add_to_long(base_offset, r.off_delta);
            PyObject *tstuple = NULL;
            if (offset != NULL) {
                if (shared_ts != NULL) {
                    tstuple = shared_ts;
                    Py_INCREF(tstuple);
                } else if (prev_ts != NULL && prev_ts_delta == r.ts_delta) {
                    tstuple = prev_ts;
                    Py_INCREF(tstuple);
                } else {
                    PyObject *t = add_to_long(first_ts, r.ts_delta);
                    tstuple = t ? PyTuple_Pack(2, ts_type, t) : NULL;
                    Py_XDECREF(t);
                    if (tstuple != NULL) {
                        Py_XSETREF(prev_ts, tstuple);
                        Py_INCREF(prev_ts);
                        prev_ts_delta = r.ts_delta;
                    }
                }
            }
            PyObject *margs = tstuple ? PyTuple_New(10) : NULL;
            if (margs == NULL) {
                Py_XDECREF(offset);
                Py_XDECREF(tstuple);
                Py_DECREF(parts.key);
                Py_DECREF(parts.value);
                Py_DECREF(parts.headers);
                batch_ok = 0;
                break;
            }
            Py_INCREF(topic);
            PyTuple_SET_ITEM(margs, 0, topic);
            Py_INCREF(partition);
            PyTuple_SET_ITEM(margs, 1, partition);
            PyTuple_SET_ITEM(margs, 2, offset);
            PyTuple_SET_ITEM(margs, 3, parts.key);
            PyTuple_SET_ITEM(margs, 4, parts.value);
            PyTuple_SET_ITEM(margs, 5, parts.headers);
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(margs, 6, Py_None);
            PyTuple_SET_ITEM(margs, 7, tstuple);
            Py_INCREF(latency_none);
            PyTuple_SET_ITEM(margs, 8, latency_none);
            Py_INCREF(epoch_obj);
            PyTuple_SET_ITEM(margs, 9, epoch_obj);
            PyObject *msg = PyObject_Call(message_type, margs, NULL);
            Py_DECREF(margs);
            if (msg == NULL || message_append(list, msg) < 0) {
                batch_ok = 0;
                break;
            }
        }
        Py_DECREF(epoch_obj);
        Py_XDECREF(shared_ts);
        Py_XDECREF(prev_ts);
        if (!batch_ok)
            goto fail;
        if (rpos != end) {
            raise_decode(pos, base_offset, "batch has %zd bytes after its %d records", end - rpos, (int)count);
            goto fail;
        }
        pos += size;
    }
    if (have_next) {
        /* next offset of the last batch, never behind the requested position */
        long long next;
        if (!__builtin_add_overflow((long long)last_base, (long long)last_delta + 1, &next))
            next_obj = PyLong_FromLongLong(next < min_offset ? min_offset : next);
        else if (last_delta >= 0)
            next_obj = add_to_long(last_base, last_delta + 1); /* past 64 bits: above min_offset */
        else
            next_obj = PyLong_FromLongLong(min_offset);
    } else {
        next_obj = PyLong_FromLongLong(min_offset);
    }
    if (next_obj == NULL)
        goto fail;
    result = PyTuple_Pack(2, list, next_obj);
    Py_DECREF(next_obj);
fail:
    Py_XDECREF(list);
done:
    if (holding) {
        Py_DECREF(layout.type);
        Py_DECREF(layout.background);
    }
    PyMem_Free(ranges);
    PyBuffer_Release(&view);
    return result;
}

/* ---- producer queue entries ------------------------------------------------------------------ */

PyDoc_STRVAR(queue_append_doc,
"queue_append(entries, key, value, timestamp) -> int\n\n"
"entries.append((key, value, timestamp, None)) and return len(entries): the embedded producer's\n"
"queue entry (replication/clients/producer.py QueueView). key and value are bytes or None and\n"
"timestamp an int, so the tuple can never be part of a reference cycle: it is created untracked\n"
"by the garbage collector (queued records are many and live until their batch is cut).");

static PyObject *queue_append(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "queue_append expects 4 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *entries = args[0], *key = args[1], *value = args[2], *ts = args[3];
    if (!PyList_CheckExact(entries)) {
        PyErr_Format(PyExc_TypeError, "queue_append: entries must be a list, not %.100s", Py_TYPE(entries)->tp_name);
        return NULL;
    }
    if ((key != Py_None && !PyBytes_CheckExact(key)) || (value != Py_None && !PyBytes_CheckExact(value)) ||
        !PyLong_CheckExact(ts)) {
        PyErr_SetString(PyExc_TypeError, "queue_append: key and value must be bytes or None, timestamp an int");
        return NULL;
    }
    PyObject *entry = PyTuple_New(4);
    if (entry == NULL)
        return NULL;
    Py_INCREF(key);
    Py_INCREF(value);
    Py_INCREF(ts);
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(entry, 0, key);
    PyTuple_SET_ITEM(entry, 1, value);
    PyTuple_SET_ITEM(entry, 2, ts);
    PyTuple_SET_ITEM(entry, 3, Py_None);
    PyObject_GC_UnTrack(entry);
    int rc = PyList_Append(entries, entry);
    Py_DECREF(entry);
    if (rc < 0)
        return NULL;
    return PyLong_FromSsize_t(PyList_GET_SIZE(entries));
}

/* ---- crc32c --------------------------------------------------------------------------------- */

PyDoc_STRVAR(crc32c_doc, "crc32c(data, value=0) -> int: CRC-32C of data, continuing from value.");

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c", &view, &value))
        return NULL;
    uint32_t crc;
    if (view.len > 65536) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c_update(value, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_update(value, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* ---- module ------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"encode_records", encode_records, METH_VARARGS, encode_records_doc},
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {"null_key_indexes", null_key_indexes, METH_VARARGS, null_key_indexes_doc},
    {"decode_messages", (PyCFunction)(void (*)(void))decode_messages, METH_VARARGS | METH_KEYWORDS,
     decode_messages_doc},
    {"crc32c", py_crc32c, METH_VARARGS, crc32c_doc},
    {"set_message_layout", set_message_layout, METH_VARARGS, set_message_layout_doc},
    {"queue_append", (PyCFunction)(void (*)(void))queue_append, METH_FASTCALL, queue_append_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "replication._records",
    .m_doc = "C implementation of the hot loops of replication.records (Kafka v2 records).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__records(void)
{
    crc_init_tables();
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    crc_hw_available = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    if (PyType_Ready(&RecordType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    empty_tuple = PyTuple_New(0);
    latency_none = PyFloat_FromDouble(-1.0);
    for (int i = 0; i < 3; i++)
        ts_type_ints[i] = PyLong_FromLong(i);
    DecodeError = PyErr_NewExceptionWithDoc(
        "replication._records.DecodeError",
        "Malformed record bytes: args are (message, position, base_offset), -1 when unknown.",
        PyExc_ValueError, NULL);
    if (empty_tuple == NULL || latency_none == NULL || DecodeError == NULL || !ts_type_ints[2])
        goto fail;
    Py_INCREF(DecodeError);
    if (PyModule_AddObject(m, "DecodeError", DecodeError) < 0)
        goto fail;
    Py_INCREF(&RecordType);
    if (PyModule_AddObject(m, "Record", (PyObject *)&RecordType) < 0)
        goto fail;
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC", crc_hw_available) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
