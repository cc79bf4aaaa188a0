/* A finished request's runs of stamps in C: `Segments.add`'s two shortcuts (roofline/sim/token_times.py, the
 * reference), on the request's token times as the scheduler keeps them (a list of floats: no conversion to an
 * array, which cost ~200 instructions a token for a preempted request) or as a float64 array.
 *
 * runs(values, num, ascending, times) -> list of (first stamp, length) in order, or None where the Python code
 * decides (its search): the same runs as `Segments.add` finds where it takes either shortcut, by the same
 * comparisons of the same floats:
 * - one run ending at the latest stamp: the stamps ascend, the run's first stamp equals the first time and the stamp
 *   before it is lower, and every time equals its stamp (`run == times`);
 * - else, the stamps ascending: `_runs_from_end` (each run the longest tail of the times left equal to the stamps
 *   ending where the run after it starts; the times strictly ascending, each run's first stamp above the one before,
 *   the end of the run before by a search of its last time, side "right").
 * Anything else (a time that is no float, a shortcut that does not hold) gives None, and the Python code runs as
 * before. tests/test_token_times.py compares the two on requests of every kind.
 *
 * Also: the step rows (`StepBlock`, recorder.py's `StepRows`), a finished request's columns and runs in one call
 * (`Finisher`, recorder.py's `Recorder.finished`) and the ITL gaps' sums in order (`ordered_sum`, token_times.py's
 * `TokenTimes.values`: numpy's mean and std of the gaps without joining them into an array), and the simulator's
 * event loop with its common step (`run_loop`, simulator.py's `_Simulation.run`).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_slots.h" /* member_slot_offset */
#include <stdint.h>
#include <string.h>

/* The times as doubles: a list's items read in place, else a C-contiguous buffer of doubles. */
typedef struct {
    PyObject *list;
    const double *data;
    Py_buffer view;
    int has_view;
} Times;

