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
 * CONTENT, each looked for only when `want` asks. PLAIN includes that each event's data is one
 * JSON object, proven without a parse (SPEC §4; see `json_object` and `like_proven`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
/* SSE2 (every x86-64) for the sixteen-byte steps of the JSON proof; elsewhere their
 * byte-by-byte loops serve (-DSSE_SCAN_NO_SSE2 builds those on x86-64 too, to test them). */
#if defined(__SSE2__) && !defined(SSE_SCAN_NO_SSE2)
#define USE_SSE2 1
#include <emmintrin.h>
#endif

#define PLAIN 1        /* whole one-line `data: {` events of one JSON object each, no CR */
#define TOOL_CALLS 2   /* `tool_calls` occurs */
#define LIVE_FINISH 4  /* a `"finish_reason"` not followed by `:null` */
#define USAGE 8        /* `"usage"` occurs */
#define MARKUP 16      /* `<`, `[T`, `["` or `\u003c` occurs */
#define CONTENT 32     /* a `"content"` key holds a non-empty string */

/* Is an event's data one JSON object? The hot path forwards events unparsed, and SPEC §4 turns
 * a data line that is not JSON into a comment: an event the general path's parser (orjson)
 * would refuse must never leave as it came. Starting with `{` proves nothing (`{not json`, a
 * truncated `{"id":1,`, `{"a":1}}`), so each event's data is proven one JSON object by the
 * validator below (`json_object`), which accepts exactly what orjson.loads accepts as an
 * object (sse_scan.py's `json_line_py` asks orjson itself; the tests hold the two to each other
 * and to orjson): RFC 8259's grammar, strings of valid UTF-8 with no control character and no
 * lone surrogate escape, numbers finite as a double, at most 1,024 levels of nesting, spaces,
 * tabs and CRs around tokens.
 *
 * Walked whole, an OpenAI-shaped event costs about 1.4K instructions (callgrind): more than
 * the rest of the scan of its read. A stream's events are alike, though: the last one proven
 * whole is kept with where its strings are (`Proven`, `kept`), and each next one is compared
 * with it; where they differ inside one of its strings, only the new event's string is walked
 * (`like_proven`): about 75 to 110 instructions an event, memchr's walk for the line's end
 * included. An event that is the proven one with other strings in their places is JSON as
 * surely as the proven one; one that differs otherwise is walked whole and kept instead.
 *
 * Every walk stops at a byte that no token can hold at that place, so a byte below 0x20 that
 * is neither a tab nor a CR at `end` (the line's `\n`, or a bytes object's closing NUL) is a
 * sentinel that no loop passes: only the sixteen-byte steps check their bound. */

#define MAX_DEPTH 1024 /* orjson's: 1,024 nested objects and arrays parse, 1,025 do not */
#define MAX_NOTED 128  /* strings of a proven event noted; a difference past them: walked */
#define MAX_HOLES 4    /* strings an event may differ in to be compared at them first */
#define MAX_KEPT 4096  /* the longest proven event kept to compare the next ones with */

/* A proven event: its bytes [data, end) (`data: {...}` and its blank line), where its first
 * `count` strings' quotes are (offsets from `data`, the opening quote at 2i and the closing one
 * at 2i+1), and the strings the last event compared with it differed in (`holes`, in order;
 * `hole_count` of them). */
typedef struct {
    const unsigned char *data;
    const unsigned char *end;
    Py_ssize_t count;
    Py_ssize_t quotes[2 * MAX_NOTED];
    int hole_count;
    Py_ssize_t holes[MAX_HOLES];
} Proven;

/* 1 for the bytes a string's run of plain bytes stops at: `"`, `\`, controls, non-ASCII. */
static unsigned char string_stop[256];

static void
init_string_stop(void)
{
    int c;
    for (c = 0; c < 256; c++) {
        string_stop[c] = (unsigned char)(c < 0x20 || c >= 0x80 || c == '"' || c == '\\');
    }
}

#define IS_DIGIT(c) ((unsigned char)((c) - '0') < 10)
/* JSON's space between tokens, but the LF that ends the line (the sentinel) */
#define IS_SPACE(c) ((c) == ' ' || (c) == '\t' || (c) == '\r')

static const unsigned char *
skip_space(const unsigned char *at)
{
    /* Most tokens follow each other without space: one compare then. */
    if (*at > ' ') {
        return at;
    }
    while (IS_SPACE(*at)) {
        at++;
    }
    return at;
}

static long
hex4(const unsigned char *at)
{
    /* The value of four hex digits, or -1: read one by one, so a sentinel stops it. */
    long value = 0;
    int n;
    for (n = 0; n < 4; n++) {
        const unsigned char c = at[n];
        long digit;
        if (IS_DIGIT(c)) {
            digit = c - '0';
        } else if ((unsigned char)((c | 0x20) - 'a') < 6) {
            digit = (c | 0x20) - 'a' + 10;
        } else {
            return -1;
        }
        value = value * 16 + digit;
    }
    return value;
}

static const unsigned char *
escape_end(const unsigned char *at)
{
    /* Past the escape at `at` (its backslash), or NULL: a surrogate escape must be a high
     * one followed by a low one, as orjson requires. */
    long high, low;
    switch (at[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return at + 2;
    case 'u':
        break;
    default:
        return NULL;
    }
    high = hex4(at + 2);
    if (high < 0xD800 || high > 0xDFFF) {
        return high < 0 ? NULL : at + 6;
    }
    if (high > 0xDBFF || at[6] != '\\' || at[7] != 'u') {
        return NULL;
    }
    low = hex4(at + 8);
    return low >= 0xDC00 && low <= 0xDFFF ? at + 12 : NULL;
}

static const unsigned char *
utf8_end(const unsigned char *at)
{
    /* Past the UTF-8 character whose first byte (>= 0x80) is at `at`, or NULL: no overlong
     * form, no encoded surrogate, nothing past U+10FFFF. */
    const unsigned char c = at[0];
    unsigned char low = 0x80, high = 0xBF;
    if (c < 0xC2 || c > 0xF4) {
        return NULL;
    }
    if (c < 0xE0) {
        return (at[1] & 0xC0) == 0x80 ? at + 2 : NULL;
    }
    if (c == 0xE0 || c == 0xF0) {
        low = c == 0xE0 ? 0xA0 : 0x90;
    } else if (c == 0xED || c == 0xF4) {
        high = c == 0xED ? 0x9F : 0x8F;
    }
    if (at[1] < low || at[1] > high || (at[2] & 0xC0) != 0x80) {
        return NULL;
    }
    if (c < 0xF0) {
        return at + 3;
    }
    return (at[3] & 0xC0) == 0x80 ? at + 4 : NULL;
}

static const unsigned char *
string_end(const unsigned char *at, const unsigned char *end)
{
    /* The closing quote of the string whose text starts at `at`, or NULL. */
    for (;;) {
#ifdef USE_SSE2
        /* Sixteen bytes a step while they lie before `end`: a quote, a backslash, or a byte
         * below 0x20 as a signed byte (the controls, and every byte from 0x80) stops. */
        while (end - at >= 16) {
            const __m128i block = _mm_loadu_si128((const __m128i *)(const void *)at);
            const int mask = _mm_movemask_epi8(_mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(block, _mm_set1_epi8('"')),
                             _mm_cmpeq_epi8(block, _mm_set1_epi8('\\'))),
                _mm_cmplt_epi8(block, _mm_set1_epi8(0x20))));
            if (mask != 0) {
                at += __builtin_ctz((unsigned int)mask);
                goto stopped;
            }
            at += 16;
        }
#else
        (void)end; /* only the sixteen-byte steps need the bound */
#endif
        while (!string_stop[*at]) {
            at++;
        }
#ifdef USE_SSE2
    stopped:
#endif
        if (*at == '"') {
            return at;
        }
        if (*at == '\\') {
            at = escape_end(at);
        } else if (*at >= 0x80) {
            at = utf8_end(at);
        } else {
            return NULL; /* a control character (the sentinel too): not a string */
        }
        if (at == NULL) {
            return NULL;
        }
    }
}

