/* A chunked transfer-coding decoder for the upstream transport's response bodies.
 *
 * Hand-written in C because it is the measured hot path of a stream: httptools calls back
 * into Python three times per HTTP chunk (chunk header, body, chunk complete), and a model's
 * stream is one small chunk per event, so a 200-event burst cost the transport about 100K
 * instructions in callbacks and another 80K gathering the pieces into reads (callgrind,
 * `python -m bench.inprocess --stream --floor`). Here one call takes a whole socket read and
 * returns its body bytes already gathered. httptools still parses every response head;
 * where this module could not be compiled, it parses the bodies too (proxy/upstream/transport.py).
 *
 * Dechunker(limit).feed(data) -> list[bytes]: the body bytes `data` carries, as reads: each
 * read is the data of consecutive chunks, cut after the first chunk that brings it to
 * `limit` bytes or more (a chunk split across feeds is cut where the feed ends). `done` is
 * true once the last chunk and the trailer section ended; `excess` counts the bytes that
 * came after that. ValueError on anything RFC 9112 section 7.1 does not allow (a size line
 * without hex digits or over 16 of them, a missing CRLF after a chunk's data, a bare LF).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum state {
    SIZE,       /* hex digits of a chunk size */
    EXTENSION,  /* `;...` after the size, up to CR */
    SIZE_LF,    /* the LF of the size line */
    DATA,       /* `remaining` bytes of chunk data */
    DATA_CR,    /* the CRLF after a chunk's data */
    DATA_LF,
    TRAILER,    /* trailer lines after the last chunk, up to an empty line */
    TRAILER_LF,
    DONE,
};

typedef struct {
    PyObject_HEAD
    enum state state;
    uint64_t size;       /* the size being read (SIZE), or left to read (DATA) */
    int digits;          /* hex digits read of the current size */
    Py_ssize_t line;     /* bytes in the current trailer line */
    Py_ssize_t limit;
    Py_ssize_t excess;
} Dechunker;

static int
hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

static int
fail(const char *message)
{
    PyErr_SetString(PyExc_ValueError, message);
    return -1;
}

/* The reads a feed produces. Each is written in place into a bytes object sized for the
 * rest of the feed and shrunk when it ends (no second copy: under callgrind a large copy
 * counts an instruction per byte, and this saved one of the body's three). */
typedef struct {
    PyObject *read;     /* the read being filled, or NULL */
    Py_ssize_t used;    /* bytes of it filled */
    PyObject *reads;
    Py_ssize_t limit;
} Gather;

static int
emit(Gather *g)
{
    PyObject *read = g->read;
    if (read == NULL) {
        return 0;
    }
    g->read = NULL;
    if (g->used == 0) {
        Py_DECREF(read);
        return 0;
    }
    if (_PyBytes_Resize(&read, g->used) < 0) {
        return -1;
    }
    g->used = 0;
    if (PyList_Append(g->reads, read) < 0) {
        Py_DECREF(read);
        return -1;
    }
    Py_DECREF(read);
    return 0;
}

/* Room for `size` more bytes: a new read as large as what is left of the feed if none. */
static char *
room(Gather *g, Py_ssize_t left)
{
    if (g->read == NULL) {
        g->read = PyBytes_FromStringAndSize(NULL, left);
        if (g->read == NULL) {
            return NULL;
        }
        g->used = 0;
    }
    return PyBytes_AS_STRING(g->read) + g->used;
}

/* A size line's byte; returns how many bytes were used (always 1), or -1. */
static int
size_byte(Dechunker *self, char c)
{
    int value;
    switch (self->state) {
    case SIZE:
        value = hex_value(c);
        if (value >= 0) {
            if (self->digits == 16) {
                return fail("chunk size too large");
            }
            self->size = (self->size << 4) | (uint64_t)value;
            self->digits++;
            return 1;
        }
        if (self->digits == 0) {
            return fail("invalid chunk size");
        }
        if (c == ';') {
            self->state = EXTENSION;
        }
        else if (c == '\r') {
            self->state = SIZE_LF;
        }
        else {
            return fail("invalid chunk size line");
        }
        return 1;
    case EXTENSION:
        if (c == '\r') {
            self->state = SIZE_LF;
        }
        else if (c == '\n') {
            return fail("bare LF in a chunk size line");
        }
        return 1;
    default: /* SIZE_LF */
        if (c != '\n') {
            return fail("expected LF after a chunk size");
        }
        if (self->size == 0) {
            self->state = TRAILER;
            self->line = 0;
        }
        else {
            self->state = DATA;
        }
        return 1;
    }
}

