/* The steps' sequences recorded in C: `engine.core.step_record.StepRecords` (the Python class, the reference) with
   each step's rows written into growing C arrays as the step is added, and the request id strings of many
   sequences gathered into one UTF-8 buffer.

   StepLog.add(plan) reads `plan.sequence_record()` as StepRecords.add does: the bulk rows (`ColumnRows`: offsets
   `off`, request indices `seq` into the period's id list `ids`, the update count, the prefill rows) and the rows
   after them (query, context, emits lists; their ids are the plan's last requests'). A bulk row is a decode of
   context `off + num_updates - 1`, except a prefill row (row, context, query, blocks). The bulk rows' offsets and
   indices are converted from the fast path's lists only when the lists change (a decode step keeps them: the
   previous step's converted rows are reused), so a step costs a few C loops over its rows.

   StepLog(arenas) writes the query, context, emits and request index arrays into the four writable buffers
   `arenas` lends (the --out writer process's shared memory, which then reads them where they lie:
   roofline.sim.outputs), an array that outgrows its arena moved to memory of its own (`Buf.external`).

   StepLog.finish() hands the arrays over (the log is then closed): query, context, request index (int32), emits
   (one byte each, 0 or 1), the steps' offsets (int64, n + 1), as buffers numpy reads in place, and the request
   names: of every period's id list the stretch the rows point into (its least to its greatest index), in the order
   of the period's first step, then the ids of the rows after the bulk rows, each row's index pointing into it. These are the values and the layout StepRecords.sequences() gives
   (tests/test_step_record.py compares the two on the same plans). StepLog(arenas, row_of) with `row_of` a dict
   (request id -> its row of the run's requests): instead of the names, each name's row there (int32, a buffer), so
   that a sequence's request row is rows[index] (the step trace's schema version 2 stores those: engine.core.trace;
   taken by the --out writer process, not here).

   A plan of the class `bind_record_types` binds (StepPlan) is read at its slots, its bulk rows (ColumnRows) at
   theirs; `StepAdder` makes a simulation's per-step call a C call (`roofline.sim.simulator`); `reap_at_exit` waits
   for the `--out` writer process at the interpreter's very end (`roofline.sim.outputs`).

   Nothing here is a model: no number in this file is a parameter. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_slots.h" /* member_slot_offset */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#ifndef _WIN32
#include <sys/wait.h> /* waitpid: the writer process reaped at the interpreter's end (`reap_at_exit`) */
#include <unistd.h>   /* read: the writer process's pipe (Linux, where roofline.sim.outputs forks) */
#endif

/* ---- an owned block of memory that numpy reads through the buffer protocol (np.frombuffer) ---- */

/* What a block holds, so that its memory can be kept for the next block of the same kind: a simulation hands its
   steps over in parts (`roofline.sim.outputs.StepTraceStream`), each part's arrays freed once handed over (written
   into the writer process's pipe, or encoded), and the next part's arrays are the same sizes. Written into the
   pages of the last part's, they touch no fresh memory: a fresh page is a fault and a page of zeros (on this
   project's VMs first-touched memory costs ~2 ms a MB: BENCHMARKS.md, "Output overhead"), ~17 MB a part of 8,192
   steps of sharegpt. One block kept of each kind (the largest), so what is kept is at most a part's arrays. The
   writer process receives each part's arrays into blocks too (`received_block`: the message's k-th buffer, kind
   KIND_RECEIVED + k), freed once the part is written. */
enum { KIND_NONE, KIND_QUERY, KIND_CONTEXT, KIND_EMITS, KIND_INDEX, KIND_STARTS, KIND_PERIOD, KIND_NUM_BULK,
       KIND_RECEIVED, NUM_KINDS = KIND_RECEIVED + 16 };
#define KEEP_MIN_BYTES (64 * 1024) /* smaller blocks are malloc's own business */
static struct {
    char *data;
    Py_ssize_t cap;
} kept[NUM_KINDS];

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len, cap;
    int kind;
    PyObject *owner; /* memory lent by `owner` (a StepLog's arena, `StepLog(arenas)`), not freed here; else NULL */
} Block;

static void keep_or_free(char *data, Py_ssize_t cap, int kind) {
    if (kind != KIND_NONE && cap >= KEEP_MIN_BYTES && cap > kept[kind].cap) {
        PyMem_RawFree(kept[kind].data);
        kept[kind].data = data;
        kept[kind].cap = cap;
    } else {
        PyMem_RawFree(data);
    }
}

static void Block_dealloc(Block *b) {
    if (b->owner != NULL)
        Py_DECREF(b->owner);
    else
        keep_or_free(b->data, b->cap, b->kind);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int Block_getbuffer(Block *b, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->len, 0, flags);
}

static PyBufferProcs Block_as_buffer = {(getbufferproc)Block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._steprec.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = (destructor)Block_dealloc,
    .tp_as_buffer = &Block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes owned here, read in place through the buffer protocol (np.frombuffer).",
};

/* A growing C array; its first memory the block kept of its kind, if any, or memory lent to it (`external`: an
   arena of `StepLog(arenas)`, never freed or reallocated here; outgrown, its bytes move to memory of its own). */