static int times_open(Times *t, PyObject *obj, Py_ssize_t *n) {
    t->list = NULL;
    t->data = NULL;
    t->has_view = 0;
    if (PyList_CheckExact(obj)) {  /* (its items' types: `times_floats`) */
        t->list = obj;
        *n = PyList_GET_SIZE(obj);
        return 1;
    }
    if (PyObject_GetBuffer(obj, &t->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    t->has_view = 1;
    if (t->view.ndim != 1 || t->view.itemsize != sizeof(double) || t->view.format == NULL
        || strcmp(t->view.format, "d") != 0)
        return 0;
    t->data = (const double *)t->view.buf;
    *n = t->view.shape[0];
    return 1;
}

/* Whether every time is a float (a list's items; a buffer's are doubles). */
static int times_floats(const Times *t) {
    if (t->list == NULL)
        return 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(t->list); i++)
        if (!PyFloat_CheckExact(PyList_GET_ITEM(t->list, i)))
            return 0;
    return 1;
}

static void times_close(Times *t) {
    if (t->has_view)
        PyBuffer_Release(&t->view);
    t->has_view = 0;
}

static inline double time_at(const Times *t, Py_ssize_t i) {
    return t->list ? PyFloat_AS_DOUBLE(PyList_GET_ITEM(t->list, i)) : t->data[i];
}

/* `values[:hi].searchsorted(x, side="right")` of ascending values: the first index whose value is above x. */
static Py_ssize_t search_right(const double *values, Py_ssize_t hi, double x) {
    Py_ssize_t lo = 0;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (x < values[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static PyObject *run_pair(Py_ssize_t start, Py_ssize_t length) {
    return Py_BuildValue("(nn)", start, length);
}

/* runs(values, num, ascending, times) */
static PyObject *mod_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "runs(values, num, ascending, times)");
        return NULL;
    }
    Py_ssize_t num = PyLong_AsSsize_t(args[1]);
    if (num == -1 && PyErr_Occurred())
        return NULL;
    int ascending = PyObject_IsTrue(args[2]);
    if (ascending < 0)
        return NULL;
    if (!ascending)
        Py_RETURN_NONE;
    Py_buffer vview;
    if (PyObject_GetBuffer(args[0], &vview, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    Times times;
    Py_ssize_t n = 0;
    if (vview.ndim != 1 || vview.itemsize != sizeof(double) || vview.format == NULL || strcmp(vview.format, "d") != 0
        || num < 0 || num > vview.shape[0]) {
        PyBuffer_Release(&vview);
        Py_RETURN_NONE;
    }
    const double *values = (const double *)vview.buf;
    if (!times_open(&times, args[3], &n) || n == 0 || num - n < 0)
        goto none;
    Py_ssize_t first = num - n;
    if (times.list != NULL && !PyFloat_CheckExact(PyList_GET_ITEM(times.list, 0)))
        goto none;
    double t0 = time_at(&times, 0);
    if (values[first] == t0 && (first == 0 || values[first - 1] < t0)) {  /* one run ending at the latest stamp */
        if (times.list != NULL) {  /* (each item a float, and equal to its stamp, in one pass) */
            PyObject **items = ((PyListObject *)times.list)->ob_item;
            const double *at = values + first;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *item = items[i];
                if (!PyFloat_CheckExact(item) || !(at[i] == PyFloat_AS_DOUBLE(item)))
                    goto none;  /* (the Python code searches, or decides) */
            }
        } else {
            for (Py_ssize_t i = 0; i < n; i++)
                if (!(values[first + i] == times.data[i]))
                    goto none;  /* (the Python code searches) */
        }
        result = PyList_New(1);
        PyObject *pair = result ? run_pair(first, n) : NULL;
        if (pair == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, 0, pair);
        goto done;
    }
    /* `_runs_from_end` */
    if (!times_floats(&times))
        goto none;
    for (Py_ssize_t i = 1; i < n; i++)
        if (!(time_at(&times, i) > time_at(&times, i - 1)))
            goto none;
    result = PyList_New(0);
    if (result == NULL)
        goto done;
    Py_ssize_t left = n, end = num;
    while (left) {
        Py_ssize_t m = left < end ? left : end;
        Py_ssize_t k = 0;  /* the equal tail's length */
        while (k < m && !(time_at(&times, left - 1 - k) != values[end - 1 - k]))
            k++;
        if (k == 0)
            goto none;
        Py_ssize_t start = end - k;
        if (start && !(values[start - 1] < values[start]))
            goto none;
        PyObject *pair = run_pair(start, k);
        if (pair == NULL || PyList_Append(result, pair) < 0) {
            Py_XDECREF(pair);
            Py_CLEAR(result);
            goto done;
        }
        Py_DECREF(pair);
        left -= k;
        if (left) {
            double last = time_at(&times, left - 1);
            end = search_right(values, start, last);
            if (end == 0 || values[end - 1] != last)
                goto none;
        }
    }
    if (PyList_Reverse(result) < 0)
        Py_CLEAR(result);
    goto done;
none:
    Py_XDECREF(result);
    result = Py_None;
    Py_INCREF(result);
done:
    times_close(&times);
    PyBuffer_Release(&vview);
    return result;
}

/* StepBlock(array): `recorder.StepRows`' rows written straight into a float64 array of (rows, STEP_COLUMNS) (the
 * Python code makes a tuple a step and converts a block of them with np.fromiter: the same doubles, a Python
 * number's conversion being PyFloat_AsDouble's either way, the KV usage Python's own division). */
#define NUM_STEP_COLUMNS 17

/* The plan's attributes in the order of STEP_COLUMNS from num_seqs on (interned once). */
static const char *plan_fields[] = {"num_seqs", "num_batched_tokens", "num_prefill_tokens", "num_decode_tokens",
                                    "num_emitting_seqs", "preempted_request_ids", "num_new_prefix_hit_tokens",
                                    "num_kv_blocks_used", "num_kv_blocks_total", "num_running", "num_waiting"};
#define NUM_PLAN_FIELDS 11
static PyObject *plan_names[NUM_PLAN_FIELDS];
static PyObject *step_index_name;

typedef struct {
    PyObject_HEAD
    PyObject *array;
    Py_buffer view;
    Py_ssize_t num_rows, count;
} StepBlock;

static int StepBlock_init(StepBlock *self, PyObject *args, PyObject *kwds) {
    PyObject *array;
    if (!PyArg_ParseTuple(args, "O", &array))
        return -1;
    if (self->array != NULL) {
        PyErr_SetString(PyExc_TypeError, "StepBlock: initialized once");
        return -1;
    }
    if (PyObject_GetBuffer(array, &self->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return -1;
    if (self->view.ndim != 2 || self->view.shape[1] != NUM_STEP_COLUMNS || self->view.format == NULL
        || strcmp(self->view.format, "d") != 0) {
        PyBuffer_Release(&self->view);
        PyErr_SetString(PyExc_ValueError, "StepBlock: a C-contiguous float64 array of (rows, 17)");
        return -1;
    }
    Py_INCREF(array);
    self->array = array;
    self->num_rows = self->view.shape[0];
    self->count = 0;
    return 0;
}

static void StepBlock_dealloc(StepBlock *self) {
    if (self->array != NULL) {
        PyBuffer_Release(&self->view);
        Py_CLEAR(self->array);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int put(double *row, int column, PyObject *value) {
    if (value == NULL)
        return -1;
    double v = PyFloat_AsDouble(value);
    Py_DECREF(value);
    if (v == -1.0 && PyErr_Occurred())
        return -1;
    row[column] = v;
    return 0;
}

/* The plan class bound by `bind_plan_type` (engine.core's StepPlan) and its slots' offsets: a plan of exactly that
 * class is read at them (`num_seqs` where it is a property, `len(self.requests)`, as the length of `requests`), any
 * other by name. */
static PyTypeObject *plan_type;
static Py_ssize_t plan_offsets[NUM_PLAN_FIELDS], step_index_offset, requests_offset;
static PyObject *requests_name;

static PyObject *bind_plan_type(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind_plan_type(cls): a class");
        return NULL;
    }
    Py_ssize_t offsets[NUM_PLAN_FIELDS + 2];
    for (int i = 0; i < NUM_PLAN_FIELDS + 2; i++) {
        PyObject *name = i < NUM_PLAN_FIELDS ? plan_names[i] : i == NUM_PLAN_FIELDS ? step_index_name : requests_name;
        offsets[i] = member_slot_offset((PyTypeObject *)cls, name, 0);
        if (i == 0 && offsets[i] < 0)
            continue;  /* (num_seqs: a property, `len(self.requests)`, read from `requests`) */
        if (offsets[i] < 0) {
            plan_type = NULL;  /* (no slot: every plan by name) */
            Py_RETURN_FALSE;
        }
    }
    memcpy(plan_offsets, offsets, sizeof(plan_offsets));
    step_index_offset = offsets[NUM_PLAN_FIELDS];
    requests_offset = offsets[NUM_PLAN_FIELDS + 1];
    Py_XSETREF(plan_type, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_TRUE;
}

/* A plan's field i (-1: step_index): a new reference, at its slot where the plan is of the bound class. */
static PyObject *plan_get(PyObject *plan, int i) {
    if (Py_TYPE(plan) == plan_type) {
        if (i == 0 && plan_offsets[0] < 0) {
            PyObject *requests = *(PyObject **)((char *)plan + requests_offset);
            if (requests != NULL) {
                Py_ssize_t n = PyObject_Length(requests);
                return n < 0 ? NULL : PyLong_FromSsize_t(n);
            }
        } else {
            PyObject *v = *(PyObject **)((char *)plan + (i < 0 ? step_index_offset : plan_offsets[i]));
            if (v != NULL)
                return Py_NewRef(v);
        }
    }
    return PyObject_GetAttr(plan, i < 0 ? step_index_name : plan_names[i]);
}

/* record(engine_index, plan, now, duration) -> whether the block is full. */
static PyObject *StepBlock_record(StepBlock *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "record(engine_index, plan, now, duration)");
        return NULL;
    }
    if (self->array == NULL || self->count >= self->num_rows) {
        PyErr_SetString(PyExc_ValueError, "StepBlock: full (take its rows first)");
        return NULL;
    }
    double *row = (double *)self->view.buf + self->count * NUM_STEP_COLUMNS;
    PyObject *plan = args[1];
    double now = PyFloat_AsDouble(args[2]);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    double duration = PyFloat_AsDouble(args[3]);
    if (duration == -1.0 && PyErr_Occurred())
        return NULL;
    Py_INCREF(args[0]);
    if (put(row, 0, args[0]) < 0 || put(row, 1, plan_get(plan, -1)) < 0)
        return NULL;
    row[2] = now;
    row[3] = now + duration;
    row[4] = duration;
    PyObject *used = NULL, *total = NULL;
    int column = 5;
    for (int i = 0; i < NUM_PLAN_FIELDS; i++, column++) {
        PyObject *value = plan_get(plan, i);
        if (value == NULL)
            goto error;
        if (i == 5) {  /* len(preempted_request_ids) */
            Py_ssize_t n = PyObject_Length(value);
            Py_DECREF(value);
            if (n < 0)
                goto error;
            value = PyLong_FromSsize_t(n);
        } else if (i == 7) {
            used = value;
            Py_INCREF(used);
        } else if (i == 8) {
            total = value;
            Py_INCREF(total);
            if (put(row, column++, value) < 0)  /* num_kv_blocks_total, then kv_usage: used / total */
                goto error;
            value = PyNumber_TrueDivide(used, total);
        }
        if (put(row, column, value) < 0)
            goto error;
    }
    Py_XDECREF(used);
    Py_XDECREF(total);
    self->count++;
    return PyBool_FromLong(self->count >= self->num_rows);
error:
    Py_XDECREF(used);
    Py_XDECREF(total);
    return NULL;
}

static PyObject *StepBlock_get_count(StepBlock *self, void *closure) { return PyLong_FromSsize_t(self->count); }

/* reset(): the block's rows taken (copied by the caller); the next record writes row 0. */
static PyObject *StepBlock_reset(StepBlock *self, PyObject *unused) {
    self->count = 0;
    Py_RETURN_NONE;
}

static PyMethodDef StepBlock_methods[] = {
    {"record", (PyCFunction)(void (*)(void))StepBlock_record, METH_FASTCALL, NULL},
    {"reset", (PyCFunction)StepBlock_reset, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef StepBlock_getset[] = {
    {"count", (getter)StepBlock_get_count, NULL, "rows written since the last reset", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StepBlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "roofline.sim._simcore.StepBlock",
    .tp_doc = "Step rows written into a float64 array (roofline/sim/_simcore.c)",
    .tp_basicsize = sizeof(StepBlock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StepBlock_init,
    .tp_dealloc = (destructor)StepBlock_dealloc,
    .tp_methods = StepBlock_methods,
    .tp_getset = StepBlock_getset,
};

/* ordered_sum(sources, which, lo, hi, mean): numpy's `np.add.reduce` of the float64 values that the pieces
 * `sources[which[k]][lo[k]:hi[k]]`, k = 0, 1, ..., joined would make (`TokenTimes.values`' gaps in order), without
 * joining them; with `mean` a float, of their squared deviations `(x - mean) * (x - mean)` (`np.std`'s sum,
 * numpy/_core/_methods.py `_var`: `arr - arrmean`, `multiply(x, x)`, `umr_sum`). The same floats as numpy's: a
 * contiguous float64 reduction starts from the identity 0.0 and adds numpy's pairwise sum of all n values
 * (numpy/_core/src/umath/loops_utils.h.src `DOUBLE_pairwise_sum`: under 8 values one by one from 0.0; up to
 * PW_BLOCKSIZE = 128 eight accumulators, combined ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest one
 * by one; above, split at n / 2 rounded down to a multiple of 8). The recursion reads its blocks left to right, so the
 * pieces are read once, in order, through a cursor. Built without fused multiply-adds (setup.py).
 * tests/test_token_times.py compares it with numpy's on arrays of every length class and on a run's gaps. */
typedef struct {
    const double *src[2];
    Py_ssize_t src_len[2];
    const unsigned char *which;
    const int64_t *lo, *hi;
    Py_ssize_t num_pieces, piece;
    int64_t at;
    int squared;
    double mean;
} Pieces;

#define PW_BLOCKSIZE 128

/* The next n values: where they lie in one piece, a pointer to them there; else copied into `buf`. */
static const double *pieces_next(Pieces *p, double *buf, Py_ssize_t n) {
    while (p->at >= p->hi[p->piece]) {  /* (the caller asks for no more than the pieces hold) */
        p->piece++;
        p->at = p->lo[p->piece];
    }
    if (p->hi[p->piece] - p->at >= n) {
        const double *values = p->src[p->which[p->piece] != 0] + p->at;
        p->at += n;
        return values;
    }
    Py_ssize_t got = 0;
    while (got < n) {
        while (p->at >= p->hi[p->piece]) {
            p->piece++;
            p->at = p->lo[p->piece];
        }
        Py_ssize_t take = (Py_ssize_t)(p->hi[p->piece] - p->at);
        if (take > n - got)
            take = n - got;
        memcpy(buf + got, p->src[p->which[p->piece] != 0] + p->at, (size_t)take * sizeof(double));
        got += take;
        p->at += take;
    }
    return buf;
}

/* numpy's pairwise sum of a[0:n], n <= PW_BLOCKSIZE (of the squared deviations from `mean` where `squared`). */
static double block_sum(const double *a, Py_ssize_t n, int squared, double mean) {
    if (n < 8) {
        double res = 0.;
        for (Py_ssize_t i = 0; i < n; i++) {
            double x = a[i];
            if (squared) {
                x -= mean;
                x *= x;
            }
            res += x;
        }
        return res;
    }
    double r0, r1, r2, r3, r4, r5, r6, r7;
    Py_ssize_t i, whole = n - (n % 8);
    if (squared) {
#define SQ(j) ((a[j] - mean) * (a[j] - mean))
        r0 = SQ(0), r1 = SQ(1), r2 = SQ(2), r3 = SQ(3), r4 = SQ(4), r5 = SQ(5), r6 = SQ(6), r7 = SQ(7);
        for (i = 8; i < whole; i += 8) {
            r0 += SQ(i), r1 += SQ(i + 1), r2 += SQ(i + 2), r3 += SQ(i + 3);
            r4 += SQ(i + 4), r5 += SQ(i + 5), r6 += SQ(i + 6), r7 += SQ(i + 7);
        }
    } else {
        r0 = a[0], r1 = a[1], r2 = a[2], r3 = a[3], r4 = a[4], r5 = a[5], r6 = a[6], r7 = a[7];
        for (i = 8; i < whole; i += 8) {
            r0 += a[i], r1 += a[i + 1], r2 += a[i + 2], r3 += a[i + 3];
            r4 += a[i + 4], r5 += a[i + 5], r6 += a[i + 6], r7 += a[i + 7];
        }
    }
    double res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
    for (; i < n; i++)
        res += squared ? SQ(i) : a[i];
#undef SQ
    return res;
}

static double pairwise(Pieces *p, Py_ssize_t n) {
    if (n <= PW_BLOCKSIZE) {
        double buf[PW_BLOCKSIZE];
        return block_sum(pieces_next(p, buf, n), n, p->squared, p->mean);
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    double left = pairwise(p, n2);  /* (first: the cursor reads left to right) */
    double right = pairwise(p, n - n2);
    return left + right;
}

static int open_array(PyObject *obj, Py_buffer *view, const char *format, Py_ssize_t itemsize, int writable) {
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    /* (int64: "l" where a C long has 8 bytes, else "q") */
    int same = view->format != NULL && (strcmp(view->format, format) == 0
                                        || (strcmp(format, "l") == 0 && strcmp(view->format, "q") == 0));
    if (view->ndim != 1 || view->itemsize != itemsize || !same) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "a 1-d contiguous array of '%s' expected", format);
        return -1;
    }
    return 0;
}

static PyObject *mod_ordered_sum(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 2) {
        PyErr_SetString(PyExc_TypeError, "ordered_sum((steps, across), which, lo, hi, mean)");
        return NULL;
    }
    Py_buffer views[5];
    int opened = 0;
    PyObject *result = NULL;
    Pieces p;
    p.squared = args[4] != Py_None;
    p.mean = p.squared ? PyFloat_AsDouble(args[4]) : 0.0;
    if (p.squared && p.mean == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *objs[5] = {PyTuple_GET_ITEM(args[0], 0), PyTuple_GET_ITEM(args[0], 1), args[1], args[2], args[3]};
    const char *formats[5] = {"d", "d", "?", "l", "l"};
    Py_ssize_t sizes[5] = {sizeof(double), sizeof(double), 1, sizeof(int64_t), sizeof(int64_t)};
    for (; opened < 5; opened++)
        if (open_array(objs[opened], &views[opened], formats[opened], sizes[opened], 0) < 0)
            goto done;
    for (int k = 0; k < 2; k++) {
        p.src[k] = (const double *)views[k].buf;
        p.src_len[k] = views[k].shape[0];
    }
    p.which = (const unsigned char *)views[2].buf;
    p.lo = (const int64_t *)views[3].buf;
    p.hi = (const int64_t *)views[4].buf;
    p.num_pieces = views[2].shape[0];
    if (views[3].shape[0] != p.num_pieces || views[4].shape[0] != p.num_pieces) {
        PyErr_SetString(PyExc_ValueError, "ordered_sum: which, lo and hi of one length");
        goto done;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t k = 0; k < p.num_pieces; k++) {
        int w = p.which[k] != 0;
        if (p.lo[k] < 0 || p.hi[k] < p.lo[k] || p.hi[k] > p.src_len[w]) {
            PyErr_SetString(PyExc_ValueError, "ordered_sum: a piece out of its source's bounds");
            goto done;
        }
        n += (Py_ssize_t)(p.hi[k] - p.lo[k]);
    }
    /* (`which` read as 0 / 1 from here on: numpy's bools are bytes 0 or 1) */
    p.piece = 0;
    p.at = p.num_pieces ? p.lo[0] : 0;
    double total = 0.0;
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        total = 0.0 + pairwise(&p, n);  /* (numpy's reduction: the identity, then the pairwise sum) */
        Py_END_ALLOW_THREADS
    }
    result = PyFloat_FromDouble(total);
done:
    for (int k = 0; k < opened; k++)
        PyBuffer_Release(&views[k]);
    return result;
}

/* Finisher(first_scheduled, num_output, num_preemptions, num_prefix_hits, first_token, finish, segments):
 * `Recorder.finished` of a request whose tokens the scheduler stamped (recorder.py, the reference), in one call:
 * record(req, row, series) writes the request's columns as the Python code's item assignments do (a float, or NaN
 * for None; an int), and appends its runs of `series`' stamps to `segments` (`Segments.add`'s shortcuts: `runs`
 * above, appended as `Segments._append` does) and says True; False, writing nothing, where the Python code is to
 * do it all (a series `segments` has not indexed yet, a run its search must find, a field of another type).
 * tests/test_compiled_sim.py compares a run's records both ways. */
static const char *finished_fields[] = {"first_scheduled_time_s", "num_output_tokens", "num_preemptions",
                                        "num_prefix_hit_tokens", "token_times_s", "finish_time_s"};
#define NUM_FINISHED_FIELDS 6
static PyObject *finished_names[NUM_FINISHED_FIELDS];
static PyObject *name_values, *name_num, *name_ascending, *name_index_of, *name_append;
static const char *segment_arrays[] = {"row", "series_index", "start", "length"};
static PyObject *segment_names[4];

typedef struct {
    PyObject_HEAD
    PyObject *columns[6];  /* first_scheduled, num_output, num_preemptions, num_prefix_hits, first_token, finish */
    Py_buffer views[6];
    int num_views;
    PyObject *segments;
    PyObject *appends[4];  /* segments' row, series_index, start, length arrays' `append` (made once: never replaced) */
    PyObject *index_of;    /* segments' `_index_of` (likewise) */
} Finisher;

static void Finisher_release(Finisher *self) {
    for (int i = 0; i < self->num_views; i++)
        PyBuffer_Release(&self->views[i]);
    self->num_views = 0;
    for (int i = 0; i < 6; i++)
        Py_CLEAR(self->columns[i]);
    for (int i = 0; i < 4; i++)
        Py_CLEAR(self->appends[i]);
    Py_CLEAR(self->index_of);
    Py_CLEAR(self->segments);
}

static int Finisher_init(Finisher *self, PyObject *args, PyObject *kwds) {
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6]))
        return -1;
    Finisher_release(self);
    static const char *formats[6] = {"d", "l", "l", "l", "d", "d"};
    for (int i = 0; i < 6; i++) {
        if (open_array(objs[i], &self->views[i], formats[i], 8, 1) < 0) {
            Finisher_release(self);
            return -1;
        }
        self->num_views = i + 1;
        Py_INCREF(objs[i]);
        self->columns[i] = objs[i];
    }
    Py_INCREF(objs[6]);
    self->segments = objs[6];
    for (int i = 0; i < 4; i++) {
        PyObject *arr = PyObject_GetAttr(objs[6], segment_names[i]);
        self->appends[i] = arr ? PyObject_GetAttr(arr, name_append) : NULL;
        Py_XDECREF(arr);
        if (self->appends[i] == NULL) {
            Finisher_release(self);
            return -1;
        }
    }
    if ((self->index_of = PyObject_GetAttr(objs[6], name_index_of)) == NULL || !PyDict_Check(self->index_of)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "Finisher: segments._index_of is no dict");
        Finisher_release(self);
        return -1;
    }
    return 0;
}

static void Finisher_dealloc(Finisher *self) {
    Finisher_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A float column's value as numpy assigns it: None -> NaN, else the number as a double; -1 on error. */
static int as_double(PyObject *v, double *out) {
    if (v == Py_None) {
        *out = Py_NAN;
        return 0;
    }
    if (!PyFloat_Check(v) && !PyLong_Check(v))
        return -1;
    *out = PyFloat_AsDouble(v);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static int as_int64(PyObject *v, long long *out) {
    if (!PyLong_CheckExact(v))
        return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* An object's attributes read and written at their slots' offsets where its type is the one bound (a class with
 * these names in its __slots__: `_Replica`, `TimeSeries`, `Request`), else by name (the same attributes). */
#define MAX_SLOTS 7
typedef struct {
    PyTypeObject *type;  /* NULL: by name */
    int num;
    PyObject **names[MAX_SLOTS];
    Py_ssize_t offsets[MAX_SLOTS];
} Slots;

static void slots_bind(Slots *s, PyTypeObject *type) {
    s->type = NULL;
    for (int i = 0; i < s->num; i++)
        if ((s->offsets[i] = member_slot_offset(type, *s->names[i], 1)) < 0)
            return;
    s->type = type;
}

/* obj's attribute i: a new reference, NULL (AttributeError) where unset. */
static PyObject *slot_get(const Slots *s, PyObject *obj, int i) {
    if (Py_TYPE(obj) == s->type) {
        PyObject *v = *(PyObject **)((char *)obj + s->offsets[i]);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(obj, *s->names[i]);
}

static int slot_set(const Slots *s, PyObject *obj, int i, PyObject *v) {
    if (Py_TYPE(obj) == s->type) {
        PyObject **at = (PyObject **)((char *)obj + s->offsets[i]);
        PyObject *old = *at;
        Py_INCREF(v);
        *at = v;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(obj, *s->names[i], v);
}

/* A finished request's fields as `Recorder.finished` reads them, at their slots where its class is the bound one
 * (`bind_request_type(Request)`) and it holds its own tokens (`_cols` None): `num_output_tokens` is then
 * len(_output_ids) and `token_times_s` is `_token_times` (Request's properties, engine/core/request.py); any other
 * request or class by name, through the properties. */
enum { F_FIRST_SCHEDULED, F_NUM_PREEMPTIONS, F_NUM_PREFIX_HITS, F_FINISH, F_COLS, F_OUTPUT_IDS, F_TOKEN_TIMES };
static PyObject *fn_first_scheduled, *fn_num_preemptions, *fn_num_prefix_hits, *fn_finish, *fn_cols, *fn_output_ids,
    *fn_token_times;
static Slots request_slots = {NULL, 7, {&fn_first_scheduled, &fn_num_preemptions, &fn_num_prefix_hits, &fn_finish,
                                        &fn_cols, &fn_output_ids, &fn_token_times}, {0}};
enum { T_VALUES, T_NUM, T_ASCENDING, T_LAST };
static PyTypeObject *finished_tokens_type;  /* engine.core._kvcore.FinishedTokens (bind_request_type) */
static PyObject *fn_missing, *fn_times;
static Slots series_slots;  /* (TimeSeries' values, num, ascending, _last: bound by run_loop, defined below) */

/* The six fields (`finished_fields`' order) as new references from the slots, 1; 0 where the request is read by name. */
static int finished_from_slots(PyObject *req, PyObject **fields) {
    if (request_slots.type == NULL || Py_TYPE(req) != request_slots.type)
        return 0;
    PyObject *const *at[7];
    for (int i = 0; i < 7; i++) {
        at[i] = (PyObject *const *)((char *)req + request_slots.offsets[i]);
        if (*at[i] == NULL)
            return 0;  /* (unset: the AttributeError by name) */
    }
    PyObject *outputs = *at[F_OUTPUT_IDS], *cols = *at[F_COLS], *times = *at[F_TOKEN_TIMES];
    if (!PyList_CheckExact(outputs) || !PyList_CheckExact(times))
        return 0;
    Py_ssize_t num = PyList_GET_SIZE(outputs);
    if (cols != Py_None) {
        /* its last tokens not written yet (engine/core/_kvcore.c `FinishedTokens`): their count and the float64 view
           of their times, which follow the request's own (none: the detach leaves them unwritten only then) */
        if (finished_tokens_type == NULL || Py_TYPE(cols) != finished_tokens_type || PyList_GET_SIZE(times))
            return 0;
        PyObject *missing = PyObject_GetAttr(cols, fn_missing);
        Py_ssize_t m = missing != NULL && PyLong_CheckExact(missing) ? PyLong_AsSsize_t(missing) : -1;
        Py_XDECREF(missing);
        if (m < 0 || (times = PyObject_GetAttr(cols, fn_times)) == NULL) {
            PyErr_Clear();
            return 0;
        }
        num += m;
    } else
        Py_INCREF(times);
    PyObject *num_output = PyLong_FromSsize_t(num);
    if (num_output == NULL) {
        Py_DECREF(times);
        return -1;
    }
    PyObject *v[NUM_FINISHED_FIELDS] = {*at[F_FIRST_SCHEDULED], num_output, *at[F_NUM_PREEMPTIONS],
                                        *at[F_NUM_PREFIX_HITS], times, *at[F_FINISH]};
    for (int i = 0; i < NUM_FINISHED_FIELDS; i++)
        fields[i] = i == 1 || i == 4 ? v[i] : Py_NewRef(v[i]);
    return 1;
}

/* bind_request_type(Request, FinishedTokens or None): `Finisher.record` reads a request of exactly that class at its
 * slots (True), or by name (False: a class without those slots); a request whose `_cols` is a FinishedTokens by its
 * count and view of times. */
static PyObject *bind_request_type(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *cls, *ft = Py_None;
    if (!PyArg_ParseTuple(args, "O!|O", &PyType_Type, &cls, &ft))
        return NULL;
    if (ft != Py_None && !PyType_Check(ft)) {
        PyErr_SetString(PyExc_TypeError, "bind_request_type(cls, FinishedTokens or None)");
        return NULL;
    }
    Py_XINCREF(ft == Py_None ? NULL : ft);
    finished_tokens_type = ft == Py_None ? NULL : (PyTypeObject *)ft;
    slots_bind(&request_slots, (PyTypeObject *)cls);
    if (request_slots.type != NULL)
        Py_INCREF(cls);  /* (kept for the process, as the slots' offsets are) */
    return PyBool_FromLong(request_slots.type != NULL);
}

static PyObject *Finisher_record(Finisher *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record(req, row, series)");
        return NULL;
    }
    if (self->segments == NULL) {
        PyErr_SetString(PyExc_ValueError, "Finisher: not initialized");
        return NULL;
    }
    PyObject *req = args[0], *series = args[2];
    Py_ssize_t row = PyLong_AsSsize_t(args[1]);
    if (row == -1 && PyErr_Occurred())
        return NULL;
    if (row < 0 || row >= self->views[0].shape[0]) {
        PyErr_SetString(PyExc_IndexError, "Finisher.record: row out of range");
        return NULL;
    }
    PyObject *fields[NUM_FINISHED_FIELDS] = {NULL};
    PyObject *index_of = NULL, *key = NULL, *runs = NULL, *svalues = NULL, *snum = NULL, *sasc = NULL;
    PyObject *result = NULL;
    int handled = 0;
    /* The series' index in `segments` (`Segments._index_of`, by id), else the Python code registers it. */
    index_of = self->index_of;
    Py_INCREF(index_of);
    key = PyLong_FromVoidPtr(series);
    if (key == NULL)
        goto done;
    PyObject *index = PyDict_GetItemWithError(index_of, key);  /* (borrowed) */
    if (index == NULL) {
        if (PyErr_Occurred())
            goto done;
        goto decided;
    }
    int direct = finished_from_slots(req, fields);
    if (direct < 0)
        goto done;
    for (int i = 0; !direct && i < NUM_FINISHED_FIELDS; i++)
        if ((fields[i] = PyObject_GetAttr(req, finished_names[i])) == NULL)
            goto done;
    double first_scheduled, finish, first_token;
    long long num_output, num_preemptions, num_prefix_hits;
    PyObject *times = fields[4];
    if (as_double(fields[0], &first_scheduled) < 0 || as_int64(fields[1], &num_output) < 0
        || as_int64(fields[2], &num_preemptions) < 0 || as_int64(fields[3], &num_prefix_hits) < 0
        || as_double(fields[5], &finish) < 0)
        goto decided;
    Py_ssize_t n;
    if (PyList_CheckExact(times)) {
        n = PyList_GET_SIZE(times);
        if (n && as_double(PyList_GET_ITEM(times, 0), &first_token) < 0)
            goto decided;
    } else {  /* (a FinishedTokens' float64 view: `finished_from_slots`) */
        Times t;
        if (!times_open(&t, times, &n) || t.data == NULL) {
            times_close(&t);
            goto decided;
        }
        if (n)
            first_token = t.data[0];
        times_close(&t);
    }
    if (!n)
        first_token = Py_NAN;
    if (n) {  /* (no tokens: no runs, as `Segments.add`) */
        if ((svalues = slot_get(&series_slots, series, T_VALUES)) == NULL
            || (snum = slot_get(&series_slots, series, T_NUM)) == NULL
            || (sasc = slot_get(&series_slots, series, T_ASCENDING)) == NULL)
            goto done;
        PyObject *run_args[4] = {svalues, snum, sasc, times};
        if ((runs = mod_runs(NULL, run_args, 4)) == NULL)
            goto done;
        if (runs == Py_None)
            goto decided;
    }
    ((double *)self->views[0].buf)[row] = first_scheduled;
    ((int64_t *)self->views[1].buf)[row] = num_output;
    if (num_preemptions)
        ((int64_t *)self->views[2].buf)[row] = num_preemptions;
    if (num_prefix_hits)
        ((int64_t *)self->views[3].buf)[row] = num_prefix_hits;
    ((double *)self->views[4].buf)[row] = first_token;
    ((double *)self->views[5].buf)[row] = finish;
    for (Py_ssize_t r = 0; runs != NULL && r < PyList_GET_SIZE(runs); r++) {
        PyObject *pair = PyList_GET_ITEM(runs, r);
        PyObject *values[4] = {args[1], index, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)};
        for (int a = 0; a < 4; a++) {
            PyObject *ok = PyObject_CallOneArg(self->appends[a], values[a]);
            if (ok == NULL)
                goto done;
            Py_DECREF(ok);
        }
    }
    handled = 1;
decided:
    result = PyBool_FromLong(handled);
done:
    for (int i = 0; i < NUM_FINISHED_FIELDS; i++)
        Py_XDECREF(fields[i]);
    Py_XDECREF(index_of);
    Py_XDECREF(key);
    Py_XDECREF(runs);
    Py_XDECREF(svalues);
    Py_XDECREF(snum);
    Py_XDECREF(sasc);
    return result;
}

static PyMethodDef Finisher_methods[] = {
    {"record", (PyCFunction)(void (*)(void))Finisher_record, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FinisherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "roofline.sim._simcore.Finisher",
    .tp_doc = "Recorder.finished in C (roofline/sim/_simcore.c)",
    .tp_basicsize = sizeof(Finisher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Finisher_init,
    .tp_dealloc = (destructor)Finisher_dealloc,
    .tp_methods = Finisher_methods,
};

/* run_loop(sim, handlers): `_Simulation.run`'s event loop without an early stop (simulator.py, the reference), with
 * the common step's handlers in C: a step's end (`end_step`, `end_step_streamed` of an API server of one process,
 * `next_step`) and a schedule (`schedule`) on a replica that is no pipeline's and no DP group's; and with one replica
 * behind an API server of one process in an open loop, the requests' way in (`arrive`, `send`, `route`, `reach`,
 * `enter`: the API server's `take_request` and `reach_s` called as the Python code calls them). Every other event,
 * and every uncommon turn of these two (an empty plan: `_Simulation.idle`; a step row block full or the steps'
 * sequences recorded: `_record_rest`; a finished request the compiled `Finisher` leaves to `Recorder.finished`; a
 * closed loop's freed slot: `request_seen` / `end_step`'s `send`; the served engine core's admissions:
 * `admission_s`), goes to the Python code. The same statements in the same order on the same objects: the
 * simulation's and replicas' attributes read and written as the Python code does (`seq`, `num_done`,
 * `num_in_flight`; a replica's `plan`, `num_steps`, `num_outstanding`, `schedule_pending`, `in_transit`), the
 * scheduler's, cost model's, API server's and stamps' methods called as it calls them (the stamps' `add` and the
 * step row written here where their types are the compiled ones), and the same float operations in the same order.
 * The heap is `heapq`'s algorithm on the same list (the Python handlers push with `heapq.heappush`): its 4-tuples
 * compared as `heapq` compares them (a time that is a float and two ints compared as numbers, anything else by
 * Python's `<`). tests/test_compiled_sim.py runs both ways and compares every output. */

static PyObject *one;
static PyObject *n_heap, *n_replicas, *n_api, *n_recorder, *n_plan_time_s, *n_time_fn, *n_token_id, *n_progress, *n_max_in_flight, *n_host_overlaps, *n_specs, *n_plan, *n_num_steps, *n_num_outstanding, *n_schedule_pending, *n_in_transit, *n_num_done, *n_num_in_flight, *n_seq, *n_admit, *n_request_id, *n_num_emitting, *n_requests, *n_idle, *n_finished, *n_request_seen, *n_admission_s, *n_stream_outputs, *n_stamps, *n_scheduler, *n_schedule, *n_update, *n_engine_step_s, *n_row_of, *n_steps, *n_record_steps, *n_finisher, *n_last, *n_grow, *n_index, *n_block, *n_add_request, *n_lag, *n_num_routed, *n_make_request, *n_prompts, *n_lazy, *n_source, *n_in_frontend, *n_api_ticket, *n_hop_waited, *n_take_request, *n_reach_s, *n_busy_hop_s, *n_sent, *n_replica, *n_arrival_s, *n_num_prompt_tokens, *n_process_of, *n_first_output_s, *n_release;
static struct { PyObject **var; const char *name; } loop_names[] = {
    {&n_heap, "heap"},
    {&n_replicas, "replicas"},
    {&n_api, "api"},
    {&n_recorder, "recorder"},
    {&n_plan_time_s, "plan_time_s"},
    {&n_time_fn, "time_fn"},
    {&n_token_id, "token_id"},
    {&n_progress, "progress"},
    {&n_max_in_flight, "max_in_flight"},
    {&n_host_overlaps, "host_overlaps_device"},
    {&n_specs, "specs"},
    {&n_plan, "plan"},
    {&n_num_steps, "num_steps"},
    {&n_num_outstanding, "num_outstanding"},
    {&n_schedule_pending, "schedule_pending"},
    {&n_in_transit, "in_transit"},
    {&n_num_done, "num_done"},
    {&n_num_in_flight, "num_in_flight"},
    {&n_seq, "seq"},
    {&n_admit, "admit"},
    {&n_request_id, "request_id"},
    {&n_num_emitting, "num_emitting_seqs"},
    {&n_requests, "requests"},
    {&n_idle, "idle"},
    {&n_finished, "finished"},
    {&n_request_seen, "request_seen"},
    {&n_admission_s, "admission_s"},
    {&n_stream_outputs, "stream_outputs"},
    {&n_stamps, "stamps"},
    {&n_scheduler, "scheduler"},
    {&n_schedule, "schedule"},
    {&n_update, "update_from_output"},
    {&n_engine_step_s, "engine_step_s"},
    {&n_first_output_s, "first_output_s"},
    {&n_release, "release"},
    {&n_row_of, "row_of"},
    {&n_steps, "steps"},
    {&n_record_steps, "record_steps"},
    {&n_finisher, "_finisher"},
    {&n_last, "_last"},
    {&n_grow, "_grow"},
    {&n_index, "index"},
    {&n_block, "_block"},
    {&n_add_request, "add_request"},
    {&n_lag, "lag"},
    {&n_num_routed, "num_routed"},
    {&n_make_request, "make_request"},
    {&n_prompts, "prompts"},
    {&n_lazy, "lazy"},
    {&n_source, "source"},
    {&n_in_frontend, "in_frontend"},
    {&n_api_ticket, "api_ticket"},
    {&n_hop_waited, "hop_waited"},
    {&n_take_request, "take_request"},
    {&n_reach_s, "reach_s"},
    {&n_busy_hop_s, "busy_hop_s"},
    {&n_sent, "sent"},
    {&n_replica, "replica"},
    {&n_arrival_s, "arrival_s"},
    {&n_num_prompt_tokens, "num_prompt_tokens"},
    {&n_process_of, "process_of"},
};

/* obj's int attribute i += delta. */
static int slot_add(const Slots *s, PyObject *obj, int i, long delta) {
    PyObject *v = slot_get(s, obj, i);
    if (v == NULL)
        return -1;
    PyObject *w;
    long x;
    int overflow = 0;
    if (PyLong_CheckExact(v) && ((x = PyLong_AsLongAndOverflow(v, &overflow)), !overflow) && x > -(1L << 60)
        && x < (1L << 60))
        w = PyLong_FromLong(x + delta);
    else {
        PyErr_Clear();
        PyObject *d = PyLong_FromLong(delta);
        w = d ? PyNumber_Add(v, d) : NULL;
        Py_XDECREF(d);
    }
    Py_DECREF(v);
    if (w == NULL)
        return -1;
    int rc = slot_set(s, obj, i, w);
    Py_DECREF(w);
    return rc;
}

enum { R_PLAN, R_NUM_STEPS, R_NUM_OUTSTANDING, R_SCHEDULE_PENDING, R_IN_TRANSIT, R_LAG };
static Slots rep_slots = {NULL, 6, {&n_plan, &n_num_steps, &n_num_outstanding, &n_schedule_pending, &n_in_transit,
                                    &n_lag}, {0}};
static Slots series_slots = {NULL, 4, {&name_values, &name_num, &name_ascending, &n_last}, {0}};
enum { S_SEQ, S_NUM_DONE, S_NUM_IN_FLIGHT, S_NUM_ROUTED };
static Slots sim_slots = {NULL, 4, {&n_seq, &n_num_done, &n_num_in_flight, &n_num_routed}, {0}};

typedef struct {
    PyObject *replica, *index, *schedule, *update, *add_request, *stamps, *stream_outputs;  /* stream_outputs: NULL without api */
    PyObject *release;  /* api.release (`end_step_streamed`'s one process: a finished request's connection idle); NULL
                           without api */
    double engine_step_s;
    double first_output_s; /* api.first_output_s: the chat endpoint's per first output (`end_step_streamed`) */
} Rep;

typedef struct {
    PyObject *sim, *handlers, *heap, *recorder, *plan_time_s, *time_fn, *token_id, *progress, *num_specs;
    PyObject *row_of, *finisher, *block, *steps_rows, *record_rest, *zero, *false_, *step_end, *schedule_prio;
    /* The request's way in (`arrive`, `send`, `route`, `reach`, `enter`): where `requests_in` (one replica behind an
     * API server of one process, an open loop), else the Python handlers. */
    int requests_in;
    PyObject *specs, *lazy, *source, *in_frontend, *api_ticket, *hop_waited, *api0, *take_request, *reach_s;
    PyObject *arrival_prio, *reach_prio;
    Py_buffer sent, replica_col;
    int num_views;
    int has_api, closed, host_overlaps, record_steps;
    Py_ssize_t num_reps;
    Rep *reps;
} Loop;

/* Python's `a < b` for the heap's entries: (time_s, priority, seq_no, payload) tuples. -1 on error. */
static int entry_lt(PyObject *a, PyObject *b) {
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) == 4 && PyTuple_GET_SIZE(b) == 4) {
        PyObject *ta = PyTuple_GET_ITEM(a, 0), *tb = PyTuple_GET_ITEM(b, 0);
        if (PyFloat_Check(ta) && PyFloat_Check(tb)) {
            if (ta != tb) {  /* (the same object is equal to itself in a tuple comparison, even a NaN) */
                double x = PyFloat_AS_DOUBLE(ta), y = PyFloat_AS_DOUBLE(tb);
                if (x != y)
                    return x < y;
            }
            for (int i = 1; i < 3; i++) {
                PyObject *u = PyTuple_GET_ITEM(a, i), *v = PyTuple_GET_ITEM(b, i);
                if (!PyLong_CheckExact(u) || !PyLong_CheckExact(v))
                    return PyObject_RichCompareBool(a, b, Py_LT);
                int overflow_u = 0, overflow_v = 0;
                long long p = PyLong_AsLongLongAndOverflow(u, &overflow_u);
                long long q = PyLong_AsLongLongAndOverflow(v, &overflow_v);
                if (overflow_u || overflow_v)
                    return PyObject_RichCompareBool(a, b, Py_LT);
                if (p != q)
                    return p < q;
            }
        }
    }
    return PyObject_RichCompareBool(a, b, Py_LT);
}

/* heapq's _siftdown / _siftup (CPython Modules/_heapqmodule.c): the same comparisons, the same layout. */
static int sift_down(PyObject *heap, Py_ssize_t startpos, Py_ssize_t pos) {
    PyObject **items = ((PyListObject *)heap)->ob_item;
    PyObject *newitem = items[pos];
    while (pos > startpos) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        PyObject *parent = items[parentpos];
        int lt = entry_lt(newitem, parent);
        if (lt < 0)
            return -1;
        if (!lt)
            break;
        items[pos] = parent;
        pos = parentpos;
    }
    items[pos] = newitem;
    return 0;
}

static int sift_up(PyObject *heap, Py_ssize_t pos) {
    Py_ssize_t endpos = PyList_GET_SIZE(heap), startpos = pos;
    PyObject **items = ((PyListObject *)heap)->ob_item;
    PyObject *newitem = items[pos];
    Py_ssize_t childpos = 2 * pos + 1;
    while (childpos < endpos) {
        Py_ssize_t rightpos = childpos + 1;
        if (rightpos < endpos) {
            int lt = entry_lt(items[childpos], items[rightpos]);
            if (lt < 0)
                return -1;
            if (!lt)
                childpos = rightpos;
        }
        items[pos] = items[childpos];
        pos = childpos;
        childpos = 2 * pos + 1;
    }
    items[pos] = newitem;
    return sift_down(heap, startpos, pos);
}

/* heapq.heappop: a new reference, NULL on error. */
static PyObject *heap_pop(PyObject *heap) {
    Py_ssize_t n = PyList_GET_SIZE(heap);
    PyObject *last = PyList_GET_ITEM(heap, n - 1);
    Py_INCREF(last);
    if (PyList_SetSlice(heap, n - 1, n, NULL) < 0) {
        Py_DECREF(last);
        return NULL;
    }
    if (n - 1 == 0)
        return last;
    PyObject *top = PyList_GET_ITEM(heap, 0);  /* (the list's reference becomes ours) */
    PyList_SET_ITEM(heap, 0, last);
    if (sift_up(heap, 0) < 0) {
        Py_DECREF(top);
        return NULL;
    }
    return top;
}

/* heapq.heappush(heap, (time_s, priority, sim.seq, payload)); sim.seq += 1. Steals nothing. */
static int push_obj(Loop *L, PyObject *time_obj, PyObject *priority, PyObject *payload) {
    PyObject *seq = slot_get(&sim_slots, L->sim, S_SEQ);
    if (seq == NULL)
        return -1;
    PyObject *entry = PyTuple_Pack(4, time_obj, priority, seq, payload);
    if (entry == NULL) {
        Py_DECREF(seq);
        return -1;
    }
    int rc = PyList_Append(L->heap, entry);
    Py_DECREF(entry);
    if (rc == 0)
        rc = sift_down(L->heap, 0, PyList_GET_SIZE(L->heap) - 1);
    if (rc == 0) {
        PyObject *next = PyNumber_Add(seq, one);
        rc = next ? slot_set(&sim_slots, L->sim, S_SEQ, next) : -1;
        Py_XDECREF(next);
    }
    Py_DECREF(seq);
    return rc;
}

static int push(Loop *L, double time_s, PyObject *priority, PyObject *payload) {
    PyObject *t = PyFloat_FromDouble(time_s);
    if (t == NULL)
        return -1;
    int rc = push_obj(L, t, priority, payload);
    Py_DECREF(t);
    return rc;
}

static int call_discard(PyObject *r) {
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* `TimeSeries.add(time_s)` (token_times.py): the stamp written into `values` (grown by its `_grow` when full), `num`
 * counted, `ascending` cleared at a step back or a NaN, `_last` the stamp. */
static int series_add(PyObject *series, PyObject *time_obj) {
    double t = PyFloat_AsDouble(time_obj);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    PyObject *num_obj = slot_get(&series_slots, series, T_NUM);
    if (num_obj == NULL)
        return -1;
    Py_ssize_t num = PyLong_AsSsize_t(num_obj);
    Py_DECREF(num_obj);
    if (num == -1 && PyErr_Occurred())
        return -1;
    Py_buffer view;
    for (int grown = 0;; grown++) {
        PyObject *values = slot_get(&series_slots, series, T_VALUES);
        if (values == NULL)
            return -1;
        int rc = PyObject_GetBuffer(values, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
        Py_DECREF(values);
        if (rc < 0)
            return -1;
        if (view.ndim != 1 || view.format == NULL || strcmp(view.format, "d") != 0) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "TimeSeries.values: a float64 array");
            return -1;
        }
        if (num < view.shape[0])
            break;
        PyBuffer_Release(&view);
        if (grown) {
            PyErr_SetString(PyExc_ValueError, "TimeSeries._grow: no room");
            return -1;
        }
        if (call_discard(PyObject_CallMethodNoArgs(series, n_grow)) < 0)
            return -1;
    }
    ((double *)view.buf)[num] = t;
    PyBuffer_Release(&view);
    PyObject *next = PyLong_FromSsize_t(num + 1);
    if (next == NULL)
        return -1;
    int rc = slot_set(&series_slots, series, T_NUM, next);
    Py_DECREF(next);
    if (rc < 0)
        return -1;
    PyObject *last = slot_get(&series_slots, series, T_LAST);
    if (last == NULL)
        return -1;
    double l = PyFloat_AsDouble(last);
    Py_DECREF(last);
    if (l == -1.0 && PyErr_Occurred())
        return -1;
    if (!(t >= l) && slot_set(&series_slots, series, T_ASCENDING, Py_False) < 0)
        return -1;
    return slot_set(&series_slots, series, T_LAST, time_obj);
}

/* `_record_step(recorder, index, plan, now, duration)` where the rows are the compiled block's: the row written, then
 * `_record_rest(recorder, plan, full)` where the block is full or the steps' sequences are recorded. */
static int record_step(Loop *L, PyObject *index, PyObject *plan, PyObject *now_obj, double duration) {
    PyObject *d = PyFloat_FromDouble(duration);
    if (d == NULL)
        return -1;
    PyObject *args[4] = {index, plan, now_obj, d};
    PyObject *full = StepBlock_record((StepBlock *)L->block, args, 4);
    Py_DECREF(d);
    if (full == NULL)
        return -1;
    int rc = 0;
    if (full == Py_True || L->record_steps)
        rc = call_discard(PyObject_CallFunctionObjArgs(L->record_rest, L->recorder, plan, full, NULL));
    Py_DECREF(full);
    return rc;
}

/* `if replica.in_transit: replica.admit()`: each [request, schedules to let pass] entry's request added to the
 * scheduler where its count is 0, else its count taken down by one and the entry kept; `in_transit` the kept entries,
 * a new list. Entries of other types: the Python method. */
static int admit(Rep *r, PyObject *in_transit) {
    if (!PyList_CheckExact(in_transit)) {
        int waiting = PyObject_IsTrue(in_transit);
        return waiting <= 0 ? waiting : call_discard(PyObject_CallMethodNoArgs(r->replica, n_admit));
    }
    Py_ssize_t n = PyList_GET_SIZE(in_transit);
    if (n == 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(in_transit, i);
        if (!PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != 2 || !PyLong_CheckExact(PyList_GET_ITEM(entry, 1)))
            return call_discard(PyObject_CallMethodNoArgs(r->replica, n_admit));
    }
    PyObject *waiting = PyList_New(0);
    if (waiting == NULL)
        return -1;
    Py_INCREF(in_transit);  /* (iterated while `replica.in_transit` is replaced only at the end, as in Python) */
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(in_transit); i++) {
        PyObject *entry = PyList_GET_ITEM(in_transit, i);
        PyObject *count = PyList_GET_ITEM(entry, 1);
        int overflow = 0;
        long c = PyLong_AsLongAndOverflow(count, &overflow);
        if (!overflow && c == 0) {
            PyObject *request = PyList_GET_ITEM(entry, 0);
            Py_INCREF(request);
            rc = call_discard(PyObject_CallOneArg(r->add_request, request));
            Py_DECREF(request);
        } else {
            PyObject *less = PyNumber_Subtract(count, one);
            if (less == NULL || PyList_SetItem(entry, 1, less) < 0)  /* (steals `less`) */
                rc = -1;
            else
                rc = PyList_Append(waiting, entry);
        }
    }
    Py_DECREF(in_transit);
    if (rc == 0)
        rc = slot_set(&rep_slots, r->replica, R_IN_TRANSIT, waiting);
    Py_DECREF(waiting);
    return rc;
}

/* `_Simulation.schedule(now, index)` for a replica with no pipeline and a plain scheduler. */
static int loop_schedule(Loop *L, PyObject *now_obj, Py_ssize_t index) {
    Rep *r = &L->reps[index];
    double now = PyFloat_AsDouble(now_obj);
    if (now == -1.0 && PyErr_Occurred())
        return -1;
    if (slot_set(&rep_slots, r->replica, R_SCHEDULE_PENDING, Py_False) < 0)
        return -1;
    PyObject *in_transit = slot_get(&rep_slots, r->replica, R_IN_TRANSIT);
    if (in_transit == NULL)
        return -1;
    int rc = admit(r, in_transit);
    Py_DECREF(in_transit);
    if (rc < 0)
        return -1;
    PyObject *plan = PyObject_CallOneArg(r->schedule, now_obj);
    if (plan == NULL)
        return -1;
    PyObject *requests = Py_TYPE(plan) == plan_type && *(PyObject **)((char *)plan + requests_offset) != NULL
        ? Py_NewRef(*(PyObject **)((char *)plan + requests_offset))
        : PyObject_GetAttr(plan, n_requests);  /* `plan.is_empty`: not plan.requests */
    int nonempty = requests ? PyObject_IsTrue(requests) : -1;
    Py_XDECREF(requests);
    if (nonempty <= 0) {
        int rc = nonempty < 0 ? -1
            : call_discard(PyObject_CallMethodObjArgs(L->sim, n_idle, now_obj, r->replica, plan, NULL));
        Py_DECREF(plan);
        return rc;
    }
    PyObject *dur_obj;
    if (L->plan_time_s != Py_None) {
        dur_obj = PyObject_CallOneArg(L->plan_time_s, plan);
    } else {
        PyObject *num_steps = slot_get(&rep_slots, r->replica, R_NUM_STEPS);
        dur_obj = num_steps ? PyObject_CallFunctionObjArgs(L->time_fn, r->index, num_steps, now_obj, plan, NULL) : NULL;
        Py_XDECREF(num_steps);
    }
    if (dur_obj == NULL)
        goto error;
    double duration = PyFloat_AsDouble(dur_obj);
    Py_DECREF(dur_obj);
    if (duration == -1.0 && PyErr_Occurred())
        goto error;
    if (L->has_api) {  /* duration += api.engine_step_s + (0.0 if host_overlaps_device else admission_s(...)) */
        double admission = 0.0;
        if (!L->host_overlaps) {
            PyObject *a = PyObject_CallMethodObjArgs(L->sim, n_admission_s, r->replica, plan, NULL);
            if (a == NULL)
                goto error;
            admission = PyFloat_AsDouble(a);
            Py_DECREF(a);
            if (admission == -1.0 && PyErr_Occurred())
                goto error;
        }
        duration += r->engine_step_s + admission;
    }
    if (record_step(L, r->index, plan, now_obj, duration) < 0 || slot_set(&rep_slots, r->replica, R_PLAN, plan) < 0)
        goto error;
    Py_DECREF(plan);
    return push(L, now + duration, L->step_end, r->index);
error:
    Py_DECREF(plan);
    return -1;
}

/* `wake(replica, now)`. */
static int wake(Loop *L, Rep *r, PyObject *now_obj) {
    PyObject *pending = slot_get(&rep_slots, r->replica, R_SCHEDULE_PENDING);
    if (pending == NULL)
        return -1;
    int is = PyObject_IsTrue(pending);
    Py_DECREF(pending);
    if (is < 0)
        return -1;
    if (is)
        return 0;
    if (slot_set(&rep_slots, r->replica, R_SCHEDULE_PENDING, Py_True) < 0)
        return -1;
    return push(L, PyFloat_AS_DOUBLE(now_obj), L->schedule_prio, r->index);
}

/* `end_step(now, index)` (with `end_step_streamed` of one API-server process, or none) and `next_step`. */
static int loop_end_step(Loop *L, PyObject *now_obj, Py_ssize_t index) {
    Rep *r = &L->reps[index];
    double now = PyFloat_AsDouble(now_obj);
    if (now == -1.0 && PyErr_Occurred())
        return -1;
    PyObject *plan = slot_get(&rep_slots, r->replica, R_PLAN);
    if (plan == NULL)
        return -1;
    PyObject *seen = NULL, *finished = NULL;
    int rc = -1;
    if (plan == Py_None) {
        PyErr_SetString(PyExc_AssertionError, "a step ended on a replica with no step in flight");
        goto done;
    }
    if (slot_set(&rep_slots, r->replica, R_PLAN, Py_None) < 0 || slot_add(&rep_slots, r->replica, R_NUM_STEPS, 1) < 0)
        goto done;
    if (r->stream_outputs != NULL) {  /* `end_step_streamed`'s one process: seen_s, the step's stream */
        PyObject *num = plan_get(plan, 4);  /* (num_emitting_seqs) */
        if (num == NULL)
            goto done;
        int nonzero = PyObject_IsTrue(num);
        if (nonzero > 0 && r->first_output_s != 0.0) {  /* with its first outputs: the emitting prefill seqs */
            PyObject *decodes = plan_get(plan, 3);  /* (num_decode_tokens) */
            PyObject *first = decodes ? PyNumber_Subtract(num, decodes) : NULL;
            Py_XDECREF(decodes);
            if (first != NULL) {
                PyObject *stream_args[4] = {now_obj, L->zero, num, first};
                seen = PyObject_Vectorcall(r->stream_outputs, stream_args, 4, NULL);
                Py_DECREF(first);
            }
        } else if (nonzero > 0) {
            PyObject *stream_args[3] = {now_obj, L->zero, num};
            seen = PyObject_Vectorcall(r->stream_outputs, stream_args, 3, NULL);
        } else if (nonzero == 0) {
            seen = now_obj;
            Py_INCREF(seen);
        }
        Py_DECREF(num);
        if (seen == NULL)
            goto done;
    } else {
        seen = now_obj;
        Py_INCREF(seen);
    }
    if (series_add(r->stamps, seen) < 0)
        goto done;
    PyObject *update_args[3] = {plan, L->token_id, seen};
    finished = PyObject_Vectorcall(r->update, update_args, 3, NULL);
    if (finished == NULL)
        goto done;
    PyObject *it = PyObject_GetIter(finished);
    if (it == NULL)
        goto done;
    PyObject *req;
    while ((req = PyIter_Next(it)) != NULL) {
        int ok = -1;
        PyObject *rid = PyObject_GetAttr(req, n_request_id);
        PyObject *row = rid ? PyDict_GetItemWithError(L->row_of, rid) : NULL;  /* (borrowed) */
        Py_XDECREF(rid);
        if (row == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_KeyError, "a finished request the recorder does not know");
        } else {
            PyObject *rec_args[3] = {req, row, r->stamps};
            PyObject *handled = Finisher_record((Finisher *)L->finisher, rec_args, 3);
            if (handled == Py_False) {  /* (the Python code does it all) */
                Py_DECREF(handled);
                handled = PyObject_CallMethodObjArgs(L->recorder, n_finished, req, r->stamps, NULL);
            }
            if (handled != NULL) {
                Py_DECREF(handled);
                ok = 0;
            }
        }
        if (ok == 0 && r->stream_outputs != NULL) {  /* api.release(0, seen_s): its connection is idle from then on */
            PyObject *release_args[2] = {L->zero, seen};
            ok = call_discard(PyObject_Vectorcall(r->release, release_args, 2, NULL));
        }
        if (ok == 0) {
            if (r->stream_outputs != NULL) {  /* request_seen(replica, seen_s) */
                if (L->closed)
                    ok = call_discard(PyObject_CallMethodObjArgs(L->sim, n_request_seen, r->replica, seen, NULL));
                else
                    ok = (slot_add(&rep_slots, r->replica, R_NUM_OUTSTANDING, -1) < 0 || slot_add(&sim_slots, L->sim, S_NUM_DONE, 1) < 0
                          || slot_add(&sim_slots, L->sim, S_NUM_IN_FLIGHT, -1) < 0) ? -1 : 0;
            } else {  /* (no API server: an open loop only, `end_step`'s statements) */
                ok = (slot_add(&rep_slots, r->replica, R_NUM_OUTSTANDING, -1) < 0 || slot_add(&sim_slots, L->sim, S_NUM_DONE, 1) < 0
                      || slot_add(&sim_slots, L->sim, S_NUM_IN_FLIGHT, -1) < 0) ? -1 : 0;
            }
        }
        Py_DECREF(req);
        if (ok < 0) {
            Py_DECREF(it);
            goto done;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        goto done;
    /* next_step */
    if (L->progress != Py_None) {
        PyObject *done_n = slot_get(&sim_slots, L->sim, S_NUM_DONE);
        PyObject *p = done_n ? PyObject_CallFunctionObjArgs(L->progress, done_n, L->num_specs, NULL) : NULL;
        Py_XDECREF(done_n);
        if (call_discard(p) < 0)
            goto done;
    }
    PyObject *pending = slot_get(&rep_slots, r->replica, R_SCHEDULE_PENDING);
    if (pending == NULL)
        goto done;
    int is_pending = PyObject_IsTrue(pending);
    Py_DECREF(pending);
    if (is_pending < 0)
        goto done;
    int alone = 0;
    if (!is_pending) {
        if (PyList_GET_SIZE(L->heap) == 0)
            alone = 1;
        else {
            PyObject *head = PyList_GET_ITEM(L->heap, 0);
            PyObject *t = PyTuple_Check(head) && PyTuple_GET_SIZE(head) > 0 ? PyTuple_GET_ITEM(head, 0) : NULL;
            if (t == NULL) {
                PyErr_SetString(PyExc_TypeError, "the heap's entries are tuples");
                goto done;
            }
            alone = PyFloat_Check(t) ? PyFloat_AS_DOUBLE(t) > now : PyObject_RichCompareBool(t, now_obj, Py_GT);
            if (alone < 0)
                goto done;
        }
    }
    rc = alone ? loop_schedule(L, now_obj, index) : wake(L, r, now_obj);
done:
    Py_DECREF(plan);
    Py_XDECREF(seen);
    Py_XDECREF(finished);
    return rc;
}

/* `enter(now, replica, request)` (no `ending`): the request reaches the replica's engine core. */
static int enter(Loop *L, Rep *r, PyObject *now_obj, PyObject *request) {
    PyObject *plan = slot_get(&rep_slots, r->replica, R_PLAN);
    if (plan == NULL)
        return -1;
    int idle = plan == Py_None;
    Py_DECREF(plan);
    int rc;
    PyObject *lag = NULL;
    if (!idle && (lag = slot_get(&rep_slots, r->replica, R_LAG)) == NULL)
        return -1;
    int no_lag = lag != NULL && PyLong_CheckExact(lag) && PyLong_AsLong(lag) == 0;
    if (lag != NULL && !PyLong_CheckExact(lag)) {  /* (`lag == 0` of another type) */
        no_lag = PyObject_RichCompareBool(lag, L->zero, Py_EQ);
        if (no_lag < 0) {
            Py_DECREF(lag);
            return -1;
        }
    }
    if (idle || no_lag)
        rc = call_discard(PyObject_CallOneArg(r->add_request, request));
    else {  /* replica.in_transit.append([request, replica.lag]) */
        PyObject *in_transit = slot_get(&rep_slots, r->replica, R_IN_TRANSIT);
        PyObject *entry = in_transit ? PyList_New(2) : NULL;
        if (entry != NULL) {
            Py_INCREF(request);
            PyList_SET_ITEM(entry, 0, request);
            Py_INCREF(lag);
            PyList_SET_ITEM(entry, 1, lag);
            rc = PyList_Check(in_transit) ? PyList_Append(in_transit, entry)
                                          : call_discard(PyObject_CallMethod(in_transit, "append", "O", entry));
            Py_DECREF(entry);
        } else
            rc = -1;
        Py_XDECREF(in_transit);
    }
    Py_XDECREF(lag);
    if (rc == 0 && idle)
        rc = wake(L, r, now_obj);
    return rc;
}

/* An item of a float64 (or int64) array: its buffer's element `index` (bounds checked). */
static int put_double(Py_buffer *view, Py_ssize_t index, double v) {
    if (index < 0 || index >= view->shape[0]) {
        PyErr_SetString(PyExc_IndexError, "run_loop: a request row out of range");
        return -1;
    }
    ((double *)view->buf)[index] = v;
    return 0;
}

/* `arrive(now, index)` of an open loop, its `send` and `route` to the one replica behind its API server. */
static int loop_arrive(Loop *L, PyObject *now_obj, PyObject *index_obj) {
    Py_ssize_t index = PyLong_AsSsize_t(index_obj);
    if (index == -1 && PyErr_Occurred())
        return -1;
    Py_ssize_t num_specs = PyList_GET_SIZE(L->specs);
    if (index < 0 || index >= num_specs) {
        PyErr_SetString(PyExc_IndexError, "run_loop: no such request");
        return -1;
    }
    PyObject *spec = PyList_GET_ITEM(L->specs, index);  /* (borrowed: the list is the simulation's, not changed) */
    Py_INCREF(spec);
    PyObject *request = NULL, *source = NULL, *taken = NULL, *ticket = NULL, *next_index = NULL, *tokens = NULL;
    int rc = -1;
    if (index + 1 < num_specs) {  /* push(specs[index + 1].arrival_s, _ARRIVAL, index + 1) */
        PyObject *arrival = PyObject_GetAttr(PyList_GET_ITEM(L->specs, index + 1), n_arrival_s);
        next_index = arrival ? PyLong_FromSsize_t(index + 1) : NULL;
        int pushed = next_index ? push_obj(L, arrival, L->arrival_prio, next_index) : -1;
        Py_XDECREF(arrival);
        if (pushed < 0)
            goto done;
    }
    /* send(now, index) */
    if (slot_add(&sim_slots, L->sim, S_NUM_IN_FLIGHT, 1) < 0
        || put_double(&L->sent, index, PyFloat_AS_DOUBLE(now_obj)) < 0)
        goto done;
    if ((source = PyObject_CallOneArg(L->source, index_obj)) == NULL)
        goto done;
    PyObject *lazy_args[3] = {spec, source, now_obj};
    if ((request = PyObject_Vectorcall(L->lazy, lazy_args, 3, NULL)) == NULL)
        goto done;
    /* route(index): the one replica */
    Rep *r = &L->reps[0];
    if (slot_add(&sim_slots, L->sim, S_NUM_ROUTED, 1) < 0)
        goto done;
    if (index >= L->replica_col.shape[0]) {
        PyErr_SetString(PyExc_IndexError, "run_loop: a request row out of range");
        goto done;
    }
    ((int64_t *)L->replica_col.buf)[index] = 0;  /* recorder.replica[index] = replica.index */
    if (slot_add(&rep_slots, r->replica, R_NUM_OUTSTANDING, 1) < 0)
        goto done;
    if ((tokens = PyObject_GetAttr(spec, n_num_prompt_tokens)) == NULL)
        goto done;
    PyObject *take_args[2] = {now_obj, tokens};
    if ((taken = PyObject_Vectorcall(L->take_request, take_args, 2, NULL)) == NULL)
        goto done;
    if (!PyTuple_CheckExact(taken)) {  /* (`process, ticket, reach_s = ...` takes any sequence of three) */
        PyObject *as_tuple = PySequence_Tuple(taken);
        Py_SETREF(taken, as_tuple);
        if (taken == NULL)
            goto done;
    }
    if (PyTuple_GET_SIZE(taken) != 3) {
        PyErr_SetString(PyExc_ValueError, "take_request: (process, ticket, reach_s)");
        goto done;
    }
    if (PyDict_SetItem(L->in_frontend, index_obj, request) < 0)
        goto done;
    if ((ticket = PyTuple_Pack(3, r->replica, PyTuple_GET_ITEM(taken, 0), PyTuple_GET_ITEM(taken, 1))) == NULL
        || PyDict_SetItem(L->api_ticket, index_obj, ticket) < 0)
        goto done;
    rc = push_obj(L, PyTuple_GET_ITEM(taken, 2), L->reach_prio, index_obj);
done:
    Py_DECREF(spec);
    Py_XDECREF(request);
    Py_XDECREF(source);
    Py_XDECREF(taken);
    Py_XDECREF(ticket);
    Py_XDECREF(next_index);
    Py_XDECREF(tokens);
    return rc;
}

/* `reach(now, index)` behind the one replica's API server of one process. */
static int loop_reach(Loop *L, PyObject *now_obj, PyObject *index_obj) {
    Rep *r = &L->reps[0];
    PyObject *ticket = PyDict_GetItemWithError(L->api_ticket, index_obj);  /* (borrowed) */
    if (ticket == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, index_obj);
        return -1;
    }
    if (!PyTuple_CheckExact(ticket) || PyTuple_GET_SIZE(ticket) != 3 || PyTuple_GET_ITEM(ticket, 0) != r->replica) {
        PyErr_SetString(PyExc_TypeError, "run_loop: a ticket (replica, process, ticket)");
        return -1;
    }
    Py_INCREF(ticket);
    int rc = -1;
    int waited = PySet_Contains(L->hop_waited, index_obj);
    if (waited < 0)
        goto done;
    if (waited) {
        if (PySet_Discard(L->hop_waited, index_obj) < 0)
            goto done;
    } else {
        PyObject *reach_args[3] = {now_obj, PyTuple_GET_ITEM(ticket, 1), PyTuple_GET_ITEM(ticket, 2)};
        PyObject *reach_s = PyObject_Vectorcall(L->reach_s, reach_args, 3, NULL);
        if (reach_s == NULL)
            goto done;
        int later = PyFloat_CheckExact(reach_s) ? PyFloat_AS_DOUBLE(reach_s) > PyFloat_AS_DOUBLE(now_obj)
                                                : PyObject_RichCompareBool(reach_s, now_obj, Py_GT);
        if (later != 0) {
            rc = later < 0 ? -1 : push_obj(L, reach_s, L->reach_prio, index_obj);
            Py_DECREF(reach_s);
            goto done;
        }
        Py_DECREF(reach_s);
        /* if api.busy_hop_s > 0 and replica.plan is not None: wait for the engine core's core */
        PyObject *hop = PyObject_GetAttr(L->api0, n_busy_hop_s);
        if (hop == NULL)
            goto done;
        int positive = PyObject_RichCompareBool(hop, L->zero, Py_GT);
        int busy = 0;
        if (positive > 0) {
            PyObject *plan = slot_get(&rep_slots, r->replica, R_PLAN);
            busy = plan == NULL ? -1 : plan != Py_None;
            Py_XDECREF(plan);
        }
        if (positive < 0 || busy < 0) {
            Py_DECREF(hop);
            goto done;
        }
        if (busy) {
            PyObject *at = PyNumber_Add(now_obj, hop);
            rc = at == NULL || PySet_Add(L->hop_waited, index_obj) < 0 ? -1 : push_obj(L, at, L->reach_prio, index_obj);
            Py_XDECREF(at);
            Py_DECREF(hop);
            goto done;
        }
        Py_DECREF(hop);
    }
    if (PyDict_DelItem(L->api_ticket, index_obj) < 0)
        goto done;
    PyObject *request = PyDict_GetItemWithError(L->in_frontend, index_obj);
    if (request == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, index_obj);
        goto done;
    }
    Py_INCREF(request);
    rc = PyDict_DelItem(L->in_frontend, index_obj);
    if (rc == 0)
        rc = enter(L, r, now_obj, request);
    Py_DECREF(request);
done:
    Py_DECREF(ticket);
    return rc;
}

static void loop_release(Loop *L) {
    for (Py_ssize_t i = 0; i < L->num_reps; i++) {
        Rep *r = &L->reps[i];
        Py_XDECREF(r->replica);
        Py_XDECREF(r->index);
        Py_XDECREF(r->schedule);
        Py_XDECREF(r->update);
        Py_XDECREF(r->add_request);
        Py_XDECREF(r->stamps);
        Py_XDECREF(r->stream_outputs);
        Py_XDECREF(r->release);
    }
    PyMem_Free(L->reps);
    if (L->num_views > 0)
        PyBuffer_Release(&L->sent);
    if (L->num_views > 1)
        PyBuffer_Release(&L->replica_col);
    L->num_views = 0;
    PyObject **owned[] = {&L->heap, &L->recorder, &L->plan_time_s, &L->time_fn, &L->token_id, &L->progress,
                          &L->num_specs, &L->row_of, &L->finisher, &L->block, &L->steps_rows, &L->specs, &L->lazy,
                          &L->source, &L->in_frontend, &L->api_ticket, &L->hop_waited, &L->api0, &L->take_request,
                          &L->reach_s, &L->arrival_prio, &L->reach_prio};
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++)
        Py_CLEAR(*owned[i]);
}

static PyObject *get_double(PyObject *obj, PyObject *name, double *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return NULL;
    *out = PyFloat_AsDouble(v);
    if (*out == -1.0 && PyErr_Occurred()) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* Whether the requests' way in runs here (`requests_in`): one replica behind an API server of one process, an open
 * loop, the specs a list, the recorder's `sent` and `replica` float64 / int64 arrays. 0, or -1 on error. */
static int setup_requests_in(Loop *L, PyObject *api, PyObject *specs) {
    L->requests_in = 0;
    if (!L->has_api || L->num_reps != 1 || L->closed || !PyList_CheckExact(specs) || !PyList_CheckExact(api))
        return 0;
    PyObject *process_of = PyObject_GetAttr(L->sim, n_process_of);
    if (process_of == NULL)
        return -1;
    int one_process = process_of == Py_None;
    Py_DECREF(process_of);
    if (!one_process)
        return 0;
    PyObject *make_request = PyObject_GetAttr(L->sim, n_make_request);
    PyObject *prompts = make_request ? PyObject_GetAttr(L->sim, n_prompts) : NULL;
    if (prompts != NULL) {
        L->lazy = PyObject_GetAttr(make_request, n_lazy);
        L->source = L->lazy ? PyObject_GetAttr(prompts, n_source) : NULL;
    }
    Py_XDECREF(make_request);
    Py_XDECREF(prompts);
    if (L->source == NULL || (L->in_frontend = PyObject_GetAttr(L->sim, n_in_frontend)) == NULL
        || (L->api_ticket = PyObject_GetAttr(L->sim, n_api_ticket)) == NULL
        || (L->hop_waited = PyObject_GetAttr(L->sim, n_hop_waited)) == NULL)
        return -1;
    L->api0 = Py_NewRef(PyList_GET_ITEM(api, 0));
    if ((L->take_request = PyObject_GetAttr(L->api0, n_take_request)) == NULL
        || (L->reach_s = PyObject_GetAttr(L->api0, n_reach_s)) == NULL)
        return -1;
    if (!PyDict_CheckExact(L->in_frontend) || !PyDict_CheckExact(L->api_ticket) || !PyAnySet_CheckExact(L->hop_waited))
        return 0;
    PyObject *sent = PyObject_GetAttr(L->recorder, n_sent);
    if (sent == NULL)
        return -1;
    int rc = PyObject_GetBuffer(sent, &L->sent, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
    Py_DECREF(sent);
    if (rc < 0) {
        PyErr_Clear();
        return 0;
    }
    L->num_views = 1;
    PyObject *column = PyObject_GetAttr(L->recorder, n_replica);
    if (column == NULL)
        return -1;
    rc = PyObject_GetBuffer(column, &L->replica_col, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
    Py_DECREF(column);
    if (rc < 0) {
        PyErr_Clear();
        return 0;
    }
    L->num_views = 2;
    Py_buffer *a = &L->sent, *b = &L->replica_col;
    if (a->ndim != 1 || a->format == NULL || strcmp(a->format, "d") != 0 || b->ndim != 1 || b->itemsize != 8
        || b->format == NULL || (strcmp(b->format, "l") != 0 && strcmp(b->format, "q") != 0))
        return 0;
    L->specs = Py_NewRef(specs);
    L->requests_in = 1;
    return 0;
}

/* run_loop(sim, handlers, record_rest) -> True once the loop has run; False, having run nothing, where the recorder's
 * finisher or step block is not the compiled one. The simulation's replicas must all be ones this code handles
 * (`_Simulation.compiled_loop` decides). */
static PyObject *mod_run_loop(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[1]) || PyList_GET_SIZE(args[1]) != 5) {
        PyErr_SetString(PyExc_TypeError, "run_loop(sim, handlers (a list of 5), record_rest)");
        return NULL;
    }
    Loop L;
    memset(&L, 0, sizeof(L));
    L.sim = args[0];
    L.handlers = args[1];
    L.record_rest = args[2];
    PyObject *result = NULL, *replicas = NULL, *api = NULL, *specs = NULL, *v = NULL;
    if ((L.heap = PyObject_GetAttr(L.sim, n_heap)) == NULL || !PyList_CheckExact(L.heap)
        || (L.recorder = PyObject_GetAttr(L.sim, n_recorder)) == NULL
        || (L.plan_time_s = PyObject_GetAttr(L.sim, n_plan_time_s)) == NULL
        || (L.time_fn = PyObject_GetAttr(L.sim, n_time_fn)) == NULL
        || (L.token_id = PyObject_GetAttr(L.sim, n_token_id)) == NULL
        || (L.progress = PyObject_GetAttr(L.sim, n_progress)) == NULL
        || (specs = PyObject_GetAttr(L.sim, n_specs)) == NULL
        || (L.row_of = PyObject_GetAttr(L.recorder, n_row_of)) == NULL || !PyDict_CheckExact(L.row_of)
        || (L.finisher = PyObject_GetAttr(L.recorder, n_finisher)) == NULL
        || (L.steps_rows = PyObject_GetAttr(L.recorder, n_steps)) == NULL
        || (L.block = PyObject_GetAttr(L.steps_rows, n_block)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "run_loop: a simulation's attributes");
        goto done;
    }
    if (Py_TYPE(L.finisher) != &FinisherType || Py_TYPE(L.block) != &StepBlockType) {
        result = Py_False;  /* (records of other types: the Python loop; nothing has run) */
        Py_INCREF(result);
        goto done;
    }
    Py_ssize_t num_specs = PyObject_Length(specs);
    if (num_specs < 0 || (L.num_specs = PyLong_FromSsize_t(num_specs)) == NULL)
        goto done;
    if ((v = PyObject_GetAttr(L.recorder, n_record_steps)) == NULL || (L.record_steps = PyObject_IsTrue(v)) < 0)
        goto done;
    Py_CLEAR(v);
    if ((v = PyObject_GetAttr(L.sim, n_max_in_flight)) == NULL)
        goto done;
    L.closed = v != Py_None;
    Py_CLEAR(v);
    if ((v = PyObject_GetAttr(L.sim, n_host_overlaps)) == NULL || (L.host_overlaps = PyObject_IsTrue(v)) < 0)
        goto done;
    Py_CLEAR(v);
    if ((api = PyObject_GetAttr(L.sim, n_api)) == NULL || (replicas = PyObject_GetAttr(L.sim, n_replicas)) == NULL
        || !PyList_CheckExact(replicas) || (api != Py_None && (!PyList_CheckExact(api)
                                                                || PyList_GET_SIZE(api) != PyList_GET_SIZE(replicas)))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "run_loop: replicas and api lists");
        goto done;
    }
    L.has_api = api != Py_None;
    slots_bind(&sim_slots, Py_TYPE(L.sim));
    if (PyList_GET_SIZE(replicas)) {
        PyObject *r0 = PyList_GET_ITEM(replicas, 0), *stamps0 = PyObject_GetAttr(r0, n_stamps);
        if (stamps0 == NULL)
            goto done;
        slots_bind(&rep_slots, Py_TYPE(r0));
        slots_bind(&series_slots, Py_TYPE(stamps0));
        Py_DECREF(stamps0);
    }
    Py_ssize_t n = PyList_GET_SIZE(replicas);
    if ((L.reps = PyMem_Calloc(n ? n : 1, sizeof(Rep))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    L.num_reps = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        Rep *r = &L.reps[i];
        r->replica = PyList_GET_ITEM(replicas, i);
        Py_INCREF(r->replica);
        PyObject *scheduler = PyObject_GetAttr(r->replica, n_scheduler);
        if (scheduler == NULL)
            goto done;
        r->schedule = PyObject_GetAttr(scheduler, n_schedule);
        r->update = r->schedule ? PyObject_GetAttr(scheduler, n_update) : NULL;
        r->add_request = r->update ? PyObject_GetAttr(scheduler, n_add_request) : NULL;
        Py_DECREF(scheduler);
        if (r->add_request == NULL || (r->stamps = PyObject_GetAttr(r->replica, n_stamps)) == NULL
            || (r->index = PyObject_GetAttr(r->replica, n_index)) == NULL)
            goto done;
        if (PyLong_AsSsize_t(r->index) != i) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "run_loop: replica i at index i");
            goto done;
        }
        if (L.has_api) {
            PyObject *a = PyList_GET_ITEM(api, i);
            if ((r->stream_outputs = PyObject_GetAttr(a, n_stream_outputs)) == NULL
                || (r->release = PyObject_GetAttr(a, n_release)) == NULL)
                goto done;
            if ((v = get_double(a, n_engine_step_s, &r->engine_step_s)) == NULL)
                goto done;
            Py_CLEAR(v);
            if ((v = get_double(a, n_first_output_s, &r->first_output_s)) == NULL)
                goto done;
            Py_CLEAR(v);
        }
    }
    L.zero = PyLong_FromLong(0);
    L.step_end = PyLong_FromLong(0);
    L.schedule_prio = PyLong_FromLong(4);
    L.arrival_prio = PyLong_FromLong(2);
    L.reach_prio = PyLong_FromLong(3);
    if (L.zero == NULL || L.step_end == NULL || L.schedule_prio == NULL || L.arrival_prio == NULL
        || L.reach_prio == NULL)
        goto done;
    if (setup_requests_in(&L, api, specs) < 0)
        goto done;
    PyObject *heap = L.heap;
    for (unsigned long events = 0; PyList_GET_SIZE(heap); events++) {
        if ((events & 4095) == 0 && PyErr_CheckSignals() < 0)  /* (Ctrl-C: the loop may run no Python code) */
            goto done;
        PyObject *entry = heap_pop(heap);
        if (entry == NULL)
            goto done;
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4) {
            Py_DECREF(entry);
            PyErr_SetString(PyExc_TypeError, "run_loop: the heap's entries are (time_s, priority, seq_no, payload)");
            goto done;
        }
        PyObject *now_obj = PyTuple_GET_ITEM(entry, 0), *payload = PyTuple_GET_ITEM(entry, 3);
        long priority = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
        int rc;
        if (priority == -1 && PyErr_Occurred())
            rc = -1;
        else if ((priority == 2 || priority == 3) && L.requests_in && PyFloat_CheckExact(now_obj)
                 && PyLong_CheckExact(payload))
            rc = priority == 2 ? loop_arrive(&L, now_obj, payload) : loop_reach(&L, now_obj, payload);
        else if ((priority == 0 || priority == 4) && PyFloat_CheckExact(now_obj) && PyLong_CheckExact(payload)) {
            Py_ssize_t index = PyLong_AsSsize_t(payload);
            if (index < 0 || index >= n) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_IndexError, "run_loop: no such replica");
                rc = -1;
            } else
                rc = priority == 0 ? loop_end_step(&L, now_obj, index) : loop_schedule(&L, now_obj, index);
        } else if (priority >= 0 && priority < 5) {
            PyObject *call_args[2] = {now_obj, payload};
            rc = call_discard(PyObject_Vectorcall(PyList_GET_ITEM(L.handlers, priority), call_args, 2, NULL));
        } else {
            PyErr_SetString(PyExc_ValueError, "run_loop: an event's priority is 0-4");
            rc = -1;
        }
        Py_DECREF(entry);
        if (rc < 0)
            goto done;
    }
    result = Py_True;
    Py_INCREF(result);
