/* The rows of a CSV file in C, as pandas' `to_csv(index=False)` writes them: roofline.sim.outputs.write_csv's cells
   (`_csv_cells`, the reference) joined by commas, each row ended by the line separator, in one pass.

   rows(columns, linesep) -> bytes, or None where the Python code decides (a column of another kind, a text that
   needs quotes). Each column is
   - a list of str: written as it is (UTF-8); None if a text holds a comma, a quote or a line break (the csv
     module would quote it);
   - a 1-d buffer of integers (numpy's signed or unsigned, any width): `str(int)`;
   - a 1-d buffer of float64: Python's `repr` (PyOS_double_to_string with 'r' and Py_DTSF_ADD_DOT_0, which is what
     float.__repr__ calls: the shortest string that reads back, 'inf'), NaN as an empty field; the finite ones' digits
     by Ryu (`shortest_repr`, below: the same text without dtoa's bignums).
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


/* ---- the shortest repr of a double, without dtoa's bignums ----

   float.__repr__ (PyOS_double_to_string 'r') writes the shortest decimal digits that read back as the same double,
   the nearest such (ties to an even digit), through David Gay's dtoa (Python/dtoa.c: mode 0), whose multiprecision
   arithmetic is ~4,000-7,000 instructions a float (requests.csv's and timeseries.csv's floats: ~480 M instructions of
   a 10,000-request run; docs/benchmark-history/2026-11-30j-outspeed2.md). The same digits come from Ryu (Ulf Adams,
   "Ryu: fast float-to-string conversion", PLDI 2018, https://github.com/ulfjack/ryu: d2s.c): the interval of
   decimals that read back as the double, scaled by 10^-q with one 64x128-bit product per bound (tables of 5^q and
   2^k / 5^q to 125 bits, made here at import from Python's integers), digits removed while the bounds still differ,
   the last one rounded half to even; then laid out as repr lays them out (Python/pystrtod.c format_float_short:
   exponent form where the decimal point is before the 4th zero or after the 16th digit, 'e' with a sign and at
   least two digits, '.0' after an integer). tests/test_sim_outputs.py compares it with repr on random bit patterns,
   every exponent, subnormals, powers of two and ten and the layout's thresholds. Without a 128-bit integer type
   (or for inf) dtoa's. */

#if defined(__SIZEOF_INT128__)
#define SHORTEST 1
typedef unsigned __int128 u128;

#define POW5_INV_BITCOUNT 125
#define POW5_BITCOUNT 125
#define POW5_INV_TABLE_SIZE 342
#define POW5_TABLE_SIZE 326

static uint64_t pow5_inv_split[POW5_INV_TABLE_SIZE][2]; /* floor(2^k / 5^q) + 1, k = pow5bits(q) - 1 + 125 */
static uint64_t pow5_split[POW5_TABLE_SIZE][2];         /* 5^i in its top 125 bits */

static inline int32_t pow5bits(int32_t e) { return (int32_t)(((uint32_t)e * 1217359) >> 19) + 1; } /* e <= 3528 */
static inline uint32_t log10_pow2(int32_t e) { return ((uint32_t)e * 78913) >> 18; }              /* e <= 1650 */
static inline uint32_t log10_pow5(int32_t e) { return ((uint32_t)e * 732923) >> 20; }             /* e <= 2620 */

static inline int multiple_of_pow5(uint64_t value, uint32_t p) {
    uint32_t count = 0;
    while (value % 5 == 0) {
        value /= 5;
        count++;
    }
    return count >= p;
}

static inline int multiple_of_pow2(uint64_t value, uint32_t p) { return (value & ((1ull << p) - 1)) == 0; }

static inline uint64_t mul_shift64(uint64_t m, const uint64_t *mul, int32_t j) {
    u128 low = (u128)m * mul[0], high = (u128)m * mul[1];
    return (uint64_t)(((low >> 64) + high) >> (j - 64));
}

