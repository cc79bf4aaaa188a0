/* The step cost's GPU full-attention paths in C: `StepCostModel.time_s` of a step of decodes only and
 * `StepCostModel._plain_rows_time_s` (roofline/cost/step_cost.py, the reference), the same floats.
 *
 * Same floats: every operation below is the Python code's, on the same doubles, in the same order: Python's float
 * arithmetic is IEEE double arithmetic, an int meeting a float is converted exactly as here (the ints are far below
 * 2^53), `**` on positive finite floats is libm's pow (CPython's float_pow and numpy's scalar power both call it),
 * and the build turns off contraction into fused multiply-adds (setup.py: -ffp-contract=off). Where the Python code
 * does integer arithmetic before meeting a float, so does this code (int64). tests/test_cost_model.py compares the
 * two paths bit for bit.
 *
 * What depends on a count alone (the token and emit operators' seconds from the cost model's tables, the padded
 * sizes, a number of decodes' attention terms) is looked up in the Python code on a count's first use and handed
 * to the object (`set_*`), which keeps it in arrays by count: a method returns None for a count it has not been
 * given (and for input it does not take: a negative context, ints past int64), and the Python code then fills it
 * in or runs itself. The object holds no Python object, so it makes no reference cycle with the cost model.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_slots.h" /* member_slot_offset */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A step of n decodes only: `_decode_step_terms(n)`'s parts besides the attention terms. */
typedef struct {
    double token_emit_s, rest_s, launch_s;
} StepParts;

/* `_decode_layer_s`'s per number of decodes: Q and O bytes and `DecodeAttentionTerms`. */
typedef struct {
    double q_bytes, rate, prologue, bandwidth, p, kernel_fixed_s, attention_fixed_s, waves_s;
    int has_waves;
} LayerTerms;

/* A count's operators: seconds and kernels (`_CountTable.lookup`). */
typedef struct {
    double s;
    long long k;
} CountPart;

/* Growable arrays indexed by count, each entry with a filled flag. */
typedef struct {
    char *data;
    char *filled;
    Py_ssize_t size, item;
} Cache;

static void *cache_get(Cache *c, long long i) {
    if (i < 0 || i >= c->size || !c->filled[i])
        return NULL;
    return c->data + i * c->item;
}

