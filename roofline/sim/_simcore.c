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
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static PyMethodDef methods[] = {
    {"runs", (PyCFunction)(void (*)(void))mod_runs, METH_FASTCALL,
     "runs(values, num, ascending, times): a finished request's runs of stamps (Segments.add's shortcuts), or None"},
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
    if (PyType_Ready(&StepBlockType) < 0)
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
    return m;
}