typedef struct {
    char *data;
    Py_ssize_t len, cap; /* bytes */
    int kind;
    int external;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    if (b->external) { /* (outgrown: the bytes so far into memory of its own, which then grows as any) */
        Py_ssize_t cap = b->cap > (1 << 14) ? b->cap : 1 << 14;
        while (cap < b->len + extra)
            cap *= 2;
        char *data = PyMem_RawMalloc(cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(data, b->data, b->cap); /* (all it holds, as realloc keeps it: rows are written before `len` grows) */
        b->data = data;
        b->cap = cap;
        b->external = 0;
        return 0;
    }
    if (b->data == NULL && b->kind != KIND_NONE && kept[b->kind].data != NULL) {
        b->data = kept[b->kind].data;
        b->cap = kept[b->kind].cap;
        kept[b->kind].data = NULL;
        kept[b->kind].cap = 0;
        if (b->len + extra <= b->cap)
            return 0;
    }
    Py_ssize_t cap = b->cap ? b->cap : 1 << 14;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = PyMem_RawRealloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* The buffer's memory back to its kind's keeping (or freed). */
static void buf_free(Buf *b) {
    if (b->data != NULL && !b->external)
        keep_or_free(b->data, b->cap, b->kind);
    b->data = NULL;
    b->len = b->cap = 0;
    b->external = 0;
}

/* The buffer as a Block (the memory handed over; `b` left empty); memory lent to it stays `owner`'s (a new
   reference: the lender lives as long as the block). */
static PyObject *buf_take(Buf *b, PyObject *owner) {
    Block *block = PyObject_New(Block, &BlockType);
    if (block == NULL)
        return NULL;
    block->owner = NULL;
    if (b->external) {
        block->data = b->data;
        block->len = b->len;
        block->cap = b->cap;
        block->kind = KIND_NONE;
        block->owner = Py_NewRef(owner);
        b->data = NULL;
        b->len = b->cap = 0;
        b->external = 0;
        return (PyObject *)block;
    }
    if (b->data == NULL) { /* (an empty array: one byte, so that the pointer is not NULL) */
        b->data = PyMem_RawMalloc(1);
        if (b->data == NULL) {
            Py_DECREF(block);
            return PyErr_NoMemory();
        }
        b->cap = 1;
    }
    block->data = b->data;
    block->len = b->len;
    block->cap = b->cap;
    block->kind = b->kind;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)block;
}

#define AT(buf, type) ((type *)(buf).data)

/* ---- StepLog ---- */

static PyObject *s_sequence_record, *s_off, *s_seq, *s_num_updates, *s_prefill_rows, *s_ids, *s_requests,
    *s_request_id;

typedef struct {
    PyObject_HEAD
    Buf query, context, emits, index; /* per sequence: int32, int32, uint8, int32 */
    Buf starts;                       /* per step, n + 1: int64 */
    Buf period, num_bulk;             /* per step: int32 (-1: no bulk rows), int64 */
    Py_ssize_t num_steps;
    PyObject *periods;   /* list: the bulk rows' id lists, each once, in the order of their first step */
    PyObject *period_of; /* dict: the address of an id list -> its index in `periods` */
    PyObject *tail_ids;  /* list[str]: the ids of the rows after the bulk rows, step after step */
    PyObject *last_ids;  /* (borrowed: `periods` holds it) */
    Py_ssize_t last_period;
    PyObject *last_off, *last_seq; /* the lists `raw_off` and `raw_seq` were converted from (references held) */
    Buf raw_off, raw_seq;          /* int64, int32 */
    int32_t raw_least, raw_most;   /* raw_seq's least and greatest index (-1, -2 where empty) */
    Buf least, most;               /* per period: the least and greatest index its rows point to (int32) */
    int closed;
    Py_buffer arenas[4]; /* memory lent for query, context, emits and index (`StepLog(arenas)`), if any */
    int num_arenas;
    PyObject *row_of; /* dict: request id -> its row of the run's requests (`StepLog(arenas, row_of)`), or NULL */
} StepLog;

static int StepLog_init(StepLog *self, PyObject *args, PyObject *kwds) {
    PyObject *arenas = Py_None, *row_of = Py_None;
    if (!PyArg_ParseTuple(args, "|OO:StepLog", &arenas, &row_of))
        return -1;
    if (self->periods != NULL || self->num_arenas) {
        PyErr_SetString(PyExc_RuntimeError, "StepLog: initialised already");
        return -1;
    }
    if (row_of != Py_None) {
        if (!PyDict_Check(row_of)) {
            PyErr_SetString(PyExc_TypeError, "StepLog(arenas, row_of): row_of must be a dict or None");
            return -1;
        }
        self->row_of = Py_NewRef(row_of);
    }
    /* The per-sequence arrays written where `arenas` lend memory (the --out writer process's shared memory, which
       it then reads without a copy: roofline.sim.outputs); an array that outgrows its arena moves to memory of its
       own. */
    if (arenas != Py_None) {
        Buf *lent[4] = {&self->query, &self->context, &self->emits, &self->index};
        if (!PyTuple_Check(arenas) || PyTuple_GET_SIZE(arenas) != 4) {
            PyErr_SetString(PyExc_TypeError, "StepLog(arenas): a tuple of 4 writable buffers (query, context, emits, "
                                             "index) or None");
            return -1;
        }
        for (int i = 0; i < 4; i++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(arenas, i), &self->arenas[i], PyBUF_WRITABLE) < 0)
                return -1;
            self->num_arenas++;
            lent[i]->data = self->arenas[i].buf;
            lent[i]->cap = self->arenas[i].len;
            lent[i]->external = 1;
        }
    }
    self->periods = PyList_New(0);
    self->period_of = PyDict_New();
    self->tail_ids = PyList_New(0);
    if (self->periods == NULL || self->period_of == NULL || self->tail_ids == NULL)
        return -1;
    self->query.kind = KIND_QUERY;
    self->context.kind = KIND_CONTEXT;
    self->emits.kind = KIND_EMITS;
    self->index.kind = KIND_INDEX;
    self->starts.kind = KIND_STARTS;
    self->period.kind = KIND_PERIOD;
    self->num_bulk.kind = KIND_NUM_BULK;
    if (buf_reserve(&self->starts, sizeof(int64_t)) < 0)
        return -1;
    AT(self->starts, int64_t)[0] = 0;
    self->starts.len = sizeof(int64_t);
    self->last_period = -1;
    return 0;
}

