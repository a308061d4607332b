/* headrace._record_check: the records inside a v2 record batch, checked as Kafka's
 * LogValidator checks them (the C twin of record_check.check_records_py, which documents
 * the layout and the answers; tests hold the two to the same answers).
 *
 * check_records(buf, pos, end, count, need_key, base_timestamp, low, high)
 *   -> (problem, index): (0, -1) when every record is well formed.
 * Reads only inside buf[pos:end]; allocates nothing but the answer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>

enum { OK = 0, FRAMING = 1, OFFSET = 2, NO_KEY = 3, TIMESTAMP = 4 };

/* A zigzag varint of at most max_bytes bytes at *p, before end; 0 when malformed. */
static int read_varint(const uint8_t **p, const uint8_t *end, int max_bytes, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    const uint8_t *q = *p;
    for (int i = 0; i < max_bytes; i++) {
        if (q >= end)
            return 0;
        uint8_t b = *q++;
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            *p = q;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

static int check(const uint8_t *buf, Py_ssize_t start, Py_ssize_t stop_all, long long count,
                 int need_key, long long base_ts, long long low, long long high, long long *index) {
    const uint8_t *p = buf + start, *end = buf + stop_all;
    int64_t length, delta, offset_delta, key, value, headers, hkey, hvalue;
    for (*index = 0; *index < count; (*index)++) {
        if (!read_varint(&p, end, 5, &length))
            return FRAMING;
        if (length < 1 || length > end - p)
            return FRAMING;
        const uint8_t *stop = p + length;
        p++; /* attributes */
        if (!read_varint(&p, stop, 10, &delta) || !read_varint(&p, stop, 5, &offset_delta))
            return FRAMING;
        if (!read_varint(&p, stop, 5, &key) || key < -1)
            return FRAMING;
        if (key > 0) {
            if (key > stop - p)
                return FRAMING;
            p += key;
        }
        if (!read_varint(&p, stop, 5, &value) || value < -1)
            return FRAMING;
        if (value > 0) {
            if (value > stop - p)
                return FRAMING;
            p += value;
        }
        if (!read_varint(&p, stop, 5, &headers) || headers < 0)
            return FRAMING;
        for (int64_t h = 0; h < headers; h++) {
            if (!read_varint(&p, stop, 5, &hkey) || hkey < 0 || hkey > stop - p)
                return FRAMING;
            p += hkey;
            if (!read_varint(&p, stop, 5, &hvalue) || hvalue < -1)
                return FRAMING;
            if (hvalue > 0) {
                if (hvalue > stop - p)
                    return FRAMING;
                p += hvalue;
            }
        }
        if (p != stop)
            return FRAMING;
        if (offset_delta != *index)
            return OFFSET;
        if (need_key && key < 0)
            return NO_KEY;
        /* base + delta without overflow: compare against the bounds moved by base */
        if ((delta < 0 && base_ts < LLONG_MIN - delta) || (delta > 0 && base_ts > LLONG_MAX - delta))
            return TIMESTAMP;
        long long ts = base_ts + delta;
        if (ts < low || ts > high)
            return TIMESTAMP;
    }
    if (p != end)
        return FRAMING;
    *index = -1;
    return OK;
}

static PyObject *check_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    long long count, base_ts, low, high, index = 0;
    int need_key;
    if (!PyArg_ParseTuple(args, "y*nnLpLLL", &view, &pos, &end, &count, &need_key, &base_ts,
                          &low, &high))
        return NULL;
    if (pos < 0 || end < pos || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within the buffer");
        return NULL;
    }
    int problem = check((const uint8_t *)view.buf, pos, end, count, need_key, base_ts, low,
                        high, &index);
    PyBuffer_Release(&view);
    return Py_BuildValue("(iL)", problem, index);
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(buf, pos, end, count, need_key, base_timestamp, low, high) -> (problem, "
     "index)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "headrace._record_check",
                                    "Kafka's checks of the records in a v2 batch, in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__record_check(void) { return PyModule_Create(&module); }