/* The shortest digits (as an integer) and their power of ten of the positive finite double of these fields. */
static void shortest_digits(uint64_t mantissa, uint32_t exponent, uint64_t *digits, int32_t *power) {
    int32_t e2;
    uint64_t m2;
    if (exponent == 0) {
        e2 = 1 - 1023 - 52 - 2;
        m2 = mantissa;
    } else {
        e2 = (int32_t)exponent - 1023 - 52 - 2;
        m2 = (1ull << 52) | mantissa;
    }
    const int accept_bounds = (m2 & 1) == 0; /* (an even mantissa: a decimal on the bound reads back to it) */
    const uint64_t mv = 4 * m2;
    const uint32_t mm_shift = mantissa != 0 || exponent <= 1; /* (the lower gap is half the upper one otherwise) */
    uint64_t vr, vp, vm;
    int32_t e10;
    int vm_trailing_zeros = 0, vr_trailing_zeros = 0;
    if (e2 >= 0) {
        const uint32_t q = log10_pow2(e2) - (e2 > 3);
        e10 = (int32_t)q;
        const int32_t k = POW5_INV_BITCOUNT + pow5bits((int32_t)q) - 1;
        const int32_t i = -e2 + (int32_t)q + k;
        vr = mul_shift64(4 * m2, pow5_inv_split[q], i);
        vp = mul_shift64(4 * m2 + 2, pow5_inv_split[q], i);
        vm = mul_shift64(4 * m2 - 1 - mm_shift, pow5_inv_split[q], i);
        if (q <= 21) {
            if (mv % 5 == 0)
                vr_trailing_zeros = multiple_of_pow5(mv, q);
            else if (accept_bounds)
                vm_trailing_zeros = multiple_of_pow5(mv - 1 - mm_shift, q);
            else
                vp -= multiple_of_pow5(mv + 2, q);
        }
    } else {
        const uint32_t q = log10_pow5(-e2) - (-e2 > 1);
        e10 = (int32_t)q + e2;
        const int32_t i = -e2 - (int32_t)q;
        const int32_t k = pow5bits(i) - POW5_BITCOUNT;
        const int32_t j = (int32_t)q - k;
        vr = mul_shift64(4 * m2, pow5_split[i], j);
        vp = mul_shift64(4 * m2 + 2, pow5_split[i], j);
        vm = mul_shift64(4 * m2 - 1 - mm_shift, pow5_split[i], j);
        if (q <= 1) {
            vr_trailing_zeros = 1;
            if (accept_bounds)
                vm_trailing_zeros = mm_shift == 1;
            else
                --vp;
        } else if (q < 63) {
            vr_trailing_zeros = multiple_of_pow2(mv, q);
        }
    }
    int32_t removed = 0;
    uint32_t last_removed = 0;
    uint64_t output;
    if (vm_trailing_zeros || vr_trailing_zeros) { /* (rare: the exact bounds and ties matter) */
        while (vp / 10 > vm / 10) {
            vm_trailing_zeros &= vm % 10 == 0;
            vr_trailing_zeros &= last_removed == 0;
            last_removed = (uint32_t)(vr % 10);
            vr /= 10;
            vp /= 10;
            vm /= 10;
            removed++;
        }
        if (vm_trailing_zeros) {
            while (vm % 10 == 0) {
                vr_trailing_zeros &= last_removed == 0;
                last_removed = (uint32_t)(vr % 10);
                vr /= 10;
                vp /= 10;
                vm /= 10;
                removed++;
            }
        }
        if (vr_trailing_zeros && last_removed == 5 && vr % 2 == 0)
            last_removed = 4; /* (exactly half: to the even digit) */
        output = vr + ((vr == vm && (!accept_bounds || !vm_trailing_zeros)) || last_removed >= 5);
    } else {
        int round_up = 0;
        if (vp / 100 > vm / 100) {
            round_up = vr % 100 >= 50;
            vr /= 100;
            vp /= 100;
            vm /= 100;
            removed += 2;
        }
        while (vp / 10 > vm / 10) {
            round_up = vr % 10 >= 5;
            vr /= 10;
            vp /= 10;
            vm /= 10;
            removed++;
        }
        output = vr + (vr == vm || round_up);
    }
    *digits = output;
    *power = e10 + removed;
}