static void StepLog_dealloc(StepLog *self) {
    Buf *bufs[] = {&self->query, &self->context, &self->emits, &self->index, &self->starts, &self->period,
                   &self->num_bulk, &self->raw_off, &self->raw_seq, &self->least, &self->most};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        buf_free(bufs[i]);
    Py_XDECREF(self->periods);
    Py_XDECREF(self->period_of);
    Py_XDECREF(self->tail_ids);
    Py_XDECREF(self->last_off);
    Py_XDECREF(self->last_seq);
    Py_XDECREF(self->row_of);
    for (int i = 0; i < self->num_arenas; i++)
        PyBuffer_Release(&self->arenas[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An int's value (-1 with an exception when it is none or out of range): a one-digit int (below 2^30: the rows'
   offsets and indices) read from its digit on CPython 3.11, from its compact value on 3.12 on, else by
   PyLong_AsLongLong (~20 instructions a call: 4.4 million calls in a 10,000-request run, most of `read_ints`' 145 M
   instructions: docs/benchmark-history/2026-11-30j-outspeed2.md). */
static inline long long int_value(PyObject *o) {
#if PY_VERSION_HEX >= 0x030C0000
    if (PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject *)o))
        return (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
#elif PY_VERSION_HEX >= 0x030B0000
    if (PyLong_CheckExact(o)) {
        Py_ssize_t size = Py_SIZE(o);
        if (size == 0)
            return 0;
        if (size == 1 || size == -1)
            return size * (long long)((PyLongObject *)o)->ob_digit[0];
    }
#endif
    return PyLong_AsLongLong(o);
}

/* `int_value` of an int that is one digit or none (the rows' offsets and indices) into *v, without a call, and 1;
   0 for any other object (then `int_value`, whose errors need a check). One test of the type and one of the size:
   `read_ints`' loops, 4.4 million ints in a 10,000-request run. */
static inline int small_int(PyObject *o, long long *v) {
#if PY_VERSION_HEX >= 0x030C0000
    if (PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        *v = (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
        return 1;
    }
#elif PY_VERSION_HEX >= 0x030B0000
    if (Py_IS_TYPE(o, &PyLong_Type)) {
        Py_ssize_t size = Py_SIZE(o);
        if ((size_t)(size + 1) <= 2) { /* (size -1, 0 or 1: times the digit, whatever a zero's holds) */
            *v = size * (long long)((PyLongObject *)o)->ob_digit[0];
            return 1;
        }
    }
#endif
    return 0;
}

/* The values of `items[lo:hi]` (ints) into dst[lo:hi] (int64 or int32, `wide`); -1 with an exception set where one
   is not an int in range. */
static int convert_ints(PyObject **items, Py_ssize_t lo, Py_ssize_t hi, char *dst, int wide) {
    for (Py_ssize_t i = lo; i < hi; i++) {
        long long v;
        if (!small_int(items[i], &v) && (v = int_value(items[i])) == -1 && PyErr_Occurred())
            return -1;
        if (wide)
            ((int64_t *)dst)[i] = v;
        else
            ((int32_t *)dst)[i] = (int32_t)v;
    }
    return 0;
}

/* Reads a sequence of ints (a list, else any sequence: a numpy array's items) into `out` (int64 or int32, `wide`;
   int32: their least and greatest value into *least and *most, -1 and -2 where there is none: the stretch of the
   period's id list the part's names take, `StepLog_finish`).

   `old`: the list `out` holds the values of (or NULL). The fast path's lists change by a few rows at a time (a
   request that joins, finishes or is preempted) and keep the others' int objects: the rows at the start and at
   the end that are the same objects as `old`'s are the same values, taken from `out` as it is (those at the end
   moved to their new place), and only the rows between them converted, not every row
   (docs/benchmark-history/2026-12-01d-outspeed5.md). */
static int read_ints(PyObject *obj, Buf *out, int wide, Py_ssize_t *n, int32_t *least, int32_t *most,
                     PyObject *old) {
    PyObject *fast = PySequence_Fast(obj, "StepLog: a sequence of ints expected");
    if (fast == NULL)
        return -1;
    Py_ssize_t size = PySequence_Fast_GET_SIZE(fast), width = wide ? 8 : 4;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    Py_ssize_t num_old = 0, head = 0, tail = 0;
    if (old != NULL && PyList_CheckExact(old) && PyList_CheckExact(fast) && out->len == PyList_GET_SIZE(old) * width) {
        PyObject **was = ((PyListObject *)old)->ob_item;
        num_old = PyList_GET_SIZE(old);
        Py_ssize_t most_same = size < num_old ? size : num_old, block = 8; /* (8 pointers a memcmp, then one by one) */
        while (head + block <= most_same && !memcmp(items + head, was + head, block * sizeof(PyObject *)))
            head += block;
        while (head < most_same && items[head] == was[head])
            head++;
        while (tail + block <= most_same - head
               && !memcmp(items + size - tail - block, was + num_old - tail - block, block * sizeof(PyObject *)))
            tail += block;
        while (tail < most_same - head && items[size - 1 - tail] == was[num_old - 1 - tail])
            tail++;
    }
    if (buf_reserve(out, size * width - out->len) < 0) {
        Py_DECREF(fast);
        return -1;
    }
    if (tail && size != num_old) /* (the rows at the end to their new place: before the rows between are written) */
        memmove(out->data + (size - tail) * width, out->data + (num_old - tail) * width, tail * width);
    out->len = 0;
    if (convert_ints(items, head, size - tail, out->data, wide) < 0) {
        Py_DECREF(fast);
        return -1;
    }
    if (!wide) {
        const int32_t *values = AT(*out, int32_t);
        int32_t lo = INT32_MAX, hi = INT32_MIN;
        for (Py_ssize_t i = 0; i < size; i++) {
            lo = values[i] < lo ? values[i] : lo;
            hi = values[i] > hi ? values[i] : hi;
        }
        *least = size ? lo : -1;
        *most = size ? hi : -2;
    }
    out->len = size * width;
    *n = size;
    Py_DECREF(fast);
    return 0;
}

/* ---- a plan's record read at its slots ---- */

/* The plan class and the bulk rows' class bound by `bind_record_types` (engine.core.step_plan's StepPlan and
   ColumnRows), and their slots' offsets: a plan of exactly that class is read at the slots its `sequence_record()`
   returns (`PLAN_SLOTS`, in its order), bulk rows of exactly that class at theirs (`ROWS_SLOTS`), as the member
   descriptors read them; anything else (a subclass, another class, a slot not set) by `sequence_record()` and
   attribute lookups: a step's Python method call and five lookups less, every step of a simulation's `--out`
   (docs/benchmark-history/2026-12-01d-outspeed5.md). */
enum { NUM_PLAN_SLOTS = 4, NUM_ROWS_SLOTS = 5 };
static const char *PLAN_SLOTS[NUM_PLAN_SLOTS] = {"_columns", "_query", "_context", "_emits"};
static const char *ROWS_SLOTS[NUM_ROWS_SLOTS] = {"off", "seq", "num_updates", "prefill_rows", "ids"};
static PyTypeObject *plan_type, *rows_type;
static Py_ssize_t plan_offsets[NUM_PLAN_SLOTS], rows_offsets[NUM_ROWS_SLOTS];

/* The offsets of `names` in `cls` into `offsets`: 1 where every one is a slot, 0 where one is not, -1 on error. */
static int bind_slots(PyObject *cls, const char **names, int n, Py_ssize_t *offsets) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind_record_types(plan_cls, rows_cls): classes");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *key = PyUnicode_InternFromString(names[i]);
        if (key == NULL)
            return -1;
        offsets[i] = member_slot_offset((PyTypeObject *)cls, key, 0);
        Py_DECREF(key);
        if (offsets[i] < 0)
            return 0;
    }
    return 1;
}