static int
finite_number(const unsigned char *start, const unsigned char *stop)
{
    /* Is the JSON number [start, stop) finite as a double? orjson refuses one that is not.
     * Asked only of numbers that may reach 1e308: the copy is rare. */
    const size_t size = (size_t)(stop - start);
    char *text = PyMem_Malloc(size + 1);
    double value;
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    memcpy(text, start, size);
    text[size] = '\0';
    value = PyOS_string_to_double(text, NULL, NULL);
    PyMem_Free(text);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return !Py_IS_INFINITY(value);
}

static const unsigned char *
number_end(const unsigned char *at)
{
    /* Past the JSON number at `at`, or NULL (not a number, or one orjson refuses). */
    const unsigned char *start = at, *digits;
    Py_ssize_t whole, exponent = 0;
    int negative = 0;

    if (*at == '-') {
        at++;
    }
    digits = at;
    if (*at == '0') {
        at++;
    } else if (IS_DIGIT(*at)) {
        do {
            at++;
        } while (IS_DIGIT(*at));
    } else {
        return NULL;
    }
    whole = *digits == '0' ? 0 : at - digits; /* the value is below 10**whole */
    if (*at == '.') {
        at++;
        if (!IS_DIGIT(*at)) {
            return NULL;
        }
        do {
            at++;
        } while (IS_DIGIT(*at));
    }
    if ((*at | 0x20) == 'e') {
        at++;
        if (*at == '+' || *at == '-') {
            negative = *at == '-';
            at++;
        }
        if (!IS_DIGIT(*at)) {
            return NULL;
        }
        do {
            if (exponent < 100000) {
                exponent = exponent * 10 + (*at - '0');
            }
            at++;
        } while (IS_DIGIT(*at));
    }
    /* Below 10**308 it is finite (DBL_MAX is about 1.8e308); past that, strtod's answer. */
    if (whole + (negative ? -exponent : exponent) <= 308 || finite_number(start, at)) {
        return at;
    }
    return NULL;
}

