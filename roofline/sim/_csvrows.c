/* The rows of a CSV file in C, as pandas' `to_csv(index=False)` writes them: roofline.sim.outputs.write_csv's cells
   (`_csv_cells`, the reference) joined by commas, each row ended by the line separator, in one pass.

   rows(columns, linesep) -> bytes, or None where the Python code decides (a column of another kind, a text that
   needs quotes). Each column is
   - a list of str: written as it is (UTF-8); None if a text holds a comma, a quote or a line break (the csv
     module would quote it);
   - a 1-d buffer of integers (numpy's signed or unsigned, any width): `str(int)`;
   - a 1-d buffer of float64: Python's `repr` (PyOS_double_to_string with 'r' and Py_DTSF_ADD_DOT_0, which is what
     float.__repr__ calls: the shortest string that reads back, 'inf'), NaN as an empty field.
   tests/test_sim_outputs.py compares the bytes with the Python cells' and pandas' own writer.

   Nothing here is a model: no number in this file is a parameter. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { TEXT, SIGNED, UNSIGNED, FLOAT };

typedef struct {
    int kind;
    PyObject *list; /* TEXT */
    Py_buffer view; /* the others */
    int has_view;
    uint64_t last_bits; /* FLOAT: the last value formatted and its text (a step's KV usage repeats) */
    char last_text[32];
    Py_ssize_t last_len;
    int has_last;
} Column;

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Out;

static int out_reserve(Out *o, Py_ssize_t extra) {
    if (o->len + extra <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + extra)
        cap *= 2;
    char *data = PyMem_Realloc(o->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->data = data;
    o->cap = cap;
    return 0;
}

static int out_put(Out *o, const char *text, Py_ssize_t n) {
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, text, n);
    o->len += n;
    return 0;
}

/* 0: opened; 1: a column the Python code writes; -1: an error. */
static int column_open(Column *c, PyObject *obj, Py_ssize_t *num_rows) {
    c->list = NULL;
    c->has_view = 0;
    c->has_last = 0;
    if (PyList_CheckExact(obj)) {
        Py_ssize_t n = PyList_GET_SIZE(obj);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyList_GET_ITEM(obj, i);
            if (!PyUnicode_CheckExact(v))
                return 1;
            Py_ssize_t size;
            const char *text = PyUnicode_AsUTF8AndSize(v, &size);
            if (text == NULL)
                return -1;
            for (Py_ssize_t k = 0; k < size; k++)
                if (text[k] == ',' || text[k] == '"' || text[k] == '\r' || text[k] == '\n')
                    return 1;
        }
        c->kind = TEXT;
        c->list = obj;
        *num_rows = n;
        return 0;
    }
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_FORMAT | PyBUF_STRIDES) < 0) {
        PyErr_Clear();
        return 1;
    }
    c->has_view = 1;
    const char *format = c->view.format;
    if (c->view.ndim != 1 || format == NULL)
        return 1;
    if (format[0] == '@' || format[0] == '=' || (format[0] == '<' && PY_LITTLE_ENDIAN))
        format++;
    if (format[0] == '\0' || format[1] != '\0')
        return 1;
    Py_ssize_t size = c->view.itemsize;
    if (strchr("bhilq", format[0]) && (size == 1 || size == 2 || size == 4 || size == 8))
        c->kind = SIGNED;
    else if (strchr("BHILQ", format[0]) && (size == 1 || size == 2 || size == 4 || size == 8))
        c->kind = UNSIGNED;
    else if (format[0] == 'd' && size == 8)
        c->kind = FLOAT;
    else
        return 1;
    *num_rows = c->view.shape[0];
    return 0;
}

static void column_close(Column *c) {
    if (c->has_view)
        PyBuffer_Release(&c->view);
    c->has_view = 0;
}