static PyObject *bind_record_types(PyObject *module, PyObject *args) {
    PyObject *plan_cls, *rows_cls;
    if (!PyArg_ParseTuple(args, "OO:bind_record_types", &plan_cls, &rows_cls))
        return NULL;
    Py_ssize_t plan_at[NUM_PLAN_SLOTS], rows_at[NUM_ROWS_SLOTS];
    int plan_ok = bind_slots(plan_cls, PLAN_SLOTS, NUM_PLAN_SLOTS, plan_at);
    int rows_ok = plan_ok < 0 ? -1 : bind_slots(rows_cls, ROWS_SLOTS, NUM_ROWS_SLOTS, rows_at);
    if (rows_ok < 0)
        return NULL;
    Py_CLEAR(plan_type);
    Py_CLEAR(rows_type);
    if (plan_ok) {
        memcpy(plan_offsets, plan_at, sizeof(plan_offsets));
        plan_type = (PyTypeObject *)Py_NewRef(plan_cls);
    }
    if (rows_ok) {
        memcpy(rows_offsets, rows_at, sizeof(rows_offsets));
        rows_type = (PyTypeObject *)Py_NewRef(rows_cls);
    }
    return PyBool_FromLong(plan_ok && rows_ok);
}

/* The `n` slots of `obj` at `offsets` as new references into `out`: 1 where all are set, else 0 (nothing taken). */
static int read_slots(PyObject *obj, const Py_ssize_t *offsets, int n, PyObject **out) {
    for (int i = 0; i < n; i++)
        if (*(PyObject **)((char *)obj + offsets[i]) == NULL)
            return 0;
    for (int i = 0; i < n; i++)
        out[i] = Py_NewRef(*(PyObject **)((char *)obj + offsets[i]));
    return 1;
}

static Py_ssize_t period_index(StepLog *self, PyObject *ids) {
    if (ids == self->last_ids)
        return self->last_period;
    PyObject *key = PyLong_FromVoidPtr(ids);
    if (key == NULL)
        return -1;
    PyObject *found = PyDict_GetItemWithError(self->period_of, key);
    Py_ssize_t period;
    if (found != NULL) {
        period = PyLong_AsSsize_t(found);
    } else if (PyErr_Occurred()) {
        period = -1;
    } else {
        period = PyList_GET_SIZE(self->periods);
        PyObject *value = PyLong_FromSsize_t(period);
        if (value == NULL || buf_reserve(&self->least, 4) < 0 || buf_reserve(&self->most, 4) < 0
            || PyDict_SetItem(self->period_of, key, value) < 0 || PyList_Append(self->periods, ids) < 0) {
            period = -1;
        } else { /* (no row points into it yet) */
            AT(self->least, int32_t)[period] = INT32_MAX;
            AT(self->most, int32_t)[period] = -1;
            self->least.len += 4;
            self->most.len += 4;
        }
        Py_XDECREF(value);
    }
    Py_DECREF(key);
    if (period >= 0) {
        self->last_ids = ids;
        self->last_period = period;
    }
    return period;
}