done:
    Py_XDECREF(v);
    Py_XDECREF(api);
    Py_XDECREF(replicas);
    Py_XDECREF(specs);
    Py_XDECREF(L.zero);
    Py_XDECREF(L.step_end);
    Py_XDECREF(L.schedule_prio);
    loop_release(&L);  /* (arrival_prio, reach_prio, specs and the views too) */
    return result;
}

/* make_specs(cls, n, id_prefix, names, values) -> a list of n instances of the dataclass `cls`, each as its
 * `__init__` makes it, without calling it (roofline/sim/workload.py `_single_turn`, its Python code the reference):
 * made by `cls.__new__` (object's) and its fields set in `__init__`'s order by object's `__setattr__`, which is what
 * a frozen dataclass's `__init__` calls. `names`: the fields in that order; the first one's value for instance i is
 * the str `id_prefix` followed by i in decimal (f"{id_prefix}{i}"), the others' are `values` (a tuple, one item a
 * field after the first): a list of n items is per instance (item i), anything else the same object for all. A slot
 * (`__slots__`) is written at its offset, as its descriptor does. A
 * per-instance list of specs made in one pass, ~0.2 us a spec against ~2.5 us for the Python loop of 1,000,000
 * (docs/benchmark-history/2026-12-01b-million3.md). */