static void *cache_put(Cache *c, long long i) {
    if (i < 0 || i > (1LL << 30)) {
        PyErr_SetString(PyExc_ValueError, "count out of range");
        return NULL;
    }
    if (i >= c->size) {
        Py_ssize_t size = c->size ? c->size : 64;
        while (size <= i)
            size *= 2;
        char *data = PyMem_Realloc(c->data, (size_t)(size * c->item));
        if (data == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        c->data = data;
        char *filled = PyMem_Realloc(c->filled, (size_t)size);
        if (filled == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        memset(filled + c->size, 0, (size_t)(size - c->size));
        c->filled = filled;
        c->size = size;
    }
    c->filled[i] = 1;
    return c->data + i * c->item;
}

static void cache_free(Cache *c) {
    PyMem_Free(c->data);
    PyMem_Free(c->filled);
    c->data = c->filled = NULL;
    c->size = 0;
}

typedef struct {
    PyObject_HEAD
    /* the model's shape */
    long long layers, heads, tile_heads, sms;
    double kv_token, q_token, flops_per_pair, decode_factor, prefill_factor;
    int q_token_is_int;
    long long q_token_int;
    /* `_make_prefill_terms` */
    double q_tile, half_tile, per_pair, per_sm, tile_fixed_s, bandwidth, p, fixed_s, attention_fixed_s;
    /* the host (`HostModel.time_s`, `HostModel.combine`): launches of the decode and the mixed graph (-1: none,
       every kernel launched) up to max_graph tokens */
    long long max_graph, decode_launches, mixed_launches;
    double kernel_launch_s, step_overhead_s, per_seq_s, step_gap_s;
    int host_overlaps;
    /* by count */
    Cache steps;      /* StepParts by number of decodes (a step of decodes only) */
    Cache layer;      /* LayerTerms by number of decodes */
    Cache tokens[2];  /* CountPart by number of tokens: [0] a step without prefills, [1] with (padded, its table) */
    Cache emits;      /* CountPart by number of emitted tokens */
} Core;

/* `roofline_math._overlap` on floats. */
static double overlap(double tc, double tm, double p) {
    double big = tc, small = tm;
    if (!(tc >= tm)) {
        big = tm;
        small = tc;
    }
    double hi = big + 1e-30;
    if (big / hi == 1.0)
        return hi * pow(1.0 + pow(small / hi, p), 1.0 / p);
    return hi * pow(pow(tc / hi, p) + pow(tm / hi, p), 1.0 / p);
}

/* `attention_decode_time_of_terms_s(terms, flops_per_pair * pairs, q_bytes + (pairs + n) * kv_token)`. */
static double decode_layer(const Core *self, const LayerTerms *l, double pairs, long long n) {
    double flops = self->flops_per_pair * pairs;
    double moved = l->q_bytes + (pairs + (double)n) * self->kv_token;
    double tc = flops / l->rate;
    double tm = (moved + l->prologue) / l->bandwidth;
    double t = overlap(tc, tm, l->p) + l->kernel_fixed_s + l->attention_fixed_s;
    if (l->has_waves)
        t = t + l->waves_s;
    return t;
}

/* Python's max(a, b) of floats: b where b > a, else a. */
static inline double py_max(double a, double b) { return b > a ? b : a; }

static int as_ll(PyObject *o, long long *out) {
    if (!PyLong_Check(o))
        return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int as_double(PyObject *o, double *out) {
    *out = PyFloat_AsDouble(o);
    return !(*out == -1.0 && PyErr_Occurred());
}

static int Core_init(Core *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"layers", "heads", "tile_heads", "sms", "kv_token", "q_token", "flops_per_pair",
                             "decode_factor", "prefill_factor", "q_tile", "half_tile", "per_pair", "per_sm",
                             "tile_fixed_s", "bandwidth", "p", "fixed_s", "attention_fixed_s", "max_graph",
                             "decode_launches", "mixed_launches", "kernel_launch_s", "step_overhead_s",
                             "per_seq_s", "step_gap_s", "host_overlaps", NULL};
    PyObject *q_token;
    int host_overlaps;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LLLLdOddddddddddddLLLddddp", kwlist, &self->layers,
                                     &self->heads, &self->tile_heads, &self->sms, &self->kv_token, &q_token,
                                     &self->flops_per_pair, &self->decode_factor, &self->prefill_factor,
                                     &self->q_tile, &self->half_tile, &self->per_pair, &self->per_sm,
                                     &self->tile_fixed_s, &self->bandwidth, &self->p, &self->fixed_s,
                                     &self->attention_fixed_s, &self->max_graph, &self->decode_launches,
                                     &self->mixed_launches, &self->kernel_launch_s, &self->step_overhead_s,
                                     &self->per_seq_s, &self->step_gap_s, &host_overlaps))
        return -1;
    self->host_overlaps = host_overlaps;
    if (PyLong_Check(q_token)) {
        self->q_token_is_int = 1;
        if (!as_ll(q_token, &self->q_token_int)) {
            PyErr_SetString(PyExc_ValueError, "q_token out of range");
            return -1;
        }
        self->q_token = (double)self->q_token_int;
    } else {
        self->q_token_is_int = 0;
        if (!as_double(q_token, &self->q_token))
            return -1;
    }
    cache_free(&self->steps);
    cache_free(&self->layer);
    cache_free(&self->tokens[0]);
    cache_free(&self->tokens[1]);
    cache_free(&self->emits);
    self->steps.item = sizeof(StepParts);
    self->layer.item = sizeof(LayerTerms);
    self->tokens[0].item = self->tokens[1].item = self->emits.item = sizeof(CountPart);
    return 0;
}

