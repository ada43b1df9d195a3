/* Compiled versions of batch.py's per-record loops: the offsets partition load's scan
 * (collect_latest), a coordinator's read of its log (read_key_values), the cleaner's two
 * scans (map_key_offsets, latest_record_ranges), the records section of a coordinator's
 * batch (key_value_section) and the produce validator's walk over a client's records
 * (produce_records_valid).
 *
 * batch.py's pure-Python functions are the reference. These take only what they read fast:
 * a `bytes` buffer, an exact dict, well-formed records. Anything else (a malformed or
 * truncated record, a varint past 64 bits, another buffer or mapping type) makes them return
 * None before writing anything the reference would not write itself, and batch.py then runs
 * the reference, which gives the result or raises its exact error. Every read is bounds
 * checked here, so a bad batch can neither crash the process nor read past the buffer. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define BAIL 1

/* A zigzag varint (as batch.read_varint) at *pos, read below lim. BAIL if it runs to lim, is
 * longer than 10 bytes or does not fit 64 bits (the reference then decides). */
static inline int
read_varint(const unsigned char *buf, Py_ssize_t lim, Py_ssize_t *pos, int64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < lim && buf[p] < 0x80) { /* one byte: nearly every length and delta */
        uint64_t z = buf[p];
        *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));
        *pos = p + 1;
        return 0;
    }
    uint64_t z = 0;
    for (int i = 0, shift = 0; i < 10; i++, shift += 7) {
        if (p >= lim)
            return BAIL;
        unsigned char c = buf[p++];
        if (i == 9 && c > 1)
            return BAIL;
        z |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));
            *pos = p;
            return 0;
        }
    }
    return BAIL;
}

#define VARINT(lim, pos, out) \
    do { if (read_varint(buf, (lim), &(pos), &(out))) goto bail; } while (0)

/* An exact int that fits in 64 bits; BAIL for anything else (a subclass, an object with
 * __index__, a value past 64 bits: no Python code runs here, and the reference takes them). */
static int
int64_arg(PyObject *o, int64_t *out)
{
    int overflow;
    if (!PyLong_CheckExact(o))
        return BAIL;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow)
        return BAIL;
    *out = v;
    return 0;
}

static int
ssize_arg(PyObject *o, Py_ssize_t *out)
{
    int64_t v;
    if (int64_arg(o, &v) || v < PY_SSIZE_T_MIN || v > PY_SSIZE_T_MAX)
        return BAIL;
    *out = (Py_ssize_t)v;
    return 0;
}

/* One record's key and value as the lean readers take them (the timestamp delta skipped, the
 * headers not read), from *pos; *pos is then the record's end. BAIL where a length or varint
 * reaches past the record or the buffer (the reference then decides). */
typedef struct {
    int64_t offset_delta, key_length, value_length;
    Py_ssize_t key_at, value_at;
} LeanRecord;

static inline int
read_lean_record(const unsigned char *buf, Py_ssize_t size, Py_ssize_t *pos, LeanRecord *r)
{
    int64_t length, skip;
    if (read_varint(buf, size, pos, &length) || length < 0 || length > size - *pos)
        return BAIL;
    Py_ssize_t record_end = *pos + (Py_ssize_t)length;
    Py_ssize_t at = *pos + 1; /* after the attributes byte: the timestamp delta */
    if (read_varint(buf, size, &at, &skip) || read_varint(buf, size, &at, &r->offset_delta)
        || read_varint(buf, size, &at, &r->key_length))
        return BAIL;
    r->key_at = at;
    if (r->key_length > 0) {
        if (r->key_length >= size - at) /* the value's length would be past the end */
            return BAIL;
        at += (Py_ssize_t)r->key_length;
    }
    if (read_varint(buf, size, &at, &r->value_length))
        return BAIL;
    if (at > record_end || (r->value_length > 0 && r->value_length > record_end - at))
        return BAIL;
    r->value_at = at;
    *pos = record_end;
    return 0;
}

