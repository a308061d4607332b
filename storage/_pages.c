/* headrace.storage._pages: whether reading a memory mapping would wait for the disk.
 *
 * resident(buffer) -> bool
 *   mincore() over the pages that buffer (a memory mapping, or any buffer) spans: True when
 *   every one of them is in memory, so that touching any byte of it causes no disk read;
 *   False when one is not, or when the kernel cannot tell. Holds the interpreter lock (one
 *   system call per 4096 pages).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define VEC_PAGES 4096

static PyObject *resident(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int all = 1;
    if (view.len > 0) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t start = (uintptr_t)view.buf & ~(page - 1);
        uintptr_t end = (uintptr_t)view.buf + (uintptr_t)view.len;
        unsigned char vec[VEC_PAGES];
        while (all && start < end) {
            uintptr_t chunk = end - start;
            if (chunk > VEC_PAGES * page)
                chunk = VEC_PAGES * page;
            if (mincore((void *)start, (size_t)chunk, vec) != 0) {
                all = 0;
                break;
            }
            for (uintptr_t i = 0; i < (chunk + page - 1) / page; i++) {
                if (!(vec[i] & 1)) {
                    all = 0;
                    break;
                }
            }
            start += chunk;
        }
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(all);
}

static PyMethodDef methods[] = {
    {"resident", resident, METH_O,
     "resident(buffer) -> bool: whether every page the buffer spans is in memory."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "headrace.storage._pages",
    "Whether reading a memory mapping would wait for the disk.", -1, methods,
};

PyMODINIT_FUNC PyInit__pages(void) { return PyModule_Create(&module); }