/* The bulk rows of `bulk` (a ColumnRows) after the `start` sequences written so far. */
static int add_bulk(StepLog *self, PyObject *bulk, Py_ssize_t start, Py_ssize_t *num_rows, Py_ssize_t *period) {
    int rc = -1;
    PyObject *fields[NUM_ROWS_SLOTS] = {NULL};
    if (Py_TYPE(bulk) != rows_type || !read_slots(bulk, rows_offsets, NUM_ROWS_SLOTS, fields)) {
        PyObject *names[NUM_ROWS_SLOTS] = {s_off, s_seq, s_num_updates, s_prefill_rows, s_ids};
        for (int i = 0; i < NUM_ROWS_SLOTS && (i == 0 || fields[i - 1] != NULL); i++)
            fields[i] = PyObject_GetAttr(bulk, names[i]);
    }
    PyObject *off = fields[0], *seq = fields[1], *nu_obj = fields[2], *prefill = fields[3], *ids = fields[4];
    if (ids == NULL)
        goto done;
    long long num_updates = PyLong_AsLongLong(nu_obj);
    if (num_updates == -1 && PyErr_Occurred())
        goto done;
    if (off != self->last_off || seq != self->last_seq) { /* (a change of rows makes new lists) */
        Py_ssize_t n_off, n_seq;
        int failed = read_ints(off, &self->raw_off, 1, &n_off, NULL, NULL, self->last_off) < 0
                     || read_ints(seq, &self->raw_seq, 0, &n_seq, &self->raw_least, &self->raw_most, self->last_seq) < 0;
        Py_CLEAR(self->last_off);
        Py_CLEAR(self->last_seq);
        if (failed) {
            self->raw_off.len = self->raw_seq.len = 0; /* (what they hold is no list's now) */
            goto done;
        }
        if (n_off != n_seq) {
            PyErr_SetString(PyExc_ValueError, "StepLog: bulk rows' off and seq differ in length");
            goto done;
        }
        Py_INCREF(off);
        Py_INCREF(seq);
        self->last_off = off;
        self->last_seq = seq;
    }
    Py_ssize_t n = self->raw_off.len / 8;
    if (buf_reserve(&self->query, (start + n) * 4 - self->query.len) < 0
        || buf_reserve(&self->context, (start + n) * 4 - self->context.len) < 0
        || buf_reserve(&self->emits, (start + n) - self->emits.len) < 0
        || buf_reserve(&self->index, (start + n) * 4 - self->index.len) < 0)
        goto done;
    int32_t *restrict query = AT(self->query, int32_t) + start, *restrict context = AT(self->context, int32_t) + start;
    int32_t *index = AT(self->index, int32_t) + start;
    const int64_t *restrict raw_off = AT(self->raw_off, int64_t);
    int64_t delta = num_updates - 1;
    for (Py_ssize_t i = 0; i < n; i++) /* (two loops, each the compiler's vector loop) */
        context[i] = (int32_t)(raw_off[i] + delta);
    for (Py_ssize_t i = 0; i < n; i++)
        query[i] = 1;
    memset(self->emits.data + start, 1, n);
    memcpy(index, self->raw_seq.data, n * 4);
    if (prefill != Py_None) {
        PyObject *rows = PySequence_Fast(prefill, "StepLog: prefill_rows must be a sequence");
        if (rows == NULL)
            goto done;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(rows); k++) {
            PyObject *row = PySequence_Fast_GET_ITEM(rows, k);
            long long r, ctx, nq;
            if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 3) {
                PyErr_SetString(PyExc_TypeError, "StepLog: a prefill row is a tuple (row, context, query, blocks)");
                Py_DECREF(rows);
                goto done;
            }
            r = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 0));
            ctx = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 1));
            nq = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 2));
            if (PyErr_Occurred()) {
                Py_DECREF(rows);
                goto done;
            }
            if (r < -n || r >= n) {
                PyErr_SetString(PyExc_IndexError, "StepLog: a prefill row outside the bulk rows");
                Py_DECREF(rows);
                goto done;
            }
            if (r < 0)
                r += n;
            context[r] = (int32_t)ctx;
            query[r] = (int32_t)nq;
        }
        Py_DECREF(rows);
    }
    *period = period_index(self, ids);
    if (*period < 0)
        goto done;
    if (n) { /* (the stretch of the period's list the part's names take: StepLog_finish) */
        int32_t *least = AT(self->least, int32_t) + *period, *most = AT(self->most, int32_t) + *period;
        *least = self->raw_least < *least ? self->raw_least : *least;
        *most = self->raw_most > *most ? self->raw_most : *most;
    }
    *num_rows = n;
    rc = 0;
done:
    Py_XDECREF(off);
    Py_XDECREF(seq);
    Py_XDECREF(nu_obj);
    Py_XDECREF(prefill);
    Py_XDECREF(ids);
    return rc;
}