/* collect_latest(buf, pos, count, base_offset, latest) -> keyed records, or None.
 * The reference's loop over an uncompressed records section (see batch.collect_latest_py):
 * latest[key] = (offset, value) for each keyed record, in order. */
static PyObject *
scan_latest(PyObject *data, Py_ssize_t pos, int64_t count, int64_t base_offset, PyObject *latest)
{
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (pos < 0 || pos > size)
        Py_RETURN_NONE;
    int64_t keyed = 0;
    for (int64_t i = 0; i < count; i++) {
        LeanRecord r;
        int64_t offset;
        if (read_lean_record(buf, size, &pos, &r))
            goto bail;
        if (r.key_length >= 0) {
            if (__builtin_add_overflow(base_offset, r.offset_delta, &offset))
                goto bail;
            PyObject *key = PyBytes_FromStringAndSize((const char *)buf + r.key_at, (Py_ssize_t)r.key_length);
            if (key == NULL)
                return NULL;
            PyObject *value;
            if (r.value_length >= 0) {
                value = PyBytes_FromStringAndSize((const char *)buf + r.value_at, (Py_ssize_t)r.value_length);
            } else {
                value = Py_None;
                Py_INCREF(value);
            }
            PyObject *off = value ? PyLong_FromLongLong(offset) : NULL;
            PyObject *entry = off ? PyTuple_Pack(2, off, value) : NULL;
            Py_XDECREF(off);
            Py_XDECREF(value);
            int failed = entry == NULL || PyDict_SetItem(latest, key, entry) < 0;
            Py_DECREF(key);
            Py_XDECREF(entry);
            if (failed)
                return NULL;
            keyed++;
        }
    }
    return PyLong_FromLongLong(keyed);
bail:
    Py_RETURN_NONE;
}

static PyObject *
collect_latest(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "collect_latest takes 5 arguments");
        return NULL;
    }
    PyObject *data = args[0], *latest = args[4];
    Py_ssize_t pos;
    int64_t count, base_offset;
    if (!PyBytes_CheckExact(data) || !PyDict_CheckExact(latest) || ssize_arg(args[1], &pos)
        || int64_arg(args[2], &count) || int64_arg(args[3], &base_offset))
        Py_RETURN_NONE;
    return scan_latest(data, pos, count, base_offset, latest);
}

static inline uint64_t
get_be(const unsigned char *at, int size)
{
    uint64_t v = 0;
    for (int i = 0; i < size; i++)
        v = v << 8 | at[i];
    return v;
}

/* The header of the uncompressed batch at position in a bytes object, as records_section reads
 * it (magic 2, a length that fits): its records' start, end, count and base offset. BAIL for
 * anything else (a compressed batch included): the caller then goes through records_section. */
static int
plain_batch(PyObject *data, PyObject *position, Py_ssize_t *start, Py_ssize_t *end, int64_t *count,
            int64_t *base_offset)
{
    if (!PyBytes_CheckExact(data) || !PyLong_CheckExact(position))
        return BAIL;
    Py_ssize_t pos = PyLong_AsSsize_t(position), size = PyBytes_GET_SIZE(data);
    if (pos == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return BAIL;
    }
    if (pos < 0 || size - pos < 61)
        return BAIL;
    const unsigned char *h = (const unsigned char *)PyBytes_AS_STRING(data) + pos;
    if (h[16] != 2 || get_be(h + 21, 2) & 0x07)
        return BAIL;
    /* in Py_ssize_t: a length near INT32_MAX plus 12 must not wrap to a short batch */
    Py_ssize_t batch_length = (int32_t)get_be(h + 8, 4);
    if (batch_length < 49 || batch_length + 12 > size - pos)
        return BAIL;
    *start = pos + 61;
    *end = pos + batch_length + 12;
    *count = (int32_t)get_be(h + 57, 4);
    *base_offset = (int64_t)get_be(h, 8);
    return 0;
}

/* collect_latest_batch(batch, position, latest): collect_latest for an uncompressed batch in
 * a bytes object, header read here; None for the rest (then records_section and the above). */
