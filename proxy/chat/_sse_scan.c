/* One pass over a read of upstream SSE bytes for the stream sanitizer's hot path.
 *
 * Hand-written in C because it is the measured hot path: the same checks as
 * proxy/chat/sse_scan.py's pure-Python `scan_py`, which CPython makes as five to eight
 * separate byte scans costing about 40 us per 16 KiB read on the benchmark machine (100 us
 * when usage and markup are looked for too), most of the proxy's per-chunk CPU on a stream.
 * Here they are memchr walks (see underscore_keys): under callgrind, 1.2 instructions per
 * byte of the benchmark's events, 2.6 with usage and markup looked for. The Python
 * version stays the reference: the tests check both give the same answer on any input, and
 * it runs wherever this module could not be compiled.
 *
 * scan(data: bytes, want: int) -> int, flags as below (the same values and the same rules as
 * sse_scan.py): 0 unless PLAIN; then PLAIN with at most one of TOOL_CALLS and LIVE_FINISH
 * (checked in that order, the first found ends the scan), else PLAIN plus USAGE, MARKUP and
 * CONTENT, each looked for only when `want` asks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define PLAIN 1        /* whole one-line `data: {` events, no CR */
#define TOOL_CALLS 2   /* `tool_calls` occurs */
#define LIVE_FINISH 4  /* a `"finish_reason"` not followed by `:null` */
#define USAGE 8        /* `"usage"` occurs */
#define MARKUP 16      /* `<`, `[T`, `["` or `\u003c` occurs */
#define CONTENT 32     /* a `"content"` key holds a non-empty string */

static int
is_plain(const char *data, Py_ssize_t size)
{
    /* data: {...}\n\n data: {...}\n\n ... : every newline is in a blank-line separator
     * that is followed by the end or by the next `data: {`. */
    static const char START[] = "data: {";
    const Py_ssize_t start_len = sizeof(START) - 1;
    const char *end = data + size;
    const char *line = data;

    if (size < start_len + 2 || data[size - 1] != '\n' || data[size - 2] != '\n') {
        return 0;
    }
    if (memchr(data, '\r', (size_t)size) != NULL) {
        return 0;
    }
    for (;;) {
        const char *newline;
        if (end - line < start_len || memcmp(line, START, (size_t)start_len) != 0) {
            return 0;
        }
        newline = memchr(line + start_len, '\n', (size_t)(end - line - start_len));
        if (newline == NULL || newline + 1 >= end || newline[1] != '\n') {
            return 0;
        }
        line = newline + 2;
        if (line == end) {
            return 1;
        }
    }
}

/* The keys below are found by a memchr for one byte every occurrence must hold at a known
 * offset, then a compare around each hit. glibc's memchr reads 16 or 32 bytes per step while
 * memmem costs several instructions per byte, and these bytes are few in a chunk: `_` is in
 * `tool_calls` and `"finish_reason"` (and in `system_fingerprint`), `g` in `"usage"` (and in
 * `logprobs` and `system_fingerprint`: two hits an OpenAI-shaped event, each a memchr
 * restarted, about 35 instructions; `u` has three, in `chunk` and in each `null`). Counted
 * under callgrind on the benchmark's events: about 4 instructions per byte with memmem, 9
 * with usage and markup looked for; see bench.inprocess. */
static int
at_offset(const char *data, const char *end, const char *hit, Py_ssize_t offset,
          const char *needle, Py_ssize_t length)
{
    const char *first = hit - offset;
    return first >= data && end - first >= length && memcmp(first, needle, (size_t)length) == 0;
}

static long
underscore_key_at(const char *data, const char *end, const char *at)
{
    /* What the `_` at `at` belongs to: TOOL_CALLS (`tool_calls`), LIVE_FINISH (a
     * `"finish_reason"` not followed by `:null`) or 0. The byte after `_` tells the keys
     * apart before any compare (most hits are `system_fingerprint`'s and the fingerprint's
     * own). */
    static const char TOOL[] = "tool_calls";
    static const char FINISH[] = "\"finish_reason\"";
    const Py_ssize_t tool_len = sizeof(TOOL) - 1, finish_len = sizeof(FINISH) - 1;
    const char next = at + 1 < end ? at[1] : '\0';

    if (next == 'c' && at_offset(data, end, at, 4, TOOL, tool_len)) {
        return TOOL_CALLS;
    }
    if (next == 'r' && at_offset(data, end, at, 7, FINISH, finish_len)) {
        const char *after = at - 7 + finish_len;
        if (end - after < 5 || memcmp(after, ":null", 5) != 0) {
            return LIVE_FINISH;
        }
    }
    return 0;
}

