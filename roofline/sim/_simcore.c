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
 * `TokenTimes.values`: numpy's mean and std of the gaps without joining them into an array).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
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
    if (PyList_CheckExact(obj)) {
        Py_ssize_t size = PyList_GET_SIZE(obj);
        for (Py_ssize_t i = 0; i < size; i++)
            if (!PyFloat_CheckExact(PyList_GET_ITEM(obj, i)))
                return 0;
        t->list = obj;
        *n = size;
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
    double t0 = time_at(&times, 0);
    if (values[first] == t0 && (first == 0 || values[first - 1] < t0)) {  /* one run ending at the latest stamp */
        for (Py_ssize_t i = 0; i < n; i++)
            if (!(values[first + i] == time_at(&times, i)))
                goto none;  /* (the Python code searches) */
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
    if (put(row, 0, args[0]) < 0 || put(row, 1, PyObject_GetAttr(plan, step_index_name)) < 0)
        return NULL;
    row[2] = now;
    row[3] = now + duration;
    row[4] = duration;
    PyObject *used = NULL, *total = NULL;
    int column = 5;
    for (int i = 0; i < NUM_PLAN_FIELDS; i++, column++) {
        PyObject *value = PyObject_GetAttr(plan, plan_names[i]);
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
    for (int i = 0; i < NUM_FINISHED_FIELDS; i++)
        if ((fields[i] = PyObject_GetAttr(req, finished_names[i])) == NULL)
            goto done;
    double first_scheduled, finish, first_token;
    long long num_output, num_preemptions, num_prefix_hits;
    PyObject *times = fields[4];
    if (as_double(fields[0], &first_scheduled) < 0 || as_int64(fields[1], &num_output) < 0
        || as_int64(fields[2], &num_preemptions) < 0 || as_int64(fields[3], &num_prefix_hits) < 0
        || as_double(fields[5], &finish) < 0 || !PyList_CheckExact(times))
        goto decided;
    Py_ssize_t n = PyList_GET_SIZE(times);
    if (n && as_double(PyList_GET_ITEM(times, 0), &first_token) < 0)
        goto decided;
    if (!n)
        first_token = Py_NAN;
    if (n) {  /* (no tokens: no runs, as `Segments.add`) */
        if ((svalues = PyObject_GetAttr(series, name_values)) == NULL || (snum = PyObject_GetAttr(series, name_num)) == NULL
            || (sasc = PyObject_GetAttr(series, name_ascending)) == NULL)
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

static PyMethodDef methods[] = {
    {"runs", (PyCFunction)(void (*)(void))mod_runs, METH_FASTCALL,
     "runs(values, num, ascending, times): a finished request's runs of stamps (Segments.add's shortcuts), or None"},
    {"ordered_sum", (PyCFunction)(void (*)(void))mod_ordered_sum, METH_FASTCALL,
     "ordered_sum((steps, across), which, lo, hi, mean): numpy's add.reduce of the pieces joined (or of their squared "
     "deviations from mean)"},
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
    if ((step_index_name = PyUnicode_InternFromString("step_index")) == NULL)
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