static PyObject *
collect_latest_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "collect_latest_batch takes 3 arguments");
        return NULL;
    }
    Py_ssize_t start, end;
    int64_t count, base_offset;
    if (!PyDict_CheckExact(args[2]) || plain_batch(args[0], args[1], &start, &end, &count, &base_offset))
        Py_RETURN_NONE;
    return scan_latest(args[0], start, count, base_offset, args[2]);
}

/* The (offset, key, value) list of the `count` records at buf[pos:size] (see
 * batch.iter_key_values, the reference: headers skipped, trailing bytes ignored), in a list
 * sized up front; NULL without an exception for the reference's cases. */
static PyObject *
scan_key_values(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t size, int64_t count, int64_t base_offset)
{
    if (pos < 0 || pos > size)
        return NULL;
    if (count <= 0) /* the reference's loop runs no times */
        return PyList_New(0);
    if (count > size - pos) /* each record takes a byte at least: too few to be read */
        return NULL;
    PyObject *listed = PyList_New((Py_ssize_t)count);
    if (listed == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        LeanRecord r;
        int64_t offset;
        if (read_lean_record(buf, size, &pos, &r))
            goto bail;
        if (__builtin_add_overflow(base_offset, r.offset_delta, &offset))
            goto bail;
        PyObject *entry = PyTuple_New(3);
        if (entry == NULL)
            goto bail;
        PyList_SET_ITEM(listed, i, entry); /* the list owns it: filled below, freed with the list */
        PyObject *item = PyLong_FromLongLong(offset);
        if (item == NULL)
            goto bail;
        PyTuple_SET_ITEM(entry, 0, item);
        if (r.key_length >= 0) {
            item = PyBytes_FromStringAndSize((const char *)buf + r.key_at, (Py_ssize_t)r.key_length);
            if (item == NULL)
                goto bail;
        } else {
            item = Py_NewRef(Py_None);
        }
        PyTuple_SET_ITEM(entry, 1, item);
        if (r.value_length >= 0) {
            item = PyBytes_FromStringAndSize((const char *)buf + r.value_at, (Py_ssize_t)r.value_length);
            if (item == NULL)
                goto bail;
        } else {
            item = Py_NewRef(Py_None);
        }
        PyTuple_SET_ITEM(entry, 2, item);
    }
    return listed;
bail: /* with an exception set (no memory) or not (the reference's) */
    Py_DECREF(listed);
    return NULL;
}

/* read_key_values(buf, pos, count, base_offset) -> [(offset, key, value), ...] of the records
 * of a section in a bytes object (a decompressed one, or a batch's in place), or None. */
static PyObject *
read_key_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "read_key_values takes 4 arguments");
        return NULL;
    }
    Py_ssize_t pos;
    int64_t count, base_offset;
    if (!PyBytes_CheckExact(args[0]) || ssize_arg(args[1], &pos) || int64_arg(args[2], &count)
        || int64_arg(args[3], &base_offset))
        Py_RETURN_NONE;
    PyObject *listed = scan_key_values((const unsigned char *)PyBytes_AS_STRING(args[0]), pos,
                                       PyBytes_GET_SIZE(args[0]), count, base_offset);
    if (listed == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return listed;
}

/* read_key_values_batch(batch, position): read_key_values for an uncompressed batch in a bytes
 * object, header read here and records read only inside it; None for the rest. */
static PyObject *
read_key_values_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "read_key_values_batch takes 2 arguments");
        return NULL;
    }
    Py_ssize_t start, end;
    int64_t count, base_offset;
    if (plain_batch(args[0], args[1], &start, &end, &count, &base_offset))
        Py_RETURN_NONE;
    PyObject *listed = scan_key_values((const unsigned char *)PyBytes_AS_STRING(args[0]), start, end, count,
                                       base_offset);
    if (listed == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return listed;
}

/* One record of a section as walk_records takes it: every field inside the record, which
 * it fills exactly (headers included), and with ascii_keys every header key in ASCII (the
 * produce validator's UTF-8 check, left to the reference for other bytes). BAIL for anything
 * else. */