static void Core_dealloc(Core *self) {
    cache_free(&self->steps);
    cache_free(&self->layer);
    cache_free(&self->tokens[0]);
    cache_free(&self->tokens[1]);
    cache_free(&self->emits);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* set_decode(n, token_emit_s, rest_s, launch_s): a step of n decodes only (`_decode_step_terms`). */
static PyObject *Core_set_decode(Core *self, PyObject *args) {
    long long n;
    StepParts v;
    if (!PyArg_ParseTuple(args, "Lddd", &n, &v.token_emit_s, &v.rest_s, &v.launch_s))
        return NULL;
    StepParts *slot = cache_put(&self->steps, n);
    if (slot == NULL)
        return NULL;
    *slot = v;
    Py_RETURN_NONE;
}

/* set_layer(n, q_bytes, rate, prologue, bandwidth, p, kernel_fixed_s, attention_fixed_s, waves_s or None). */
static PyObject *Core_set_layer(Core *self, PyObject *args) {
    long long n;
    LayerTerms v;
    PyObject *waves;
    if (!PyArg_ParseTuple(args, "LdddddddO", &n, &v.q_bytes, &v.rate, &v.prologue, &v.bandwidth, &v.p,
                          &v.kernel_fixed_s, &v.attention_fixed_s, &waves))
        return NULL;
    v.has_waves = waves != Py_None;
    v.waves_s = 0.0;
    if (v.has_waves && !as_double(waves, &v.waves_s))
        return NULL;
    LayerTerms *slot = cache_put(&self->layer, n);
    if (slot == NULL)
        return NULL;
    *slot = v;
    Py_RETURN_NONE;
}

/* set_tokens(with_prefills, num_tokens, seconds, kernels) and set_emits(num_emits, seconds, kernels). */
static PyObject *Core_set_tokens(Core *self, PyObject *args) {
    int mixed;
    long long n;
    CountPart v;
    if (!PyArg_ParseTuple(args, "pLdL", &mixed, &n, &v.s, &v.k))
        return NULL;
    CountPart *slot = cache_put(&self->tokens[mixed], n);
    if (slot == NULL)
        return NULL;
    *slot = v;
    Py_RETURN_NONE;
}

/* set_tokens_range(with_prefills, first, seconds, kernels): counts first, first + 1, ... at once (a table's block of
   counts that no CUDA graph pads: each its own count's seconds). */
static PyObject *Core_set_tokens_range(Core *self, PyObject *args) {
    int mixed;
    long long first, kernels;
    PyObject *seconds;
    if (!PyArg_ParseTuple(args, "pLO!L", &mixed, &first, &PyList_Type, &seconds, &kernels))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(seconds);
    if (n && cache_put(&self->tokens[mixed], first + n - 1) == NULL)  /* (grown once) */
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        double s = PyFloat_AsDouble(PyList_GET_ITEM(seconds, i));
        if (s == -1.0 && PyErr_Occurred())
            return NULL;
        CountPart *slot = cache_put(&self->tokens[mixed], first + i);
        if (slot == NULL)
            return NULL;
        slot->s = s;
        slot->k = kernels;
    }
    Py_RETURN_NONE;
}

static PyObject *Core_set_emits(Core *self, PyObject *args) {
    long long n;
    CountPart v;
    if (!PyArg_ParseTuple(args, "LdL", &n, &v.s, &v.k))
        return NULL;
    CountPart *slot = cache_put(&self->emits, n);
    if (slot == NULL)
        return NULL;
    *slot = v;
    Py_RETURN_NONE;
}

/* `time_s` of a step of n >= 1 decodes whose contexts sum to `context` into *t; 0 where n's terms are not set. */
static int decode_time(Core *self, long long n, long long context, double *t) {
    const StepParts *s = cache_get(&self->steps, n);
    const LayerTerms *l = cache_get(&self->layer, n);
    if (s == NULL || l == NULL)
        return 0;
    double pairs = (double)context + (double)n;
    double device_s = s->token_emit_s + (double)self->layers * (decode_layer(self, l, pairs, n) * self->decode_factor);
    if (self->host_overlaps)
        *t = (s->rest_s > device_s ? s->rest_s : device_s) + self->step_gap_s;
    else
        *t = s->rest_s + (s->launch_s > device_s ? s->launch_s : device_s);
    return 1;
}