static const unsigned char *
scalar_end(const unsigned char *at)
{
    /* Past `true`, `false`, `null` or a number at `at`, or NULL. Compared byte by byte, in
     * order, so the sentinel stops a compare. */
    switch (at[0]) {
    case 't':
        return at[1] == 'r' && at[2] == 'u' && at[3] == 'e' ? at + 4 : NULL;
    case 'f':
        return at[1] == 'a' && at[2] == 'l' && at[3] == 's' && at[4] == 'e' ? at + 5 : NULL;
    case 'n':
        return at[1] == 'u' && at[2] == 'l' && at[3] == 'l' ? at + 4 : NULL;
    default:
        return number_end(at);
    }
}

static const unsigned char *
noted_string_end(const unsigned char *at, const unsigned char *end, Proven *note)
{
    /* string_end for the string whose opening quote is at `at`, noted in `note` (if any). */
    const unsigned char *close = string_end(at + 1, end);
    if (note != NULL && close != NULL && note->count < MAX_NOTED) {
        note->quotes[2 * note->count] = at - note->data;
        note->quotes[2 * note->count + 1] = close - note->data;
        note->count++;
    }
    return close;
}

static int
json_object(const unsigned char *at, const unsigned char *end, Proven *note)
{
    /* Is [at, end) one JSON object, spaces around it allowed? `*end` must be a byte below
     * 0x20 other than a tab or a CR (the sentinel). The containers open are a stack of
     * their closing brackets. `note`: where to note the strings (NULL: nowhere). */
    unsigned char closers[MAX_DEPTH];
    Py_ssize_t depth = 0;

    at = skip_space(at);
    if (*at != '{') {
        return 0;
    }
value:
    if (*at == '{' || *at == '[') {
        if (depth == MAX_DEPTH) {
            return 0;
        }
        closers[depth++] = *at == '{' ? '}' : ']';
        at = skip_space(at + 1);
        if (*at == closers[depth - 1]) {
            at++;
            depth--;
            goto after;
        }
        if (closers[depth - 1] == ']') {
            goto value;
        }
        goto key;
    }
    if (*at == '"') {
        if ((at = noted_string_end(at, end, note)) == NULL) {
            return 0;
        }
        at++; /* past the closing quote */
    } else if ((at = scalar_end(at)) == NULL) {
        return 0;
    }
    goto after;
key:
    if (*at != '"' || (at = noted_string_end(at, end, note)) == NULL) {
        return 0;
    }
    at = skip_space(at + 1);
    if (*at != ':') {
        return 0;
    }
    at = skip_space(at + 1);
    goto value;
after:
    at = skip_space(at);
    if (depth == 0) {
        return at == end;
    }
    if (*at == ',') {
        at = skip_space(at + 1);
        if (closers[depth - 1] == ']') {
            goto value;
        }
        goto key;
    }
    if (*at == closers[depth - 1]) {
        at++;
        depth--;
        goto after;
    }
    return 0;
}