static int put_cell(Out *o, Column *c, Py_ssize_t i) {
    if (c->kind == TEXT) {
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(c->list, i), &size);
        return text == NULL ? -1 : out_put(o, text, size);
    }
    const char *at = (const char *)c->view.buf + i * c->view.strides[0];
    if (c->kind == SIGNED || c->kind == UNSIGNED) {
        char digits[24], *end = digits + sizeof(digits), *p = end;
        unsigned long long magnitude;
        int negative = 0;
        if (c->kind == SIGNED) {
            long long v = c->view.itemsize == 8 ? (long long)*(const int64_t *)at
                        : c->view.itemsize == 4 ? (long long)*(const int32_t *)at
                        : c->view.itemsize == 2 ? (long long)*(const int16_t *)at : (long long)*(const int8_t *)at;
            negative = v < 0;
            magnitude = negative ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        } else {
            magnitude = c->view.itemsize == 8 ? (unsigned long long)*(const uint64_t *)at
                      : c->view.itemsize == 4 ? (unsigned long long)*(const uint32_t *)at
                      : c->view.itemsize == 2 ? (unsigned long long)*(const uint16_t *)at
                      : (unsigned long long)*(const uint8_t *)at;
        }
        do { /* (str(int): the decimal digits, a minus sign before them) */
            *--p = (char)('0' + magnitude % 10);
            magnitude /= 10;
        } while (magnitude);
        if (negative)
            *--p = '-';
        return out_put(o, p, end - p);
    }
    double v;
    uint64_t bits;
    memcpy(&v, at, 8);
    memcpy(&bits, at, 8);
    if (isnan(v)) /* (every NaN: an empty field) */
        return 0;
    if (c->has_last && bits == c->last_bits)
        return out_put(o, c->last_text, c->last_len);
    char *text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL)
        return -1;
    Py_ssize_t n = (Py_ssize_t)strlen(text);
    int rc = out_put(o, text, n);
    if (n < (Py_ssize_t)sizeof(c->last_text)) {
        memcpy(c->last_text, text, n);
        c->last_len = n;
        c->last_bits = bits;
        c->has_last = 1;
    }
    PyMem_Free(text);
    return rc;
}

static PyObject *rows(PyObject *module, PyObject *args) {
    PyObject *columns;
    const char *linesep;
    Py_ssize_t linesep_len;
    if (!PyArg_ParseTuple(args, "O!s#:rows", &PyList_Type, &columns, &linesep, &linesep_len))
        return NULL;
    Py_ssize_t num_columns = PyList_GET_SIZE(columns), num_rows = -1, opened = 0;
    PyObject *result = NULL;
    Out out = {0};
    Column *cols = PyMem_Calloc(num_columns ? num_columns : 1, sizeof(Column));
    if (cols == NULL)
        return PyErr_NoMemory();
    for (; opened < num_columns; opened++) {
        Py_ssize_t n = 0;
        int rc = column_open(&cols[opened], PyList_GET_ITEM(columns, opened), &n);
        if (rc != 0) {
            opened++;
            if (rc > 0) {
                Py_INCREF(Py_None);
                result = Py_None;
            }
            goto done;
        }
        if (num_rows >= 0 && n != num_rows) {
            opened++;
            PyErr_SetString(PyExc_ValueError, "rows: columns of different lengths");
            goto done;
        }
        num_rows = n;
    }
    for (Py_ssize_t i = 0; i < num_rows; i++) {
        for (Py_ssize_t j = 0; j < num_columns; j++)
            if ((j && out_put(&out, ",", 1) < 0) || put_cell(&out, &cols[j], i) < 0)
                goto done;
        if (out_put(&out, linesep, linesep_len) < 0)
            goto done;
    }
    result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
done:
    for (Py_ssize_t j = 0; j < opened; j++)
        column_close(&cols[j]);
    PyMem_Free(cols);
    PyMem_Free(out.data);
    return result;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(columns, linesep) -> bytes or None: the CSV rows of the columns as pandas writes them (outputs.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csvrows", "A CSV file's rows in C (roofline/sim/outputs.py's write_csv, the reference).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__csvrows(void) { return PyModule_Create(&module); }