/* decode_s(n, context_sum): `time_s` of a step of n >= 1 decodes whose contexts sum to context_sum; None where n's
   terms are not set. */
static PyObject *Core_decode_s(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    long long n, context;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode_s(n, context_sum)");
        return NULL;
    }
    double t;
    if (!as_ll(args[0], &n) || !as_ll(args[1], &context) || !decode_time(self, n, context, &t))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(t);
}

/* `_plain_rows_time_s` of a step given by its counts and its prefill chunks' query and context lengths (q[i], c[i],
   i < num_prefills) into *t: 1; 0 where a count's parts are not set, or for input it does not take (a negative
   context: the Python code asserts; lengths past 2^40). */
static int rows_time(Core *self, long long num_tokens, long long num_emits, long long num_decodes,
                     long long decode_context, const long long *pq, const long long *pc, Py_ssize_t num_prefills,
                     double *out) {
    const CountPart *token = cache_get(&self->tokens[num_prefills > 0], num_tokens);
    if (token == NULL)
        return 0;
    CountPart no_emits = {0.0, 0};
    const CountPart *emit = num_emits > 0 ? cache_get(&self->emits, num_emits) : &no_emits;
    if (emit == NULL)
        return 0;
    const LayerTerms *l = NULL;
    if (num_decodes) {
        l = cache_get(&self->layer, num_decodes);
        if (l == NULL)
            return 0;
    }
    double t = 0.0;
    long long kernels = 0;
    if (num_prefills) {
        double q_tile = self->q_tile;
        double pairs = 0.0, kv_tokens = 0.0, pad = 0.0;
        long long tiles = 0, tokens = 0;
        for (Py_ssize_t i = 0; i < num_prefills; i++) {
            long long q = pq[i], c = pc[i];
            if (c < 0 || q > (1LL << 40) || c > (1LL << 40) || q < -(1LL << 40))
                return 0;  /* (the Python code asserts c >= 0) */
            long long n = (long long)ceil((double)q / q_tile);
            double qf = (double)q, cf = (double)c;
            pairs += qf * (cf + 1.0) + qf * (qf - 1.0) / 2.0;
            kv_tokens += (double)(c + q);
            pad += ((double)n * q_tile - (double)q) * (double)(c + q);
            tiles += n;
            tokens += q;
        }
        /* prefill_attention_shape */
        double computed = pairs + (double)tiles * self->half_tile + pad;
        double q_moved = self->q_token_is_int ? (double)(2 * tokens * self->q_token_int)
                                              : (double)(2 * tokens) * self->q_token;
        double moved = q_moved + (kv_tokens + (double)tokens) * self->kv_token;
        long long work_units = self->tile_heads * tiles;
        /* attention_prefill_time_s: max(work_units, 1.0) */
        double units = 1.0 > (double)work_units ? 1.0 : (double)work_units;
        long long waves = (long long)ceil(units / (double)self->sms);
        double tc = (double)waves * ((double)self->heads * computed) / units * self->per_pair / self->per_sm
                    + (double)(waves - 1) * self->tile_fixed_s;
        double tm = moved / self->bandwidth;
        t += (double)self->layers * (overlap(tc, tm, self->p) + self->fixed_s + self->attention_fixed_s)
             * self->prefill_factor;
        kernels += self->layers;
    }
    if (num_decodes) {
        double pairs = (double)decode_context + (double)num_decodes;
        t += (double)self->layers * (decode_layer(self, l, pairs, num_decodes) * self->decode_factor);
        kernels += self->layers;
    }
    /* HostModel.time_s */
    long long launches = kernels + token->k + emit->k;
    if (0 < num_tokens && num_tokens <= self->max_graph) {
        long long graph = num_prefills ? self->mixed_launches : self->decode_launches;
        if (graph >= 0)
            launches = graph;
    }
    double launch_s = (double)launches * self->kernel_launch_s;
    double host_s = self->step_overhead_s + launch_s + self->per_seq_s * (double)(num_decodes + num_prefills);
    /* HostModel.combine */
    double device_s = token->s + emit->s + t;
    if (self->host_overlaps)
        *out = py_max(device_s, host_s) + self->step_gap_s;
    else
        *out = (host_s - launch_s) + py_max(device_s, launch_s);
    return 1;
}