static PyObject *mod_make_specs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyType_Check(args[0]) || !PyUnicode_Check(args[2]) || !PyTuple_Check(args[3])
        || !PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) + 1 != PyTuple_GET_SIZE(args[3])) {
        PyErr_SetString(PyExc_TypeError, "make_specs(cls, n, id_prefix, names, values): values one per name after the first");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "make_specs: n must be >= 0");
        return NULL;
    }
    PyObject *prefix = args[2], *names = args[3], *values = args[4];
    Py_ssize_t num_fields = PyTuple_GET_SIZE(names);
    if (num_fields < 1) {
        PyErr_SetString(PyExc_TypeError, "make_specs: at least one name (the id's)");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < num_fields; k++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_TypeError, "make_specs: names must be str");
            return NULL;
        }
    for (Py_ssize_t k = 0; k + 1 < num_fields; k++) {
        PyObject *v = PyTuple_GET_ITEM(values, k);
        if (PyList_CheckExact(v) && PyList_GET_SIZE(v) != n) {
            PyErr_SetString(PyExc_ValueError, "make_specs: a per-instance list must hold n items");
            return NULL;
        }
    }
    Py_ssize_t prefix_len;
    const char *prefix_text = PyUnicode_AsUTF8AndSize(prefix, &prefix_len);
    if (prefix_text == NULL)
        return NULL;
    if (prefix_len > 64) {  /* (ours is "r") */
        PyErr_SetString(PyExc_ValueError, "make_specs: id_prefix longer than 64 bytes");
        return NULL;
    }
    char id_text[96];  /* the prefix, then i's digits (at most 19) */
    memcpy(id_text, prefix_text, prefix_len);
    /* A field that is a slot (its class attribute a member descriptor of an object, as `__slots__` makes) is written
     * at its offset, as the descriptor's `__set__` writes it (PyMember_SetOne: the new reference in, the old one, none
     * on a new object, out); any other by object's `__setattr__`. */
    Py_ssize_t offsets[16];
    if (num_fields > 16) {
        PyErr_SetString(PyExc_ValueError, "make_specs: at most 16 fields");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < num_fields; k++)
        offsets[k] = member_slot_offset(cls, PyTuple_GET_ITEM(names, k), 1);
    PyObject *empty = PyTuple_New(0), *specs = PyList_New(n);
    if (empty == NULL || specs == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = cls->tp_new(cls, empty, NULL);
        if (spec == NULL)
            goto fail;
        PyList_SET_ITEM(specs, i, spec);  /* (the list owns it from here) */
        int digits = snprintf(id_text + prefix_len, sizeof(id_text) - prefix_len, "%zd", i);
        PyObject *id = PyUnicode_FromStringAndSize(id_text, prefix_len + digits);  /* (UTF-8, as the prefix) */
        if (id == NULL)
            goto fail;
        for (Py_ssize_t k = 0; k < num_fields; k++) {
            PyObject *v = id;
            if (k > 0) {
                v = PyTuple_GET_ITEM(values, k - 1);
                if (PyList_CheckExact(v))
                    v = PyList_GET_ITEM(v, i);
            }
            if (offsets[k] >= 0) {
                PyObject **slot = (PyObject **)((char *)spec + offsets[k]);
                PyObject *old = *slot;
                *slot = Py_NewRef(v);
                Py_XDECREF(old);
            } else if (PyObject_GenericSetAttr(spec, PyTuple_GET_ITEM(names, k), v) < 0) {
                Py_DECREF(id);
                goto fail;
            }
        }
        Py_DECREF(id);
    }
    Py_DECREF(empty);
    return specs;