static Py_ssize_t
common_length(const unsigned char *a, const unsigned char *b, Py_ssize_t size)
{
    /* How many of the first `size` bytes of `a` and `b` are the same, from the start. */
    Py_ssize_t n = 0;
#ifdef USE_SSE2
    unsigned int differ;
    while (size - n >= 16) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(a + n));
        const __m128i y = _mm_loadu_si128((const __m128i *)(const void *)(b + n));
        differ = ~(unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) & 0xFFFF;
        if (differ != 0) {
            return n + __builtin_ctz(differ);
        }
        n += 16;
    }
    if (n != size && size >= 16) {
        /* the last sixteen bytes, overlapping some known to be the same */
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(a + size - 16));
        const __m128i y = _mm_loadu_si128((const __m128i *)(const void *)(b + size - 16));
        differ = ~(unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) & 0xFFFF;
        return differ != 0 ? size - 16 + __builtin_ctz(differ) : size;
    }
#endif
    while (n < size && a[n] == b[n]) {
        n++;
    }
    return n;
}

/* like_proven's answers (with the end of the event it proved, for LIKE) */
#define LIKE 1     /* a whole one-line event of one JSON object */
#define REFUSED 0  /* not one */
#define UNKNOWN -1 /* it differs from the proven one otherwise: walk it */

static int
like_at_holes(const Proven *proven, const unsigned char *data, const unsigned char *end,
              const unsigned char **stop)
{
    /* like_proven (below), when the event is the proven one but for the strings the last
     * event differed in: the parts between those strings compared whole (memcmp), the
     * strings walked. About 150 instructions for an OpenAI-shaped event, and its line's
     * end is found on the way (a memchr and a compare less than a walk would take). */
    const unsigned char *old = proven->data;
    const Py_ssize_t size = end - data;
    Py_ssize_t i = 0, j = 0, n;
    int h;

    for (h = 0; h < proven->hole_count; h++) {
        const Py_ssize_t k = proven->holes[h];
        const unsigned char *close;
        n = proven->quotes[2 * k] + 1 - i; /* up to the string's opening quote, with it */
        if (size - j < n || memcmp(old + i, data + j, (size_t)n) != 0) {
            return UNKNOWN;
        }
        if ((close = string_end(data + j + n, end)) == NULL) {
            return REFUSED;
        }
        i = proven->quotes[2 * k + 1] + 1;
        j = close - data + 1;
    }
    n = proven->end - old - i;
    if (size - j < n || memcmp(old + i, data + j, (size_t)n) != 0) {
        return UNKNOWN;
    }
    *stop = data + j + n;
    return LIKE;
}