/* Growable pairs of int64 (a step's prefill chunks: query and context lengths), on the stack up to 64. */
typedef struct {
    long long *q, *c;
    Py_ssize_t n, cap;
    long long small_q[64], small_c[64];
} Chunks;

static void chunks_init(Chunks *k) {
    k->q = k->small_q;
    k->c = k->small_c;
    k->n = 0;
    k->cap = 64;
}

static void chunks_free(Chunks *k) {
    if (k->q != k->small_q) {
        PyMem_Free(k->q);
        PyMem_Free(k->c);
    }
}

static int chunks_add(Chunks *k, long long q, long long c) {
    if (k->n == k->cap) {
        Py_ssize_t cap = 2 * k->cap;
        long long *nq = PyMem_Malloc(sizeof(long long) * (size_t)cap), *nc = PyMem_Malloc(sizeof(long long) * (size_t)cap);
        if (nq == NULL || nc == NULL) {
            PyMem_Free(nq);
            PyMem_Free(nc);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(nq, k->q, sizeof(long long) * (size_t)k->n);
        memcpy(nc, k->c, sizeof(long long) * (size_t)k->n);
        chunks_free(k);
        k->q = nq;
        k->c = nc;
        k->cap = cap;
    }
    k->q[k->n] = q;
    k->c[k->n] = c;
    k->n++;
    return 0;
}

/* rows_s(num_tokens, num_emits, num_decodes, decode_context_sum, prefill_query, prefill_context):
   `_plain_rows_time_s`; None where a count's parts are not set, or for input it does not take. */
static PyObject *Core_rows_s(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    long long num_tokens, num_emits, num_decodes, decode_context;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "rows_s(num_tokens, num_emits, num_decodes, decode_context_sum, "
                                         "prefill_query, prefill_context)");
        return NULL;
    }
    PyObject *pq = args[4], *pc = args[5];
    if (!as_ll(args[0], &num_tokens) || !as_ll(args[1], &num_emits) || !as_ll(args[2], &num_decodes)
        || !as_ll(args[3], &decode_context) || !PyList_Check(pq) || !PyList_Check(pc))
        Py_RETURN_NONE;
    Py_ssize_t num_prefills = PyList_GET_SIZE(pq);
    if (PyList_GET_SIZE(pc) != num_prefills)
        Py_RETURN_NONE;
    Chunks k;
    chunks_init(&k);
    for (Py_ssize_t i = 0; i < num_prefills; i++) {
        long long q, c;
        if (!as_ll(PyList_GET_ITEM(pq, i), &q) || !as_ll(PyList_GET_ITEM(pc, i), &c)) {
            chunks_free(&k);
            Py_RETURN_NONE;
        }
        if (chunks_add(&k, q, c) < 0) {
            chunks_free(&k);
            return NULL;
        }
    }
    double t;
    int ok = rows_time(self, num_tokens, num_emits, num_decodes, decode_context, k.q, k.c, k.n, &t);
    chunks_free(&k);
    if (!ok)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(t);
}

/* The StepPlan fields `plan_s` reads (engine/core/step_plan.py). */
static PyObject *name_num_prefill_tokens, *name_requests, *name_bulk_context_sum, *name_context;

/* A plan's int attribute, or -1 where it is none (or missing: the Python code then decides). */
static long long plan_int(PyObject *plan, PyObject *name) {
    PyObject *v = PyObject_GetAttr(plan, name);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    long long out;
    int ok = as_ll(v, &out);
    Py_DECREF(v);
    return ok && out >= 0 ? out : -1;
}

/* StepPlan and ColumnRows (engine/core/step_plan.py) as `bind_plan_types` gave them, and the offsets of the slots
   `plan_s` reads (a plan of exactly that class is read at its slots, without attribute lookups). */