fail:
    Py_XDECREF(empty);
    Py_XDECREF(specs);  /* (its items not yet set are NULL: list_dealloc skips them) */
    return NULL;
}

/* rows_of(specs, name) -> {spec.<name>: i for i, spec in enumerate(specs)} of a list, the dict made at its final
 * size at once (recorder.py's `Recorder`, whose comprehension is the reference: the same keys and rows, a later
 * equal key's row kept): a comprehension's dict of 1,000,000 ids grows by doubling, ~0.4 s. */
static PyObject *mod_rows_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "rows_of(specs: list, name: str)");
        return NULL;
    }
    PyObject *specs = args[0], *name = args[1];
    PyObject *rows = _PyDict_NewPresized(PyList_GET_SIZE(specs));
    if (rows == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(specs); i++) {  /* (re-read: an attribute may run Python code) */
        PyObject *spec = PyList_GET_ITEM(specs, i);
        Py_INCREF(spec);
        PyObject *key = PyObject_GetAttr(spec, name);
        Py_DECREF(spec);
        PyObject *row = key ? PyLong_FromSsize_t(i) : NULL;
        int rc = row ? PyDict_SetItem(rows, key, row) : -1;
        Py_XDECREF(key);
        Py_XDECREF(row);
        if (rc < 0) {
            Py_DECREF(rows);
            return NULL;
        }
    }
    return rows;
}