/* Kept out of event_end's body (GCC would inline it), so the usual answer, like_at_holes',
 * takes no stack frame this needs. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int
like_anywhere(Proven *proven, const unsigned char *data, const unsigned char *end,
              const unsigned char **stop)
{
    /* like_proven, the differences found sixteen bytes a step; the strings they fall in are
     * noted as the holes the next event is compared at first. */
    const unsigned char *old = proven->data;
    const Py_ssize_t old_size = proven->end - old, size = end - data;
    Py_ssize_t i = 0, j = 0, k = 0; /* old[i:] is compared with data[j:]; k: a noted string */
    Py_ssize_t holes[MAX_HOLES];
    int hole_count = 0;

    for (;;) {
        const Py_ssize_t same =
            common_length(old + i, data + j, old_size - i < size - j ? old_size - i : size - j);
        const unsigned char *close;
        Py_ssize_t open;
        i += same;
        j += same;
        if (i == old_size) {
            break; /* its blank line too: the event ends there */
        }
        while (k < proven->count && proven->quotes[2 * k + 1] < i) {
            k++; /* strings that closed before the difference */
        }
        if (k == proven->count || proven->quotes[2 * k] >= i) {
            return UNKNOWN; /* not inside a string of the proven event */
        }
        open = proven->quotes[2 * k] + (j - i); /* the same quote, in the new event */
        if ((close = string_end(data + open + 1, end)) == NULL) {
            return REFUSED;
        }
        if (hole_count <= MAX_HOLES) {
            if (hole_count < MAX_HOLES) {
                holes[hole_count] = k;
            }
            hole_count++;
        }
        i = proven->quotes[2 * k + 1] + 1;
        j = close - data + 1;
        k++;
    }
    /* more holes than are noted: none, the next event is compared anywhere at once */
    proven->hole_count = hole_count <= MAX_HOLES ? hole_count : 0;
    memcpy(proven->holes, holes, (size_t)proven->hole_count * sizeof(holes[0]));
    *stop = data + j;
    return LIKE;
}

static int
like_proven(Proven *proven, const unsigned char *data, const unsigned char *end,
            const unsigned char **stop)
{
    /* The event at `data` (the bytes up to `end`, where a sentinel lies), compared with the
     * proven one: LIKE (and its end in `*stop`) when it is that event with some of its noted
     * strings replaced by strings; REFUSED when it is not a whole one-line event of one JSON
     * object; UNKNOWN when this
     * cannot tell (it differs elsewhere: a number, the structure, a string not noted).
     * Both are read alike up to the first difference; inside a string of the proven event,
     * the new event holds a string there too, walked from its opening quote (a difference
     * may fall inside an escape or a character); after both strings' closing quotes both are
     * read alike again, so the rest is compared the same way, up to the blank line that
     * ends the proven event. A string holds no newline, so the event is one line too. */
    const int like = like_at_holes(proven, data, end, stop);
    return like != UNKNOWN ? like : like_anywhere(proven, data, end, stop);
}

/* The last event proven whole (if one was, and it was at most MAX_KEPT bytes long), copied:
 * the next event is compared with it, in the same read or in the next one (a paced upstream
 * sends one event a read) and whichever stream it came from. Any event proven whole will do:
 * an event is proven against it exactly when it is JSON, or not proven by it at all. Module
 * state, read and written with the GIL held (no call here releases it). */
static Proven kept;
static unsigned char kept_bytes[MAX_KEPT];
static int kept_any;

static void
keep(const Proven *proven)
{
    const Py_ssize_t size = proven->end - proven->data;
    if (size > MAX_KEPT) {
        return; /* the one kept stays */
    }
    memcpy(kept_bytes, proven->data, (size_t)size);
    kept.data = kept_bytes;
    kept.end = kept_bytes + size;
    kept.count = proven->count;
    memcpy(kept.quotes, proven->quotes, (size_t)(2 * proven->count) * sizeof(kept.quotes[0]));
    kept.hole_count = 0;
    kept_any = 1;
}