static PyTypeObject *plan_type, *colrows_type;
static Py_ssize_t off_num_prefill_tokens, off_requests, off_bulk_context_sum, off_context, off_query, off_bulk_decodes,
    off_columns, off_num_batched_tokens, off_num_emitting_seqs, off_cr_off, off_cr_prefill_rows;

static int slot_offset(PyTypeObject *cls, const char *name, Py_ssize_t *off) {
    PyObject *key = PyUnicode_InternFromString(name);
    if (key == NULL)
        return -1;
    *off = member_slot_offset(cls, key, 0);
    Py_DECREF(key);
    if (*off < 0) {
        PyErr_Format(PyExc_TypeError, "bind_plan_types: %s has no object slot %s", cls->tp_name, name);
        return -1;
    }
    return 0;
}

/* bind_plan_types(StepPlan, ColumnRows): `plan_s` reads a plan of exactly the class StepPlan at its slots. */
static PyObject *mod_bind_plan_types(PyObject *Py_UNUSED(m), PyObject *args) {
    PyTypeObject *pt, *ct;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &pt, &PyType_Type, &ct))
        return NULL;
    struct { PyTypeObject *cls; const char *name; Py_ssize_t *off; } fields[] = {
        {pt, "num_prefill_tokens", &off_num_prefill_tokens}, {pt, "requests", &off_requests},
        {pt, "_bulk_context_sum", &off_bulk_context_sum}, {pt, "_context", &off_context}, {pt, "_query", &off_query},
        {pt, "_bulk_decodes", &off_bulk_decodes}, {pt, "_columns", &off_columns},
        {pt, "num_batched_tokens", &off_num_batched_tokens}, {pt, "num_emitting_seqs", &off_num_emitting_seqs},
        {ct, "off", &off_cr_off}, {ct, "prefill_rows", &off_cr_prefill_rows},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (slot_offset(fields[i].cls, fields[i].name, fields[i].off) < 0)
            return NULL;
    Py_INCREF(pt);
    Py_INCREF(ct);
    Py_XSETREF(plan_type, pt);
    Py_XSETREF(colrows_type, ct);
    Py_RETURN_NONE;
}

/* A slot's value (borrowed; NULL where unset). */
static inline PyObject *slot_of(PyObject *o, Py_ssize_t off) { return *(PyObject **)((char *)o + off); }

/* A slot's int into *out: 0 where unset or not an int in range. */
static inline int slot_ll(PyObject *o, Py_ssize_t off, long long *out) {
    PyObject *v = slot_of(o, off);
    return v != NULL && as_ll(v, out);
}

/* A prefill row of `ColumnRows.prefill_rows`: (row, context, query, blocks). */
typedef struct { long long v[4]; } Row4;