static long
underscore_keys(const char *data, Py_ssize_t size)
{
    /* TOOL_CALLS if `tool_calls` occurs, else LIVE_FINISH if some `"finish_reason"` is not
     * followed by `:null`, else 0: any occurrence counts, as in scan_py's regex (one that a
     * left-to-right walk would skip overlaps one followed by `finish`, which is live). */
    const char *end = data + size;
    const char *at = data;
    long found = 0;

    while ((at = memchr(at, '_', (size_t)(end - at))) != NULL) {
        const long key = underscore_key_at(data, end, at);
        if (key == TOOL_CALLS) {
            return TOOL_CALLS;
        }
        found |= key; /* a tool call further on still takes precedence */
        at++;
    }
    return found;
}

/* The first_* walks below answer where the first hit of their key lies: a byte of it before
 * `limit` (searched from `data`; the key itself may reach up to `end`), or NULL. run_end
 * asks them in turn, each up to the earliest hit found so far. */

static const char *
first_underscore_key(const char *data, const char *limit, const char *end)
{
    const char *at = data;

    while ((at = memchr(at, '_', (size_t)(limit - at))) != NULL) {
        if (underscore_key_at(data, end, at) != 0) {
            return at;
        }
        at++;
    }
    return NULL;
}

static const char *
first_usage(const char *data, const char *limit, const char *end)
{
    static const char KEY[] = "\"usage\"";
    const char *at = data;

    while ((at = memchr(at, 'g', (size_t)(limit - at))) != NULL) {
        if (at > data && at[-1] == 'a' && at_offset(data, end, at, 4, KEY, sizeof(KEY) - 1)) {
            return at;
        }
        at++;
    }
    return NULL;
}

static int
has_usage(const char *data, Py_ssize_t size)
{
    return first_usage(data, data + size, data + size) != NULL;
}

static const char *
first_markup(const char *data, const char *limit, const char *end)
{
    /* The three walks in turn, each up to the earliest hit before it. */
    const char *at = data;
    const char *found = memchr(data, '<', (size_t)(limit - data));

    if (found != NULL) {
        limit = found;
    }
    while ((at = memchr(at, '[', (size_t)(limit - at))) != NULL) {
        at++;
        if (at < end && (*at == 'T' || *at == '"')) {
            found = at - 1;
            limit = found;
            break;
        }
    }
    at = data;
    while ((at = memchr(at, '\\', (size_t)(limit - at))) != NULL) {
        if (end - at >= 6 && memcmp(at, "\\u003c", 6) == 0) {
            return at;
        }
        at++;
    }
    return found;
}

static int
has_markup(const char *data, Py_ssize_t size)
{
    return first_markup(data, data + size, data + size) != NULL;
}

static const char *
skip_json_space(const char *at, const char *end)
{
    while (at < end && (*at == ' ' || *at == '\t' || *at == '\r' || *at == '\n')) {
        at++;
    }
    return at;
}

static const char *
first_content(const char *data, const char *limit, const char *end)
{
    /* `"content"`, JSON whitespace, `:`, JSON whitespace, `"`, then anything but `"`. */
    static const char KEY[] = "\"content\"";
    const size_t key_len = sizeof(KEY) - 1;
    /* A key that starts before `limit` ends before `stop`. */
    const char *stop = (size_t)(end - limit) >= key_len - 1 ? limit + key_len - 1 : end;
    const char *found = data;

    while ((found = memmem(found, (size_t)(stop - found), KEY, key_len)) != NULL) {
        const char *at = skip_json_space(found + key_len, end);
        if (at < end && *at == ':') {
            at = skip_json_space(at + 1, end);
            if (at + 1 < end && at[0] == '"' && at[1] != '"') {
                return found;
            }
        }
        found++; /* the closing quote may open the next occurrence */
    }
    return NULL;
}