typedef struct {
    Py_ssize_t end, key_at;
    int64_t offset_delta, key_length, value_length;
} strict_record;

static int
read_strict_record(const unsigned char *buf, Py_ssize_t size, Py_ssize_t pos, strict_record *r, int ascii_keys)
{
    int64_t length, skip, n_headers;
    if (pos >= size)
        goto bail;
    VARINT(size, pos, length);
    if (length <= 0 || length > size - pos)
        goto bail;
    Py_ssize_t end = pos + (Py_ssize_t)length; /* every field must lie before it */
    Py_ssize_t at = pos + 1;                     /* attributes read: the timestamp delta */
    VARINT(end, at, skip);
    VARINT(end, at, r->offset_delta);
    VARINT(end, at, r->key_length);
    r->key_at = at;
    if (r->key_length > 0) {
        if (r->key_length > end - at)
            goto bail;
        at += (Py_ssize_t)r->key_length;
    }
    VARINT(end, at, r->value_length);
    if (r->value_length > 0) {
        if (r->value_length > end - at)
            goto bail;
        at += (Py_ssize_t)r->value_length;
    }
    VARINT(end, at, n_headers);
    if (n_headers < 0)
        goto bail;
    for (int64_t h = 0; h < n_headers; h++) {
        int64_t n;
        VARINT(end, at, n);
        if (n < 0 || n > end - at)
            goto bail;
        if (ascii_keys)
            for (Py_ssize_t k = at; k < at + (Py_ssize_t)n; k++)
                if (buf[k] >= 0x80)
                    goto bail;
        at += (Py_ssize_t)n;
        VARINT(end, at, n);
        if (n > 0) {
            if (n > end - at)
                goto bail;
            at += (Py_ssize_t)n;
        }
    }
    if (at != end)
        goto bail;
    r->end = end;
    return 0;
bail:
    return BAIL;
}

/* map_key_offsets(buf, start, size, count, base_offset, offsets) -> (keyed, tombstone), or None.
 * Takes only batches walk_records passes (every record exactly filling its length, headers
 * included, the records filling buf[start:size]); anything else goes to the reference, which
 * raises its error. The whole batch is checked before the first write: the reference may
 * write some keys and then refuse the batch, and what it writes then is its own business. */
static PyObject *
map_offsets(PyObject *data, Py_ssize_t start, Py_ssize_t size, int64_t count, int64_t base_offset, PyObject *offsets)
{
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    if (start < 0 || size > PyBytes_GET_SIZE(data) || start > size)
        Py_RETURN_NONE;
    int64_t null_keys = 0, offset;
    int tombstone = 0;
    strict_record r;
    Py_ssize_t pos = start;
    for (int64_t i = 0; i < count; i++) { /* check */
        if (read_strict_record(buf, size, pos, &r, 0)
            || (r.key_length >= 0 && __builtin_add_overflow(base_offset, r.offset_delta, &offset)))
            Py_RETURN_NONE;
        null_keys += r.key_length < 0;
        tombstone |= r.value_length < 0;
        pos = r.end;
    }
    if (pos != size)
        Py_RETURN_NONE;
    pos = start;
    for (int64_t i = 0; i < count; i++) { /* write */
        read_strict_record(buf, size, pos, &r, 0);
        pos = r.end;
        if (r.key_length < 0)
            continue;
        PyObject *key = PyBytes_FromStringAndSize((const char *)buf + r.key_at, (Py_ssize_t)r.key_length);
        PyObject *off = key ? PyLong_FromLongLong(base_offset + r.offset_delta) : NULL;
        int failed = off == NULL || PyDict_SetItem(offsets, key, off) < 0;
        Py_XDECREF(key);
        Py_XDECREF(off);
        if (failed)
            return NULL;
    }
    return Py_BuildValue("(LO)", (long long)(count - null_keys), tombstone ? Py_True : Py_False);
}