static int row4_cmp(const void *a, const void *b) {  /* tuples' order */
    const long long *x = ((const Row4 *)a)->v, *y = ((const Row4 *)b)->v;
    for (int i = 0; i < 4; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* `time_s` of a plan of exactly StepPlan with prefills (num_prefill_tokens not 0) into *t, as the Python code gives
   it where a `_core` exists (`_plain_gqa_decode`): `StepPlan.seq_sums(False)` from the slots, then
   `_rows_time_s` -> `_plain_rows_time_s` -> `rows_time`. 1: done; 0: the Python code decides (no bulk rows: the
   arrays' path; a slot unset or of another type; a count's parts not set; input `rows_time` does not take); -1: an
   error. */
static int plan_rows_time(Core *self, PyObject *plan, double *t) {
    long long total, count, num_tokens, num_emits;
    if (!slot_ll(plan, off_bulk_context_sum, &total) || !slot_ll(plan, off_num_batched_tokens, &num_tokens)
        || !slot_ll(plan, off_num_emitting_seqs, &num_emits))
        return 0;  /* (no bulk rows: seq_sums gives None) */
    Chunks k;
    chunks_init(&k);
    int rc = 0;
    PyObject *decodes = slot_of(plan, off_bulk_decodes);
    if (decodes == NULL)
        goto done;
    if (decodes != Py_None) {  /* every bulk row a decode: their count */
        if (!PyTuple_CheckExact(decodes) || PyTuple_GET_SIZE(decodes) != 2
            || !as_ll(PyTuple_GET_ITEM(decodes, 0), &count))
            goto done;
    } else {  /* bulk rows with prefill chunks: the rows' sums less the chunks', the chunks in row order */
        PyObject *cols = slot_of(plan, off_columns);
        if (cols == NULL || Py_TYPE(cols) != colrows_type)
            goto done;
        PyObject *off = slot_of(cols, off_cr_off), *rows = slot_of(cols, off_cr_prefill_rows);
        if (off == NULL || rows == NULL || !PyList_CheckExact(rows))
            goto done;
        Py_ssize_t num_off = PyObject_Length(off);
        if (num_off < 0) {
            rc = -1;
            goto done;
        }
        count = num_off;
        Py_ssize_t nr = PyList_GET_SIZE(rows);
        Row4 small[16], *sorted = nr <= 16 ? small : PyMem_Malloc(sizeof(Row4) * (size_t)nr);
        if (sorted == NULL) {
            PyErr_NoMemory();
            rc = -1;
            goto done;
        }
        int ok = 1;
        for (Py_ssize_t i = 0; ok && i < nr; i++) {
            PyObject *row = PyList_GET_ITEM(rows, i);
            ok = PyTuple_CheckExact(row) && PyTuple_GET_SIZE(row) == 4;
            for (int j = 0; ok && j < 4; j++)
                ok = as_ll(PyTuple_GET_ITEM(row, j), &sorted[i].v[j]);
        }
        if (ok) {
            qsort(sorted, (size_t)nr, sizeof(Row4), row4_cmp);
            for (Py_ssize_t i = 0; i < nr; i++) {
                long long ctx = sorted[i].v[1], q = sorted[i].v[2];
                if (q == 1)
                    continue;
                count -= 1;
                total -= ctx;
                if (q > 1 && chunks_add(&k, q, ctx) < 0) {
                    ok = 0;
                    rc = -1;
                }
            }
        }
        if (sorted != small)
            PyMem_Free(sorted);
        if (!ok)
            goto done;
    }
    /* the sequences after the bulk rows */
    PyObject *query = slot_of(plan, off_query), *context = slot_of(plan, off_context);
    if (query == NULL || context == NULL || !PyList_CheckExact(query) || !PyList_CheckExact(context))
        goto done;
    Py_ssize_t m = PyList_GET_SIZE(query) < PyList_GET_SIZE(context) ? PyList_GET_SIZE(query)
                                                                       : PyList_GET_SIZE(context);
    for (Py_ssize_t i = 0; i < m; i++) {
        long long q, c;
        if (!as_ll(PyList_GET_ITEM(query, i), &q) || !as_ll(PyList_GET_ITEM(context, i), &c))
            goto done;
        if (q == 1) {
            count += 1;
            total += c;
        } else if (chunks_add(&k, q, c) < 0) {
            rc = -1;
            goto done;
        }
    }
    rc = rows_time(self, num_tokens, num_emits, count, total, k.q, k.c, k.n, t);
done:
    chunks_free(&k);
    return rc;
}

/* plan_s(time_s, plan): `time_s(plan)` (the cost model's method, given), from the plan's fields here where they
   suffice, the same floats:
   - a step of decodes only (`num_prefill_tokens` 0) whose time `decode_s` knows: `decode_s(plan.num_seqs,
     plan.num_context_tokens)` (the sequences `requests`; the context sum `num_context_tokens` computes where the
     scheduler's fast path gave it, `_bulk_context_sum`, with no rows after its own, `_context` empty);
   - a plan of exactly StepPlan with prefills: `plan_rows_time`.
   Otherwise (a field missing or of another type, a count's first step) `time_s(plan)`. */
static PyObject *Core_plan_s(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "plan_s(time_s, plan)");
        return NULL;
    }
    PyObject *time_s = args[0], *plan = args[1];
    double t;
    if (plan_type != NULL && Py_TYPE(plan) == plan_type) {  /* its slots */
        long long prefill;
        if (!slot_ll(plan, off_num_prefill_tokens, &prefill))
            return PyObject_CallOneArg(time_s, plan);
        if (prefill != 0) {
            int rc = plan_rows_time(self, plan, &t);
            if (rc < 0)
                return NULL;
            return rc ? PyFloat_FromDouble(t) : PyObject_CallOneArg(time_s, plan);
        }
        PyObject *requests = slot_of(plan, off_requests), *rest = slot_of(plan, off_context);
        Py_ssize_t n = requests != NULL && PyList_Check(requests) ? PyList_GET_SIZE(requests) : 0;
        long long context;
        if (n > 0 && slot_ll(plan, off_bulk_context_sum, &context) && context >= 0 && rest != NULL
            && PyList_Check(rest) && PyList_GET_SIZE(rest) == 0 && decode_time(self, n, context, &t))
            return PyFloat_FromDouble(t);
        return PyObject_CallOneArg(time_s, plan);
    }
    if (plan_int(plan, name_num_prefill_tokens) != 0)
        return PyObject_CallOneArg(time_s, plan);
    PyObject *requests = PyObject_GetAttr(plan, name_requests);
    if (requests == NULL) {
        PyErr_Clear();
        return PyObject_CallOneArg(time_s, plan);
    }
    Py_ssize_t n = PyList_Check(requests) ? PyList_GET_SIZE(requests) : 0;
    Py_DECREF(requests);
    long long context = n > 0 ? plan_int(plan, name_bulk_context_sum) : -1;
    if (context >= 0) {  /* (rows after the fast path's: the Python code sums them) */
        PyObject *rest = PyObject_GetAttr(plan, name_context);
        if (rest == NULL)
            PyErr_Clear();
        if (rest == NULL || !PyList_Check(rest) || PyList_GET_SIZE(rest) != 0)
            context = -1;
        Py_XDECREF(rest);
    }
    if (context < 0 || !decode_time(self, n, context, &t))
        return PyObject_CallOneArg(time_s, plan);
    return PyFloat_FromDouble(t);
}