static int
has_content(const char *data, Py_ssize_t size)
{
    return first_content(data, data + size, data + size) != NULL;
}

static int
bytes_and_int(PyObject *const *args, Py_ssize_t nargs, const char *usage, const char **data,
              Py_ssize_t *size, Py_ssize_t *value)
{
    /* The arguments scan() and event_at() take: bytes, then an int. 0 with an error set when
     * they are not (`usage` is the TypeError's message). */
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    *value = PyLong_AsSsize_t(args[1]);
    if (*value == -1 && PyErr_Occurred()) {
        return 0;
    }
    *data = PyBytes_AS_STRING(args[0]);
    *size = PyBytes_GET_SIZE(args[0]);
    return 1;
}

static PyObject *
scan(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    const char *data;
    Py_ssize_t size, want_arg;
    long want, flags = PLAIN;

    if (!bytes_and_int(args, nargs, "scan() takes bytes and an int", &data, &size, &want_arg)) {
        return NULL;
    }
    want = (long)want_arg;
    if (!is_plain(data, size)) {
        return PyLong_FromLong(0);
    }
    flags = underscore_keys(data, size);
    if (flags != 0) {
        return PyLong_FromLong(PLAIN | flags);
    }
    flags = PLAIN;
    if ((want & USAGE) && has_usage(data, size)) {
        flags |= USAGE;
    }
    if ((want & MARKUP) && has_markup(data, size)) {
        flags |= MARKUP;
    }
    if ((want & CONTENT) && has_content(data, size)) {
        flags |= CONTENT;
    }
    return PyLong_FromLong(flags);
}

/* Does one whole event (`data: {...}\n\n`, already known to be one line), or a run of them,
 * pass the rule? */
static int
event_passes(const char *data, Py_ssize_t size, long want)
{
    if (memchr(data, '\r', (size_t)size) != NULL || underscore_keys(data, size) != 0) {
        return 0;
    }
    return !((want & USAGE) && has_usage(data, size)) &&
           !((want & MARKUP) && has_markup(data, size)) &&
           !((want & CONTENT) && has_content(data, size));
}

static const char *
event_end(const char *at, const char *end)
{
    /* The end of the whole one-line `data: {` event at `at`, or NULL when none starts there. */
    static const char START[] = "data: {";
    const Py_ssize_t start_len = sizeof(START) - 1;
    const char *newline;

    if (end - at < start_len + 2 || memcmp(at, START, (size_t)start_len) != 0) {
        return NULL;
    }
    newline = memchr(at + start_len, '\n', (size_t)(end - at - start_len));
    if (newline == NULL || newline + 1 >= end || newline[1] != '\n') {
        return NULL;
    }
    return newline + 2;
}

static const char *
first_refusal(const char *data, const char *end, long want)
{
    /* The first byte of a key that refuses its event, in the whole events [data, end), or
     * NULL: the earliest of each key's first hit. Each walk stops at its first hit and looks
     * only before the earliest hit so far (an event refused earlier holds every byte of its
     * key before that hit), so a run refused near its end is walked about once per key. */
    const char *limit = end, *hit;

    if ((hit = memchr(data, '\r', (size_t)(end - data))) != NULL) {
        limit = hit;
    }
    if ((hit = first_underscore_key(data, limit, end)) != NULL) {
        limit = hit;
    }
    if ((want & USAGE) && (hit = first_usage(data, limit, end)) != NULL) {
        limit = hit;
    }
    if ((want & MARKUP) && (hit = first_markup(data, limit, end)) != NULL) {
        limit = hit;
    }
    if ((want & CONTENT) && (hit = first_content(data, limit, end)) != NULL) {
        limit = hit;
    }
    return limit == end ? NULL : limit;
}

static const char *
line_start(const char *data, const char *at)
{
    /* The start of the line that holds `at` (an event's, as events are one line each). */
#ifdef __GLIBC__
    const char *newline = memrchr(data, '\n', (size_t)(at - data));
    return newline != NULL ? newline + 1 : data;
#else
    while (at > data && at[-1] != '\n') {
        at--;
    }
    return at;
#endif
}