static PyObject *
map_key_offsets(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "map_key_offsets takes 6 arguments");
        return NULL;
    }
    PyObject *data = args[0], *offsets = args[5];
    Py_ssize_t start, size;
    int64_t count, base_offset;
    if (!PyBytes_CheckExact(data) || !PyDict_CheckExact(offsets) || ssize_arg(args[1], &start)
        || ssize_arg(args[2], &size) || int64_arg(args[3], &count) || int64_arg(args[4], &base_offset))
        Py_RETURN_NONE;
    return map_offsets(data, start, size, count, base_offset, offsets);
}

/* map_key_offsets_batch(batch, position, offsets): map_key_offsets for an uncompressed batch in
 * a bytes object, header read here (its records must fill it); None for the rest. */
static PyObject *
map_key_offsets_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "map_key_offsets_batch takes 3 arguments");
        return NULL;
    }
    Py_ssize_t start, end;
    int64_t count, base_offset;
    if (!PyDict_CheckExact(args[2]) || plain_batch(args[0], args[1], &start, &end, &count, &base_offset))
        Py_RETURN_NONE;
    return map_offsets(args[0], start, end, count, base_offset, args[2]);
}

/* latest_record_ranges(buf, start, end, count, base_offset, offsets, retain_tombstones)
 * -> (ranges, kept, max timestamp delta or None), or None. Reads offsets, writes nothing, so
 * giving up at any point is free: every field must lie inside its record and the records must
 * fill buf[start:end], else the reference decides. */
static PyObject *
latest_record_ranges(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "latest_record_ranges takes 7 arguments");
        return NULL;
    }
    PyObject *data = args[0], *offsets = args[5];
    /* retain_tombstones a bool: the reference asks its truth only of a record it keeps */
    Py_ssize_t pos, size;
    int64_t count, base_offset;
    if (!PyBytes_CheckExact(data) || !PyDict_CheckExact(offsets) || ssize_arg(args[1], &pos)
        || ssize_arg(args[2], &size) || int64_arg(args[3], &count) || int64_arg(args[4], &base_offset)
        || !PyBool_Check(args[6]))
        Py_RETURN_NONE;
    int retain = args[6] == Py_True;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    if (pos < 0 || size > PyBytes_GET_SIZE(data) || pos > size)
        Py_RETURN_NONE;
    PyObject *ranges = PyList_New(0);
    if (ranges == NULL)
        return NULL;
    Py_ssize_t range_start = -1, range_end = -1; /* the open range, appended when one cannot join it */
    int64_t kept = 0, max_ts = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_length, offset;
        Py_ssize_t record_start = pos;
        VARINT(size, pos, length);
        if (length <= 0 || length > size - pos)
            goto bail;
        Py_ssize_t end = pos + (Py_ssize_t)length;
        Py_ssize_t at = pos + 1;
        VARINT(end, at, ts_delta);
        VARINT(end, at, offset_delta);
        VARINT(end, at, key_length);
        pos = end;
        if (key_length < 0)
            continue;
        if (key_length >= end - at) /* the value's length must follow the key */
            goto bail;
        if (__builtin_add_overflow(base_offset, offset_delta, &offset))
            goto bail;
        PyObject *key = PyBytes_FromStringAndSize((const char *)buf + at, (Py_ssize_t)key_length);
        if (key == NULL)
            goto error;
        PyObject *mapped = PyDict_GetItemWithError(offsets, key); /* borrowed */
        Py_DECREF(key);
        if (mapped == NULL) {
            if (PyErr_Occurred())
                goto error;
            continue;
        }
        /* an exact int compares in C; any other value is the reference's (its `!=` may run
         * Python code that disagrees with `==`), and nothing is written yet */
        if (!PyLong_CheckExact(mapped))
            goto bail;
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(mapped, &overflow);
        if (overflow || v != offset)
            continue;
        if (!retain && buf[at + key_length] & 1) /* a zigzag varint's sign: a null value */
            continue;
        if (kept == 0 || ts_delta > max_ts)
            max_ts = ts_delta;
        kept++;
        if (range_start >= 0 && range_end == record_start) {
            range_end = end;
        } else {
            if (range_start >= 0) {
                PyObject *r = Py_BuildValue("(nn)", range_start, range_end);
                if (r == NULL || PyList_Append(ranges, r) < 0) {
                    Py_XDECREF(r);
                    goto error;
                }
                Py_DECREF(r);
            }
            range_start = record_start;
            range_end = end;
        }
    }
    if (pos != size)
        goto bail;
    if (range_start >= 0) {
        PyObject *r = Py_BuildValue("(nn)", range_start, range_end);
        if (r == NULL || PyList_Append(ranges, r) < 0) {
            Py_XDECREF(r);
            goto error;
        }
        Py_DECREF(r);
    }
    if (kept == 0)
        return Py_BuildValue("(NLO)", ranges, (long long)0, Py_None);
    return Py_BuildValue("(NLL)", ranges, (long long)kept, (long long)max_ts);