/* repr() of the finite double of `bits` into `text` (32 bytes); its length. */
static Py_ssize_t shortest_repr(uint64_t bits, char *text) {
    char *p = text;
    const uint64_t mantissa = bits & ((1ull << 52) - 1);
    const uint32_t exponent = (uint32_t)((bits >> 52) & 0x7ff);
    if (bits >> 63)
        *p++ = '-';
    if (exponent == 0 && mantissa == 0) {
        memcpy(p, "0.0", 3);
        return p + 3 - text;
    }
    uint64_t value;
    int32_t power;
    shortest_digits(mantissa, exponent, &value, &power);
    char digits[24];
    int n = 0;
    do {
        digits[sizeof(digits) - 1 - n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    const char *d = digits + sizeof(digits) - n;
    const int decpt = n + power; /* the decimal point after this many digits */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) { /* 0.000ddd */
            *p++ = '0';
            *p++ = '.';
            for (int k = 0; k < -decpt; k++)
                *p++ = '0';
            memcpy(p, d, n);
            p += n;
        } else if (decpt < n) { /* dd.ddd */
            memcpy(p, d, decpt);
            p += decpt;
            *p++ = '.';
            memcpy(p, d + decpt, n - decpt);
            p += n - decpt;
        } else { /* ddd00.0 */
            memcpy(p, d, n);
            p += n;
            for (int k = n; k < decpt; k++)
                *p++ = '0';
            *p++ = '.';
            *p++ = '0';
        }
    } else { /* d.ddde+XX */
        *p++ = d[0];
        if (n > 1) {
            *p++ = '.';
            memcpy(p, d + 1, n - 1);
            p += n - 1;
        }
        int x = decpt - 1;
        *p++ = 'e';
        *p++ = x < 0 ? '-' : '+';
        x = x < 0 ? -x : x;
        if (x >= 100)
            *p++ = (char)('0' + x / 100);
        *p++ = (char)('0' + x / 10 % 10);
        *p++ = (char)('0' + x % 10);
    }
    return p - text;
}

/* The tables, from Python's integers. */
static int make_tables(void) {
    int rc = -1;
    PyObject *mask = PyLong_FromUnsignedLongLong(~0ull), *sixty_four = PyLong_FromLong(64), *one = PyLong_FromLong(1);
    PyObject *power = PyLong_FromLong(1), *five = PyLong_FromLong(5);
    if (!mask || !sixty_four || !one || !power || !five)
        goto done;
    for (int q = 0; q < POW5_INV_TABLE_SIZE; q++) {
        if (q) { /* power = 5^q */
            PyObject *next = PyNumber_Multiply(power, five);
            if (next == NULL)
                goto done;
            Py_SETREF(power, next);
        }
        PyObject *shift = PyLong_FromLong(pow5bits(q) - 1 + POW5_INV_BITCOUNT);
        PyObject *two_k = shift ? PyNumber_Lshift(one, shift) : NULL;
        PyObject *quotient = two_k ? PyNumber_FloorDivide(two_k, power) : NULL;
        PyObject *inv = quotient ? PyNumber_Add(quotient, one) : NULL;
        PyObject *high = inv ? PyNumber_Rshift(inv, sixty_four) : NULL;
        PyObject *shifted = NULL;
        int ok = high != NULL;
        if (ok) {
            pow5_inv_split[q][0] = PyLong_AsUnsignedLongLongMask(inv);
            pow5_inv_split[q][1] = PyLong_AsUnsignedLongLong(high);
            ok = !PyErr_Occurred();
        }
        if (ok && q < POW5_TABLE_SIZE) { /* 5^q >> (pow5bits(q) - 125), or shifted left where that is negative */
            int32_t bits = pow5bits(q) - POW5_BITCOUNT;
            PyObject *amount = PyLong_FromLong(bits < 0 ? -bits : bits);
            shifted = amount ? (bits < 0 ? PyNumber_Lshift(power, amount) : PyNumber_Rshift(power, amount)) : NULL;
            Py_XDECREF(amount);
            PyObject *top = shifted ? PyNumber_Rshift(shifted, sixty_four) : NULL;
            ok = top != NULL;
            if (ok) {
                pow5_split[q][0] = PyLong_AsUnsignedLongLongMask(shifted);
                pow5_split[q][1] = PyLong_AsUnsignedLongLong(top);
                ok = !PyErr_Occurred();
            }
            Py_XDECREF(top);
        }
        Py_XDECREF(shift);
        Py_XDECREF(two_k);
        Py_XDECREF(quotient);
        Py_XDECREF(inv);
        Py_XDECREF(high);
        Py_XDECREF(shifted);
        if (!ok)
            goto done;
    }
    rc = 0;
done:
    Py_XDECREF(mask);
    Py_XDECREF(sixty_four);
    Py_XDECREF(one);
    Py_XDECREF(power);
    Py_XDECREF(five);
    return rc;
}
#endif

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
#ifdef SHORTEST
    if (((bits >> 52) & 0x7ff) != 0x7ff) { /* (finite: inf is dtoa's) */
        c->last_len = shortest_repr(bits, c->last_text);
        c->last_bits = bits;
        c->has_last = 1;
        return out_put(o, c->last_text, c->last_len);
    }
#endif
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

PyMODINIT_FUNC PyInit__csvrows(void) {
#ifdef SHORTEST
    if (make_tables() < 0)
        return NULL;
#endif
    return PyModule_Create(&module);
}