static const char *
line_end(const char *at, const char *end)
{
    /* The end of the whole one-line `data: {` event at `at` by its framing alone (its data
     * not looked into), or NULL when none starts there. */
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

#if defined(__GNUC__)
__attribute__((noinline)) /* its 2 KiB frame stays out of event_end's usual path */
#endif
static const char *
proven_whole_end(const char *at, const char *end)
{
    /* event_end, when the event is proven whole; then it is kept. */
    const char *stop = line_end(at, end);
    Proven proven;

    if (stop == NULL) {
        return NULL;
    }
    proven.data = (const unsigned char *)at;
    proven.end = (const unsigned char *)stop;
    proven.count = 0;
    /* its data: from the `{` after `data: ` to the line's `\n` (the sentinel) */
    if (!json_object(proven.data + 6, proven.end - 2, &proven)) {
        return NULL;
    }
    keep(&proven);
    return stop;
}

static const char *
event_end(const char *at, const char *end)
{
    /* The end of the whole one-line `data: {` event at `at` whose data is one JSON object,
     * or NULL when none starts there: compared with the event kept (`like_proven`), or
     * proven whole and then kept. `*end` must be a sentinel (a bytes object's NUL). */
    if (end - at < 9) {
        return NULL; /* shorter than `data: {}` and its blank line: the end of a run */
    }
    if (kept_any) {
        const unsigned char *stop = NULL;
        switch (like_proven(&kept, (const unsigned char *)at, (const unsigned char *)end, &stop)) {
        case LIKE:
            return (const char *)stop;
        case REFUSED:
            return NULL;
        default:
            break;
        }
    }
    return proven_whole_end(at, end);
}


static int
is_plain(const char *data, Py_ssize_t size)
{
    /* data: {...}\n\n data: {...}\n\n ... : whole one-line events of one JSON object each
     * (`event_end`), and no CR. */
    const char *end = data + size;
    const char *line = data;

    if (size < 2 || data[size - 1] != '\n' || data[size - 2] != '\n') {
        return 0;
    }
    if (memchr(data, '\r', (size_t)size) != NULL) {
        return 0;
    }
    while ((line = event_end(line, end)) != NULL) {
        if (line == end) {
            return 1;
        }
    }
    return 0;
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
     * first: a run refused there (a round's first content) is not walked whole, and its
     * data is proven JSON (`event_end`) only once its keys pass. After it, the events are
     * proven one by one only up to the first key refusing them (found over the rest of the
     * read): the proofs of events past it (each a walk whole, where a tool call's event
     * differs from the content before it) would be spent for nothing. */
    const char *data, *end, *at, *next, *framed, *refusal, *limit;
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
    next = line_end(at, end);
    if (next == NULL || !event_passes(at, next - at, want) || event_end(at, end) != next) {
        return PyLong_FromSsize_t(pos);
    }
    refusal = first_refusal(next, end, want);
    limit = refusal != NULL ? line_start(next, refusal) : end;
    framed = next; /* the run's end: whole events of one JSON object each, before `limit` */
    while (framed < limit && (at = event_end(framed, end)) != NULL) {
        framed = at;
    }
    return PyLong_FromSsize_t(framed - data);
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

static PyObject *
json_line(PyObject *Py_UNUSED(module), PyObject *data)
{
    /* Is `data` one JSON object on one line (no LF), as orjson reads it? What the scan asks
     * of each event's data, for the tests to hold to orjson. A bytes object ends in a NUL:
     * the sentinel. */
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "json_line() takes bytes");
        return NULL;
    }
    return PyBool_FromLong(json_object((const unsigned char *)PyBytes_AS_STRING(data),
                                       (const unsigned char *)PyBytes_AS_STRING(data) +
                                           PyBytes_GET_SIZE(data),
                                       NULL));
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, "Flags describing a read of SSE bytes (see proxy.chat.sse_scan)."},
    {"run_end", (PyCFunction)(void (*)(void))run_end, METH_FASTCALL, "Where the run of events the rule forwards ends (see proxy.chat.sse_scan)."},
    {"event_at", (PyCFunction)(void (*)(void))event_at, METH_FASTCALL, "Where the event at a position ends, and whether it is one data line (see proxy.chat.sse_scan)."},
    {"json_line", (PyCFunction)(void (*)(void))json_line, METH_O, "Whether bytes are one JSON object on one line (see proxy.chat.sse_scan)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sse_scan", NULL, 0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__sse_scan(void)
{
    init_string_stop();
    return PyModule_Create(&module);
}