/* spec_column(specs, name, out) -> bool: `out` (a writable C-contiguous buffer of len(specs) float64 ('d') or int64
 * ('q' / 'l')) filled with each spec's attribute `name` as `np.array([getattr(s, name) for s in specs], dtype)`
 * fills it: a float's double, an int's value (OverflowError past int64, as numpy's); False, `out` partly written,
 * where an item is of another type (the caller's Python code decides then). With `out` None: the list of the
 * attribute's values. recorder.py's `build_result` (its comprehensions the reference). */
static PyObject *mod_spec_column(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "spec_column(specs: list, name: str, out)");
        return NULL;
    }
    PyObject *specs = args[0], *name = args[1], *out = args[2];
    Py_ssize_t n = PyList_GET_SIZE(specs);
    if (out == Py_None) {
        PyObject *values = PyList_New(n);
        if (values == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyObject_GetAttr(PyList_GET_ITEM(specs, i), name);
            if (v == NULL) {
                Py_DECREF(values);
                return NULL;
            }
            PyList_SET_ITEM(values, i, v);
        }
        return values;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    const char *format = view.format ? view.format : "B";
    int is_float = strcmp(format, "d") == 0 && view.itemsize == 8;
    int is_int = (strcmp(format, "q") == 0 || strcmp(format, "l") == 0) && view.itemsize == 8;
    if ((!is_float && !is_int) || view.len != n * 8) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "spec_column: out must hold len(specs) float64 or int64");
        return NULL;
    }
    PyObject *result = Py_True;
    for (Py_ssize_t i = 0; i < n && result == Py_True; i++) {
        PyObject *v = PyObject_GetAttr(PyList_GET_ITEM(specs, i), name);
        if (v == NULL) {
            result = NULL;
            break;
        }
        if (is_float && PyFloat_CheckExact(v))
            ((double *)view.buf)[i] = PyFloat_AS_DOUBLE(v);
        else if (is_int && PyLong_CheckExact(v)) {
            long long x = PyLong_AsLongLong(v);
            if (x == -1 && PyErr_Occurred())
                result = NULL;
            else
                ((int64_t *)view.buf)[i] = (int64_t)x;
        } else
            result = Py_False;
        Py_DECREF(v);
    }
    PyBuffer_Release(&view);
    return Py_XNewRef(result);
}

