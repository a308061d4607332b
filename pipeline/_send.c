/* headrace.pipeline._send: the common case of a send step's file chunk (writer.py), in C,
 * so that a chunk sent over many fillings of the socket's buffer takes the interpreter
 * lock once instead of twice per filling.
 *
 * send_file(sock_fd, file_fd, position, count, timeout_ms) -> sent
 *   sendfile() from the file at position to the non-blocking socket; when the socket's
 *   buffer is full, waits (poll) for room and goes on, for timeout_ms at the most. Returns
 *   the bytes sent: count, or fewer when the time ran out or sendfile did anything but send
 *   or find the socket full (an error, the end of the file): the caller's Python path sends
 *   the rest and tells those apart. Never raises for them; runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <time.h>

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long send_loop(int sock, int file, long long position, long long count,
                           long long timeout_ms) {
    long long sent = 0, deadline = now_ms() + timeout_ms;
    struct pollfd pfd = {.fd = sock, .events = POLLOUT};
    while (sent < count) {
        off_t offset = (off_t)(position + sent);
        ssize_t n = sendfile(sock, file, &offset, (size_t)(count - sent));
        if (n > 0) {
            sent += n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            break; /* the end of the file, or an error: the caller's to tell */
        if (errno == EINTR)
            continue;
        long long left = deadline - now_ms();
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            break;
    }
    return sent;
}

static PyObject *send_file(PyObject *self, PyObject *args) {
    int sock, file;
    long long position, count, timeout_ms, sent;
    if (!PyArg_ParseTuple(args, "iiLLL", &sock, &file, &position, &count, &timeout_ms))
        return NULL;
    if (position < 0 || count < 0) {
        PyErr_SetString(PyExc_ValueError, "position and count must not be negative");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    sent = send_loop(sock, file, position, count, timeout_ms);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(sent);
}

static PyMethodDef methods[] = {
    {"send_file", send_file, METH_VARARGS,
     "send_file(sock_fd, file_fd, position, count, timeout_ms) -> bytes sent"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "headrace.pipeline._send",
                                    "A send step's file chunk, sent without the GIL.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__send(void) { return PyModule_Create(&module); }