static PyObject *
run_end(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    /* Where the run of whole events from `pos` whose every event scan() would answer PLAIN
     * alone ends: `pos` when the first does not. The rule holds for a run exactly when it
     * holds for each of its events (no key the scan looks for can span an event boundary,
     * which holds a newline), so the events after the first are asked together: the run
     * ends at the event that holds the first key refusing it (`first_refusal`, about one
     * walk per key). Asked event by event (the first version), a read of the benchmark's
     * events with usage and markup looked for cost about 1.4K instructions an event, some
     * 100K a read; asked together, then event by event when refused (the second), a read
     * that ends in a tool call was walked three times. The first event is asked alone
     * first: a run refused there (a round's first content) is not walked whole. */
    const char *data, *end, *at, *next, *framed, *refusal;
    Py_ssize_t size, pos;
    long want;

    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) ||
        !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "run_end() takes bytes, an int and an int");
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    want = PyLong_AsLong(args[2]);
    if ((pos == -1 || want == -1) && PyErr_Occurred()) {
        return NULL;
    }
    data = PyBytes_AS_STRING(args[0]);
    size = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || pos > size) {
        PyErr_SetString(PyExc_ValueError, "run_end() position out of range");
        return NULL;
    }
    end = data + size;
    at = data + pos;
    next = event_end(at, end);
    if (next == NULL || !event_passes(at, next - at, want)) {
        return PyLong_FromSsize_t(pos);
    }
    framed = next; /* the run's end by framing alone */
    while ((at = event_end(framed, end)) != NULL) {
        framed = at;
    }
    refusal = first_refusal(next, framed, want);
    if (refusal == NULL) {
        return PyLong_FromSsize_t(framed - data);
    }
    return PyLong_FromSsize_t(line_start(next, refusal) - data);
}

static PyObject *
event_at(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    /* The end of the event at `pos` (just past the first blank line `\n\n` from `pos`),
     * positive when that event is one whole `data: {...}` line with no CR (the hot path's
     * shape: its data is `data[pos + 6:end - 2]`), negative for any other event; -len(data)
     * when no blank line follows. The stream's loop over a refused read asks this once per
     * event: as bytes.find, bytes.startswith and the one-line check from compiled code
     * (each a method call that parses its arguments into a tuple, bytes.find about 2.5K
     * instructions under callgrind) it cost about 6K an event. */
    static const char START[] = "data: {";
    const Py_ssize_t start_len = sizeof(START) - 1;
    const char *data, *at, *end, *first, *blank;
    Py_ssize_t size, pos, stop;

    if (!bytes_and_int(args, nargs, "event_at() takes bytes and an int", &data, &size, &pos)) {
        return NULL;
    }
    if (pos < 0 || pos >= size) {
        PyErr_SetString(PyExc_ValueError, "event_at() position out of range");
        return NULL;
    }
    at = data + pos;
    end = data + size;
    first = memchr(at, '\n', (size_t)(end - at));
    blank = first;
    while (blank != NULL && (blank + 1 >= end || blank[1] != '\n')) {
        blank = blank + 1 < end ? memchr(blank + 1, '\n', (size_t)(end - blank - 1)) : NULL;
    }
    if (blank == NULL) {
        return PyLong_FromSsize_t(-size);
    }
    stop = blank + 2 - data;
    if (blank == first && blank - at >= start_len && memcmp(at, START, (size_t)start_len) == 0 &&
        memchr(at, '\r', (size_t)(blank - at)) == NULL) {
        return PyLong_FromSsize_t(stop);
    }
    return PyLong_FromSsize_t(-stop);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, "Flags describing a read of SSE bytes (see proxy.chat.sse_scan)."},
    {"run_end", (PyCFunction)(void (*)(void))run_end, METH_FASTCALL, "Where the run of events the rule forwards ends (see proxy.chat.sse_scan)."},
    {"event_at", (PyCFunction)(void (*)(void))event_at, METH_FASTCALL, "Where the event at a position ends, and whether it is one data line (see proxy.chat.sse_scan)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sse_scan", NULL, 0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__sse_scan(void)
{
    return PyModule_Create(&module);
}