/* The rows after the bulk rows: values from the lists, ids from the plan's last requests. */
static int add_tail(StepLog *self, PyObject *plan, PyObject *query_obj, PyObject *context_obj, PyObject *emits_obj,
                    Py_ssize_t start, Py_ssize_t *num_rows) {
    int rc = -1;
    if (PyList_CheckExact(query_obj) && PyList_CheckExact(context_obj) && PyList_CheckExact(emits_obj)
        && PyList_GET_SIZE(query_obj) == 0) { /* (most steps: every row a bulk row) */
        *num_rows = 0;
        return 0;
    }
    PyObject *q = PySequence_Fast(query_obj, "StepLog: query lengths must be a sequence");
    PyObject *c = q ? PySequence_Fast(context_obj, "StepLog: context lengths must be a sequence") : NULL;
    PyObject *e = c ? PySequence_Fast(emits_obj, "StepLog: emits must be a sequence") : NULL;
    PyObject *requests = NULL, *fast_requests = NULL;
    if (e == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(q);
    *num_rows = n;
    if (n == 0) {
        rc = 0;
        goto done;
    }
    if (PySequence_Fast_GET_SIZE(c) != n || PySequence_Fast_GET_SIZE(e) != n) {
        PyErr_SetString(PyExc_ValueError, "StepLog: query, context and emits differ in length");
        goto done;
    }
    requests = PyObject_GetAttr(plan, s_requests);
    fast_requests = requests ? PySequence_Fast(requests, "StepLog: plan.requests must be a sequence") : NULL;
    if (fast_requests == NULL)
        goto done;
    Py_ssize_t num_requests = PySequence_Fast_GET_SIZE(fast_requests);
    if (num_requests < n) {
        PyErr_SetString(PyExc_ValueError, "StepLog: fewer requests than rows after the bulk rows");
        goto done;
    }
    if (buf_reserve(&self->query, (start + n) * 4 - self->query.len) < 0
        || buf_reserve(&self->context, (start + n) * 4 - self->context.len) < 0
        || buf_reserve(&self->emits, (start + n) - self->emits.len) < 0
        || buf_reserve(&self->index, (start + n) * 4 - self->index.len) < 0)
        goto done;
    Py_ssize_t first_tail = PyList_GET_SIZE(self->tail_ids);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long qv = int_value(PySequence_Fast_GET_ITEM(q, i));
        long long cv = int_value(PySequence_Fast_GET_ITEM(c, i));
        int ev = PyObject_IsTrue(PySequence_Fast_GET_ITEM(e, i));
        if (PyErr_Occurred() || ev < 0)
            goto done;
        AT(self->query, int32_t)[start + i] = (int32_t)qv;
        AT(self->context, int32_t)[start + i] = (int32_t)cv;
        self->emits.data[start + i] = (char)ev;
        AT(self->index, int32_t)[start + i] = (int32_t)(first_tail + i);
        PyObject *id = PyObject_GetAttr(PySequence_Fast_GET_ITEM(fast_requests, num_requests - n + i), s_request_id);
        if (id == NULL)
            goto done;
        int failed = PyList_Append(self->tail_ids, id);
        Py_DECREF(id);
        if (failed < 0)
            goto done;
    }
    rc = 0;
done:
    Py_XDECREF(q);
    Py_XDECREF(c);
    Py_XDECREF(e);
    Py_XDECREF(requests);
    Py_XDECREF(fast_requests);
    return rc;
}

static PyObject *StepLog_add(StepLog *self, PyObject *plan) {
    if (self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "StepLog: add after finish");
        return NULL;
    }
    if (buf_reserve(&self->starts, 8) < 0 || buf_reserve(&self->period, 4) < 0 || buf_reserve(&self->num_bulk, 8) < 0)
        return NULL;
    /* (bulk, query, context, emits): the plan's slots, else `plan.sequence_record()`'s */
    PyObject *record = NULL, *fields[NUM_PLAN_SLOTS];
    if (Py_TYPE(plan) != plan_type || !read_slots(plan, plan_offsets, NUM_PLAN_SLOTS, fields)) {
        record = PyObject_CallMethodNoArgs(plan, s_sequence_record);
        if (record == NULL)
            return NULL;
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != NUM_PLAN_SLOTS) {
            PyErr_SetString(PyExc_TypeError, "StepLog: sequence_record() must give (bulk, query, context, emits)");
            Py_DECREF(record);
            return NULL;
        }
        for (int i = 0; i < NUM_PLAN_SLOTS; i++)
            fields[i] = Py_NewRef(PyTuple_GET_ITEM(record, i));
        Py_DECREF(record);
    }
    PyObject *bulk = fields[0];
    Py_ssize_t start = self->query.len / 4, num_bulk = 0, num_tail = 0, period = -1;
    int failed = (bulk != Py_None && add_bulk(self, bulk, start, &num_bulk, &period) < 0)
                 || add_tail(self, plan, fields[1], fields[2], fields[3], start + num_bulk, &num_tail) < 0;
    for (int i = 0; i < NUM_PLAN_SLOTS; i++)
        Py_DECREF(fields[i]);
    if (failed)
        return NULL;
    Py_ssize_t end = start + num_bulk + num_tail;
    self->query.len = self->context.len = self->index.len = end * 4;
    self->emits.len = end;
    AT(self->starts, int64_t)[self->num_steps + 1] = end;
    AT(self->period, int32_t)[self->num_steps] = (int32_t)period;
    AT(self->num_bulk, int64_t)[self->num_steps] = num_bulk;
    self->num_steps++;
    self->starts.len += 8;
    self->period.len += 4;
    self->num_bulk.len += 8;
    Py_RETURN_NONE;
}

