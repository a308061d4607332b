/* The records of v2 batches into columns, for topics as Iceberg tables (broker/iceberg/
 * committed.py): no Python object per record, except the headers of records that have some.
 *
 * columns(payloads, bases, base_timestamps, max_timestamps, timestamp_types, counts, start, end)
 *   payloads         the batches' records sections, decompressed (bytes-like, one per batch)
 *   bases ...counts  per batch: base offset, base timestamp, max timestamp, timestamp type
 *                    (1: LogAppendTime, every record gets the max timestamp), record count
 *   start, end       only records with start <= offset < end are kept
 * returns (n, offsets, timestamps, timestamp_types, key_offsets, key_valid, key_data,
 *          value_offsets, value_valid, value_data, headers) where offsets and timestamps are
 *   int64 arrays, timestamp_types int32, *_offsets int32 arrays of n + 1 (Arrow's binary
 *   layout, a null has length 0), *_valid one byte per record (0: null), *_data the bytes;
 *   headers {row: [(key str, value bytes | None), ...]} for rows that have headers.
 * Raises ValueError for a record that does not fit its batch (as decode_records would).
 * The records are scanned without the interpreter lock (the broker's event loop runs
 * meanwhile); it is taken back only to make the headers of a kept record that has some.
 * A record (after the 61-byte header): length varint, attributes int8, timestampDelta varlong,
 * offsetDelta varint, keyLength varint + key, valueLength varint + value, headerCount varint,
 * then per header keyLength varint + key, valueLength varint + value; zigzag varints.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

/* (the raw allocator: called without the interpreter lock; -1 when out of memory) */
static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *p = PyMem_RawRealloc(b->data, cap);
        if (!p) return -1;
        b->data = p;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int max, int64_t *out) {
    uint64_t z = 0;
    int shift = 0;
    for (int i = 0; i < max; i++) {
        if (*pos >= end) return -1;
        uint8_t b = p[(*pos)++];
        z |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static PyObject *bytes_of(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
}

/* A record's nh headers from pos: skipped, or appended to list as (key, value) pairs when
 * list is not NULL (then the caller holds the interpreter lock). Returns NULL or what is bad;
 * *pyerr is set when a Python call failed. */
static const char *headers_of(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t rec_end, int64_t nh,
                              PyObject *list, int *pyerr) {
    for (int64_t h = 0; h < nh; h++) {
        int64_t hk, hv;
        if (varint(p, pos, rec_end, 5, &hk) || hk < 0 || *pos + hk > rec_end) return "header key";
        Py_ssize_t hkpos = *pos;
        *pos += hk;
        if (varint(p, pos, rec_end, 5, &hv) || (hv > 0 && *pos + hv > rec_end))
            return "header value";
        Py_ssize_t hvpos = *pos;
        if (hv > 0) *pos += hv;
        if (list) {
            PyObject *k = PyUnicode_DecodeUTF8((const char *)p + hkpos, hk, "strict");
            PyObject *v = hv < 0 ? Py_NewRef(Py_None)
                                 : PyBytes_FromStringAndSize((const char *)p + hvpos, hv);
            PyObject *pair = (k && v) ? PyTuple_Pack(2, k, v) : NULL;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (!pair || PyList_Append(list, pair)) {
                Py_XDECREF(pair);
                *pyerr = 1;
                return "header";
            }
            Py_DECREF(pair);
        }
    }
    return NULL;
}

typedef struct {
    Py_buffer view;
    int held;
    long long base, bts, mts, count;
    int32_t ttype;
} Batch;

/* The scan runs without the interpreter lock (the event loop's thread goes on meanwhile); it
 * takes the lock back only for a kept record that has headers (Python objects). */
static PyObject *columns(PyObject *self, PyObject *args) {
    PyObject *payloads, *bases, *base_ts, *max_ts, *ts_types, *counts;
    long long start, end;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!LL", &PyList_Type, &payloads, &PyList_Type, &bases,
                          &PyList_Type, &base_ts, &PyList_Type, &max_ts, &PyList_Type, &ts_types,
                          &PyList_Type, &counts, &start, &end))
        return NULL;
    Py_ssize_t batches = PyList_GET_SIZE(payloads);
    if (PyList_GET_SIZE(bases) != batches || PyList_GET_SIZE(base_ts) != batches ||
        PyList_GET_SIZE(max_ts) != batches || PyList_GET_SIZE(ts_types) != batches ||
        PyList_GET_SIZE(counts) != batches) {
        PyErr_SetString(PyExc_ValueError, "the per-batch lists differ in length");
        return NULL;
    }
    Buf offs = {0}, tss = {0}, types = {0}, koffs = {0}, kvalid = {0}, kdata = {0};
    Buf voffs = {0}, vvalid = {0}, vdata = {0};
    PyObject *headers = PyDict_New(), *result = NULL;
    Batch *bs = PyMem_Calloc(batches ? batches : 1, sizeof(Batch));
    Py_ssize_t n = 0;
    int32_t zero = 0;
    if (!headers || !bs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < batches; i++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(payloads, i), &bs[i].view, PyBUF_SIMPLE))
            goto done;
        bs[i].held = 1;
        bs[i].base = PyLong_AsLongLong(PyList_GET_ITEM(bases, i));
        bs[i].bts = PyLong_AsLongLong(PyList_GET_ITEM(base_ts, i));
        bs[i].mts = PyLong_AsLongLong(PyList_GET_ITEM(max_ts, i));
        bs[i].ttype = (int32_t)PyLong_AsLong(PyList_GET_ITEM(ts_types, i));
        bs[i].count = PyLong_AsLongLong(PyList_GET_ITEM(counts, i));
        if (PyErr_Occurred()) goto done;
    }
    const char *bad = NULL;
    long long bad_base = 0;
    int nomem = buf_put(&koffs, &zero, 4) || buf_put(&voffs, &zero, 4), pyerr = 0, big = 0;
    PyThreadState *unlocked = PyEval_SaveThread();
    for (Py_ssize_t i = 0; i < batches && !nomem; i++) {
        const uint8_t *p = bs[i].view.buf;
        Py_ssize_t pos = 0, len = bs[i].view.len;
        long long base = bs[i].base, count = bs[i].count;
        int32_t ttype = bs[i].ttype;
        for (long long r = 0; r < count; r++) {
            int64_t length, ts_delta, off_delta, klen, vlen, nh;
            if (varint(p, &pos, len, 5, &length) || length < 0 || pos + length > len) {
                bad = "record length runs past the batch";
                break;
            }
            Py_ssize_t rec_end = pos + length;
            pos += 1; /* attributes */
            if (pos > rec_end || varint(p, &pos, rec_end, 10, &ts_delta) ||
                varint(p, &pos, rec_end, 5, &off_delta) || varint(p, &pos, rec_end, 5, &klen) ||
                (klen > 0 && pos + klen > rec_end)) {
                bad = "record framing";
                break;
            }
            Py_ssize_t kpos = pos;
            if (klen > 0) pos += klen;
            if (varint(p, &pos, rec_end, 5, &vlen) || (vlen > 0 && pos + vlen > rec_end)) {
                bad = "record framing";
                break;
            }
            Py_ssize_t vpos = pos;
            if (vlen > 0) pos += vlen;
            if (varint(p, &pos, rec_end, 5, &nh) || nh < 0 || nh > rec_end - pos) {
                bad = "header count";
                break;
            }
            long long offset = base + off_delta;
            int keep = offset >= start && offset < end;
            PyObject *list = NULL;
            if (nh > 0 && keep) {
                PyEval_RestoreThread(unlocked);
                list = PyList_New(0);
                if (!list) pyerr = 1;
                else bad = headers_of(p, &pos, rec_end, nh, list, &pyerr);
                if (bad || pyerr) Py_CLEAR(list);
                unlocked = PyEval_SaveThread();
                if (bad || pyerr) break;
            } else if ((bad = headers_of(p, &pos, rec_end, nh, NULL, &pyerr))) {
                break;
            }
            if (pos != rec_end) bad = "record length does not match its contents";
            if (bad || !keep) {
                if (list) {
                    PyEval_RestoreThread(unlocked);
                    Py_DECREF(list);
                    unlocked = PyEval_SaveThread();
                }
                if (bad) break;
                continue;
            }
            int64_t ts = ttype == 1 ? bs[i].mts : bs[i].bts + ts_delta;
            int32_t ko = (int32_t)(kdata.len + (klen > 0 ? klen : 0));
            int32_t vo = (int32_t)(vdata.len + (vlen > 0 ? vlen : 0));
            uint8_t kv = klen >= 0, vv = vlen >= 0;
            int64_t off64 = offset;
            nomem = buf_put(&offs, &off64, 8) || buf_put(&tss, &ts, 8) ||
                    buf_put(&types, &ttype, 4) ||
                    buf_put(&kdata, p + kpos, klen > 0 ? klen : 0) || buf_put(&koffs, &ko, 4) ||
                    buf_put(&kvalid, &kv, 1) ||
                    buf_put(&vdata, p + vpos, vlen > 0 ? vlen : 0) || buf_put(&voffs, &vo, 4) ||
                    buf_put(&vvalid, &vv, 1);
            if (list) {
                PyEval_RestoreThread(unlocked);
                PyObject *row = nomem ? NULL : PyLong_FromSsize_t(n);
                if (!nomem && (!row || PyDict_SetItem(headers, row, list))) pyerr = 1;
                Py_XDECREF(row);
                Py_DECREF(list);
                unlocked = PyEval_SaveThread();
            }
            if (nomem || pyerr) break;
            n++;
        }
        if (!bad && !nomem && !pyerr && pos != len) bad = "bytes left after the last record";
        if (bad) bad_base = base;
        if (bad || pyerr) break;
        if (kdata.len > INT32_MAX || vdata.len > INT32_MAX) {
            big = 1;
            break;
        }
    }
    PyEval_RestoreThread(unlocked);
    if (pyerr) goto done;
    if (nomem) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad) {
        PyErr_Format(PyExc_ValueError, "batch at offset %lld: %s", bad_base, bad);
        goto done;
    }
    if (big) {
        PyErr_SetString(PyExc_ValueError, "more than 2 GiB of keys or values");
        goto done;
    }
    result = Py_BuildValue("(nNNNNNNNNNO)", n, bytes_of(&offs), bytes_of(&tss), bytes_of(&types),
                           bytes_of(&koffs), bytes_of(&kvalid), bytes_of(&kdata),
                           bytes_of(&voffs), bytes_of(&vvalid), bytes_of(&vdata), headers);
done:
    if (bs) {
        for (Py_ssize_t i = 0; i < batches; i++)
            if (bs[i].held) PyBuffer_Release(&bs[i].view);
        PyMem_Free(bs);
    }
    PyMem_RawFree(offs.data);
    PyMem_RawFree(tss.data);
    PyMem_RawFree(types.data);
    PyMem_RawFree(koffs.data);
    PyMem_RawFree(kvalid.data);
    PyMem_RawFree(kdata.data);
    PyMem_RawFree(voffs.data);
    PyMem_RawFree(vvalid.data);
    PyMem_RawFree(vdata.data);
    Py_XDECREF(headers);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS,
     "columns(payloads, bases, base_timestamps, max_timestamps, timestamp_types, counts, start, "
     "end) -> (n, offsets, timestamps, timestamp_types, key_offsets, key_valid, key_data, "
     "value_offsets, value_valid, value_data, headers)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "headrace._record_columns",
                                    "The records of v2 batches into columns, in C.", -1, methods};

PyMODINIT_FUNC PyInit__record_columns(void) { return PyModule_Create(&module); }
