/* headrace._record_check: the records inside a v2 record batch, checked as Kafka's
 * LogValidator checks them (the C twin of record_check.check_records_py, which documents
 * the layout and the answers; tests hold the two to the same answers).
 *
 * check_records(buf, pos, end, count, need_key, base_timestamp, low, high)
 *   -> (problem, index): (0, -1) when every record is well formed.
 * schema_ids(buf, pos, end, count, key_ids, value_ids) -> (problem, index, schema id): the
 *   schema registry's wire format on keys and values (record_check.schema_ids_py).
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

/* schema_ids: the schema registry's wire format on keys and values (record_check.schema_ids
 * documents the answers). The allowed ids come as buffers of sorted native uint32 (or None:
 * that part is not checked); a lookup is a binary search, nothing is allocated per record. */
enum { KEY_NO_ID = 1, KEY_ID = 2, VALUE_NO_ID = 3, VALUE_ID = 4, IDS_FRAMING = 5 };

static int in_sorted(const uint32_t *ids, Py_ssize_t n, uint32_t id) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && ids[lo] == id;
}

/* 0: the id is allowed; else no_id or bad_id (with *id set) */
static int check_id(const uint8_t *p, int64_t length, const uint32_t *ids, Py_ssize_t n,
                    int no_id, int bad_id, long long *id) {
    if (length < 5 || p[0] != 0)
        return no_id;
    uint32_t found = ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 8) |
                     (uint32_t)p[4];
    if (in_sorted(ids, n, found))
        return 0;
    *id = found;
    return bad_id;
}

static int walk_ids(const uint8_t *buf, Py_ssize_t start, Py_ssize_t stop_all, long long count,
                    const uint32_t *kids, Py_ssize_t nk, const uint32_t *vids, Py_ssize_t nv,
                    long long *index, long long *id) {
    const uint8_t *p = buf + start, *end = buf + stop_all;
    int64_t length, skip, key, value;
    int problem;
    for (*index = 0; *index < count; (*index)++) {
        if (!read_varint(&p, end, 5, &length) || length < 1 || length > end - p)
            return IDS_FRAMING;
        const uint8_t *stop = p + length;
        p++; /* attributes */
        if (!read_varint(&p, stop, 10, &skip) || !read_varint(&p, stop, 5, &skip))
            return IDS_FRAMING;
        if (!read_varint(&p, stop, 5, &key) || key < -1 || key > stop - p)
            return IDS_FRAMING;
        if (key >= 0) {
            if (kids != NULL && (problem = check_id(p, key, kids, nk, KEY_NO_ID, KEY_ID, id)))
                return problem;
            p += key;
        }
        if (!read_varint(&p, stop, 5, &value) || value < -1 || value > stop - p)
            return IDS_FRAMING;
        if (value >= 0 && vids != NULL &&
            (problem = check_id(p, value, vids, nv, VALUE_NO_ID, VALUE_ID, id)))
            return problem;
        p = stop;
    }
    *index = -1;
    return OK;
}

static int ids_buffer(PyObject *o, Py_buffer *view, int *held) {
    *held = 0;
    if (o == Py_None)
        return 1;
    if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0)
        return 0;
    *held = 1;
    if (view->len % sizeof(uint32_t)) {
        PyErr_SetString(PyExc_ValueError, "ids must be a buffer of uint32");
        return 0;
    }
    return 1;
}

static PyObject *schema_ids(PyObject *self, PyObject *args) {
    Py_buffer view, kview, vview;
    Py_ssize_t pos, end;
    long long count, index = 0, id = -1;
    PyObject *kobj, *vobj;
    int kheld = 0, vheld = 0;
    PyObject *answer = NULL;
    if (!PyArg_ParseTuple(args, "y*nnLOO", &view, &pos, &end, &count, &kobj, &vobj))
        return NULL;
    if (!ids_buffer(kobj, &kview, &kheld) || !ids_buffer(vobj, &vview, &vheld))
        goto done;
    if (pos < 0 || end < pos || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within the buffer");
        goto done;
    }
    int problem = walk_ids((const uint8_t *)view.buf, pos, end, count,
                           kheld ? (const uint32_t *)kview.buf : NULL,
                           kheld ? kview.len / (Py_ssize_t)sizeof(uint32_t) : 0,
                           vheld ? (const uint32_t *)vview.buf : NULL,
                           vheld ? vview.len / (Py_ssize_t)sizeof(uint32_t) : 0, &index, &id);
    answer = Py_BuildValue("(iLL)", problem, index, problem ? id : -1LL);
done:
    if (kheld)
        PyBuffer_Release(&kview);
    if (vheld)
        PyBuffer_Release(&vview);
    PyBuffer_Release(&view);
    return answer;
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(buf, pos, end, count, need_key, base_timestamp, low, high) -> (problem, "
     "index)"},
    {"schema_ids", schema_ids, METH_VARARGS,
     "schema_ids(buf, pos, end, count, key_ids, value_ids) -> (problem, index, schema id);"
     " ids: sorted uint32 buffers or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "headrace._record_check",
                                    "Kafka's checks of the records in a v2 batch, in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__record_check(void) { return PyModule_Create(&module); }