/* A trailer section's byte (after the last chunk): lines up to an empty one. */
static int
trailer_byte(Dechunker *self, char c)
{
    if (self->state == TRAILER) {
        if (c == '\r') {
            self->state = TRAILER_LF;
        }
        else if (c == '\n') {
            return fail("bare LF in the trailer section");
        }
        else {
            self->line++;
        }
        return 1;
    }
    if (c != '\n') { /* TRAILER_LF */
        return fail("expected LF in the trailer section");
    }
    self->state = self->line == 0 ? DONE : TRAILER;
    self->line = 0;
    return 1;
}

static int
run(Dechunker *self, const char *data, Py_ssize_t size, Gather *g)
{
    Py_ssize_t at = 0;
    while (at < size) {
        const char c = data[at];
        switch (self->state) {
        case DATA: {
            Py_ssize_t take = size - at;
            char *out = room(g, size - at); /* the body left is at most the feed left */
            if (out == NULL) {
                return -1;
            }
            if ((uint64_t)take > self->size) {
                take = (Py_ssize_t)self->size;
            }
            memcpy(out, data + at, (size_t)take);
            g->used += take;
            at += take;
            self->size -= (uint64_t)take;
            if (self->size == 0) {
                self->state = DATA_CR;
                if (g->used >= g->limit && emit(g) < 0) {
                    return -1;
                }
            }
            break;
        }
        case DATA_CR:
            if (c != '\r') {
                return fail("expected CRLF after chunk data");
            }
            self->state = DATA_LF;
            at++;
            break;
        case DATA_LF:
            if (c != '\n') {
                return fail("expected CRLF after chunk data");
            }
            self->state = SIZE;
            self->size = 0;
            self->digits = 0;
            at++;
            break;
        case TRAILER:
        case TRAILER_LF:
            if (trailer_byte(self, c) < 0) {
                return -1;
            }
            at++;
            break;
        case DONE:
            self->excess += size - at;
            return 0;
        default:
            if (size_byte(self, c) < 0) {
                return -1;
            }
            at++;
        }
    }
    return 0;
}

static PyObject *
Dechunker_feed(Dechunker *self, PyObject *arg)
{
    Gather g;
    Py_buffer view;
    int failed;

    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    g.reads = PyList_New(0);
    if (g.reads == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    g.read = NULL;
    g.used = 0;
    g.limit = self->limit;
    failed = run(self, (const char *)view.buf, view.len, &g) < 0 || emit(&g) < 0;
    Py_XDECREF(g.read);
    PyBuffer_Release(&view);
    if (failed) {
        Py_DECREF(g.reads);
        return NULL;
    }
    return g.reads;
}

static int
Dechunker_init(Dechunker *self, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"limit", NULL};
    Py_ssize_t limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", keywords, &limit)) {
        return -1;
    }
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "limit must be positive");
        return -1;
    }
    self->state = SIZE;
    self->size = 0;
    self->digits = 0;
    self->line = 0;
    self->limit = limit;
    self->excess = 0;
    return 0;
}

static PyObject *
Dechunker_done(Dechunker *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->state == DONE);
}

static PyObject *
Dechunker_excess(Dechunker *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->excess);
}

static PyMethodDef Dechunker_methods[] = {
    {"feed", (PyCFunction)Dechunker_feed, METH_O, "The body bytes of a read, gathered."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Dechunker_getset[] = {
    {"done", (getter)Dechunker_done, NULL, "The last chunk and the trailers ended.", NULL},
    {"excess", (getter)Dechunker_excess, NULL, "Bytes fed after the end.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DechunkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proxy.upstream._chunked.Dechunker",
    .tp_basicsize = sizeof(Dechunker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A chunked transfer-coding decoder (see proxy/upstream/_chunked.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Dechunker_init,
    .tp_methods = Dechunker_methods,
    .tp_getset = Dechunker_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chunked", NULL, 0, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__chunked(void)
{
    PyObject *m;
    if (PyType_Ready(&DechunkerType) < 0) {
        return NULL;
    }
    m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&DechunkerType);
    if (PyModule_AddObject(m, "Dechunker", (PyObject *)&DechunkerType) < 0) {
        Py_DECREF(&DechunkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