static PyObject *StepLog_finish(StepLog *self, PyObject *unused) {
    if (self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "StepLog: finished already");
        return NULL;
    }
    /* The names: of each period's list the stretch its rows here point into (from the least index to the greatest:
       a period's list only grows, with every request that joined it, so the whole list would make each part's names
       as many as the run's requests so far), then the rows' after the bulk rows. */
    Py_ssize_t num_periods = PyList_GET_SIZE(self->periods);
    Py_ssize_t *base = PyMem_RawMalloc((num_periods + 1) * sizeof(Py_ssize_t));
    PyObject *rows = NULL; /* (with row_of: each name's row, int32) */
    const int32_t *least = AT(self->least, int32_t), *most = AT(self->most, int32_t); /* (kept by add_bulk) */
    PyObject *names = PyList_New(0);
    if (names == NULL)
        goto fail;
    if (base == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    const int64_t *starts = AT(self->starts, int64_t), *num_bulk = AT(self->num_bulk, int64_t);
    const int32_t *period = AT(self->period, int32_t);
    int32_t *index = AT(self->index, int32_t);
    for (Py_ssize_t p = 0; p < num_periods; p++) {
        PyObject *ids = PyList_GET_ITEM(self->periods, p);
        if (most[p] < least[p]) { /* (no rows point into it) */
            base[p] = 0;
            continue;
        }
        base[p] = PyList_GET_SIZE(names) - least[p];
        PyObject *stretch = PyList_GetSlice(ids, least[p], (Py_ssize_t)most[p] + 1); /* (as it is now) */
        if (stretch == NULL)
            goto fail;
        int failed = PyList_SetSlice(names, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, stretch);
        Py_DECREF(stretch);
        if (failed < 0)
            goto fail;
    }
    Py_ssize_t tail_base = PyList_GET_SIZE(names);
    if (PyList_SetSlice(names, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, self->tail_ids) < 0)
        goto fail;
    if (self->row_of != NULL) { /* each name's row of the run's requests, in place of the names */
        Py_ssize_t num_names = PyList_GET_SIZE(names);
        rows = PyBytes_FromStringAndSize(NULL, num_names * (Py_ssize_t)sizeof(int32_t));
        if (rows == NULL)
            goto fail;
        int32_t *row_at = (int32_t *)PyBytes_AS_STRING(rows);
        for (Py_ssize_t k = 0; k < num_names; k++) {
            PyObject *name = PyList_GET_ITEM(names, k);
            PyObject *row = PyDict_GetItemWithError(self->row_of, name);
            if (row == NULL) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_KeyError, "StepLog: request %R is not in row_of", name);
                goto fail;
            }
            long r = PyLong_AsLong(row);
            if (r == -1 && PyErr_Occurred())
                goto fail;
            if (r < 0 || r > INT32_MAX) {
                PyErr_Format(PyExc_ValueError, "StepLog: request %R's row %ld is not an int32 row", name, r);
                goto fail;
            }
            row_at[k] = (int32_t)r;
        }
        Py_SETREF(names, rows);
        rows = NULL;
    }
    for (Py_ssize_t i = 0; i < self->num_steps; i++) {
        int64_t lo = starts[i], mid = lo + num_bulk[i], hi = starts[i + 1];
        int32_t b = period[i] >= 0 ? (int32_t)base[period[i]] : 0;
        if (b)
            for (int64_t j = lo; j < mid; j++)
                index[j] += b;
        for (int64_t j = mid; j < hi; j++)
            index[j] += (int32_t)tail_base;
    }
    PyMem_RawFree(base);
    base = NULL;

    PyObject *me = (PyObject *)self; /* (the lender of `arenas`' memory: alive while a block of it is) */
    PyObject *query = buf_take(&self->query, me), *context = buf_take(&self->context, me);
    PyObject *emits = buf_take(&self->emits, me), *index_block = buf_take(&self->index, me);
    PyObject *starts_block = buf_take(&self->starts, me);
    if (query == NULL || context == NULL || emits == NULL || index_block == NULL || starts_block == NULL) {
        Py_XDECREF(query);
        Py_XDECREF(context);
        Py_XDECREF(emits);
        Py_XDECREF(index_block);
        Py_XDECREF(starts_block);
        goto fail;
    }
    self->closed = 1;
    Py_CLEAR(self->last_off);
    Py_CLEAR(self->last_seq);
    return Py_BuildValue("(NNNNNN)", query, context, emits, starts_block, names, index_block);
fail:
    PyMem_RawFree(base);
    Py_XDECREF(rows);
    Py_XDECREF(names);
    return NULL;
}

static Py_ssize_t StepLog_len(StepLog *self) { return self->num_steps; }

static PySequenceMethods StepLog_as_sequence = {.sq_length = (lenfunc)StepLog_len};

static PyMethodDef StepLog_methods[] = {
    {"add", (PyCFunction)StepLog_add, METH_O, "add(plan): record the plan's sequences (StepRecords.add)."},
    {"finish", (PyCFunction)StepLog_finish, METH_NOARGS,
     "finish() -> (query, context, emits, starts, names, index): the arrays as buffers; the log is closed."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StepLogType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._steprec.StepLog",
    .tp_basicsize = sizeof(StepLog),
    .tp_dealloc = (destructor)StepLog_dealloc,
    .tp_as_sequence = &StepLog_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "StepLog(arenas=None, row_of=None): the sequences of every step added, written into C arrays "
              "(engine.core.step_record); `arenas`: 4 writable buffers lent for the query, context, emits and index "
              "arrays; `row_of`: a dict of request id -> row, finish() then giving each name's row (int32) for the names.",
    .tp_methods = StepLog_methods,
    .tp_init = (initproc)StepLog_init,
    .tp_new = PyType_GenericNew,
};

/* ---- StepAdder ---- */

/* StepAdder(fallback, attr): called as (owner, plan, full), `getattr(owner, attr).add(plan)` where `full` is False,
   else `fallback(owner, plan, full)`: a simulation's per-step call (`roofline.sim.simulator._record_rest` where
   every step's sequences are recorded, which is then the fallback) without a Python frame for the common step. */
typedef struct {
    PyObject_HEAD
    PyObject *fallback, *attr;
    vectorcallfunc vectorcall;
} StepAdder;

static PyObject *s_add;

static PyObject *StepAdder_vectorcall(StepAdder *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "StepAdder: (owner, plan, full) expected");
        return NULL;
    }
    if (args[2] != Py_False)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *records = PyObject_GetAttr(args[0], self->attr);
    if (records == NULL)
        return NULL;
    PyObject *call[3] = {NULL, records, args[1]}; /* (call[0]: the room PY_VECTORCALL_ARGUMENTS_OFFSET lends) */
    PyObject *result = PyObject_VectorcallMethod(s_add, call + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(records);
    return result;
}

static PyObject *StepAdder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *fallback, *attr;
    if (!PyArg_ParseTuple(args, "OU:StepAdder", &fallback, &attr))
        return NULL;
    StepAdder *self = (StepAdder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->fallback = Py_NewRef(fallback);
    self->attr = Py_NewRef(attr);
    self->vectorcall = (vectorcallfunc)StepAdder_vectorcall;
    return (PyObject *)self;
}