static PyMethodDef Core_methods[] = {
    {"decode_s", (PyCFunction)(void (*)(void))Core_decode_s, METH_FASTCALL, NULL},
    {"plan_s", (PyCFunction)(void (*)(void))Core_plan_s, METH_FASTCALL, NULL},
    {"rows_s", (PyCFunction)(void (*)(void))Core_rows_s, METH_FASTCALL, NULL},
    {"set_decode", (PyCFunction)Core_set_decode, METH_VARARGS, NULL},
    {"set_layer", (PyCFunction)Core_set_layer, METH_VARARGS, NULL},
    {"set_tokens", (PyCFunction)Core_set_tokens, METH_VARARGS, NULL},
    {"set_tokens_range", (PyCFunction)Core_set_tokens_range, METH_VARARGS, NULL},
    {"set_emits", (PyCFunction)Core_set_emits, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "roofline.cost._stepcost.PlainStepCost",
    .tp_doc = "The step cost's GPU full-attention paths (roofline/cost/_stepcost.c)",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static PyMethodDef module_methods[] = {
    {"bind_plan_types", (PyCFunction)mod_bind_plan_types, METH_VARARGS,
     "bind_plan_types(StepPlan, ColumnRows): `plan_s` reads a plan of exactly that class at its slots."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stepcost", "The step cost's GPU full-attention paths in C (step_cost.py's reference).",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stepcost(void) {
    if ((name_num_prefill_tokens = PyUnicode_InternFromString("num_prefill_tokens")) == NULL
        || (name_requests = PyUnicode_InternFromString("requests")) == NULL
        || (name_bulk_context_sum = PyUnicode_InternFromString("_bulk_context_sum")) == NULL
        || (name_context = PyUnicode_InternFromString("_context")) == NULL)
        return NULL;
    if (PyType_Ready(&CoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "PlainStepCost", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