static PyMethodDef methods[] = {
    {"runs", (PyCFunction)(void (*)(void))mod_runs, METH_FASTCALL,
     "runs(values, num, ascending, times): a finished request's runs of stamps (Segments.add's shortcuts), or None"},
    {"bind_request_type", (PyCFunction)bind_request_type, METH_VARARGS,
     "bind_request_type(Request, FinishedTokens=None): Finisher.record reads a request of that class at its slots "
     "(True), or by name"},
    {"bind_plan_type", (PyCFunction)bind_plan_type, METH_O,
     "bind_plan_type(StepPlan): the step rows read a plan of that class at its slots (True), or by name (False)"},
    {"run_loop", (PyCFunction)(void (*)(void))mod_run_loop, METH_FASTCALL,
     "run_loop(sim, handlers, record_rest): _Simulation.run's loop, its common step in C (False: not run)"},
    {"ordered_sum", (PyCFunction)(void (*)(void))mod_ordered_sum, METH_FASTCALL,
     "ordered_sum((steps, across), which, lo, hi, mean): numpy's add.reduce of the pieces joined (or of their squared "
     "deviations from mean)"},
    {"spec_column", (PyCFunction)(void (*)(void))mod_spec_column, METH_FASTCALL,
     "spec_column(specs, name, out): out (float64 or int64) filled with each spec's attribute (False: another type), "
     "or with out None the list of them"},
    {"rows_of", (PyCFunction)(void (*)(void))mod_rows_of, METH_FASTCALL,
     "rows_of(specs, name): {getattr(spec, name): i for i, spec in enumerate(specs)}, the dict at its size at once"},
    {"make_specs", (PyCFunction)(void (*)(void))mod_make_specs, METH_FASTCALL,
     "make_specs(cls, n, id_prefix, names, values): n instances of the dataclass cls as its __init__ makes them"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_simcore", "The simulator's per-request records in C (token_times.py's reference).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__simcore(void) {
    for (int i = 0; i < NUM_PLAN_FIELDS; i++)
        if ((plan_names[i] = PyUnicode_InternFromString(plan_fields[i])) == NULL)
            return NULL;
    if ((step_index_name = PyUnicode_InternFromString("step_index")) == NULL
        || (requests_name = PyUnicode_InternFromString("requests")) == NULL)
        return NULL;
    if (PyType_Ready(&StepBlockType) < 0 || PyType_Ready(&FinisherType) < 0)
        return NULL;
    for (int i = 0; i < NUM_FINISHED_FIELDS; i++)
        if ((finished_names[i] = PyUnicode_InternFromString(finished_fields[i])) == NULL)
            return NULL;
    for (int i = 0; i < 4; i++)
        if ((segment_names[i] = PyUnicode_InternFromString(segment_arrays[i])) == NULL)
            return NULL;
    if ((name_values = PyUnicode_InternFromString("values")) == NULL
        || (name_num = PyUnicode_InternFromString("num")) == NULL
        || (name_ascending = PyUnicode_InternFromString("ascending")) == NULL
        || (name_index_of = PyUnicode_InternFromString("_index_of")) == NULL
        || (name_append = PyUnicode_InternFromString("append")) == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(loop_names) / sizeof(loop_names[0]); i++)
        if ((*loop_names[i].var = PyUnicode_InternFromString(loop_names[i].name)) == NULL)
            return NULL;
    struct { PyObject **var; const char *name; } request_names[] = {
        {&fn_first_scheduled, "first_scheduled_time_s"}, {&fn_num_preemptions, "num_preemptions"},
        {&fn_num_prefix_hits, "num_prefix_hit_tokens"}, {&fn_finish, "finish_time_s"}, {&fn_cols, "_cols"},
        {&fn_output_ids, "_output_ids"}, {&fn_token_times, "_token_times"}, {&fn_missing, "missing"},
        {&fn_times, "times"}};
    for (size_t i = 0; i < sizeof(request_names) / sizeof(request_names[0]); i++)
        if ((*request_names[i].var = PyUnicode_InternFromString(request_names[i].name)) == NULL)
            return NULL;
    if ((one = PyLong_FromLong(1)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&StepBlockType);
    if (PyModule_AddObject(m, "StepBlock", (PyObject *)&StepBlockType) < 0) {
        Py_DECREF(&StepBlockType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&FinisherType);
    if (PyModule_AddObject(m, "Finisher", (PyObject *)&FinisherType) < 0) {
        Py_DECREF(&FinisherType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