static void StepAdder_dealloc(StepAdder *self) {
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->attr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject StepAdderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._steprec.StepAdder",
    .tp_basicsize = sizeof(StepAdder),
    .tp_dealloc = (destructor)StepAdder_dealloc,
    .tp_vectorcall_offset = offsetof(StepAdder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "StepAdder(fallback, attr)(owner, plan, full): getattr(owner, attr).add(plan) where full is False, "
              "else fallback(owner, plan, full).",
    .tp_new = StepAdder_new,
};

/* ---- received_block, kept_bytes ---- */

static PyObject *received_block(PyObject *module, PyObject *args) {
    Py_ssize_t nbytes, slot;
    int fd = -1;
    if (!PyArg_ParseTuple(args, "nn|i:received_block", &nbytes, &slot, &fd))
        return NULL;
    if (nbytes < 0 || slot < 0) {
        PyErr_SetString(PyExc_ValueError, "received_block: nbytes and slot must be >= 0");
        return NULL;
    }
    Buf buf = {.kind = slot < NUM_KINDS - KIND_RECEIVED ? KIND_RECEIVED + (int)slot : KIND_NONE};
    if (buf_reserve(&buf, nbytes) < 0)
        return NULL;
    /* Read from `fd` (a pipe) until the block is full, without the GIL: one call a buffer, not one a pipe's worth
       of it (a thread that reads the pipe takes the GIL only then). */
    Py_ssize_t at = 0;
    int error = 0;
    if (fd >= 0) {
#ifdef _WIN32
        buf_free(&buf);
        PyErr_SetString(PyExc_NotImplementedError, "received_block: reading a pipe (where the platform forks)");
        return NULL;
#else
        Py_BEGIN_ALLOW_THREADS
        while (at < nbytes) {
            ssize_t got = read(fd, buf.data + at, (size_t)(nbytes - at));
            if (got > 0) {
                at += got;
            } else if (got == 0) {
                break;
            } else if (errno != EINTR) {
                error = errno;
                break;
            }
        }
        Py_END_ALLOW_THREADS
        if (error) {
            buf_free(&buf);
            errno = error;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        if (at < nbytes) {
            buf_free(&buf);
            PyErr_SetString(PyExc_EOFError, "the simulation's process closed the pipe before the last part");
            return NULL;
        }
#endif
    }
    buf.len = nbytes;
    PyObject *block = buf_take(&buf, NULL);
    if (block == NULL)
        buf_free(&buf);
    return block;
}

static PyObject *kept_bytes(PyObject *module, PyObject *unused) {
    Py_ssize_t total = 0;
    for (int k = 0; k < NUM_KINDS; k++)
        total += kept[k].cap;
    return PyLong_FromSsize_t(total);
}

/* ---- reap_at_exit ---- */

/* reap_at_exit(pid) -> bool: wait for the child `pid` at the very end of the interpreter's finalization (Py_AtExit:
   after the exit handlers, the modules' teardown and the last collection), not before them as `atexit` would, so
   that the writer process's own end (the kernel taking back its memory) runs beside the simulation's process's
   finalization instead of before it (docs/benchmark-history/2026-12-01d-outspeed5.md).
   False where it cannot (no fork on the platform, or all `MAX_REAPED` places taken): the caller waits its own way. */
#define MAX_REAPED 32
#ifndef _WIN32
static pid_t reaped[MAX_REAPED];
static int num_reaped, reaping_registered;

static void reap_all(void) {
    for (int i = 0; i < num_reaped; i++) {
        int status;
        while (waitpid(reaped[i], &status, 0) < 0 && errno == EINTR)
            ;
    }
    num_reaped = 0;
}
#endif

static PyObject *reap_at_exit(PyObject *module, PyObject *arg) {
    long pid = PyLong_AsLong(arg);
    if (pid == -1 && PyErr_Occurred())
        return NULL;
#ifdef _WIN32
    Py_RETURN_FALSE;
#else
    if (pid <= 0 || num_reaped == MAX_REAPED)
        Py_RETURN_FALSE;
    if (!reaping_registered) {
        if (Py_AtExit(reap_all) < 0)
            Py_RETURN_FALSE;
        reaping_registered = 1;
    }
    reaped[num_reaped++] = (pid_t)pid;
    Py_RETURN_TRUE;
#endif
}

static PyMethodDef methods[] = {
    {"received_block", received_block, METH_VARARGS,
     "received_block(nbytes, slot[, fd]) -> Block: nbytes of writable memory, the block kept of `slot`'s kind (the "
     "k-th buffer of a message) if any, kept again for the next one once freed; read from the pipe `fd` if given "
     "(without the GIL; EOFError if it ends first), else uninitialised."},
    {"kept_bytes", kept_bytes, METH_NOARGS, "kept_bytes() -> int: the bytes kept for the next blocks (all kinds)."},
    {"bind_record_types", bind_record_types, METH_VARARGS,
     "bind_record_types(plan_cls, rows_cls) -> bool: StepLog.add reads plans and bulk rows of exactly these classes at "
     "their slots (sequence_record()'s and the rows' fields); True where both have them all."},
    {"reap_at_exit", reap_at_exit, METH_O,
     "reap_at_exit(pid) -> bool: wait for the child pid at the end of the interpreter's finalization (Py_AtExit); "
     "False where it cannot."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_steprec", "The steps' sequences recorded in C (engine/core/step_record.py's reference).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__steprec(void) {
    struct { PyObject **name; const char *text; } names[] = {
        {&s_sequence_record, "sequence_record"}, {&s_off, "off"}, {&s_seq, "seq"}, {&s_num_updates, "num_updates"},
        {&s_prefill_rows, "prefill_rows"}, {&s_ids, "ids"}, {&s_requests, "requests"},
        {&s_request_id, "request_id"}, {&s_add, "add"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    if (PyType_Ready(&BlockType) < 0 || PyType_Ready(&StepLogType) < 0 || PyType_Ready(&StepAdderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "StepLog", (PyObject *)&StepLogType) < 0
        || PyModule_AddObjectRef(m, "StepAdder", (PyObject *)&StepAdderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