bail:
    Py_DECREF(ranges);
    Py_RETURN_NONE;
error:
    Py_DECREF(ranges);
    return NULL;
}

static inline Py_ssize_t
varint_size(int64_t n)
{
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    Py_ssize_t size = 1;
    while (z > 0x7F) {
        z >>= 7;
        size++;
    }
    return size;
}

static inline unsigned char *
write_varint(unsigned char *out, int64_t n)
{
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (z > 0x7F) {
        *out++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *out++ = (unsigned char)z;
    return out;
}

/* The records section of pairs (see key_value_section) in a new bytes object after `room`
 * bytes left for a header: NULL with an exception, or NULL without one for the reference's
 * cases (not a list or tuple of (bytes or None, bytes or None) tuples, no pairs). */
static PyObject *
records_of_pairs(PyObject *pairs, Py_ssize_t room, Py_ssize_t *count_out)
{
    if (!PyList_CheckExact(pairs) && !PyTuple_CheckExact(pairs))
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(pairs);
    if (count == 0)
        return NULL;
    PyObject **items = PySequence_Fast_ITEMS(pairs);
    Py_ssize_t total = room;
    for (Py_ssize_t i = 0; i < count; i++) { /* first the size, checking every pair */
        PyObject *pair = items[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return NULL;
        PyObject *key = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
        if ((key != Py_None && !PyBytes_CheckExact(key)) || (value != Py_None && !PyBytes_CheckExact(value)))
            return NULL;
        Py_ssize_t key_length = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
        Py_ssize_t value_length = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        /* attributes, timestamp delta, offset delta, key, value, header count */
        Py_ssize_t body = 3 + varint_size(i) + varint_size(key_length) + varint_size(value_length)
            + (key_length > 0 ? key_length : 0) + (value_length > 0 ? value_length : 0);
        if (__builtin_add_overflow(total, varint_size(body) + body, &total))
            return NULL; /* past Py_ssize_t: the reference raises its own error */
    }
    PyObject *out_bytes = PyBytes_FromStringAndSize(NULL, total);
    if (out_bytes == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(out_bytes) + room;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyTuple_GET_ITEM(items[i], 0), *value = PyTuple_GET_ITEM(items[i], 1);
        Py_ssize_t key_length = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
        Py_ssize_t value_length = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        Py_ssize_t body = 3 + varint_size(i) + varint_size(key_length) + varint_size(value_length)
            + (key_length > 0 ? key_length : 0) + (value_length > 0 ? value_length : 0);
        out = write_varint(out, body);
        *out++ = 0; /* attributes */
        *out++ = 0; /* timestamp delta: one timestamp for all */
        out = write_varint(out, i);
        out = write_varint(out, key_length);
        if (key_length > 0) {
            memcpy(out, PyBytes_AS_STRING(key), key_length);
            out += key_length;
        }
        out = write_varint(out, value_length);
        if (value_length > 0) {
            memcpy(out, PyBytes_AS_STRING(value), value_length);
            out += value_length;
        }
        *out++ = 0; /* no headers */
    }
    *count_out = count;
    return out_bytes;
}

/* key_value_section(pairs) -> the records section build_key_value_batch_py joins, or None.
 * pairs: a list or tuple of (key, value) tuples of bytes or None; anything else (and no pairs
 * at all) is the reference's to build or refuse. */
static PyObject *
key_value_section(PyObject *self, PyObject *pairs)
{
    Py_ssize_t count;
    PyObject *section = records_of_pairs(pairs, 0, &count);
    if (section == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return section;
}

static inline void
put_be(unsigned char *at, uint64_t v, int size)
{
    for (int i = size - 1; i >= 0; i--, v >>= 8)
        at[i] = (unsigned char)v;
}

/* key_value_batch(pairs, timestamp, producer_id, producer_epoch, attributes, crc32c) -> the
 * whole uncompressed batch build_key_value_batch_py builds (base offset 0, leader epoch 0, no
 * base sequence), header and CRC (crc32c: the checksum function, called once) included, or
 * None for the reference: the pairs as key_value_section, or a field its header cannot hold. */
static PyObject *
key_value_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "key_value_batch takes 6 arguments");
        return NULL;
    }
    int64_t field[4];
    for (int i = 0; i < 4; i++) {
        int overflow;
        if (!PyLong_CheckExact(args[i + 1]))
            Py_RETURN_NONE;
        field[i] = PyLong_AsLongLongAndOverflow(args[i + 1], &overflow);
        if (overflow)
            Py_RETURN_NONE;
        if (field[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    int64_t timestamp = field[0], producer_id = field[1], producer_epoch = field[2], attributes = field[3];
    if (producer_epoch < -32768 || producer_epoch > 32767 || attributes < 0 || attributes > 32767)
        Py_RETURN_NONE;
    Py_ssize_t count;
    PyObject *batch = records_of_pairs(args[0], 61, &count);
    if (batch == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(batch);
    if (size - 12 > INT32_MAX || count > INT32_MAX) {
        Py_DECREF(batch);
        Py_RETURN_NONE;
    }
    unsigned char *h = (unsigned char *)PyBytes_AS_STRING(batch);
    put_be(h, 0, 8);                              /* base offset */
    put_be(h + 8, (uint64_t)(size - 12), 4);      /* batch length */
    put_be(h + 12, 0, 4);                         /* partition leader epoch */
    h[16] = 2;                                    /* magic */
    put_be(h + 21, (uint64_t)attributes, 2);
    put_be(h + 23, (uint64_t)(count - 1), 4);     /* last offset delta */
    put_be(h + 27, (uint64_t)timestamp, 8);       /* base timestamp */
    put_be(h + 35, (uint64_t)timestamp, 8);       /* max timestamp */
    put_be(h + 43, (uint64_t)producer_id, 8);
    put_be(h + 51, (uint64_t)producer_epoch, 2);
    put_be(h + 53, (uint64_t)-1, 4);              /* base sequence */
    put_be(h + 57, (uint64_t)count, 4);
    /* crc32c reads the batch through a view that owns a reference to it (a view it kept can
     * never read freed memory); if anything kept the batch, it is not ours to finish writing,
     * and a checksum that is not a 32-bit int is the reference's to refuse. */
    PyObject *view = PyMemoryView_FromObject(batch);
    if (view != NULL) { /* narrowed to batch[21:] as a slice would be, without a second view */
        Py_buffer *window = PyMemoryView_GET_BUFFER(view);
        window->buf = (char *)window->buf + 21;
        window->len -= 21;
        window->shape[0] -= 21;
    }
    PyObject *crc = view ? PyObject_CallOneArg(args[5], view) : NULL;
    Py_XDECREF(view);
    if (crc == NULL) {
        Py_DECREF(batch);
        return NULL;
    }
    int overflow = 0;
    long long value = PyLong_CheckExact(crc) ? PyLong_AsLongLongAndOverflow(crc, &overflow) : -1;
    Py_DECREF(crc);
    if (overflow || value < 0 || value > 0xFFFFFFFFLL || Py_REFCNT(batch) != 1) {
        Py_DECREF(batch);
        Py_RETURN_NONE;
    }
    put_be(h + 17, (uint64_t)value, 4);
    return batch;
}

/* produce_records_valid(buf, start, end, count, compacted) -> True, or None for the reference.
 * The produce validator's walk (broker.validator._validate_records over batch.walk_records):
 * True only when buf[start:end] is exactly `count` well-formed records, each filling exactly
 * its declared length, with offset deltas 0..count-1, a key on every record if `compacted`,
 * and header keys in ASCII (a key with other bytes may still be UTF-8: the reference decides).
 * buf: any contiguous buffer (a Produce's records arrive as a view of the receive buffer).
 * Nothing is written or allocated, so None for anything unusual costs only the reference's walk.
 * Every read stays below the record's end: the reference reads on past it only to fail. */
static int
produce_walk(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t size, int64_t count, int compacted)
{
    strict_record r;
    for (int64_t index = 0; index < count; index++) {
        if (read_strict_record(buf, size, pos, &r, 1) || r.offset_delta != index
                || (r.key_length < 0 && compacted))
            return BAIL;
        pos = r.end;
    }
    return pos == size ? 0 : BAIL;
}

static PyObject *
produce_records_valid(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "produce_records_valid takes 5 arguments");
        return NULL;
    }
    Py_ssize_t start, end;
    int64_t count;
    if (ssize_arg(args[1], &start) || ssize_arg(args[2], &end) || int64_arg(args[3], &count)
            || !PyBool_Check(args[4]))
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not a contiguous buffer: the reference reads it */
        Py_RETURN_NONE;
    }
    int bail = start < 0 || end < start || end > view.len
        || produce_walk((const unsigned char *)view.buf, start, end, count, args[4] == Py_True);
    PyBuffer_Release(&view);
    if (bail)
        Py_RETURN_NONE;
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"collect_latest", (PyCFunction)(void (*)(void))collect_latest, METH_FASTCALL,
     "collect_latest(buf, pos, count, base_offset, latest) -> keyed records, or None for the reference"},
    {"collect_latest_batch", (PyCFunction)(void (*)(void))collect_latest_batch, METH_FASTCALL,
     "collect_latest_batch(batch, position, latest) -> keyed records, or None"},
    {"read_key_values", (PyCFunction)(void (*)(void))read_key_values, METH_FASTCALL,
     "read_key_values(buf, pos, count, base_offset) -> [(offset, key, value), ...], or None for the reference"},
    {"read_key_values_batch", (PyCFunction)(void (*)(void))read_key_values_batch, METH_FASTCALL,
     "read_key_values_batch(batch, position) -> [(offset, key, value), ...], or None"},
    {"map_key_offsets_batch", (PyCFunction)(void (*)(void))map_key_offsets_batch, METH_FASTCALL,
     "map_key_offsets_batch(batch, position, offsets) -> (keyed, tombstone), or None"},
    {"map_key_offsets", (PyCFunction)(void (*)(void))map_key_offsets, METH_FASTCALL,
     "map_key_offsets(buf, start, size, count, base_offset, offsets) -> (keyed, tombstone), or None"},
    {"latest_record_ranges", (PyCFunction)(void (*)(void))latest_record_ranges, METH_FASTCALL,
     "latest_record_ranges(buf, start, end, count, base_offset, offsets, retain_tombstones) -> "
     "(ranges, kept, max_ts), or None"},
    {"key_value_section", key_value_section, METH_O,
     "key_value_section(pairs) -> the records section of (key, value) records, or None"},
    {"key_value_batch", (PyCFunction)(void (*)(void))key_value_batch, METH_FASTCALL,
     "key_value_batch(pairs, timestamp, producer_id, producer_epoch, attributes, crc32c) -> "
     "an uncompressed batch of (key, value) records, or None"},
    {"produce_records_valid", (PyCFunction)(void (*)(void))produce_records_valid, METH_FASTCALL,
     "produce_records_valid(buf, start, end, count, compacted) -> True when the records pass the "
     "produce validator's checks, or None for the reference"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tidemark.records._speedups",
    "Compiled per-record loops of tidemark.records.batch (the pure-Python ones are the reference).",
    0, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
