/* The compiled block pool and KV cache manager of engine.core (`engine.core.compiled_kv` wraps them).

   The same operations, with the same results, as engine/core/block_pool.py (`BlockPool`) and
   engine/core/kv_cache_manager.py (`KVCacheManager`), which stay the reference: every block id handed out, every
   prefix hit, every eviction is the one the Python classes give (tests/test_core_*.py run both). What differs is
   only how the state is held:

   - the free queue is the Python pool's layout, in int32 C arrays: a window [head, tail) of a large array, with
     the position of each free block in it; allocation reads a run at the head, a freed block is written before
     the head or after the tail, a prefix hit leaves a hole that allocation skips, and compaction packs it. (A
     doubly linked list gave the same order but chased a pointer per allocated block through memory the loop
     keeps out of the caches: 2-3x slower admissions.)
   - reference counts, block hashes and each block's registration order and chain are the int64 numpy arrays the
     Python wrapper made (`CompiledBlockPool`), written in place through their buffers, so that tests and the
     wrapper read them as they read the Python pool's;
   - a chain (one request's block list registered in the prefix cache) is a C struct indexed by its id, holding
     the request's block id and hash lists (the same list objects), and for a lazy chain the hasher to call (the
     manager's `ensure_block_hashes` and the request) when a lookup walks into it.

   Nothing here is a model: no number in this file is a parameter. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_slots.h" /* member_slot_offset */
#include <stdint.h>
#include <string.h>

#define NO_HASH (-1LL)
#define PLACEHOLDER_BASE (-2LL)
#define NEVER INT64_MAX
#define MIN_MAX_CHAINS 1024

typedef struct {
    PyObject *block_ids;    /* list[int]: the block list registered from `start` on */
    PyObject *block_hashes; /* list[int]: its chained hashes (a lazy chain: those computed so far) */
    PyObject *hash_fn;      /* NULL: hashed when registered; else hash_fn(n) or hash_fn(hash_arg, n) hashes n blocks */
    PyObject *hash_arg;
    Py_ssize_t start;
    int closed;
} Chain;

typedef struct {
    PyObject_HEAD
    Py_ssize_t num_blocks;
    Py_buffer bufs[4];
    int have_bufs;
    int64_t *ref_cnt, *block_hash, *reg_order, *reg_chain;
    int32_t *queue, *pos; /* the free queue: queue[head:tail] in eviction order, with holes where pos does not
                             point back; pos[b] is -1 for a block not in it */
    Py_ssize_t queue_len, head, tail, num_holes;
    Py_ssize_t num_free;
    int64_t num_registered;
    Chain **chains;  /* by chain id; NULL once dropped */
    Py_ssize_t chains_cap;
    int64_t *alive;  /* ids of the chains kept, ascending */
    Py_ssize_t num_alive, alive_cap;
    int64_t num_chains_made;
    Py_ssize_t max_chains;
    PyObject *starts; /* dict: hash of a chain's first registered block -> list of chain ids, in creation order */
    PyObject **id_objs; /* the int object of each block id, made on first use and shared by every block list: a
                           block list's ints cost a reference each, not an allocation and a free */
} Pool;

static PyTypeObject PoolType;

/* ---- helpers ---- */

/* An int's value (-1 with an exception when it is none or out of range). Block ids and hashes (non-negative, below
   2^63: up to three 30-bit digits) read from CPython 3.11's digits directly: PyLong_AsLongLong goes through
   _PyLong_AsByteArray for anything past one digit (~125 instructions a hash). Other versions: the API call. */
static inline int64_t as_i64(PyObject *o) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    if (PyLong_CheckExact(o)) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        switch (Py_SIZE(o)) {
        case 0: return 0;
        case 1: return (int64_t)d[0];
        case -1: return -(int64_t)d[0];
        case 2: return (int64_t)d[0] | ((int64_t)d[1] << 30);
        case 3:
            if (d[2] < 8) return (int64_t)d[0] | ((int64_t)d[1] << 30) | ((int64_t)d[2] << 60);
            break;
        default: break;
        }
    }
#endif
    return PyLong_AsLongLong(o);
}

/* An int64 copy of a sequence of ints (list, tuple, or anything iterable by PySequence_Fast: numpy arrays). */
typedef struct { int64_t *v; Py_ssize_t n; int64_t small[64]; } IdBuf;

static int idbuf_init(IdBuf *b, Py_ssize_t n) {
    b->n = n;
    b->v = n <= 64 ? b->small : PyMem_Malloc(sizeof(int64_t) * (size_t)n);
    if (!b->v) { PyErr_NoMemory(); return -1; }
    return 0;
}
static void idbuf_free(IdBuf *b) { if (b->v && b->v != b->small) PyMem_Free(b->v); b->v = NULL; }

static int idbuf_from(IdBuf *b, PyObject *seq, int reversed) {
    PyObject *fast = PySequence_Fast(seq, "block ids must be a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (idbuf_init(b, n) < 0) { Py_DECREF(fast); return -1; }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x = as_i64(items[reversed ? n - 1 - i : i]);
        if (x == -1 && PyErr_Occurred()) { Py_DECREF(fast); idbuf_free(b); return -1; }
        b->v[i] = x;
    }
    Py_DECREF(fast);
    return 0;
}

/* A new reference to the int of block id b (0 <= b < num_blocks). */
static inline PyObject *block_obj(Pool *p, int64_t b) {
    PyObject *o = p->id_objs[b];
    if (!o) {
        o = PyLong_FromLongLong(b);
        if (!o) return NULL;
        p->id_objs[b] = o;
    }
    Py_INCREF(o);
    return o;
}

/* Append the ints of block ids ids[0..n) to the list `lst` in one slice assignment (one resize, not n appends). */
static int append_blocks(Pool *p, PyObject *lst, const int64_t *ids, Py_ssize_t n) {
    PyObject *tail = PyList_New(n);
    if (!tail) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = block_obj(p, ids[i]);
        if (!o) { Py_DECREF(tail); return -1; }
        PyList_SET_ITEM(tail, i, o);
    }
    Py_ssize_t len = PyList_GET_SIZE(lst);
    int rc = PyList_SetSlice(lst, len, len, tail);
    Py_DECREF(tail);
    return rc;
}

static int check_block(Pool *p, int64_t b) {
    if (b < 0 || b >= p->num_blocks) {
        PyErr_Format(PyExc_IndexError, "block id %lld out of range [0, %zd)", (long long)b, p->num_blocks);
        return -1;
    }
    return 0;
}

/* ---- the free queue ---- */

/* Lay the free queue `ids` (not aliasing the queue) out anew, with room for num_blocks prepends before it. */
static void q_reset(Pool *p, const int32_t *ids, Py_ssize_t n) {
    Py_ssize_t head = p->num_blocks;
    for (Py_ssize_t i = 0; i < n; i++) {
        p->queue[head + i] = ids[i];
        p->pos[ids[i]] = (int32_t)(head + i);
    }
    p->head = head;
    p->tail = head + n;
    p->num_free = n;
    p->num_holes = 0;
}

static int q_compact(Pool *p) {
    int32_t *valid = PyMem_Malloc(sizeof(int32_t) * (size_t)(p->num_free + 1));
    if (!valid) { PyErr_NoMemory(); return -1; }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = p->head; i < p->tail; i++) {
        int32_t b = p->queue[i];
        if (p->pos[b] == i) valid[n++] = b;
    }
    q_reset(p, valid, n);
    PyMem_Free(valid);
    return 0;
}

/* ids[0..n) after the tail, in order. */
static int q_append(Pool *p, const int64_t *ids, Py_ssize_t n) {
    if (p->tail + n > p->queue_len && q_compact(p) < 0) return -1;
    Py_ssize_t tail = p->tail;
    for (Py_ssize_t i = 0; i < n; i++) {
        p->queue[tail + i] = (int32_t)ids[i];
        p->pos[ids[i]] = (int32_t)(tail + i);
    }
    p->tail = tail + n;
    p->num_free += n;
    return 0;
}

/* ids[0..n) before the head, in order (ids[0] becomes the head). */
static int q_prepend(Pool *p, const int64_t *ids, Py_ssize_t n) {
    if (p->head < n && q_compact(p) < 0) return -1;
    Py_ssize_t head = p->head - n;
    for (Py_ssize_t i = 0; i < n; i++) {
        p->queue[head + i] = (int32_t)ids[i];
        p->pos[ids[i]] = (int32_t)(head + i);
    }
    p->head = head;
    p->num_free += n;
    return 0;
}

/* Take n blocks from the head (ref_cnt 1, evicted from the prefix cache) into out. */
static int pool_take(Pool *p, Py_ssize_t n, int64_t *out) {
    if (n > p->num_free) {
        PyErr_Format(PyExc_AssertionError, "(%zd, %zd)", n, p->num_free);
        return -1;
    }
    Py_ssize_t head = p->head;
    if (!p->num_holes) {
        for (Py_ssize_t i = 0; i < n; i++) out[i] = p->queue[head + i];
        p->head = head + n;
    } else {
        Py_ssize_t got = 0, i = head;
        while (got < n) {
            int32_t b = p->queue[i];
            if (p->pos[b] == i) out[got++] = b;
            i++;
        }
        p->num_holes -= (i - head) - n;
        p->head = i;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t b = out[i];
        p->pos[b] = -1;
        p->block_hash[b] = NO_HASH;  /* eviction; its chain's entry is stale now */
        p->ref_cnt[b] = 1;
    }
    p->num_free -= n;
    return 0;
}

/* Drop a reference from each of ids (distinct, in eviction order); num_uncached < 0: unknown (`BlockPool.free`). */
static int pool_free_ids(Pool *p, const int64_t *ids, Py_ssize_t n, Py_ssize_t num_uncached) {
    if (!n) return 0;
    Py_ssize_t num_held = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (check_block(p, ids[i]) < 0) return -1;
        if (p->ref_cnt[ids[i]] != 1) num_held++;
    }
    if (num_held) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (p->ref_cnt[ids[i]] < 1) {
                PyErr_Format(PyExc_AssertionError, "block %lld freed twice", (long long)ids[i]);
                return -1;
            }
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) p->ref_cnt[ids[i]] -= 1;
    if (!num_held && num_uncached >= 0) { /* every block idle: the caller's split */
        if (num_uncached > n) num_uncached = n;
        if (num_uncached < n && q_append(p, ids + num_uncached, n - num_uncached) < 0) return -1;
        if (num_uncached && q_prepend(p, ids, num_uncached) < 0) return -1;
        return 0;
    }
    /* The idle blocks holding a hash to the tail in order, the others to the head in order. */
    IdBuf hashed, uncached;
    if (idbuf_init(&hashed, n) < 0) return -1;
    if (idbuf_init(&uncached, n) < 0) { idbuf_free(&hashed); return -1; }
    Py_ssize_t num_hashed = 0, num_uncached_idle = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t b = ids[i];
        if (p->ref_cnt[b]) continue;
        if (p->block_hash[b] != NO_HASH) hashed.v[num_hashed++] = b;
        else uncached.v[num_uncached_idle++] = b;
    }
    int rc = 0;
    if (num_hashed && q_append(p, hashed.v, num_hashed) < 0) rc = -1;
    if (!rc && num_uncached_idle && q_prepend(p, uncached.v, num_uncached_idle) < 0) rc = -1;
    idbuf_free(&hashed);
    idbuf_free(&uncached);
    return rc;
}

static void pool_touch_ids(Pool *p, const int64_t *ids, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t b = ids[i];
        if (!p->ref_cnt[b]) {  /* out of the free queue: a hole */
            p->pos[b] = -1;
            p->num_free--;
            p->num_holes++;
        }
        p->ref_cnt[b] += 1;
    }
}

/* ---- chains ---- */

static void chain_free(Chain *c) {
    if (!c) return;
    Py_XDECREF(c->block_ids); Py_XDECREF(c->block_hashes); Py_XDECREF(c->hash_fn); Py_XDECREF(c->hash_arg);
    PyMem_Free(c);
}

static Chain *pool_chain(Pool *p, int64_t id) {
    if (id <= 0 || id >= p->chains_cap || !p->chains[id]) {
        PyObject *key = PyLong_FromLongLong(id);
        if (key) { PyErr_SetObject(PyExc_KeyError, key); Py_DECREF(key); }
        return NULL;
    }
    return p->chains[id];
}

/* Drop the chains none of whose blocks are cached any more (`BlockPool._prune_chains`). */
static int pool_prune(Pool *p) {
    Py_ssize_t cap = p->num_chains_made + 1;
    char *live = PyMem_Calloc((size_t)cap, 1);
    if (!live) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t b = 0; b < p->num_blocks; b++) {
        if (p->block_hash[b] != NO_HASH) {
            int64_t c = p->reg_chain[b];
            if (c > 0 && c < cap) live[c] = 1;
        }
    }
    PyObject *starts = PyDict_New();
    if (!starts) { PyMem_Free(live); return -1; }
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < p->num_alive; i++) {
        int64_t id = p->alive[i];
        Chain *c = p->chains[id];
        if (!live[id]) { p->chains[id] = NULL; chain_free(c); continue; }
        p->alive[kept++] = id;
        PyObject *key = PyList_GET_ITEM(c->block_hashes, c->start);
        PyObject *lst = PyDict_GetItemWithError(starts, key);
        if (!lst) {
            if (PyErr_Occurred()) goto fail;
            lst = PyList_New(0);
            if (!lst || PyDict_SetItem(starts, key, lst) < 0) { Py_XDECREF(lst); goto fail; }
            Py_DECREF(lst);
        }
        PyObject *idobj = PyLong_FromLongLong(id);
        if (!idobj || PyList_Append(lst, idobj) < 0) { Py_XDECREF(idobj); goto fail; }
        Py_DECREF(idobj);
    }
    p->num_alive = kept;
    Py_SETREF(p->starts, starts);
    p->max_chains = 2 * kept > MIN_MAX_CHAINS ? 2 * kept : MIN_MAX_CHAINS;
    PyMem_Free(live);
    return 0;
fail:
    /* (chains already dropped are gone; the rest are compacted up to the failure, which only memory can cause) */
    PyMem_Free(live);
    Py_DECREF(starts);
    return -1;
}

/* A new chain; steals nothing. Returns its id, or -1 with an exception. */
static int64_t pool_new_chain(Pool *p, PyObject *block_ids, PyObject *block_hashes, Py_ssize_t start,
                              PyObject *hash_fn, PyObject *hash_arg) {
    if (!PyList_Check(block_ids) || !PyList_Check(block_hashes)) {
        PyErr_SetString(PyExc_TypeError, "a chain's block_ids and block_hashes must be lists");
        return -1;
    }
    if (start < 0 || start >= PyList_GET_SIZE(block_hashes)) {
        PyErr_SetString(PyExc_IndexError, "a new chain needs the hash of its first block");
        return -1;
    }
    if (p->num_alive >= p->max_chains && pool_prune(p) < 0) return -1;
    int64_t id = p->num_chains_made + 1;
    if (id >= p->chains_cap) {
        Py_ssize_t cap = p->chains_cap ? 2 * p->chains_cap : 1024;
        Chain **chains = PyMem_Realloc(p->chains, sizeof(Chain *) * (size_t)cap);
        if (!chains) { PyErr_NoMemory(); return -1; }
        memset(chains + p->chains_cap, 0, sizeof(Chain *) * (size_t)(cap - p->chains_cap));
        p->chains = chains;
        p->chains_cap = cap;
    }
    if (p->num_alive >= p->alive_cap) {
        Py_ssize_t cap = p->alive_cap ? 2 * p->alive_cap : 1024;
        int64_t *alive = PyMem_Realloc(p->alive, sizeof(int64_t) * (size_t)cap);
        if (!alive) { PyErr_NoMemory(); return -1; }
        p->alive = alive;
        p->alive_cap = cap;
    }
    Chain *c = PyMem_Calloc(1, sizeof(Chain));
    if (!c) { PyErr_NoMemory(); return -1; }
    PyObject *key = PyList_GET_ITEM(block_hashes, start);
    PyObject *lst = PyDict_GetItemWithError(p->starts, key);
    if (!lst) {
        if (PyErr_Occurred()) { PyMem_Free(c); return -1; }
        lst = PyList_New(0);
        if (!lst || PyDict_SetItem(p->starts, key, lst) < 0) { Py_XDECREF(lst); PyMem_Free(c); return -1; }
        Py_DECREF(lst);
    }
    PyObject *idobj = PyLong_FromLongLong(id);
    if (!idobj || PyList_Append(lst, idobj) < 0) { Py_XDECREF(idobj); PyMem_Free(c); return -1; }
    Py_DECREF(idobj);
    Py_INCREF(block_ids); c->block_ids = block_ids;
    Py_INCREF(block_hashes); c->block_hashes = block_hashes;
    Py_XINCREF(hash_fn); c->hash_fn = hash_fn;
    Py_XINCREF(hash_arg); c->hash_arg = hash_arg;
    c->start = start;
    p->chains[id] = c;
    p->alive[p->num_alive++] = id;
    p->num_chains_made = id;
    return id;
}

/* Register block_ids[start:end] (a list) in `chain`. */
static int pool_register(Pool *p, int64_t chain, PyObject *block_ids, PyObject *block_hashes, Py_ssize_t start,
                         Py_ssize_t end) {
    Chain *c = pool_chain(p, chain);
    if (!c) return -1;
    if (end > PyList_GET_SIZE(block_ids) || start < 0) {
        PyErr_SetString(PyExc_IndexError, "register_chain: [start, end) past the block list");
        return -1;
    }
    int64_t order = p->num_registered;
    p->num_registered = order + (end - start);
    if (c->hash_fn) {
        for (Py_ssize_t k = start; k < end; k++) {
            int64_t b = as_i64(PyList_GET_ITEM(block_ids, k));
            if (check_block(p, b) < 0) return -1;
            p->block_hash[b] = PLACEHOLDER_BASE - order++;
            p->reg_chain[b] = chain;
        }
    } else {
        if (end > PyList_GET_SIZE(block_hashes)) {
            PyErr_SetString(PyExc_IndexError, "register_chain: a hash missing for an eager chain");
            return -1;
        }
        for (Py_ssize_t k = start; k < end; k++) {
            int64_t b = as_i64(PyList_GET_ITEM(block_ids, k));
            if (check_block(p, b) < 0) return -1;
            int64_t h = as_i64(PyList_GET_ITEM(block_hashes, k));
            if (h == -1 && PyErr_Occurred()) return -1;
            p->block_hash[b] = h;
            p->reg_order[b] = order++;
            p->reg_chain[b] = chain;
        }
    }
    return 0;
}

/* Write the real hashes of a lazy chain over the placeholders of its blocks still registered in it. */
static int pool_materialize(Pool *p, int64_t chain_id) {
    Chain *c = pool_chain(p, chain_id);
    if (!c) return -1;
    if (!c->hash_fn) return 0;
    Py_ssize_t n = PyList_GET_SIZE(c->block_ids) - c->start;
    Py_ssize_t last = -1;
    for (Py_ssize_t m = 0; m < n; m++) {
        int64_t b = as_i64(PyList_GET_ITEM(c->block_ids, c->start + m));
        if (p->reg_chain[b] == chain_id && p->block_hash[b] < NO_HASH) last = m;
    }
    if (last < 0) return 0;
    PyObject *num = PyLong_FromSsize_t(c->start + last + 1);
    if (!num) return -1;
    PyObject *fn = c->hash_fn, *arg = c->hash_arg;
    Py_INCREF(fn); Py_XINCREF(arg);  /* (the call may drop the chain) */
    PyObject *r = arg ? PyObject_CallFunctionObjArgs(fn, arg, num, NULL) : PyObject_CallOneArg(fn, num);
    Py_DECREF(num); Py_DECREF(fn); Py_XDECREF(arg);
    if (!r) return -1;
    Py_DECREF(r);
    c = pool_chain(p, chain_id);
    if (!c) return -1;
    if (PyList_GET_SIZE(c->block_hashes) < c->start + last + 1) {
        PyErr_SetString(PyExc_AssertionError, "a lazy chain's hasher did not hash its blocks");
        return -1;
    }
    for (Py_ssize_t m = 0; m <= last; m++) {
        int64_t b = as_i64(PyList_GET_ITEM(c->block_ids, c->start + m));
        if (p->reg_chain[b] == chain_id && p->block_hash[b] < NO_HASH) {
            int64_t h = as_i64(PyList_GET_ITEM(c->block_hashes, c->start + m));
            if (h == -1 && PyErr_Occurred()) return -1;
            p->reg_order[b] = PLACEHOLDER_BASE - p->block_hash[b];
            p->block_hash[b] = h;
        }
    }
    return 0;
}

/* The blocks cached under wanted[0], [1], ... up to the first miss (`BlockPool.find_longest_cache_hit`). */
static PyObject *pool_find_hit(Pool *p, PyObject *block_hashes, Py_ssize_t max_num_blocks) {
    PyObject *fast = PySequence_Fast(block_hashes, "block_hashes must be a sequence");
    if (!fast) return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *result = NULL;
    int64_t *wanted = NULL, *found = NULL;
    if (max_num_blocks <= 0 || !len) { Py_DECREF(fast); return PyList_New(0); }
    int in = PyDict_Contains(p->starts, items[0]);
    if (in <= 0) { Py_DECREF(fast); return in < 0 ? NULL : PyList_New(0); }
    Py_ssize_t num_wanted = len < max_num_blocks ? len : max_num_blocks;
    wanted = PyMem_Malloc(sizeof(int64_t) * (size_t)num_wanted);
    Py_ssize_t num_found = 0, found_cap = 8;
    found = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)found_cap);
    if (!wanted || !found) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < num_wanted; k++) {
        wanted[k] = as_i64(items[k]);
        if (wanted[k] == -1 && PyErr_Occurred()) goto done;
        PyObject *lst = PyDict_GetItemWithError(p->starts, items[k]);
        if (!lst) { if (PyErr_Occurred()) goto done; continue; }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(lst); j++) {
            if (num_found == found_cap) {
                found_cap *= 2;
                int64_t *f = PyMem_Realloc(found, sizeof(int64_t) * 2 * (size_t)found_cap);
                if (!f) { PyErr_NoMemory(); goto done; }
                found = f;
            }
            found[2 * num_found] = k;
            found[2 * num_found + 1] = as_i64(PyList_GET_ITEM(lst, j));
            num_found++;
        }
    }
    for (Py_ssize_t f = 0; f < num_found; f++) {  /* the only blocks compared below are these chains' */
        if (pool_materialize(p, found[2 * f + 1]) < 0) goto done;
    }
    result = PyList_New(0);
    if (!result) goto done;
    for (Py_ssize_t pos = 0; pos < num_wanted; pos++) {
        int64_t best_order = NEVER, best = -1;
        for (Py_ssize_t f = 0; f < num_found; f++) {
            int64_t k = found[2 * f];
            if (k > pos) break;  /* (found is by position) */
            Chain *c = pool_chain(p, found[2 * f + 1]);
            if (!c) { Py_CLEAR(result); goto done; }
            Py_ssize_t idx = c->start + (pos - k);
            if (idx >= PyList_GET_SIZE(c->block_ids)) continue;
            int64_t b = as_i64(PyList_GET_ITEM(c->block_ids, idx));
            if (p->block_hash[b] != wanted[pos]) continue;
            if (best < 0 || p->reg_order[b] < best_order) { best_order = p->reg_order[b]; best = b; }
            if (num_found == 1) break;
        }
        if (best < 0) break;
        PyObject *o = block_obj(p, best);
        if (!o || PyList_Append(result, o) < 0) { Py_XDECREF(o); Py_CLEAR(result); goto done; }
        Py_DECREF(o);
    }
done:
    PyMem_Free(wanted);
    PyMem_Free(found);
    Py_DECREF(fast);
    return result;
}

static void pool_release_chains(Pool *p) {
    for (Py_ssize_t i = 0; i < p->num_alive; i++) {
        int64_t id = p->alive[i];
        chain_free(p->chains[id]);
        p->chains[id] = NULL;
    }
    p->num_alive = 0;
    if (p->starts) PyDict_Clear(p->starts);
}

/* ---- the Python type ---- */

static int Pool_traverse(Pool *p, visitproc visit, void *arg) {
    Py_VISIT(p->starts);
    for (Py_ssize_t i = 0; i < p->num_alive; i++) {
        Chain *c = p->chains[p->alive[i]];
        if (!c) continue;
        Py_VISIT(c->block_ids); Py_VISIT(c->block_hashes); Py_VISIT(c->hash_fn); Py_VISIT(c->hash_arg);
    }
    for (int i = 0; i < 4 && p->have_bufs; i++) Py_VISIT(p->bufs[i].obj);
    return 0;
}

static int Pool_clear(Pool *p) {
    pool_release_chains(p);
    Py_CLEAR(p->starts);
    return 0;
}

static void Pool_dealloc(Pool *p) {
    PyObject_GC_UnTrack(p);
    Pool_clear(p);
    if (p->have_bufs) for (int i = 0; i < 4; i++) PyBuffer_Release(&p->bufs[i]);
    p->have_bufs = 0;
    if (p->id_objs) for (Py_ssize_t b = 0; b < p->num_blocks; b++) Py_XDECREF(p->id_objs[b]);
    PyMem_Free(p->queue); PyMem_Free(p->pos); PyMem_Free(p->chains); PyMem_Free(p->alive); PyMem_Free(p->id_objs);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int Pool_init(Pool *p, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"num_blocks", "ref_cnt", "block_hash", "reg_order", "reg_chain", NULL};
    Py_ssize_t n;
    PyObject *arrays[4];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nOOOO", kwlist, &n, &arrays[0], &arrays[1], &arrays[2], &arrays[3]))
        return -1;
    if (p->have_bufs) { PyErr_SetString(PyExc_RuntimeError, "BlockPool initialized twice"); return -1; }
    if (n < 2 || n > INT32_MAX - 1) { PyErr_SetString(PyExc_AssertionError, "num_blocks"); return -1; }
    for (int i = 0; i < 4; i++) {
        if (PyObject_GetBuffer(arrays[i], &p->bufs[i], PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            for (int j = 0; j < i; j++) PyBuffer_Release(&p->bufs[j]);
            return -1;
        }
        if (p->bufs[i].itemsize != 8 || p->bufs[i].len != 8 * n) {
            for (int j = 0; j <= i; j++) PyBuffer_Release(&p->bufs[j]);
            PyErr_SetString(PyExc_ValueError, "the pool's arrays must be int64 of num_blocks elements");
            return -1;
        }
    }
    p->have_bufs = 1;
    p->num_blocks = n;
    p->ref_cnt = p->bufs[0].buf; p->block_hash = p->bufs[1].buf;
    p->reg_order = p->bufs[2].buf; p->reg_chain = p->bufs[3].buf;
    p->queue_len = 4 * n + 16;
    p->queue = PyMem_Malloc(sizeof(int32_t) * (size_t)p->queue_len);
    p->pos = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    p->id_objs = PyMem_Calloc((size_t)n, sizeof(PyObject *));
    p->starts = PyDict_New();
    if (!p->queue || !p->pos || !p->starts || !p->id_objs) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t b = 0; b < n; b++) p->pos[b] = -1;
    for (Py_ssize_t b = 1; b < n; b++) p->queue[b - 1] = (int32_t)b;  /* (below the window q_reset lays out) */
    q_reset(p, p->queue, n - 1);
    p->max_chains = MIN_MAX_CHAINS;
    return 0;
}

static PyObject *Pool_allocate(Pool *p, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) n = 0;
    IdBuf b;
    if (idbuf_init(&b, n) < 0) return NULL;
    if (pool_take(p, n, b.v) < 0) { idbuf_free(&b); return NULL; }
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *o = block_obj(p, b.v[i]);
        if (!o) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, o);
    }
    idbuf_free(&b);
    return out;
}

static PyObject *Pool_touch_ids(Pool *p, PyObject *arg) {
    IdBuf b;
    if (idbuf_from(&b, arg, 0) < 0) return NULL;
    for (Py_ssize_t i = 0; i < b.n; i++) if (check_block(p, b.v[i]) < 0) { idbuf_free(&b); return NULL; }
    pool_touch_ids(p, b.v, b.n);
    idbuf_free(&b);
    Py_RETURN_NONE;
}

static PyObject *Pool_free(Pool *p, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"ordered_ids", "num_uncached", NULL};
    PyObject *ids, *nu = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &ids, &nu)) return NULL;
    Py_ssize_t num_uncached = -1;
    if (nu != Py_None) {
        num_uncached = PyLong_AsSsize_t(nu);
        if (num_uncached == -1 && PyErr_Occurred()) return NULL;
        if (num_uncached < 0) { PyErr_SetString(PyExc_ValueError, "num_uncached < 0"); return NULL; }
    }
    IdBuf b;
    if (idbuf_from(&b, ids, 0) < 0) return NULL;
    int rc = pool_free_ids(p, b.v, b.n, num_uncached);
    idbuf_free(&b);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Pool_register_chain(Pool *p, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"chain", "block_ids", "block_hashes", "start", "end", "hash_blocks", "ids", NULL};
    PyObject *chain, *block_ids, *block_hashes, *hash_blocks = Py_None, *ids = Py_None;
    Py_ssize_t start, end;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!O!nn|OO", kwlist, &chain, &PyList_Type, &block_ids, &PyList_Type,
                                     &block_hashes, &start, &end, &hash_blocks, &ids))
        return NULL;
    int64_t id;
    if (chain == Py_None) {
        id = pool_new_chain(p, block_ids, block_hashes, start, hash_blocks == Py_None ? NULL : hash_blocks, NULL);
        if (id < 0) return NULL;
    } else {
        id = as_i64(chain);
        if (id == -1 && PyErr_Occurred()) return NULL;
    }
    if (pool_register(p, id, block_ids, block_hashes, start, end) < 0) return NULL;
    return PyLong_FromLongLong(id);
}

static PyObject *Pool_register_ends(Pool *p, PyObject *args) {
    PyObject *chains, *ids;
    if (!PyArg_ParseTuple(args, "OO", &chains, &ids)) return NULL;
    IdBuf c, b;
    if (idbuf_from(&c, chains, 0) < 0) return NULL;
    if (idbuf_from(&b, ids, 0) < 0) { idbuf_free(&c); return NULL; }
    Py_ssize_t n = b.n < c.n ? b.n : c.n;
    int64_t order = p->num_registered;
    p->num_registered = order + b.n;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (check_block(p, b.v[i]) < 0) { idbuf_free(&c); idbuf_free(&b); return NULL; }
        p->block_hash[b.v[i]] = PLACEHOLDER_BASE - order++;
        p->reg_chain[b.v[i]] = c.v[i];
    }
    idbuf_free(&c); idbuf_free(&b);
    Py_RETURN_NONE;
}

static PyObject *Pool_materialize(Pool *p, PyObject *arg) {
    int64_t id = as_i64(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (pool_materialize(p, id) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Pool_materialize_all(Pool *p, PyObject *Py_UNUSED(ignored)) {
    /* The chains of the blocks holding placeholders, ascending (as np.unique gives them). */
    char *seen = PyMem_Calloc((size_t)(p->num_chains_made + 1), 1);
    if (!seen) return PyErr_NoMemory();
    for (Py_ssize_t b = 0; b < p->num_blocks; b++) {
        if (p->block_hash[b] < NO_HASH) {
            int64_t c = p->reg_chain[b];
            if (c >= 0 && c <= p->num_chains_made) seen[c] = 1;
        }
    }
    for (int64_t c = 0; c <= p->num_chains_made; c++) {
        if (seen[c] && pool_materialize(p, c) < 0) { PyMem_Free(seen); return NULL; }
    }
    PyMem_Free(seen);
    Py_RETURN_NONE;
}

static PyObject *Pool_may_hit(Pool *p, PyObject *arg) {
    int r = PyDict_Contains(p->starts, arg);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

static PyObject *Pool_find_longest_cache_hit(Pool *p, PyObject *args) {
    PyObject *hashes;
    Py_ssize_t max_num_blocks;
    if (!PyArg_ParseTuple(args, "On", &hashes, &max_num_blocks)) return NULL;
    return pool_find_hit(p, hashes, max_num_blocks);
}

static PyObject *Pool_close_chain(Pool *p, PyObject *arg) {
    int64_t id = as_i64(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (id > 0 && id < p->chains_cap && p->chains[id]) p->chains[id]->closed = 1;
    Py_RETURN_NONE;
}

/* Whether every chain compared by a lookup of hashes[0..max_num_blocks) is closed: 1 yes, 0 no, -1 error. */
static int pool_candidates_closed(Pool *p, PyObject *hashes, Py_ssize_t max_num_blocks) {
    PyObject *fast = PySequence_Fast(hashes, "block_hashes must be a sequence");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (max_num_blocks < n) n = max_num_blocks < 0 ? 0 : max_num_blocks;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *lst = PyDict_GetItemWithError(p->starts, PySequence_Fast_GET_ITEM(fast, k));
        if (!lst) { if (PyErr_Occurred()) { Py_DECREF(fast); return -1; } continue; }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(lst); j++) {
            Chain *c = pool_chain(p, as_i64(PyList_GET_ITEM(lst, j)));
            if (!c) { Py_DECREF(fast); return -1; }
            if (!c->closed) { Py_DECREF(fast); return 0; }
        }
    }
    Py_DECREF(fast);
    return 1;
}

static PyObject *Pool_candidates_closed(Pool *p, PyObject *args) {
    PyObject *hashes;
    Py_ssize_t max_num_blocks;
    if (!PyArg_ParseTuple(args, "On", &hashes, &max_num_blocks)) return NULL;
    int r = pool_candidates_closed(p, hashes, max_num_blocks);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

static PyObject *Pool_prune_chains(Pool *p, PyObject *Py_UNUSED(ignored)) {
    if (pool_prune(p) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Pool_release_chains(Pool *p, PyObject *Py_UNUSED(ignored)) {
    pool_release_chains(p);
    Py_RETURN_NONE;
}

static PyObject *Pool_free_queue(Pool *p, PyObject *Py_UNUSED(ignored)) {
    /* The free queue head first, for check_invariants (its holes counted). */
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t holes = 0;
    for (Py_ssize_t i = p->head; i < p->tail; i++) {
        int32_t b = p->queue[i];
        if (b < 0 || b >= p->num_blocks || p->pos[b] != i) { holes++; continue; }
        PyObject *o = PyLong_FromLong(b);
        if (!o || PyList_Append(out, o) < 0) { Py_XDECREF(o); Py_DECREF(out); return NULL; }
        Py_DECREF(o);
    }
    if (holes != p->num_holes) {
        Py_DECREF(out);
        PyErr_Format(PyExc_AssertionError, "%zd holes in the free queue, %zd counted", holes, p->num_holes);
        return NULL;
    }
    return out;
}

static PyObject *Pool_chain_info(Pool *p, PyObject *arg) {
    /* (block_ids, block_hashes, start, lazy, closed) of a kept chain, else None; for check_invariants. */
    int64_t id = as_i64(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (id <= 0 || id >= p->chains_cap || !p->chains[id]) Py_RETURN_NONE;
    Chain *c = p->chains[id];
    return Py_BuildValue("OOnOO", c->block_ids, c->block_hashes, c->start, c->hash_fn ? Py_True : Py_False,
                         c->closed ? Py_True : Py_False);
}

static PyObject *Pool_get_num_free(Pool *p, void *c) { return PyLong_FromSsize_t(p->num_free); }
static PyObject *Pool_get_num_used(Pool *p, void *c) { return PyLong_FromSsize_t(p->num_blocks - 1 - p->num_free); }
static PyObject *Pool_get_num_usable(Pool *p, void *c) { return PyLong_FromSsize_t(p->num_blocks - 1); }
static PyObject *Pool_get_num_chains_made(Pool *p, void *c) { return PyLong_FromLongLong(p->num_chains_made); }
static PyObject *Pool_get_num_live_chains(Pool *p, void *c) { return PyLong_FromSsize_t(p->num_alive); }
static PyObject *Pool_get_starts(Pool *p, void *c) { Py_INCREF(p->starts); return p->starts; }
static PyObject *Pool_get_max_chains(Pool *p, void *c) { return PyLong_FromSsize_t(p->max_chains); }
static int Pool_set_max_chains(Pool *p, PyObject *v, void *c) {
    Py_ssize_t n = v ? PyLong_AsSsize_t(v) : -1;
    if (n == -1 && (PyErr_Occurred() || !v)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cannot delete _max_chains");
        return -1;
    }
    p->max_chains = n;
    return 0;
}

static PyMethodDef Pool_methods[] = {
    {"allocate", (PyCFunction)Pool_allocate, METH_O, "Take n blocks (ref_cnt 1) from the head of the free queue."},
    {"touch_ids", (PyCFunction)Pool_touch_ids, METH_O, "A prefix hit takes a reference on each block."},
    {"free", (PyCFunction)(void (*)(void))Pool_free, METH_VARARGS | METH_KEYWORDS, "Drop one reference each."},
    {"register_chain", (PyCFunction)(void (*)(void))Pool_register_chain, METH_VARARGS | METH_KEYWORDS,
     "Register block_ids[start:end] in a chain (a new one for None); returns the chain."},
    {"register_ends", (PyCFunction)Pool_register_ends, METH_VARARGS, "One block at the end of each lazy chain."},
    {"_materialize", (PyCFunction)Pool_materialize, METH_O, "Hash a lazy chain's registered blocks."},
    {"_materialize_all", (PyCFunction)Pool_materialize_all, METH_NOARGS, "Hash every lazy chain's blocks."},
    {"may_hit", (PyCFunction)Pool_may_hit, METH_O, "Whether some chain starts with this hash."},
    {"find_longest_cache_hit", (PyCFunction)Pool_find_longest_cache_hit, METH_VARARGS, "The longest prefix hit."},
    {"close_chain", (PyCFunction)Pool_close_chain, METH_O, "No more blocks will be registered in the chain."},
    {"candidates_closed", (PyCFunction)Pool_candidates_closed, METH_VARARGS, "Every compared chain closed."},
    {"_prune_chains", (PyCFunction)Pool_prune_chains, METH_NOARGS, "Drop the chains with no cached block."},
    {"release_chains", (PyCFunction)Pool_release_chains, METH_NOARGS, "Forget every chain."},
    {"_free_queue", (PyCFunction)Pool_free_queue, METH_NOARGS, "The free queue, head first."},
    {"_chain_info", (PyCFunction)Pool_chain_info, METH_O, "A kept chain's lists, start, laziness, closed."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Pool_getset[] = {
    {"num_free_blocks", (getter)Pool_get_num_free, NULL, NULL, NULL},
    {"num_used_blocks", (getter)Pool_get_num_used, NULL, NULL, NULL},
    {"num_usable_blocks", (getter)Pool_get_num_usable, NULL, NULL, NULL},
    {"num_chains_made", (getter)Pool_get_num_chains_made, NULL, NULL, NULL},
    {"num_live_chains", (getter)Pool_get_num_live_chains, NULL, NULL, NULL},
    {"_chain_starts", (getter)Pool_get_starts, NULL, NULL, NULL},
    {"_max_chains", (getter)Pool_get_max_chains, (setter)Pool_set_max_chains, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Pool_members[] = {
    {"num_blocks", T_PYSSIZET, offsetof(Pool, num_blocks), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.BlockPoolCore",
    .tp_basicsize = sizeof(Pool),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled block pool's state and operations (engine.core.compiled_kv.CompiledBlockPool).",
    .tp_traverse = (traverseproc)Pool_traverse,
    .tp_clear = (inquiry)Pool_clear,
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_init = (initproc)Pool_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = Pool_methods,
    .tp_getset = Pool_getset,
    .tp_members = Pool_members,
};

/* ---- prompt block hashes (engine/core/block_hash.py, the reference) ----

   hash_k = (hash_{k-1} + sum over the block's positions t of w_token(x_t) * w_position(t)) mod 2^63, with
   w_token(x) = splitmix64(x ^ TOKEN_SALT), w_position(t) = splitmix64(t ^ POSITION_SALT) | 1, arithmetic mod 2^64:
   the same numbers as block_hash.py's `block_hash` and `prompt_block_hashes` (tests/test_compiled_kv.py compares
   them), computed here for the prompt's blocks without a numpy call per block. */

#define ROOT_BLOCK_HASH 0x5EEDB10CULL
#define MASK_63 0x7FFFFFFFFFFFFFFFULL
#define TOKEN_SALT 0x243F6A8885A308D3ULL
#define POSITION_SALT 0x13198A2E03707344ULL

static inline uint64_t splitmix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t *position_weights;  /* w_position(t) for t < num_position_weights, grown by doubling */
static Py_ssize_t num_position_weights;

static int ensure_position_weights(Py_ssize_t n) {
    if (n <= num_position_weights) return 0;
    Py_ssize_t size = num_position_weights ? 2 * num_position_weights : 1 << 13;
    while (size < n) size *= 2;
    uint64_t *w = PyMem_RawRealloc(position_weights, sizeof(uint64_t) * (size_t)size);
    if (!w) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t t = num_position_weights; t < size; t++) w[t] = splitmix64((uint64_t)t ^ POSITION_SALT) | 1ULL;
    position_weights = w;
    num_position_weights = size;
    return 0;
}

/* Append to `hashes` (a list) the hashes of blocks [len(hashes), num_blocks) of the int64 ids `prompt` (its first
   num_blocks * block_size ids), chained after the list's last hash. */
static int hash_prompt_blocks(PyObject *hashes, PyObject *prompt, Py_ssize_t num_blocks, Py_ssize_t bs) {
    Py_ssize_t have = PyList_GET_SIZE(hashes);
    if (num_blocks <= have) return 0;
    uint64_t parent = ROOT_BLOCK_HASH;
    if (have) {
        parent = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(hashes, have - 1));
        if (parent == (uint64_t)-1 && PyErr_Occurred()) return -1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(prompt, &view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return -1;
    int rc = -1;
    const char *fmt = view.format ? view.format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@') fmt++;
    if (view.ndim != 1 || view.itemsize != 8 || !(fmt[0] == 'l' || fmt[0] == 'q') || fmt[1]) {
        PyErr_SetString(PyExc_TypeError, "a prompt must be a 1-d int64 array");
        goto done;
    }
    if (view.shape[0] < num_blocks * bs) {
        PyErr_SetString(PyExc_IndexError, "hash_prompt_blocks: the prompt is shorter than its blocks");
        goto done;
    }
    if (ensure_position_weights(num_blocks * bs) < 0) goto done;
    Py_ssize_t stride = view.strides[0];
    const char *base = view.buf;
    for (Py_ssize_t k = have; k < num_blocks; k++) {
        uint64_t content = 0;
        for (Py_ssize_t t = k * bs; t < (k + 1) * bs; t++) {
            uint64_t x = (uint64_t)*(const int64_t *)(base + t * stride);
            content += splitmix64(x ^ TOKEN_SALT) * position_weights[t];
        }
        parent = (parent + content) & MASK_63;
        PyObject *h = PyLong_FromUnsignedLongLong(parent);
        if (!h || PyList_Append(hashes, h) < 0) { Py_XDECREF(h); goto done; }
        Py_DECREF(h);
    }
    rc = 0;
done:
    PyBuffer_Release(&view);
    return rc;
}

/* ready_prompt(prompt, num_prompt_tokens, ndarray): whether `prompt` is exactly a numpy array of `num_prompt_tokens`
   int64 ids >= 0, read-only, C-contiguous: what `Request._load_prompt` keeps as it is (its checks, without numpy's
   calls; False: the Python code decides, and raises where it must). */
/* `scan`: whether to check that no id is below 0 (not for ids `TokenIdGenerator._draw` made, all in [0, vocab)). */
static int prompt_ready(PyObject *prompt, Py_ssize_t n, PyObject *ndarray, int scan) {
    if ((PyObject *)Py_TYPE(prompt) != ndarray) return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(prompt, &view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) { PyErr_Clear(); return 0; }
    const char *fmt = view.format ? view.format : "B";
    if (*fmt == '=' || *fmt == '@') fmt++;
    int ok = view.readonly && view.ndim == 1 && view.itemsize == 8 && (fmt[0] == 'l' || fmt[0] == 'q') && !fmt[1]
        && view.shape[0] == n && view.strides[0] == 8;
    if (ok && scan) {
        const uint64_t *v = (const uint64_t *)view.buf;
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        Py_ssize_t i = 0;
        for (; i + 4 <= n; i += 4) { a0 |= v[i]; a1 |= v[i + 1]; a2 |= v[i + 2]; a3 |= v[i + 3]; }
        for (; i < n; i++) a0 |= v[i];
        ok = !(((a0 | a1 | a2 | a3) >> 63) != 0);
    }
    PyBuffer_Release(&view);
    return ok;
}

static PyObject *mod_ready_prompt(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "ready_prompt(prompt, num_prompt_tokens, ndarray)"); return NULL; }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(prompt_ready(args[0], n, args[2], 1));
}

static PyObject *mod_any_negative_id(PyObject *Py_UNUSED(m), PyObject *ids) {
    /* any_negative_id(ids): whether a 1-d int64 array holds an id below 0 (Request's prompt check: the sign bits
       or-ed in four lanes, ~1 instruction an id; numpy's `minimum.reduce` sets up a reduction, ~10 k instructions a
       prompt). */
    Py_buffer view;
    if (PyObject_GetBuffer(ids, &view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return NULL;
    const char *fmt = view.format ? view.format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@') fmt++;
    if (view.ndim != 1 || view.itemsize != 8 || !(fmt[0] == 'l' || fmt[0] == 'q') || fmt[1]) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "any_negative_id: ids must be a 1-d int64 array");
        return NULL;
    }
    const char *base = view.buf;
    Py_ssize_t n = view.shape[0], stride = view.strides[0], i = 0;
    uint64_t acc = 0;
    if (stride == 8) {
        const uint64_t *v = (const uint64_t *)base;
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (; i + 4 <= n; i += 4) { a0 |= v[i]; a1 |= v[i + 1]; a2 |= v[i + 2]; a3 |= v[i + 3]; }
        acc = a0 | a1 | a2 | a3;
    }
    for (; i < n; i++) acc |= *(const uint64_t *)(base + i * stride);
    PyBuffer_Release(&view);
    return PyBool_FromLong((acc >> 63) != 0);
}

static PyObject *mod_prompt_block_hashes(PyObject *Py_UNUSED(m), PyObject *args) {
    /* prompt_block_hashes(hashes, prompt, num_blocks, block_size): the C path of `KVCacheManagerCore`'s
       hashing, for tests. */
    PyObject *hashes, *prompt;
    Py_ssize_t num_blocks, bs;
    if (!PyArg_ParseTuple(args, "O!Onn", &PyList_Type, &hashes, &prompt, &num_blocks, &bs)) return NULL;
    if (bs < 1) { PyErr_SetString(PyExc_ValueError, "block_size < 1"); return NULL; }
    if (hash_prompt_blocks(hashes, prompt, num_blocks, bs) < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- token ids drawn from numpy's PCG64 (engine/core/token_ids.py, `TokenIdGenerator._draw`) ----

   `Generator(PCG64).integers(0, num_allowed, size=n)` (int64, num_allowed <= 2^32) gives, id after id,
   Lemire's bounded draw on the bit generator's next 32-bit output (numpy/random/src/distributions/distributions.c
   `random_bounded_uint64_fill`, `buffered_bounded_lemire_uint32`); a 32-bit output is the low half of the next
   64-bit PCG64 output, its high half kept for the following one (`pcg64_next32`: has_uint32, uinteger); a 64-bit
   output steps the 128-bit LCG, then applies XSL-RR (numpy/random/src/pcg64/pcg64.h, O'Neill's PCG). Drawn here
   from the state numpy reports (`bit_generator.state`, which the caller sets back), the same ids and the same
   final state (tests/test_compiled_kv.py checks both against numpy), at a fraction of numpy's per-id cost
   (its bounded fill calls the generator through a pointer for each 32 bits). The reserved-id shift of `_draw`
   is applied in the same pass. */

#ifdef __SIZEOF_INT128__  /* (a compiler without 128-bit integers builds the rest: token_ids then draws by numpy) */
typedef unsigned __int128 u128;
#define PCG_MULT (((u128)0x2360ED051FC65DA4ULL << 64) | (u128)0x4385DF649FCCF645ULL)

static int u128_from(PyObject *o, u128 *out) {
    uint64_t lo = PyLong_AsUnsignedLongLongMask(o);
    if (lo == (uint64_t)-1 && PyErr_Occurred()) return -1;
    PyObject *sh = PyLong_FromLong(64);
    if (!sh) return -1;
    PyObject *hi_o = PyNumber_Rshift(o, sh);
    Py_DECREF(sh);
    if (!hi_o) return -1;
    uint64_t hi = PyLong_AsUnsignedLongLong(hi_o);
    Py_DECREF(hi_o);
    if (hi == (uint64_t)-1 && PyErr_Occurred()) return -1;
    *out = ((u128)hi << 64) | lo;
    return 0;
}

static PyObject *u128_to(u128 v) {
    PyObject *hi = PyLong_FromUnsignedLongLong((uint64_t)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((uint64_t)v);
    PyObject *sh = PyLong_FromLong(64);
    PyObject *shifted = hi && sh ? PyNumber_Lshift(hi, sh) : NULL;
    PyObject *r = shifted && lo ? PyNumber_Or(shifted, lo) : NULL;
    Py_XDECREF(hi); Py_XDECREF(lo); Py_XDECREF(sh); Py_XDECREF(shifted);
    return r;
}

/* PCG64's next 64-bit output: step the LCG, then XSL-RR of the new state. */
static inline uint64_t pcg64_next(u128 *state, u128 inc) {
    *state = *state * PCG_MULT + inc;
    uint64_t word = (uint64_t)(*state >> 64) ^ (uint64_t)*state;
    unsigned rot = (unsigned)(*state >> 122);
    return (word >> rot) | (word << ((-rot) & 63));
}

/* One draw: `n` ids into `out` from the generator state (state, inc, has_uint32, uinteger), which it advances.
   No Python object is touched (a `DrawAhead` runs it without the GIL). */
typedef struct {
    u128 state, inc;
    int has_uint32;
    uint32_t uinteger, num_allowed;  /* num_allowed in [2, 2^32) */
    const int64_t *bounds;           /* the ascending reserved_j - j */
    Py_ssize_t num_bounds;
    int64_t *out;
    Py_ssize_t n;
} DrawJob;

static void draw_ids(DrawJob *job) {
    u128 state = job->state;
    const u128 inc = job->inc;
    int has_uint32 = job->has_uint32;
    uint32_t uinteger = job->uinteger;
    const int64_t *bv = job->bounds;
    const Py_ssize_t bn = job->num_bounds, n = job->n;
    int64_t *out = job->out;
    const uint32_t rng_excl = job->num_allowed;  /* numpy's rng + 1, rng = high - low */
    const uint32_t threshold = (uint32_t)(UINT32_MAX - (rng_excl - 1)) % rng_excl;
    const int64_t first_bound = bn ? bv[0] : INT64_MAX;
    /* An id from a 32-bit output x: Lemire's draw (x again while rejected), then the reserved-id shift. */
#define NEXT32(x)                                                              \
    do {                                                                       \
        if (has_uint32) {                                                      \
            has_uint32 = 0;                                                    \
            (x) = uinteger;                                                    \
        } else {                                                               \
            uint64_t w_ = pcg64_next(&state, inc);                             \
            has_uint32 = 1;                                                    \
            uinteger = (uint32_t)(w_ >> 32);                                   \
            (x) = (uint32_t)w_;                                                \
        }                                                                      \
    } while (0)
#define FINISH(m, dst)                                                         \
    do {                                                                       \
        uint64_t m_ = (m);                                                     \
        while ((uint32_t)m_ < threshold) {                                     \
            uint32_t x_;                                                       \
            NEXT32(x_);                                                        \
            m_ = (uint64_t)x_ * rng_excl;                                      \
        }                                                                      \
        int64_t k_ = (int64_t)(m_ >> 32);                                      \
        if (k_ >= first_bound) {                                               \
            Py_ssize_t j_ = 0;                                                 \
            while (j_ < bn && bv[j_] <= k_) j_++;                  \
            k_ += j_;                                                          \
        }                                                                      \
        (dst) = k_;                                                            \
    } while (0)
    Py_ssize_t i = 0;
    while (i < n) {
        if (has_uint32 || i + 1 == n) {  /* one id, from the buffered half or a new output's low half */
            uint32_t x;
            NEXT32(x);
            FINISH((uint64_t)x * rng_excl, out[i]);
            i++;
            continue;
        }
        /* Two ids from each 64-bit output, low half first, while neither is rejected (all but a few in
           2^32 / num_allowed): then the first goes the one-id way with the high half buffered, as numpy has it. */
        u128 st = state;
        uint32_t hi = uinteger;
        int rejected = 0;
        for (; i + 1 < n; i += 2) {
            st = st * PCG_MULT + inc;
            uint64_t word = (uint64_t)(st >> 64) ^ (uint64_t)st;
            unsigned rot = (unsigned)(st >> 122);
            uint64_t w = (word >> rot) | (word << ((-rot) & 63));
            uint64_t m0 = (uint64_t)(uint32_t)w * rng_excl, m1 = (w >> 32) * rng_excl;
            hi = (uint32_t)(w >> 32);  /* (numpy keeps the last high half in its state, used or not) */
            if ((uint32_t)m0 < threshold || (uint32_t)m1 < threshold) {
                rejected = 1;
                uinteger = hi;
                has_uint32 = 1;
                state = st;
                FINISH(m0, out[i]);
                i++;
                break;
            }
            int64_t k0 = (int64_t)(m0 >> 32), k1 = (int64_t)(m1 >> 32);
            if (k0 >= first_bound || k1 >= first_bound) {
                FINISH(m0, out[i]);
                FINISH(m1, out[i + 1]);
            } else {
                out[i] = k0;
                out[i + 1] = k1;
            }
        }
        if (!rejected) {
            state = st;
            uinteger = hi;
        }
    }
#undef NEXT32
#undef FINISH
    job->state = state;
    job->has_uint32 = has_uint32;
    job->uinteger = uinteger;
}

/* `out`'s buffer into `view` where it is a writable, C-contiguous 1-d int64 array; else -1 with a TypeError. */
static int int64_out(PyObject *out_o, const char *name, Py_buffer *view) {
    if (PyObject_GetBuffer(out_o, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@') fmt++;
    if (view->ndim != 1 || view->itemsize != 8 || !(fmt[0] == 'l' || fmt[0] == 'q') || fmt[1]) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s: out must be a 1-d int64 array", name);
        return -1;
    }
    return 0;
}

/* The generator's arguments (state, inc, has_uint32, uinteger, num_allowed, bounds) of draw_token_ids into `job`,
   the bounds copied into `bounds` (freed by the caller; `job->bounds` points into it). */
static int draw_job_parse(PyObject *args, const char *name, DrawJob *job, IdBuf *bounds, PyObject **out_o) {
    PyObject *state_o, *inc_o, *bounds_o;
    int has_uint32;
    unsigned long long uinteger_ull, num_allowed;
    if (!PyArg_ParseTuple(args, "OOiKKOO", &state_o, &inc_o, &has_uint32, &uinteger_ull, &num_allowed, &bounds_o,
                          out_o))
        return -1;
    if (num_allowed < 2 || num_allowed > 0xFFFFFFFFULL) {
        PyErr_Format(PyExc_ValueError, "%s: num_allowed must be in [2, 2^32)", name);
        return -1;
    }
    if (u128_from(state_o, &job->state) < 0 || u128_from(inc_o, &job->inc) < 0) return -1;
    if (idbuf_from(bounds, bounds_o, 0) < 0) return -1;
    job->has_uint32 = has_uint32 != 0;
    job->uinteger = (uint32_t)uinteger_ull;
    job->num_allowed = (uint32_t)num_allowed;
    job->bounds = bounds->v;
    job->num_bounds = bounds->n;
    job->out = NULL;
    job->n = 0;
    return 0;
}

/* (state, has_uint32, uinteger) after the draw: a new reference. */
static PyObject *draw_job_result(const DrawJob *job) {
    PyObject *st = u128_to(job->state);
    if (!st) return NULL;
    return Py_BuildValue("(NiK)", st, job->has_uint32, (unsigned long long)job->uinteger);
}

static PyObject *mod_draw_token_ids(PyObject *Py_UNUSED(m), PyObject *args) {
    /* draw_token_ids(state, inc, has_uint32, uinteger, num_allowed, bounds, out) -> (state, has_uint32, uinteger):
       out[i] = the i-th id of `_draw`; bounds: the ascending reserved_j - j. */
    DrawJob job;
    IdBuf bounds;
    Py_buffer view;
    PyObject *out_o;
    if (draw_job_parse(args, "draw_token_ids", &job, &bounds, &out_o) < 0) return NULL;
    if (int64_out(out_o, "draw_token_ids", &view) < 0) { idbuf_free(&bounds); return NULL; }
    job.bounds = bounds.v;  /* (bounds.v may point into the struct's own small array: set here, not in a copy) */
    job.out = view.buf;
    job.n = view.shape[0];
    draw_ids(&job);
    PyBuffer_Release(&view);
    idbuf_free(&bounds);
    return draw_job_result(&job);
}

/* ---- the sequential stream's next draws on another thread (`TokenIdGenerator.unique_array`) ----

   `DrawAhead()`: `start(state, inc, has_uint32, uinteger, num_allowed, bounds, outs)` begins, on a new thread
   (pthread, no GIL: it touches no Python object, only the buffers of the int64 arrays of the list `outs`, held until
   the join, and a copy of the bounds), the draws of `draw_token_ids` into each array of `outs` in turn, one after
   another from the state given, and returns at once; `join()` waits for them and gives, for
   each, the state after it as `draw_token_ids` does (a list), or None where no draw is pending or its thread runs in
   another process (a fork's child of a process whose draw was running: the arrays' bytes are not to be read). The
   ids are those `draw_token_ids` gives from the same states: the same function draws them. `join_draws()` joins
   every pending draw's thread of this process (at exit and before a fork: token_ids.py registers it), its result
   kept for `join`, so that no thread is left running. Where the thread cannot be made, `start` draws on the
   caller's thread. */

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

typedef struct DrawAhead {
    PyObject_HEAD
    DrawJob job;                        /* the state the draws start from */
    IdBuf bounds;
    Py_ssize_t num_outs;
    Py_buffer *views;                   /* the arrays' buffers (malloc'd: num_outs) */
    DrawJob *after;                     /* the state after each draw (malloc'd: num_outs) */
    pthread_t thread;
    pid_t pid;                          /* the process that started the pending draws */
    int pending;                        /* draws started, not joined (views and bounds held) */
    int threaded;                       /* ... on `thread`, not yet joined */
    struct DrawAhead *prev, *next;      /* the list of pending draws (changed with the GIL held) */
} DrawAhead;

static DrawAhead *draws_pending;

static void draw_all(DrawAhead *o) {
    DrawJob job = o->job;
    for (Py_ssize_t k = 0; k < o->num_outs; k++) {
        job.out = o->views[k].buf;
        job.n = o->views[k].shape[0];
        draw_ids(&job);
        o->after[k] = job;
    }
}

static void *draw_thread(void *arg) {
    draw_all((DrawAhead *)arg);
    return NULL;
}

static void draw_ahead_release(DrawAhead *o) {
    for (Py_ssize_t k = 0; k < o->num_outs; k++) PyBuffer_Release(&o->views[k]);
    o->num_outs = 0;
    idbuf_free(&o->bounds);
}

/* Waits for the pending draws and releases what they held. Returns 1 where their results are this process's
   draws, 0 otherwise. (The GIL is held throughout: the thread needs none, and no other Python thread can then
   join or free the same draws meanwhile; the wait is a batch's draw at most, ~2.5 ms, and nothing where the
   draws ended, as they have when the ids before them took their usual ~1 ms a draw to hand out.) */
static int draw_ahead_finish(DrawAhead *o) {
    if (!o->pending) return 0;
    int ours = 1;  /* (draws that ended before a fork are whole in the child too) */
    if (o->threaded) {
        if (o->pid != getpid()) ours = 0;
        else pthread_join(o->thread, NULL);
    }
    o->pending = 0;
    o->threaded = 0;
    if (o->prev) o->prev->next = o->next; else if (draws_pending == o) draws_pending = o->next;
    if (o->next) o->next->prev = o->prev;
    o->prev = o->next = NULL;
    Py_ssize_t n = o->num_outs;
    draw_ahead_release(o);
    o->num_outs = n;  /* (the results' count, for `join`) */
    return ours;
}

static PyObject *DA_start(DrawAhead *o, PyObject *args) {
    if (o->pending) {
        PyErr_SetString(PyExc_RuntimeError, "DrawAhead.start: draws are pending (join them first)");
        return NULL;
    }
    PyObject *outs;
    if (draw_job_parse(args, "DrawAhead.start", &o->job, &o->bounds, &outs) < 0) return NULL;
    o->job.bounds = o->bounds.v;
    o->num_outs = 0;
    if (!PyList_Check(outs)) {
        idbuf_free(&o->bounds);
        PyErr_SetString(PyExc_TypeError, "DrawAhead.start: outs must be a list of int64 arrays");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(outs), cap = n ? n : 1;
    free(o->views);
    free(o->after);
    o->views = malloc(sizeof(Py_buffer) * cap);
    o->after = malloc(sizeof(DrawJob) * cap);
    if (!o->views || !o->after) { idbuf_free(&o->bounds); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (int64_out(PyList_GET_ITEM(outs, k), "DrawAhead.start", &o->views[k]) < 0) {
            draw_ahead_release(o);
            return NULL;
        }
        o->num_outs = k + 1;
    }
    o->pending = 1;
    o->pid = getpid();
    o->prev = NULL;
    o->next = draws_pending;
    if (draws_pending) draws_pending->prev = o;
    draws_pending = o;
    /* The thread takes no signal (it inherits the mask blocked here): they go to the threads that handle them. */
    sigset_t all, old;
    sigfillset(&all);
    int masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    o->threaded = pthread_create(&o->thread, NULL, draw_thread, o) == 0;
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!o->threaded) draw_all(o);  /* (no thread: the same draws here) */
    Py_RETURN_NONE;
}

static PyObject *DA_join(DrawAhead *o, PyObject *Py_UNUSED(ignored)) {
    if (!draw_ahead_finish(o)) Py_RETURN_NONE;
    PyObject *list = PyList_New(o->num_outs);
    if (!list) return NULL;
    for (Py_ssize_t k = 0; k < o->num_outs; k++) {
        PyObject *r = draw_job_result(&o->after[k]);
        if (!r) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, k, r);
    }
    return list;
}

static PyObject *DA_get_pending(DrawAhead *o, void *Py_UNUSED(c)) { return PyBool_FromLong(o->pending); }
static PyObject *DA_get_running(DrawAhead *o, void *Py_UNUSED(c)) { return PyBool_FromLong(o->threaded); }

static void DA_dealloc(DrawAhead *o) {
    draw_ahead_finish(o);  /* (the thread writes into the arrays' memory: joined before they are released) */
    free(o->views);
    free(o->after);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *mod_join_draws(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    /* Joins every pending draw's thread (their results kept for `join`, as where they ended by themselves). */
    for (DrawAhead *o = draws_pending; o; o = o->next)
        if (o->threaded && o->pid == getpid()) {
            pthread_join(o->thread, NULL);  /* (the GIL held: see draw_ahead_finish) */
            o->threaded = 0;  /* (still pending: `join` gives its result without waiting) */
        }
    Py_RETURN_NONE;
}

static PyMethodDef DA_methods[] = {
    {"start", (PyCFunction)DA_start, METH_VARARGS,
     "start(state, inc, has_uint32, uinteger, num_allowed, bounds, outs): `draw_token_ids` into each int64 array of "
     "the list `outs` in turn, begun on another thread."},
    {"join", (PyCFunction)DA_join, METH_NOARGS,
     "join() -> [(state, has_uint32, uinteger) after each array], or None where no draw of this process is pending."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef DA_getset[] = {
    {"pending", (getter)DA_get_pending, NULL, "draws started and not joined", NULL},
    {"running", (getter)DA_get_running, NULL, "their thread started and not joined (it may have ended)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DrawAheadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.DrawAhead",
    .tp_basicsize = sizeof(DrawAhead),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The sequential stream's next `draw_token_ids` on another thread (TokenIdGenerator.unique_array).",
    .tp_dealloc = (destructor)DA_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_methods = DA_methods,
    .tp_getset = DA_getset,
};

#endif  /* __SIZEOF_INT128__ */

/* ---- the KV cache manager ---- */

typedef struct {
    PyObject_HEAD
    Pool *pool;
    PyObject *ensure;       /* the manager's ensure_block_hashes, unbound: ensure(self, req, n) */
    PyObject *no_block_ids; /* engine.core.request.NO_BLOCK_IDS */
    Py_ssize_t block_size, max_model_len, watermark_blocks, failed_need;
    int enable_caching;
} KV;

static PyObject *s_block_ids, *s_block_ids_head, *s_block_hashes, *s_num_cached_blocks, *s_cache_chain,
    *s_sliding_block_ids, *s_sliding_first_block, *s_num_tokens, *s_num_computed_tokens, *s_num_prompt_tokens,
    *s_prompt_array, *s_ensure_block_hashes, *s_zero;

static int KV_traverse(KV *kv, visitproc visit, void *arg) {
    Py_VISIT(kv->pool); Py_VISIT(kv->ensure); Py_VISIT(kv->no_block_ids);
    return 0;
}
static int KV_clear(KV *kv) {
    Py_CLEAR(kv->pool); Py_CLEAR(kv->ensure); Py_CLEAR(kv->no_block_ids);
    return 0;
}
static void KV_dealloc(KV *kv) {
    PyObject_GC_UnTrack(kv);
    KV_clear(kv);
    Py_TYPE(kv)->tp_free((PyObject *)kv);
}

static int KV_init(KV *kv, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"pool", "block_size", "max_model_len", "watermark_blocks", "enable_caching",
                             "ensure_block_hashes", "no_block_ids", NULL};
    PyObject *pool, *ensure, *nbi;
    int caching;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!nnnpOO", kwlist, &PoolType, &pool, &kv->block_size,
                                     &kv->max_model_len, &kv->watermark_blocks, &caching, &ensure, &nbi))
        return -1;
    if (kv->block_size < 1) { PyErr_SetString(PyExc_ValueError, "block_size < 1"); return -1; }
    Py_INCREF(pool); Py_XSETREF(kv->pool, (Pool *)pool);
    Py_INCREF(ensure); Py_XSETREF(kv->ensure, ensure);
    Py_INCREF(nbi); Py_XSETREF(kv->no_block_ids, nbi);
    kv->enable_caching = caching;
    kv->failed_need = 0;
    return 0;
}

static inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) { return -((-a) / b) - (((-a) % b) > 0 ? 1 : 0); }
/* (a >= 0 everywhere it is used: the usual (a + b - 1) / b) */
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* A request's fields read and written at their slots' offsets, as the interpreter's LOAD_ATTR_SLOT does, when it is
   exactly `engine.core.request.Request` (`bind_request_type`, called by engine.core.compiled_kv); any other object,
   or before the binding, through the generic attribute calls (~160 instructions each: the type's lookup and the
   descriptor's call, most of what these entry points cost, 2026-11-30g-steploop3.md). `num_tokens` and
   `num_computed_tokens` are Request properties: read here as they compute them while the fast path's columns do not
   hold the request (`_cols` None), else through the property. */
static PyTypeObject *req_type;
static Py_ssize_t off_block_ids, off_block_ids_head, off_block_hashes, off_num_cached_blocks, off_cache_chain,
    off_sliding_block_ids, off_sliding_first_block, off_num_prompt_tokens, off_prompt, off_output_ids, off_num_computed,
    off_cols, off_prompt_source;
static PyObject *s_prompt, *s_output_ids, *s_num_computed, *s_cols, *s_prompt_source;

static inline PyObject *req_get(PyObject *req, PyObject *name, Py_ssize_t off) {  /* new reference */
    if (Py_TYPE(req) == req_type) {
        PyObject *v = *(PyObject **)((char *)req + off);
        if (v) { Py_INCREF(v); return v; }
    }
    return PyObject_GetAttr(req, name);
}
static inline int req_set(PyObject *req, PyObject *name, Py_ssize_t off, PyObject *v) {
    if (Py_TYPE(req) == req_type) {
        PyObject **slot = (PyObject **)((char *)req + off);
        PyObject *old = *slot;
        Py_INCREF(v);
        *slot = v;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(req, name, v);
}
#define RGET(req, field) req_get((req), s_##field, off_##field)
#define RSET(req, field, v) req_set((req), s_##field, off_##field, (v))
/* A borrowed slot value, NULL where not bound or unset. */
static inline PyObject *req_slot(PyObject *req, Py_ssize_t off) {
    return Py_TYPE(req) == req_type ? *(PyObject **)((char *)req + off) : NULL;
}

static PyObject *mod_bind_request_type(PyObject *Py_UNUSED(m), PyObject *cls) {
    if (!PyType_Check(cls)) { PyErr_SetString(PyExc_TypeError, "bind_request_type: a class"); return NULL; }
    struct { PyObject *name; Py_ssize_t *off; } fields[] = {
        {s_block_ids, &off_block_ids}, {s_block_ids_head, &off_block_ids_head}, {s_block_hashes, &off_block_hashes},
        {s_num_cached_blocks, &off_num_cached_blocks}, {s_cache_chain, &off_cache_chain},
        {s_sliding_block_ids, &off_sliding_block_ids}, {s_sliding_first_block, &off_sliding_first_block},
        {s_num_prompt_tokens, &off_num_prompt_tokens}, {s_prompt, &off_prompt}, {s_output_ids, &off_output_ids},
        {s_num_computed, &off_num_computed}, {s_cols, &off_cols}, {s_prompt_source, &off_prompt_source},
    };
    /* (the offsets found first: a class refused leaves the type bound before, and its offsets, as they were) */
    Py_ssize_t offs[sizeof(fields) / sizeof(fields[0])];
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        offs[i] = member_slot_offset((PyTypeObject *)cls, fields[i].name, 0);
        if (offs[i] < 0) {
            PyErr_Format(PyExc_TypeError, "bind_request_type: no slot %R holding an object", fields[i].name);
            return NULL;
        }
    }
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) *fields[i].off = offs[i];
    Py_INCREF(cls);
    req_type = (PyTypeObject *)cls;
    Py_RETURN_NONE;
}

static Py_ssize_t ssize_of(PyObject *v) {  /* steals v */
    if (!v) return -1;
    Py_ssize_t r = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return r;
}

/* `req.num_tokens`, `req.num_computed_tokens` (Request's properties). */
static Py_ssize_t req_num_tokens(PyObject *req) {
    PyObject *outputs = req_slot(req, off_output_ids), *np = req_slot(req, off_num_prompt_tokens);
    if (req_slot(req, off_cols) == Py_None && outputs && PyList_CheckExact(outputs) && np && PyLong_CheckExact(np)) {
        Py_ssize_t n = PyLong_AsSsize_t(np);
        return n == -1 && PyErr_Occurred() ? -1 : n + PyList_GET_SIZE(outputs);
    }
    return ssize_of(PyObject_GetAttr(req, s_num_tokens));
}
static Py_ssize_t req_num_computed(PyObject *req) {
    PyObject *nc = req_slot(req, off_num_computed);
    if (req_slot(req, off_cols) == Py_None && nc && PyLong_CheckExact(nc)) return PyLong_AsSsize_t(nc);
    return ssize_of(PyObject_GetAttr(req, s_num_computed_tokens));
}

#define RGET_SSIZE(req, field) ssize_of(RGET(req, field))
static int req_set_ssize(PyObject *req, PyObject *name, Py_ssize_t off, Py_ssize_t value) {
    PyObject *v = PyLong_FromSsize_t(value);
    if (!v) return -1;
    int r = req_set(req, name, off, v);
    Py_DECREF(v);
    return r;
}
#define RSET_SSIZE(req, field, value) req_set_ssize((req), s_##field, off_##field, (value))

/* `KVCacheManager.ensure_block_hashes(req, n)`: the prompt's blocks hashed here (`hash_prompt_blocks`), the blocks
   of generated tokens past them by the Python method. */
static PyObject *load_lazy_prompt(PyObject *req);

static int kv_ensure(KV *kv, PyObject *req, Py_ssize_t n) {
    PyObject *hashes = RGET(req, block_hashes);
    if (!hashes) return -1;
    if (!PyList_Check(hashes)) { Py_DECREF(hashes); PyErr_SetString(PyExc_TypeError, "block_hashes: a list"); return -1; }
    Py_ssize_t have = PyList_GET_SIZE(hashes);
    if (have < n) {
        Py_ssize_t num_prompt = RGET_SSIZE(req, num_prompt_tokens);
        if (num_prompt == -1 && PyErr_Occurred()) { Py_DECREF(hashes); return -1; }
        Py_ssize_t num_prompt_blocks = num_prompt / kv->block_size;
        if (num_prompt_blocks > n) num_prompt_blocks = n;
        if (num_prompt_blocks > have) {
            PyObject *prompt = req_slot(req, off_prompt);
            if (prompt && prompt != Py_None) Py_INCREF(prompt);
            else prompt = load_lazy_prompt(req);  /* (a lazy request's prompt: `prompt_array`) */
            int rc = prompt ? hash_prompt_blocks(hashes, prompt, num_prompt_blocks, kv->block_size) : -1;
            Py_XDECREF(prompt);
            if (rc < 0) { Py_DECREF(hashes); return -1; }
            have = PyList_GET_SIZE(hashes);
        }
    }
    Py_DECREF(hashes);
    if (have >= n) return 0;
    PyObject *num = PyLong_FromSsize_t(n);
    if (!num) return -1;
    PyObject *r = PyObject_CallFunctionObjArgs(kv->ensure, (PyObject *)kv, req, num, NULL);
    Py_DECREF(num);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* `KVCacheManager._register`: req.block_ids[start:end] into its chain, a new lazy one if it has none. */
static int kv_register(KV *kv, PyObject *req, Py_ssize_t start, Py_ssize_t end) {
    PyObject *chain = RGET(req, cache_chain);
    if (!chain) return -1;
    PyObject *block_ids = RGET(req, block_ids);
    if (!block_ids) { Py_DECREF(chain); return -1; }
    int rc = -1;
    int64_t id;
    PyObject *hashes = NULL;
    if (chain == Py_None) {
        if (kv_ensure(kv, req, start + 1) < 0) goto done;
        hashes = RGET(req, block_hashes);
        if (!hashes) goto done;
        /* The hasher: this manager's ensure_block_hashes (bound), called with (req, n). */
        PyObject *bound = PyObject_GetAttr((PyObject *)kv, s_ensure_block_hashes);
        if (!bound) goto done;
        id = pool_new_chain(kv->pool, block_ids, hashes, start, bound, req);
        Py_DECREF(bound);
        if (id < 0) goto done;
        if (RSET_SSIZE(req, cache_chain, (Py_ssize_t)id) < 0) goto done;
        if (pool_register(kv->pool, id, block_ids, hashes, start, end) < 0) goto done;
    } else {
        id = as_i64(chain);
        if (id == -1 && PyErr_Occurred()) goto done;
        Chain *c = pool_chain(kv->pool, id);
        if (!c) goto done;
        if (pool_register(kv->pool, id, block_ids, c->block_hashes, start, end) < 0) goto done;
    }
    rc = 0;
done:
    Py_XDECREF(hashes);
    Py_DECREF(block_ids);
    Py_DECREF(chain);
    return rc;
}

/* `KVCacheManager.allocate`, without sliding groups. 1: allocated, 0: does not fit, -1: error. */
static int kv_allocate(KV *kv, PyObject *req, Py_ssize_t num_computed_tokens, Py_ssize_t num_tokens,
                       Py_ssize_t num_new_tokens, PyObject *hit_ids, int must_fit, int watermark) {
    Pool *pool = kv->pool;
    Py_ssize_t bs = kv->block_size;
    IdBuf hits;
    hits.v = NULL; hits.n = 0;
    if (hit_ids && idbuf_from(&hits, hit_ids, 0) < 0) return -1;
    for (Py_ssize_t i = 0; i < hits.n; i++) if (check_block(pool, hits.v[i]) < 0) { idbuf_free(&hits); return -1; }
    Py_ssize_t num_hit = hits.n;
    Py_ssize_t num_computed = num_computed_tokens + num_hit * bs;
    PyObject *block_ids = RGET(req, block_ids);
    if (!block_ids) { idbuf_free(&hits); return -1; }
    if (!PyList_Check(block_ids)) {
        PyErr_SetString(PyExc_TypeError, "Request.block_ids must be a list");
        goto fail;
    }
    Py_ssize_t num_held = PyList_GET_SIZE(block_ids) + num_hit;
    Py_ssize_t num_required_free = watermark ? kv->watermark_blocks : 0;
    for (Py_ssize_t i = 0; i < num_hit; i++) num_required_free += pool->ref_cnt[hits.v[i]] == 0;
    Py_ssize_t num_free = pool->num_free;
    if (must_fit) {
        Py_ssize_t num_full = num_tokens < kv->max_model_len ? num_tokens : kv->max_model_len;
        Py_ssize_t need = CEIL_DIV(num_full, bs) - num_held + num_required_free;
        if (need > num_free) { kv->failed_need = need; goto no; }
    }
    Py_ssize_t upto = num_computed + num_new_tokens;
    if (upto > kv->max_model_len) upto = kv->max_model_len;
    Py_ssize_t end_block = CEIL_DIV(upto, bs);
    Py_ssize_t num_to_allocate = end_block - num_held;
    if (num_to_allocate + num_required_free > num_free) {
        kv->failed_need = num_to_allocate + num_required_free;
        goto no;
    }
    if (num_hit) {
        pool_touch_ids(pool, hits.v, num_hit);
        if (append_blocks(pool, block_ids, hits.v, num_hit) < 0) goto fail;
        if (RSET_SSIZE(req, num_cached_blocks, num_hit) < 0) goto fail;
    }
    if (num_to_allocate > 0) {
        IdBuf fresh;
        if (idbuf_init(&fresh, num_to_allocate) < 0) goto fail;
        if (pool_take(pool, num_to_allocate, fresh.v) < 0) { idbuf_free(&fresh); goto fail; }
        int rc = append_blocks(pool, block_ids, fresh.v, num_to_allocate);
        idbuf_free(&fresh);
        if (rc < 0) goto fail;
    }
    if (kv->enable_caching) {
        /* Register blocks full of scheduled tokens; generated tokens not yet sampled are never cached. */
        Py_ssize_t full = num_computed + num_new_tokens < num_tokens ? num_computed + num_new_tokens : num_tokens;
        Py_ssize_t num_full_blocks = full / bs;
        Py_ssize_t num_cached = RGET_SSIZE(req, num_cached_blocks);
        if (num_cached == -1 && PyErr_Occurred()) goto fail;
        if (num_full_blocks > num_cached) {
            if (kv_register(kv, req, num_cached, num_full_blocks) < 0) goto fail;
            if (RSET_SSIZE(req, num_cached_blocks, num_full_blocks) < 0) goto fail;
        }
    }
    Py_DECREF(block_ids);
    idbuf_free(&hits);
    return 1;
no:
    Py_DECREF(block_ids);
    idbuf_free(&hits);
    return 0;
fail:
    Py_DECREF(block_ids);
    idbuf_free(&hits);
    return -1;
}

static PyObject *KV_allocate(KV *kv, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"req", "num_computed_tokens", "num_tokens", "num_new_tokens", "hit_ids",
                             "full_sequence_must_fit", "apply_watermark", NULL};
    PyObject *req, *hits = NULL;
    Py_ssize_t nc, nt, nn;
    int must_fit = 0, watermark = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Onnn|Opp", kwlist, &req, &nc, &nt, &nn, &hits, &must_fit, &watermark))
        return NULL;
    int r = kv_allocate(kv, req, nc, nt, nn, hits, must_fit, watermark);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

/* `KVCacheManager.allocate_slots`: 1 allocated, 0 does not fit, -1 error. */
static int kv_allocate_slots(KV *kv, PyObject *req, Py_ssize_t nn, PyObject *hits, int must_fit, int watermark) {
    Py_ssize_t nc = req_num_computed(req);
    if (nc == -1 && PyErr_Occurred()) return -1;
    Py_ssize_t bs = kv->block_size;
    int has_hits = 0;
    if (hits) {
        has_hits = PyObject_IsTrue(hits);
        if (has_hits < 0) return -1;
    }
    if (nn == 1 && nc % bs > 0 && nc % bs < bs - 1 && !(has_hits || must_fit || watermark))
        return 1;  /* the common decode: its slot is in the last block held, which it does not fill */
    Py_ssize_t nt = req_num_tokens(req);
    if (nt == -1 && PyErr_Occurred()) return -1;
    return kv_allocate(kv, req, nc, nt, nn, has_hits ? hits : NULL, must_fit, watermark);
}

static PyObject *KV_allocate_slots(KV *kv, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"req", "num_new_tokens", "new_computed_block_ids", "full_sequence_must_fit",
                             "apply_watermark", NULL};
    PyObject *req, *hits = NULL;
    Py_ssize_t nn;
    int must_fit = 0, watermark = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On|Opp", kwlist, &req, &nn, &hits, &must_fit, &watermark))
        return NULL;
    int r = kv_allocate_slots(kv, req, nn, hits, must_fit, watermark);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

/* `KVCacheManager.allocate_decode_slots`: a new block for each of opening[0..n) (in order), and the block each of
   filling[0..m) fills registered (in order). */
static int kv_decode_slots(KV *kv, PyObject *const *opening, Py_ssize_t n, PyObject *const *filling, Py_ssize_t m) {
    Pool *pool = kv->pool;
    if (n) {
        IdBuf fresh;
        if (idbuf_init(&fresh, n) < 0) return -1;
        if (pool_take(pool, n, fresh.v) < 0) { idbuf_free(&fresh); return -1; }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *ids = RGET(opening[i], block_ids);
            PyObject *o = ids ? block_obj(pool, fresh.v[i]) : NULL;
            int rc = o ? PyList_Append(ids, o) : -1;
            Py_XDECREF(o); Py_XDECREF(ids);
            if (rc < 0) { idbuf_free(&fresh); return -1; }
        }
        idbuf_free(&fresh);
    }
    /* Each fill registers one block at the end of its request's chain, the orders in queue order (what
       `register_ends` of the pending run and `_register` of a new chain give, one after the other). */
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *req = filling[i];
        Py_ssize_t k = RGET_SSIZE(req, num_cached_blocks);
        if (k == -1 && PyErr_Occurred()) return -1;
        if (kv_register(kv, req, k, k + 1) < 0 || RSET_SSIZE(req, num_cached_blocks, k + 1) < 0) return -1;
    }
    return 0;
}

static PyObject *KV_allocate_decode_slots(KV *kv, PyObject *args) {
    PyObject *opening, *filling, *o = NULL, *f = NULL;
    if (!PyArg_ParseTuple(args, "OO", &opening, &filling)) return NULL;
    if (!(o = PySequence_Fast(opening, "opening: an iterable of requests"))) return NULL;
    if (filling != Py_None && !(f = PySequence_Fast(filling, "filling: an iterable of requests"))) {
        Py_DECREF(o);
        return NULL;
    }
    int rc = kv_decode_slots(kv, PySequence_Fast_ITEMS(o), PySequence_Fast_GET_SIZE(o),
                             f ? PySequence_Fast_ITEMS(f) : NULL, f ? PySequence_Fast_GET_SIZE(f) : 0);
    Py_DECREF(o);
    Py_XDECREF(f);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *KV_free(KV *kv, PyObject *req) {
    Pool *pool = kv->pool;
    PyObject *ids = RGET(req, block_ids);
    if (!ids) return NULL;
    IdBuf b;
    if (idbuf_from(&b, ids, 1) < 0) { Py_DECREF(ids); return NULL; }  /* last block first */
    Py_DECREF(ids);
    Py_ssize_t nc = RGET_SSIZE(req, num_cached_blocks);
    if (nc == -1 && PyErr_Occurred()) { idbuf_free(&b); return NULL; }
    /* Its first num_cached_blocks blocks are in the prefix cache (registered, or hits), the others not. */
    int rc = pool_free_ids(pool, b.v, b.n, b.n - nc);
    idbuf_free(&b);
    if (rc < 0) return NULL;
    PyObject *empty = PyList_New(0);
    if (!empty || RSET(req, block_ids, empty) < 0) { Py_XDECREF(empty); return NULL; }
    Py_DECREF(empty);
    if (RSET(req, block_ids_head, kv->no_block_ids) < 0) return NULL;
    if (RSET(req, num_cached_blocks, s_zero) < 0) return NULL;
    PyObject *sliding = RGET(req, sliding_block_ids);
    if (!sliding) return NULL;
    Py_ssize_t ns = PyObject_Length(sliding);
    if (ns > 0) {
        if (idbuf_from(&b, sliding, 1) < 0) { Py_DECREF(sliding); return NULL; }
        rc = pool_free_ids(pool, b.v, b.n, -1);
        idbuf_free(&b);
        if (rc < 0) { Py_DECREF(sliding); return NULL; }
        empty = PyList_New(0);
        if (!empty || RSET(req, sliding_block_ids, empty) < 0) {
            Py_XDECREF(empty); Py_DECREF(sliding); return NULL;
        }
        Py_DECREF(empty);
    }
    Py_DECREF(sliding);
    if (ns < 0) return NULL;
    if (RSET(req, sliding_first_block, s_zero) < 0) return NULL;
    PyObject *chain = RGET(req, cache_chain);
    if (!chain) return NULL;
    if (chain != Py_None) {
        int64_t id = as_i64(chain);
        if (id == -1 && PyErr_Occurred()) { Py_DECREF(chain); return NULL; }
        if (id > 0 && id < pool->chains_cap && pool->chains[id]) pool->chains[id]->closed = 1;
        if (RSET(req, cache_chain, Py_None) < 0) { Py_DECREF(chain); return NULL; }
    }
    Py_DECREF(chain);
    Py_RETURN_NONE;
}

static PyObject *KV_ensure_block_hashes(KV *kv, PyObject *args) {
    PyObject *req;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &req, &n)) return NULL;
    if (kv_ensure(kv, req, n) < 0) return NULL;
    Py_RETURN_NONE;
}

/* `KVCacheManager.get_computed_blocks(req)`: 0 and *hits NULL without a hit, else 1 with *hits a new list of the hit
   block ids (maybe empty); -1 on error. */
static int kv_lookup(KV *kv, PyObject *req, PyObject **hits) {
    *hits = NULL;
    if (!kv->enable_caching) return 0;
    Py_ssize_t nt = req_num_tokens(req);
    if (nt == -1 && PyErr_Occurred()) return -1;
    Py_ssize_t max_num_blocks = (nt - 1) / kv->block_size;
    if (nt - 1 < 0 || max_num_blocks <= 0) return 0;
    /* A hit starts at the first block: the rest of the request is hashed only if some chain starts there. */
    if (kv_ensure(kv, req, 1) < 0) return -1;
    PyObject *hashes = RGET(req, block_hashes);
    if (!hashes) return -1;
    if (!PyList_Check(hashes) || PyList_GET_SIZE(hashes) < 1) {
        Py_DECREF(hashes);
        PyErr_SetString(PyExc_AssertionError, "ensure_block_hashes gave no first hash");
        return -1;
    }
    int hit = PyDict_Contains(kv->pool->starts, PyList_GET_ITEM(hashes, 0));
    Py_DECREF(hashes);
    if (hit <= 0) return hit;
    if (kv_ensure(kv, req, max_num_blocks) < 0) return -1;
    hashes = RGET(req, block_hashes);
    if (!hashes) return -1;
    *hits = pool_find_hit(kv->pool, hashes, max_num_blocks);
    Py_DECREF(hashes);
    return *hits ? 1 : -1;
}

static PyObject *KV_get_computed_blocks(KV *kv, PyObject *req) {
    PyObject *hits;
    int r = kv_lookup(kv, req, &hits);
    if (r < 0) return NULL;
    if (!r) return Py_BuildValue("([]i)", 0);
    return Py_BuildValue("(Nn)", hits, PyList_GET_SIZE(hits) * kv->block_size);
}

static PyObject *KV_get_num_free(KV *kv, void *c) { return PyLong_FromSsize_t(kv->pool->num_free); }
static PyObject *KV_get_num_used(KV *kv, void *c) {
    return PyLong_FromSsize_t(kv->pool->num_blocks - 1 - kv->pool->num_free);
}
static PyObject *KV_get_num_usable(KV *kv, void *c) { return PyLong_FromSsize_t(kv->pool->num_blocks - 1); }
static PyObject *KV_get_pool(KV *kv, void *c) {
    if (!kv->pool) Py_RETURN_NONE;
    Py_INCREF(kv->pool);
    return (PyObject *)kv->pool;
}
static PyObject *KV_get_enable_caching(KV *kv, void *c) { return PyBool_FromLong(kv->enable_caching); }

static PyMethodDef KV_methods[] = {
    {"allocate", (PyCFunction)(void (*)(void))KV_allocate, METH_VARARGS | METH_KEYWORDS,
     "`KVCacheManager.allocate` (no sliding groups)."},
    {"allocate_slots", (PyCFunction)(void (*)(void))KV_allocate_slots, METH_VARARGS | METH_KEYWORDS,
     "`KVCacheManager.allocate_slots` (no sliding groups)."},
    {"allocate_decode_slots", (PyCFunction)KV_allocate_decode_slots, METH_VARARGS,
     "`KVCacheManager.allocate_decode_slots`."},
    {"free", (PyCFunction)KV_free, METH_O, "`KVCacheManager.free`."},
    {"get_computed_blocks", (PyCFunction)KV_get_computed_blocks, METH_O, "`KVCacheManager.get_computed_blocks`."},
    {"ensure_block_hashes", (PyCFunction)KV_ensure_block_hashes, METH_VARARGS,
     "`KVCacheManager.ensure_block_hashes`: the prompt's blocks hashed in C, the rest by the Python method."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef KV_getset[] = {
    {"num_free_blocks", (getter)KV_get_num_free, NULL, NULL, NULL},
    {"num_used_blocks", (getter)KV_get_num_used, NULL, NULL, NULL},
    {"num_usable_blocks", (getter)KV_get_num_usable, NULL, NULL, NULL},
    {"pool", (getter)KV_get_pool, NULL, NULL, NULL},
    {"enable_caching", (getter)KV_get_enable_caching, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef KV_members[] = {
    {"block_size", T_PYSSIZET, offsetof(KV, block_size), READONLY, NULL},
    {"max_model_len", T_PYSSIZET, offsetof(KV, max_model_len), READONLY, NULL},
    {"watermark_blocks", T_PYSSIZET, offsetof(KV, watermark_blocks), READONLY, NULL},
    {"failed_need", T_PYSSIZET, offsetof(KV, failed_need), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject KVType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.KVCacheManagerCore",
    .tp_basicsize = sizeof(KV),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled KV cache manager's hot operations (engine.core.compiled_kv.CompiledKVCacheManager).",
    .tp_traverse = (traverseproc)KV_traverse,
    .tp_clear = (inquiry)KV_clear,
    .tp_dealloc = (destructor)KV_dealloc,
    .tp_init = (initproc)KV_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = KV_methods,
    .tp_getset = KV_getset,
    .tp_members = KV_members,
};

/* ---- the scheduler's fast path: its columns' state in C (engine.core.compiled_fast) ----

   `ColumnsCore` holds `engine.core.fast_path.RunningColumns`' state as C fields (the rows of a period indexed by
   `_col_seq`; each phase's decoders as a list linked in queue order; the stops as a heap on (update count, seq))
   and its operations, with their results; `FastPathCore` runs `FastPath.schedule_running` and `FastPath.update` in
   C in the common case (a period without prefill rows, every running request a decoder and the free blocks covering
   the step; every admission sampling its token) and calls the Python methods, on the same C columns, for every
   other case. The Python classes stay the reference (tests/test_core_properties.py compares them step by step). */

typedef struct {
    PyObject *req;          /* owned while the row is held (joined, not yet detached) */
    Py_ssize_t prev, next;  /* the phase's list, in seq order */
    int64_t stop;           /* the update count of its stop while a decoder */
    char in_phase;          /* a decoder */
} Row;

typedef struct { int64_t stop; Py_ssize_t seq; } StopEntry;

typedef struct {
    PyObject_HEAD
    PyObject *reqs, *token, *times, *times_array, *off, *seq, *ids, *prefills;
    Py_ssize_t block_size, num_updates, num_joined, num_decoders;
    long long off_sum;
    char scheduled, times_complete;
    double *times_data;
    Py_ssize_t times_cap;
    Row *rows;
    Py_ssize_t rows_cap;
    Py_ssize_t *head, *tail, *count;  /* by phase */
    StopEntry *heap;
    Py_ssize_t heap_n, heap_cap;
} Cols;

static PyTypeObject ColsType;

/* Offsets of the slots the fast path reads and writes (`bind_fast_path_types`); generic attribute calls where the
   object is not exactly the bound class. */
static PyTypeObject *plan_type, *colrows_type;
static Py_ssize_t off_col_off, off_col_seq, off_request_id, off_max_num_tokens, off_stop_token_set, off_token_times,
    off_times_array;
static Py_ssize_t off_p_preempted_request_ids, off_p_requests, off_p_columns, off_p_bulk_context_sum, off_p_bulk_decodes, off_p_num_batched_tokens,
    off_p_num_prefill_tokens, off_p_num_decode_tokens, off_p_emits, off_p_num_emitting_seqs, off_p_num_seqs;
static Py_ssize_t off_cr_off, off_cr_num_updates, off_cr_block_size, off_cr_prefill_rows, off_cr_seq, off_cr_ids;
static PyObject *s_col_off, *s_col_seq, *s_request_id, *s_max_num_tokens, *s_stop_token_set, *s_token_times,
    *s_times_array, *s_requests, *s_columns, *s_bulk_context_sum, *s_bulk_decodes, *s_num_batched_tokens,
    *s_num_prefill_tokens, *s_num_decode_tokens, *s_emits, *s_num_emitting_seqs, *s_num_seqs, *s_running, *s_num_running_without_output,
    *s_finish_request, *s_grow_times, *s_remove, *s_preempted_request_ids, *s_preempt_request;

static inline PyObject *obj_get(PyObject *o, PyTypeObject *t, Py_ssize_t off, PyObject *name) {  /* new ref */
    if (t && Py_TYPE(o) == t) {
        PyObject *v = *(PyObject **)((char *)o + off);
        if (v) { Py_INCREF(v); return v; }
    }
    return PyObject_GetAttr(o, name);
}
static inline int obj_set(PyObject *o, PyTypeObject *t, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (t && Py_TYPE(o) == t) {
        PyObject **slot = (PyObject **)((char *)o + off);
        PyObject *old = *slot;
        Py_INCREF(v);
        *slot = v;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(o, name, v);
}
/* Steals v. */
static inline int obj_set_new(PyObject *o, PyTypeObject *t, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (!v) return -1;
    int rc = obj_set(o, t, off, name, v);
    Py_DECREF(v);
    return rc;
}
#define FGET(req, field) obj_get((req), req_type, off_##field, s_##field)
#define FSET(req, field, v) obj_set((req), req_type, off_##field, s_##field, (v))
#define FSET_NEW(req, field, v) obj_set_new((req), req_type, off_##field, s_##field, (v))
#define PSET_NEW(plan, field, v) obj_set_new((plan), plan_type, off_p_##field, s_##field, (v))

static int slot_offset(PyTypeObject *cls, PyObject *name, Py_ssize_t *off) {
    if ((*off = member_slot_offset(cls, name, 0)) < 0) {
        PyErr_Format(PyExc_TypeError, "bind_fast_path_types: %s has no slot %R holding an object", cls->tp_name, name);
        return -1;
    }
    return 0;
}

static PyObject *status_stopped, *status_capped;

static PyObject *mod_bind_fast_path_types(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *req_cls, *plan_cls, *rows_cls, *stopped, *capped;
    if (!PyArg_ParseTuple(args, "O!O!O!OO", &PyType_Type, &req_cls, &PyType_Type, &plan_cls, &PyType_Type, &rows_cls,
                          &stopped, &capped))
        return NULL;
    if ((PyTypeObject *)req_cls != req_type) {
        PyErr_SetString(PyExc_TypeError, "bind_fast_path_types: the request class must be bind_request_type's");
        return NULL;
    }
    if (((PyTypeObject *)rows_cls)->tp_dictoffset || ((PyTypeObject *)rows_cls)->tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "bind_fast_path_types: the rows class must have slots only");
        return NULL;
    }
    struct { PyTypeObject *cls; PyObject *name; Py_ssize_t *off; } fields[] = {
        {req_type, s_col_off, &off_col_off}, {req_type, s_col_seq, &off_col_seq},
        {req_type, s_request_id, &off_request_id}, {req_type, s_max_num_tokens, &off_max_num_tokens},
        {req_type, s_stop_token_set, &off_stop_token_set}, {req_type, s_token_times, &off_token_times},
        {req_type, s_times_array, &off_times_array},
        {(PyTypeObject *)plan_cls, s_preempted_request_ids, &off_p_preempted_request_ids},
        {(PyTypeObject *)plan_cls, s_requests, &off_p_requests}, {(PyTypeObject *)plan_cls, s_columns, &off_p_columns},
        {(PyTypeObject *)plan_cls, s_bulk_context_sum, &off_p_bulk_context_sum},
        {(PyTypeObject *)plan_cls, s_bulk_decodes, &off_p_bulk_decodes},
        {(PyTypeObject *)plan_cls, s_num_batched_tokens, &off_p_num_batched_tokens},
        {(PyTypeObject *)plan_cls, s_num_prefill_tokens, &off_p_num_prefill_tokens},
        {(PyTypeObject *)plan_cls, s_num_decode_tokens, &off_p_num_decode_tokens},
        {(PyTypeObject *)plan_cls, s_emits, &off_p_emits},
        {(PyTypeObject *)plan_cls, s_num_emitting_seqs, &off_p_num_emitting_seqs},
        {(PyTypeObject *)plan_cls, s_num_seqs, &off_p_num_seqs},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (slot_offset(fields[i].cls, fields[i].name, fields[i].off) < 0) return NULL;
    const char *row_names[] = {"off", "num_updates", "block_size", "prefill_rows", "seq", "ids"};
    Py_ssize_t *row_offs[] = {&off_cr_off, &off_cr_num_updates, &off_cr_block_size, &off_cr_prefill_rows, &off_cr_seq,
                              &off_cr_ids};
    for (int i = 0; i < 6; i++) {
        PyObject *name = PyUnicode_InternFromString(row_names[i]);
        int rc = name ? slot_offset((PyTypeObject *)rows_cls, name, row_offs[i]) : -1;
        Py_XDECREF(name);
        if (rc < 0) return NULL;
    }
    Py_INCREF(plan_cls); Py_XSETREF(plan_type, (PyTypeObject *)plan_cls);
    Py_INCREF(rows_cls); Py_XSETREF(colrows_type, (PyTypeObject *)rows_cls);
    Py_INCREF(stopped); Py_XSETREF(status_stopped, stopped);
    Py_INCREF(capped); Py_XSETREF(status_capped, capped);
    Py_RETURN_NONE;
}

/* `max(off) + delta`, called by a plan for its longest decode context (`RunningColumns.longest_context`). */
typedef struct { PyObject_HEAD PyObject *off; Py_ssize_t delta; } MaxPlus;
static PyTypeObject MaxPlusType;
static void MaxPlus_dealloc(MaxPlus *m) { Py_XDECREF(m->off); Py_TYPE(m)->tp_free((PyObject *)m); }
static PyObject *MaxPlus_call(MaxPlus *m, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "takes no arguments");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(m->off);
    if (!n) { PyErr_SetString(PyExc_ValueError, "max() arg is an empty sequence"); return NULL; }
    int64_t best = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v = as_i64(PyList_GET_ITEM(m->off, i));
        if (v == -1 && PyErr_Occurred()) return NULL;
        if (v > best) best = v;
    }
    return PyLong_FromLongLong(best + m->delta);
}
static PyTypeObject MaxPlusType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.MaxPlus",
    .tp_basicsize = sizeof(MaxPlus),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "max(off) + delta of a list of ints (a plan's longest decode context).",
    .tp_dealloc = (destructor)MaxPlus_dealloc,
    .tp_call = (ternaryfunc)MaxPlus_call,
};
static PyObject *maxplus_new(PyObject *off, Py_ssize_t delta) {
    MaxPlus *m = PyObject_New(MaxPlus, &MaxPlusType);
    if (!m) return NULL;
    Py_INCREF(off);
    m->off = off;
    m->delta = delta;
    return (PyObject *)m;
}

static inline Py_ssize_t phase_of(int64_t off, Py_ssize_t bs) {
    Py_ssize_t p = (Py_ssize_t)(off % bs);
    return p < 0 ? p + bs : p;
}

static int Cols_traverse(Cols *c, visitproc visit, void *arg) {
    Py_VISIT(c->reqs); Py_VISIT(c->token); Py_VISIT(c->times); Py_VISIT(c->times_array);
    Py_VISIT(c->off); Py_VISIT(c->seq); Py_VISIT(c->ids); Py_VISIT(c->prefills);
    for (Py_ssize_t i = 0; i < c->num_joined; i++) Py_VISIT(c->rows[i].req);
    return 0;
}
static int Cols_clear(Cols *c) {
    Py_CLEAR(c->reqs); Py_CLEAR(c->token); Py_CLEAR(c->times); Py_CLEAR(c->times_array);
    Py_CLEAR(c->off); Py_CLEAR(c->seq); Py_CLEAR(c->ids); Py_CLEAR(c->prefills);
    c->times_data = NULL; c->times_cap = 0;
    for (Py_ssize_t i = 0; i < c->num_joined; i++) Py_CLEAR(c->rows[i].req);
    return 0;
}
static void Cols_dealloc(Cols *c) {
    PyObject_GC_UnTrack(c);
    Cols_clear(c);
    PyMem_Free(c->rows); PyMem_Free(c->head); PyMem_Free(c->tail); PyMem_Free(c->count); PyMem_Free(c->heap);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* Point times_data at `arr` (a C-contiguous float64 array) and hold it. */
static int cols_set_times_array(Cols *c, PyObject *arr) {
    Py_buffer view;
    if (PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    int ok = view.itemsize == 8 && view.format && strcmp(view.format, "d") == 0 && view.ndim == 1;
    double *data = (double *)view.buf;
    Py_ssize_t n = view.len / 8;
    PyBuffer_Release(&view);  /* (the array is held: its data stays where it is) */
    if (!ok) { PyErr_SetString(PyExc_TypeError, "times_array: a 1-d float64 array"); return -1; }
    Py_INCREF(arr);
    Py_XSETREF(c->times_array, arr);
    c->times_data = data;
    c->times_cap = n;
    return 0;
}

static int Cols_init(Cols *c, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"reqs", "token", "block_size", "times_array", NULL};
    PyObject *reqs, *token, *arr;
    Py_ssize_t bs;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OnO", kwlist, &PyList_Type, &reqs, &token, &bs, &arr)) return -1;
    if (bs < 1) { PyErr_SetString(PyExc_ValueError, "block_size < 1"); return -1; }
    if (c->head) { PyErr_SetString(PyExc_RuntimeError, "ColumnsCore is initialized once"); return -1; }
    if (cols_set_times_array(c, arr) < 0) return -1;
    Py_INCREF(reqs); c->reqs = reqs;
    Py_INCREF(token); c->token = token;
    if (!(c->times = PyList_New(0)) || !(c->off = PyList_New(0)) || !(c->seq = PyList_New(0))
            || !(c->ids = PyList_New(0)) || !(c->prefills = PyList_New(0)))
        return -1;
    c->block_size = bs;
    c->times_complete = 1;
    c->head = PyMem_Malloc(bs * sizeof(Py_ssize_t));
    c->tail = PyMem_Malloc(bs * sizeof(Py_ssize_t));
    c->count = PyMem_Calloc(bs, sizeof(Py_ssize_t));
    if (!c->head || !c->tail || !c->count) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < bs; i++) c->head[i] = c->tail[i] = -1;
    return 0;
}

/* The row of `req` (its `_col_seq`), checked to be held by it; -1 with an exception if not. */
static Py_ssize_t cols_row(Cols *c, PyObject *req) {
    PyObject *o = FGET(req, col_seq);
    if (!o) return -1;
    Py_ssize_t s = PyLong_AsSsize_t(o);
    Py_DECREF(o);
    if (s == -1 && PyErr_Occurred()) return -1;
    if (s < 0 || s >= c->num_joined || c->rows[s].req != req) {
        PyErr_Format(PyExc_AssertionError, "request %R holds no row of these columns", req);
        return -1;
    }
    return s;
}

/* `req._col_off`: 1 with *off set, 0 when None (a prefill), -1 on error. */
static int col_off_of(PyObject *req, int64_t *off) {
    PyObject *o = FGET(req, col_off);
    if (!o) return -1;
    if (o == Py_None) { Py_DECREF(o); return 0; }
    *off = as_i64(o);
    Py_DECREF(o);
    return *off == -1 && PyErr_Occurred() ? -1 : 1;
}

static int cols_join(Cols *c, PyObject *const *reqs, Py_ssize_t n) {
    if (c->num_joined + n > c->rows_cap) {
        Py_ssize_t cap = c->rows_cap ? c->rows_cap : 256;
        while (cap < c->num_joined + n) cap *= 2;
        Row *rows = PyMem_Realloc(c->rows, cap * sizeof(Row));
        if (!rows) { PyErr_NoMemory(); return -1; }
        c->rows = rows;
        c->rows_cap = cap;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = reqs[i];
        PyObject *rid = FGET(r, request_id);
        if (!rid) return -1;
        int rc = PyList_Append(c->ids, rid);
        Py_DECREF(rid);
        if (rc < 0 || FSET(r, cols, (PyObject *)c) < 0 || FSET(r, col_off, Py_None) < 0
                || FSET_NEW(r, col_seq, PyLong_FromSsize_t(c->num_joined)) < 0)
            return -1;
        Row *row = &c->rows[c->num_joined++];
        Py_INCREF(r);
        row->req = r;
        row->prev = row->next = -1;
        row->stop = 0;
        row->in_phase = 0;
    }
    return 0;
}

static int heap_push(Cols *c, int64_t stop, Py_ssize_t seq) {
    if (c->heap_n == c->heap_cap) {
        Py_ssize_t cap = c->heap_cap ? 2 * c->heap_cap : 256;
        StopEntry *h = PyMem_Realloc(c->heap, cap * sizeof(StopEntry));
        if (!h) { PyErr_NoMemory(); return -1; }
        c->heap = h;
        c->heap_cap = cap;
    }
    StopEntry *h = c->heap, e = {stop, seq};
    Py_ssize_t i = c->heap_n++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (h[p].stop < stop || (h[p].stop == stop && h[p].seq < seq)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
    return 0;
}
static void heap_pop(Cols *c) {
    StopEntry *h = c->heap, last = h[--c->heap_n];
    Py_ssize_t n = c->heap_n, i = 0;
    if (!n) return;
    for (;;) {
        Py_ssize_t l = 2 * i + 1, best = i;
        StopEntry b = last;
        if (l < n && (h[l].stop < b.stop || (h[l].stop == b.stop && h[l].seq < b.seq))) { best = l; b = h[l]; }
        if (l + 1 < n && (h[l + 1].stop < b.stop || (h[l + 1].stop == b.stop && h[l + 1].seq < b.seq))) best = l + 1;
        if (best == i) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = last;
}

/* `RunningColumns.add_decoder` (row s of req). */
static int cols_add_decoder(Cols *c, Py_ssize_t s, PyObject *req, int64_t off) {
    PyObject *mt = FGET(req, max_num_tokens);
    if (!mt) return -1;
    int64_t max_num_tokens = as_i64(mt);
    Py_DECREF(mt);
    if (max_num_tokens == -1 && PyErr_Occurred()) return -1;
    if (FSET_NEW(req, col_off, PyLong_FromLongLong(off)) < 0) return -1;
    Row *rows = c->rows, *row = &rows[s];
    Py_ssize_t p = phase_of(off, c->block_size);
    /* In seq order: after the last row of its phase with a smaller seq (its tail, unless it joined before a decoder
       of its phase but decodes after it: a prompt chunk). */
    Py_ssize_t after = c->tail[p];
    while (after >= 0 && after > s) after = rows[after].prev;
    row->prev = after;
    row->next = after >= 0 ? rows[after].next : c->head[p];
    if (row->next >= 0) rows[row->next].prev = s; else c->tail[p] = s;
    if (after >= 0) rows[after].next = s; else c->head[p] = s;
    c->count[p]++;
    row->in_phase = 1;
    row->stop = max_num_tokens - off;
    if (heap_push(c, row->stop, s) < 0) return -1;
    c->num_decoders++;
    c->off_sum += off;
    return 0;
}

/* Forget decoder row s (`RunningColumns.remove`; its heap entry goes stale). */
static void cols_unlink(Cols *c, Py_ssize_t s, int64_t off) {
    Row *rows = c->rows, *row = &rows[s];
    Py_ssize_t p = phase_of(off, c->block_size);
    if (row->prev >= 0) rows[row->prev].next = row->next; else c->head[p] = row->next;
    if (row->next >= 0) rows[row->next].prev = row->prev; else c->tail[p] = row->prev;
    c->count[p]--;
    row->in_phase = 0;
    c->num_decoders--;
    c->off_sum -= off;
}

static int cols_remove(Cols *c, PyObject *req) {
    Py_ssize_t s = cols_row(c, req);
    if (s < 0) return -1;
    int64_t off;
    int has = col_off_of(req, &off);
    if (has < 0) return -1;
    if (!has) {
        PyObject *r = PyObject_CallMethodOneArg(c->prefills, s_remove, req);
        if (!r) return -1;
        Py_DECREF(r);
        return 0;
    }
    if (c->rows[s].in_phase) cols_unlink(c, s, off);
    return 0;
}

/* Append to the list l (exactly a list) n items: src[0..n), or n times `one` where src is NULL; one resize of its
   item array (PyMem_Realloc, as the list's own resize), not a temporary list and a slice assignment. */
static int list_append_n(PyObject *l, PyObject *const *src, PyObject *one, Py_ssize_t n) {
    if (!PyList_CheckExact(l)) { PyErr_SetString(PyExc_TypeError, "list_append_n: a list"); return -1; }
    PyListObject *lst = (PyListObject *)l;
    Py_ssize_t len = Py_SIZE(l), need = len + n;
    if (need > lst->allocated) {
        Py_ssize_t cap = need + (need >> 3) + 6;
        PyObject **items = PyMem_Realloc(lst->ob_item, cap * sizeof(PyObject *));
        if (!items) { PyErr_NoMemory(); return -1; }
        lst->ob_item = items;
        lst->allocated = cap;
    }
    PyObject **dst = lst->ob_item + len;
    if (src)
        for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(src[i]); dst[i] = src[i]; }
    else
        for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(one); dst[i] = one; }
    Py_SET_SIZE(l, need);
    return 0;
}

/* `RunningColumns.materialize`. */
static int cols_materialize(Cols *c, PyObject *req) {
    int64_t off;
    int has = col_off_of(req, &off);
    if (has <= 0) return has;
    PyObject *outputs = FGET(req, output_ids), *times = NULL;
    if (!outputs) return -1;
    int rc = -1;
    if (!PyList_Check(outputs)) { PyErr_SetString(PyExc_TypeError, "_output_ids: a list"); goto done; }
    Py_ssize_t num_prompt = RGET_SSIZE(req, num_prompt_tokens);
    if (num_prompt == -1 && PyErr_Occurred()) goto done;
    Py_ssize_t missing = (Py_ssize_t)(off + c->num_updates) - num_prompt - PyList_GET_SIZE(outputs);
    if (missing <= 0) { rc = 0; goto done; }
    Py_ssize_t nt = PyList_GET_SIZE(c->times);
    if (missing > nt) { PyErr_SetString(PyExc_AssertionError, "materialize: more tokens than updates"); goto done; }
    if (list_append_n(outputs, NULL, c->token, missing) < 0) goto done;  /* outputs.extend([token] * missing) */
    if (!(times = FGET(req, token_times))) goto done;
    if (!PyList_Check(times)) { PyErr_SetString(PyExc_TypeError, "_token_times: a list"); goto done; }
    if (c->times_complete) {
        if (!PyList_GET_SIZE(times)) {
            PyObject *view = PySequence_GetSlice(c->times_array, c->num_updates - missing, c->num_updates);
            if (!view || FSET_NEW(req, times_array, view) < 0) goto done;
        }
        if (list_append_n(times, &PyList_GET_ITEM(c->times, nt - missing), NULL, missing) < 0) goto done;
    } else {
        for (Py_ssize_t i = nt - missing; i < nt; i++) {
            PyObject *t = PyList_GET_ITEM(c->times, i);
            if (t != Py_None && PyList_Append(times, t) < 0) goto done;
        }
    }
    rc = 0;
done:
    Py_XDECREF(times);
    Py_DECREF(outputs);
    return rc;
}

static PyObject *cols_num_computed_of(Cols *c, PyObject *req) {
    int64_t off;
    int has = col_off_of(req, &off);
    if (has < 0) return NULL;
    if (!has) return FGET(req, num_computed);
    return PyLong_FromLongLong(off + c->num_updates - !c->scheduled);
}

static int cols_detach(Cols *c, PyObject *req) {
    Py_ssize_t s = cols_row(c, req);
    if (s < 0 || cols_materialize(c, req) < 0) return -1;
    if (FSET_NEW(req, num_computed, cols_num_computed_of(c, req)) < 0) return -1;
    if (FSET(req, cols, Py_None) < 0 || FSET(req, col_off, Py_None) < 0) return -1;
    if (!c->rows[s].in_phase) Py_CLEAR(c->rows[s].req);  /* (a decoder's stays linked until the columns go) */
    return 0;
}

/* ---- a finished request's last tokens, made when first read (`FinishedTokens`) ----

   A request that finishes while the columns hold its counters (`FastPath.update`'s stopping rows) is detached as
   `cols_detach` does it, except that its last generated tokens and their times, which `materialize` would append
   to its lists (hundreds of references each, dropped again when the simulator has recorded it), are not written
   yet: `_cols` holds a `FinishedTokens` of them, which implements what `Request` asks of a `ColumnStorage`
   (engine/core/request.py): `num_computed_of` (the request's own `_num_computed`, set as `cols_detach` sets it),
   `num_tokens_of` (its prompt, its written outputs and the unwritten ones) and `materialize` (the lists written as
   `cols_materialize` would have written them: `missing` times the token, the times as floats of the same values,
   `_times_array` the same view of the columns' times; then `_cols` None). Every property of the request reads the
   same values as before. Where the times are not all known (`times_complete` false) or the request already holds
   times of its own, the detach materializes at once, as before. The simulator's recorder reads `missing` and
   `times` (the float64 view) without writing the lists (roofline/sim/_simcore.c `Finisher`). */
typedef struct {
    PyObject_HEAD
    PyObject *token, *times;  /* the sampled token; the float64 view of the unwritten tokens' times */
    Py_ssize_t missing;       /* unwritten tokens (len(times)) */
} FinishedTokens;

static PyTypeObject FinishedTokensType;

static void FT_dealloc(FinishedTokens *o) {
    Py_XDECREF(o->token);
    Py_XDECREF(o->times);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int ft_mine(FinishedTokens *o, PyObject *req) {  /* whether req's `_cols` is o (1), not (0), error (-1) */
    PyObject *cols = FGET(req, cols);
    if (!cols) return -1;
    Py_DECREF(cols);
    return cols == (PyObject *)o;
}

static PyObject *FT_materialize(FinishedTokens *o, PyObject *req) {
    int mine = ft_mine(o, req);
    if (mine <= 0) { if (mine < 0) return NULL; Py_RETURN_NONE; }
    PyObject *outputs = FGET(req, output_ids), *times = outputs ? FGET(req, token_times) : NULL, *result = NULL;
    if (!times) goto done;
    if (!PyList_Check(outputs) || !PyList_Check(times)) { PyErr_SetString(PyExc_TypeError, "a request's lists"); goto done; }
    Py_buffer view;
    if (PyObject_GetBuffer(o->times, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) goto done;
    if (view.len != o->missing * (Py_ssize_t)sizeof(double)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_AssertionError, "FinishedTokens: times and count differ");
        goto done;
    }
    int was_empty = PyList_GET_SIZE(times) == 0;
    int rc = list_append_n(outputs, NULL, o->token, o->missing);
    for (Py_ssize_t i = 0; rc == 0 && i < o->missing; i++) {
        PyObject *t = PyFloat_FromDouble(((const double *)view.buf)[i]);
        rc = t ? PyList_Append(times, t) : -1;
        Py_XDECREF(t);
    }
    PyBuffer_Release(&view);
    if (rc < 0 || (was_empty && FSET(req, times_array, o->times) < 0) || FSET(req, cols, Py_None) < 0) goto done;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(outputs);
    Py_XDECREF(times);
    return result;
}

static PyObject *FT_num_computed_of(FinishedTokens *o, PyObject *req) { return FGET(req, num_computed); }

static PyObject *FT_num_tokens_of(FinishedTokens *o, PyObject *req) {
    int mine = ft_mine(o, req);
    if (mine < 0) return NULL;
    PyObject *outputs = FGET(req, output_ids);
    if (!outputs) return NULL;
    Py_ssize_t n = PyObject_Length(outputs);
    Py_DECREF(outputs);
    Py_ssize_t np_ = RGET_SSIZE(req, num_prompt_tokens);
    if (n < 0 || (np_ == -1 && PyErr_Occurred())) return NULL;
    return PyLong_FromSsize_t(np_ + n + (mine ? o->missing : 0));
}

/* `cols_detach` of a request that finishes now: its last tokens left unwritten where that keeps every read the same. */
static int cols_detach_finished(Cols *c, PyObject *req) {
    int64_t off;
    int has = col_off_of(req, &off);
    if (has < 0) return -1;
    PyObject *outputs = has ? req_slot(req, off_output_ids) : NULL, *times = has ? req_slot(req, off_token_times) : NULL;
    PyObject *np_o = has ? req_slot(req, off_num_prompt_tokens) : NULL;
    if (!has || !c->times_complete || !outputs || !times || !np_o || !PyList_CheckExact(outputs)
            || !PyList_CheckExact(times) || PyList_GET_SIZE(times) || !PyLong_CheckExact(np_o))
        return cols_detach(c, req);
    Py_ssize_t num_prompt = PyLong_AsSsize_t(np_o);
    if (num_prompt == -1 && PyErr_Occurred()) return -1;
    Py_ssize_t missing = (Py_ssize_t)(off + c->num_updates) - num_prompt - PyList_GET_SIZE(outputs);
    if (missing <= 0 || missing > PyList_GET_SIZE(c->times)) return cols_detach(c, req);
    Py_ssize_t s = cols_row(c, req);
    if (s < 0) return -1;
    PyObject *view = PySequence_GetSlice(c->times_array, c->num_updates - missing, c->num_updates);
    if (!view) return -1;
    FinishedTokens *ft = PyObject_New(FinishedTokens, &FinishedTokensType);
    if (!ft) { Py_DECREF(view); return -1; }
    Py_INCREF(c->token);
    ft->token = c->token;
    ft->times = view;
    ft->missing = missing;
    int rc = FSET_NEW(req, num_computed, cols_num_computed_of(c, req));
    if (rc == 0) rc = FSET(req, cols, (PyObject *)ft);
    if (rc == 0) rc = FSET(req, col_off, Py_None);
    Py_DECREF(ft);
    if (rc < 0) return -1;
    if (!c->rows[s].in_phase) Py_CLEAR(c->rows[s].req);  /* (a decoder's stays linked until the columns go) */
    return 0;
}

static PyMethodDef FT_methods[] = {
    {"materialize", (PyCFunction)FT_materialize, METH_O, "Write the request's last tokens and their times into it."},
    {"num_computed_of", (PyCFunction)FT_num_computed_of, METH_O, "`req.num_computed_tokens`."},
    {"num_tokens_of", (PyCFunction)FT_num_tokens_of, METH_O, "`req.num_tokens`."},
    {NULL, NULL, 0, NULL},
};
static PyMemberDef FT_members[] = {
    {"token", T_OBJECT_EX, offsetof(FinishedTokens, token), READONLY, NULL},
    {"times", T_OBJECT_EX, offsetof(FinishedTokens, times), READONLY, NULL},
    {"missing", T_PYSSIZET, offsetof(FinishedTokens, missing), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};
static PyTypeObject FinishedTokensType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.FinishedTokens",
    .tp_doc = "A finished request's last tokens and their times, written into it when first read (a ColumnStorage).",
    .tp_basicsize = sizeof(FinishedTokens),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)FT_dealloc,
    .tp_methods = FT_methods,
    .tp_members = FT_members,
};

static PyObject *Cols_join(Cols *c, PyObject *new) {
    PyObject *fast = PySequence_Fast(new, "join: a sequence of requests");
    if (!fast) return NULL;
    int rc = cols_join(c, PySequence_Fast_ITEMS(fast), PySequence_Fast_GET_SIZE(fast));
    Py_DECREF(fast);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}
static PyObject *Cols_add_decoder(Cols *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "add_decoder(req, off)"); return NULL; }
    Py_ssize_t s = cols_row(c, args[0]);
    if (s < 0) return NULL;
    if (c->rows[s].in_phase) { PyErr_SetString(PyExc_AssertionError, "add_decoder: already a decoder"); return NULL; }
    int64_t off = as_i64(args[1]);
    if (off == -1 && PyErr_Occurred()) return NULL;
    if (cols_add_decoder(c, s, args[0], off) < 0) return NULL;
    Py_RETURN_NONE;
}
static PyObject *Cols_remove(Cols *c, PyObject *req) {
    if (cols_remove(c, req) < 0) return NULL;
    Py_RETURN_NONE;
}
static PyObject *Cols_materialize(Cols *c, PyObject *req) {
    if (cols_materialize(c, req) < 0) return NULL;
    Py_RETURN_NONE;
}
static PyObject *Cols_detach(Cols *c, PyObject *req) {
    if (cols_detach(c, req) < 0) return NULL;
    Py_RETURN_NONE;
}
static PyObject *Cols_num_computed_of(Cols *c, PyObject *req) { return cols_num_computed_of(c, req); }
static PyObject *Cols_num_tokens_of(Cols *c, PyObject *req) {
    int64_t off;
    int has = col_off_of(req, &off);
    if (has < 0) return NULL;
    if (has) return PyLong_FromLongLong(off + c->num_updates);
    PyObject *outputs = FGET(req, output_ids);
    if (!outputs) return NULL;
    Py_ssize_t n = PyObject_Length(outputs);
    Py_DECREF(outputs);
    Py_ssize_t num_prompt = RGET_SSIZE(req, num_prompt_tokens);
    if (n < 0 || (num_prompt == -1 && PyErr_Occurred())) return NULL;
    return PyLong_FromSsize_t(num_prompt + n);
}
/* The rows of phase p, in queue order, as a dict (`RunningColumns.by_phase[p]`). */
static PyObject *Cols_phase(Cols *c, PyObject *arg) {
    Py_ssize_t p = PyLong_AsSsize_t(arg);
    if (p == -1 && PyErr_Occurred()) return NULL;
    if (p < 0 || p >= c->block_size) { PyErr_SetString(PyExc_IndexError, "phase out of range"); return NULL; }
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (Py_ssize_t s = c->head[p]; s >= 0; s = c->rows[s].next)
        if (PyDict_SetItem(d, c->rows[s].req, Py_None) < 0) { Py_DECREF(d); return NULL; }
    return d;
}
/* The decoders stopping at update count u, in seq order, forgotten here: n of them into out (a caller's array of at
   least c->num_decoders), or -1. */
static Py_ssize_t cols_pop_stops(Cols *c, int64_t u, Py_ssize_t *out) {
    Py_ssize_t n = 0;
    while (c->heap_n && c->heap[0].stop <= u) {
        StopEntry e = c->heap[0];
        heap_pop(c);
        Row *row = &c->rows[e.seq];
        if (e.stop == u && row->in_phase && row->stop == u) out[n++] = e.seq;
    }
    return n;
}
static PyObject *Cols_pop_stops(Cols *c, PyObject *arg) {
    int64_t u = as_i64(arg);
    if (u == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t *seqs = PyMem_Malloc((c->num_decoders + 1) * sizeof(Py_ssize_t));
    if (!seqs) return PyErr_NoMemory();
    Py_ssize_t n = cols_pop_stops(c, u, seqs);
    if (!n) { PyMem_Free(seqs); Py_RETURN_NONE; }
    PyObject *lst = PyList_New(n);
    if (lst)
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_INCREF(c->rows[seqs[i]].req);
            PyList_SET_ITEM(lst, i, c->rows[seqs[i]].req);
        }
    PyMem_Free(seqs);
    return lst;
}
static PyObject *Cols_get_times_array(Cols *c, void *x) {
    if (!c->times_array) Py_RETURN_NONE;
    Py_INCREF(c->times_array);
    return c->times_array;
}
static int Cols_set_times_array(Cols *c, PyObject *v, void *x) {
    if (!v) { PyErr_SetString(PyExc_AttributeError, "times_array cannot be deleted"); return -1; }
    return cols_set_times_array(c, v);
}

static PyMethodDef Cols_methods[] = {
    {"join", (PyCFunction)Cols_join, METH_O, "`RunningColumns.join`."},
    {"add_decoder", (PyCFunction)(void (*)(void))Cols_add_decoder, METH_FASTCALL, "`RunningColumns.add_decoder`."},
    {"remove", (PyCFunction)Cols_remove, METH_O, "`RunningColumns.remove`."},
    {"materialize", (PyCFunction)Cols_materialize, METH_O, "`RunningColumns.materialize`."},
    {"detach", (PyCFunction)Cols_detach, METH_O, "`RunningColumns.detach`."},
    {"num_computed_of", (PyCFunction)Cols_num_computed_of, METH_O, "`RunningColumns.num_computed_of`."},
    {"num_tokens_of", (PyCFunction)Cols_num_tokens_of, METH_O, "`RunningColumns.num_tokens_of`."},
    {"phase", (PyCFunction)Cols_phase, METH_O, "`RunningColumns.phase`: a new dict."},
    {"pop_stops", (PyCFunction)Cols_pop_stops, METH_O, "`RunningColumns.pop_stops`: in seq order."},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef Cols_getset[] = {
    {"times_array", (getter)Cols_get_times_array, (setter)Cols_set_times_array, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
static PyMemberDef Cols_members[] = {
    {"reqs", T_OBJECT_EX, offsetof(Cols, reqs), READONLY, NULL},
    {"token", T_OBJECT_EX, offsetof(Cols, token), READONLY, NULL},
    {"times", T_OBJECT_EX, offsetof(Cols, times), READONLY, NULL},
    {"off", T_OBJECT_EX, offsetof(Cols, off), 0, NULL},
    {"seq", T_OBJECT_EX, offsetof(Cols, seq), 0, NULL},
    {"ids", T_OBJECT_EX, offsetof(Cols, ids), READONLY, NULL},
    {"prefills", T_OBJECT_EX, offsetof(Cols, prefills), 0, NULL},
    {"block_size", T_PYSSIZET, offsetof(Cols, block_size), READONLY, NULL},
    {"num_updates", T_PYSSIZET, offsetof(Cols, num_updates), 0, NULL},
    {"num_joined", T_PYSSIZET, offsetof(Cols, num_joined), READONLY, NULL},
    {"num_decoders", T_PYSSIZET, offsetof(Cols, num_decoders), READONLY, NULL},
    {"off_sum", T_LONGLONG, offsetof(Cols, off_sum), READONLY, NULL},
    {"scheduled", T_BOOL, offsetof(Cols, scheduled), 0, NULL},
    {"times_complete", T_BOOL, offsetof(Cols, times_complete), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};
static PyTypeObject ColsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.ColumnsCore",
    .tp_basicsize = sizeof(Cols),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "`RunningColumns`' state and operations in C (engine.core.compiled_fast.CompiledColumns).",
    .tp_traverse = (traverseproc)Cols_traverse,
    .tp_clear = (inquiry)Cols_clear,
    .tp_dealloc = (destructor)Cols_dealloc,
    .tp_init = (initproc)Cols_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = Cols_methods,
    .tp_getset = Cols_getset,
    .tp_members = Cols_members,
};

/* ---- FastPathCore ---- */

typedef struct {
    PyObject_HEAD
    PyObject *sched, *columns, *kv;
    PyObject *py_schedule_running, *py_update;  /* FastPath's own methods (unbound): every other case */
    Py_ssize_t *buf;  /* scratch: row indices */
    Py_ssize_t buf_cap;
    PyObject **objs;  /* scratch: requests */
    Py_ssize_t objs_cap;
    int fcfs;  /* the scheduler's policy is "fcfs" (its config is frozen) */
    /* `schedule_step`: the scheduler's config (the object last read) and its fields */
    PyObject *config;
    Py_ssize_t max_num_batched_tokens, long_prefill_token_threshold, max_num_seqs, max_model_len;
    int chunked, reserve_full_isl;
    int in_step;  /* inside `update_step`: the scheduler is exactly `Scheduler` (its `finish_request` done here) */
} FP;

static int FP_traverse(FP *f, visitproc visit, void *arg) {
    Py_VISIT(f->sched); Py_VISIT(f->columns); Py_VISIT(f->kv); Py_VISIT(f->py_schedule_running); Py_VISIT(f->py_update);
    Py_VISIT(f->config);
    return 0;
}
static int FP_clear(FP *f) {
    Py_CLEAR(f->sched); Py_CLEAR(f->columns); Py_CLEAR(f->kv); Py_CLEAR(f->py_schedule_running); Py_CLEAR(f->py_update);
    Py_CLEAR(f->config);
    return 0;
}
static void FP_dealloc(FP *f) {
    PyObject_GC_UnTrack(f);
    FP_clear(f);
    PyMem_Free(f->buf);
    PyMem_Free(f->objs);
    Py_TYPE(f)->tp_free((PyObject *)f);
}
static int FP_init(FP *f, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"scheduler", "kv", "schedule_running", "update", NULL};
    PyObject *sched, *kv, *sr, *up;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!OO", kwlist, &sched, &KVType, &kv, &sr, &up)) return -1;
    if (!plan_type) { PyErr_SetString(PyExc_RuntimeError, "bind_fast_path_types first"); return -1; }
    Py_INCREF(sched); Py_XSETREF(f->sched, sched);
    Py_INCREF(kv); Py_XSETREF(f->kv, kv);
    Py_INCREF(sr); Py_XSETREF(f->py_schedule_running, sr);
    Py_INCREF(up); Py_XSETREF(f->py_update, up);
    Py_INCREF(Py_None); Py_XSETREF(f->columns, Py_None);
    PyObject *config = PyObject_GetAttrString(sched, "config");
    PyObject *policy = config ? PyObject_GetAttrString(config, "policy") : NULL;
    Py_XDECREF(config);
    if (!policy) return -1;
    f->fcfs = PyUnicode_Check(policy) && PyUnicode_CompareWithASCIIString(policy, "fcfs") == 0;
    Py_DECREF(policy);
    return 0;
}

static int fp_scratch(FP *f, Py_ssize_t n) {
    if (n > f->buf_cap) {
        Py_ssize_t cap = f->buf_cap ? f->buf_cap : 256;
        while (cap < n) cap *= 2;
        Py_ssize_t *b = PyMem_Realloc(f->buf, cap * sizeof(Py_ssize_t));
        if (!b) { PyErr_NoMemory(); return -1; }
        f->buf = b;
        PyObject **o = PyMem_Realloc(f->objs, cap * sizeof(PyObject *));
        if (!o) { PyErr_NoMemory(); return -1; }
        f->objs = o;
        f->buf_cap = f->objs_cap = cap;
    }
    return 0;
}

/* The scheduler's running list, borrowed, if it is the columns' (else NULL, no exception). */
static PyObject *fp_running(FP *f, Cols *c) {
    PyObject *running = PyObject_GetAttr(f->sched, s_running);
    if (!running) return NULL;
    Py_DECREF(running);  /* (the scheduler holds it) */
    return running == c->reqs && PyList_CheckExact(running) ? running : NULL;
}

static PyObject *fp_call_python(PyObject *fn, FP *f, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *all[4];
    all[0] = (PyObject *)f;
    for (Py_ssize_t i = 0; i < nargs; i++) all[i + 1] = args[i];
    return PyObject_Vectorcall(fn, all, nargs + 1, NULL);
}

/* A decoder row still held by the columns (not preempted). */
static inline int row_held(Cols *c, Py_ssize_t s) { return c->rows[s].req != NULL && c->rows[s].in_phase; }

/* `FastPath._allocate_or_preempt` for a period without prefill rows (FCFS): the rows opening (phase po) or filling
   (phase pf, where `caching`) a block, in queue order, ask the KV cache manager in runs that fit; a row that does not
   fit preempts from the tail of the running list until it fits or is itself preempted. Sets the plan's
   preempted_request_ids. */
static int fp_allocate_or_preempt(FP *f, Cols *c, PyObject *running, PyObject *plan, Py_ssize_t po, Py_ssize_t pf,
                                  int caching) {
    KV *kv = (KV *)f->kv;
    Row *rows = c->rows;
    Py_ssize_t n = c->count[po] + (caching ? c->count[pf] : 0);
    if (fp_scratch(f, 2 * n + 2) < 0) return -1;
    /* touched rows (seq) merged from the two lists, with flags: 1 opening, 2 filling */
    Py_ssize_t *tseq = f->buf, nt = 0;
    char *flags = PyMem_Malloc(n + 1);
    if (!flags) { PyErr_NoMemory(); return -1; }
    Py_ssize_t a = c->head[po], b = caching ? c->head[pf] : -1;
    while (a >= 0 || b >= 0) {
        if (b < 0 || (a >= 0 && a < b)) { tseq[nt] = a; flags[nt++] = 1; a = rows[a].next; }
        else if (a < 0 || b < a) { tseq[nt] = b; flags[nt++] = 2; b = rows[b].next; }
        else { tseq[nt] = a; flags[nt++] = 3; a = rows[a].next; b = rows[b].next; }  /* (a block of one token) */
    }
    PyObject **objs = f->objs;  /* opening run, then filling run, both within [0, n) and [n, 2n) */
    PyObject *preempted = PyList_New(0), *req = NULL;
    if (!preempted) goto fail;
    Py_ssize_t u = c->num_updates, i = 0;
    while (i < nt && row_held(c, tseq[i])) {
        Py_ssize_t free = kv->pool->num_free, end = i;
        while (end < nt && row_held(c, tseq[end]) && (flags[end] & 1) <= free) {
            free -= flags[end] & 1;
            end++;
        }
        if (end > i) {
            Py_ssize_t no = 0, nf = 0;
            for (Py_ssize_t k = i; k < end; k++) {
                if (flags[k] & 1) objs[no++] = rows[tseq[k]].req;
                if (flags[k] & 2) objs[n + nf++] = rows[tseq[k]].req;
            }
            if (kv_decode_slots(kv, objs, no, objs + n, nf) < 0) goto fail;
            i = end;
            continue;
        }
        req = rows[tseq[i]].req;
        Py_INCREF(req);  /* (it may be preempted: its row lets go of it) */
        int64_t off;
        if (col_off_of(req, &off) != 1) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_AssertionError, "a decoder without _col_off");
            goto fail;
        }
        for (;;) {
            int r = kv_allocate(kv, req, (Py_ssize_t)(off + u - 1), (Py_ssize_t)(off + u), 1, NULL, 0, 0);
            if (r < 0) goto fail;
            if (r) break;
            Py_ssize_t last = PyList_GET_SIZE(running) - 1;
            if (last < 0) { PyErr_SetString(PyExc_AssertionError, "nothing left to preempt"); goto fail; }
            PyObject *victim = PyList_GET_ITEM(running, last);
            Py_INCREF(victim);
            int rc = PyList_SetSlice(running, last, last + 1, NULL);
            if (rc == 0) rc = cols_remove(c, victim);
            if (rc == 0) rc = cols_detach(c, victim);
            PyObject *res = rc == 0 ? PyObject_CallMethodOneArg(f->sched, s_preempt_request, victim) : NULL;
            PyObject *rid = res ? FGET(victim, request_id) : NULL;
            Py_XDECREF(res);
            rc = rid ? PyList_Append(preempted, rid) : -1;
            Py_XDECREF(rid);
            Py_DECREF(victim);
            if (rc < 0) goto fail;
            if (victim == req) break;
        }
        Py_CLEAR(req);
        i++;
    }
    PyMem_Free(flags);
    return PSET_NEW(plan, preempted_request_ids, PyList_AsTuple(preempted)) < 0 ? (Py_DECREF(preempted), -1)
                                                                              : (Py_DECREF(preempted), 0);
fail:
    PyMem_Free(flags);
    Py_XDECREF(req);
    Py_XDECREF(preempted);
    return -1;
}

/* The position of row s in the running list (its seq's in `seq`, ascending, which the running list follows), checked;
   -1 with an exception if not there. */
static Py_ssize_t row_pos(Cols *c, PyObject *running, Py_ssize_t s) {
    PyObject *seq = c->seq;
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(seq);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(seq, mid));
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < s) lo = mid + 1; else hi = mid;
    }
    if (lo >= PyList_GET_SIZE(seq) || lo >= PyList_GET_SIZE(running) || PyList_GET_ITEM(running, lo) != c->rows[s].req) {
        PyErr_SetString(PyExc_AssertionError, "a row is not at its place in the running list");
        return -1;
    }
    return lo;
}

/* A prefill row's counts: tokens, computed tokens, blocks held. */
typedef struct { Py_ssize_t s, num_tokens, computed, num_blocks, is_first; } PrefillInfo;

static int prefill_info(Cols *c, PyObject *req, PrefillInfo *p) {
    if ((p->s = cols_row(c, req)) < 0) return -1;
    PyObject *outputs = FGET(req, output_ids), *ids = NULL;
    if (!outputs) return -1;
    Py_ssize_t num_out = PyObject_Length(outputs);
    Py_DECREF(outputs);
    Py_ssize_t num_prompt = RGET_SSIZE(req, num_prompt_tokens);
    if (num_out < 0 || (num_prompt == -1 && PyErr_Occurred())) return -1;
    p->num_tokens = num_prompt + num_out;
    p->is_first = num_out == 0;
    p->computed = RGET_SSIZE(req, num_computed);
    if (p->computed == -1 && PyErr_Occurred()) return -1;
    if (!(ids = RGET(req, block_ids))) return -1;
    p->num_blocks = PyObject_Length(ids);
    Py_DECREF(ids);
    return p->num_blocks < 0 ? -1 : 0;
}

/* The rows of a step with prefill rows, when the free blocks cover them (`FastPath._allocate_rows` on `_touched`):
   in queue order, each prefill by `allocate`, the runs of decoders between them by one decode allocation each.
   0: done, 1: does not fit or is cut (nothing changed: the Python method takes the step), -1: error. */
static int fp_allocate_prefills(FP *f, Cols *c, PrefillInfo *pi, Py_ssize_t np, Py_ssize_t po, Py_ssize_t pf,
                                Py_ssize_t extra_tokens, Py_ssize_t budget, Py_ssize_t threshold, Py_ssize_t total) {
    KV *kv = (KV *)f->kv;
    Row *rows = c->rows;
    Py_ssize_t num_needed = c->count[po], max_rem = 0, bs = c->block_size;
    for (Py_ssize_t i = 0; i < np; i++) {
        Py_ssize_t rem = pi[i].num_tokens - pi[i].computed;
        if (rem > max_rem) max_rem = rem;
        num_needed += CEIL_DIV(pi[i].num_tokens, bs) - pi[i].num_blocks;
    }
    if (total + extra_tokens > budget || (threshold && max_rem > threshold) || num_needed > kv->pool->num_free) return 1;
    int caching = kv->enable_caching;
    Py_ssize_t n = c->count[po] + (caching ? c->count[pf] : 0);
    if (fp_scratch(f, 2 * n + 2) < 0) return -1;
    PyObject **objs = f->objs;
    Py_ssize_t a = c->head[po], b = caching ? c->head[pf] : -1, k = 0, no = 0, nf = 0;
    for (;;) {
        Py_ssize_t next_p = k < np ? pi[k].s : PY_SSIZE_T_MAX;
        Py_ssize_t next_d = a >= 0 && (b < 0 || a <= b) ? a : b;  /* the next decoder in queue order */
        if (next_d < 0) next_d = PY_SSIZE_T_MAX;
        if (next_p == PY_SSIZE_T_MAX && next_d == PY_SSIZE_T_MAX) break;
        if (next_d < next_p) {
            if (a == next_d) { objs[no++] = rows[a].req; a = rows[a].next; }
            if (b == next_d) { objs[n + nf++] = rows[b].req; b = rows[b].next; }
            continue;
        }
        if (no || nf) {
            if (kv_decode_slots(kv, objs, no, objs + n, nf) < 0) return -1;
            no = nf = 0;
        }
        PrefillInfo *p = &pi[k++];
        int r = kv_allocate(kv, rows[p->s].req, p->computed, p->num_tokens, p->num_tokens - p->computed, NULL, 0, 0);
        if (r < 0) return -1;
        if (!r) { PyErr_SetString(PyExc_AssertionError, "a prefill row did not fit"); return -1; }
    }
    if ((no || nf) && kv_decode_slots(kv, objs, no, objs + n, nf) < 0) return -1;
    return 0;
}

/* `FastPath.schedule_running(plan, budget, threshold)`: in C for a period whose step the free blocks cover (decoders
   and prefill rows, all scheduled in full), and for FCFS steps of decoders that preempt; the Python method otherwise
   (no period, someone cut short, preempting with prefill rows or under another policy). */
static PyObject *FP_schedule_running(FP *f, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "schedule_running(plan, budget, threshold)"); return NULL; }
    PyObject *plan = args[0];
    if (!PyObject_TypeCheck(f->columns, &ColsType)) return fp_call_python(f->py_schedule_running, f, args, nargs);
    Cols *c = (Cols *)f->columns;
    if (!PyList_CheckExact(c->off) || !PyList_CheckExact(c->seq) || !PyList_CheckExact(c->prefills))
        return fp_call_python(f->py_schedule_running, f, args, nargs);
    PyObject *running = fp_running(f, c);
    if (!running) {
        if (PyErr_Occurred()) return NULL;
        return fp_call_python(f->py_schedule_running, f, args, nargs);
    }
    Py_ssize_t budget = PyLong_AsSsize_t(args[1]), threshold = PyLong_AsSsize_t(args[2]);
    if ((budget == -1 || threshold == -1) && PyErr_Occurred()) return NULL;
    Py_ssize_t total = PyList_GET_SIZE(running), np = PyList_GET_SIZE(c->prefills);
    KV *kv = (KV *)f->kv;
    Py_ssize_t bs = c->block_size, u = c->num_updates;
    Py_ssize_t po = phase_of(1 - (int64_t)u, bs), pf = phase_of(-(int64_t)u, bs);
    if (total != c->num_decoders + np || PyList_GET_SIZE(c->off) != total)
        return fp_call_python(f->py_schedule_running, f, args, nargs);
    PrefillInfo *pi = NULL;
    PyObject *prefill_rows = NULL, *result = NULL;
    long long context_sum;
    Py_ssize_t num_prefill_tokens = 0;
    if (np) {
        pi = PyMem_Malloc(np * sizeof(PrefillInfo));
        if (!pi) return PyErr_NoMemory();
        Py_ssize_t extra = 0;
        for (Py_ssize_t i = 0; i < np; i++) {
            if (prefill_info(c, PyList_GET_ITEM(c->prefills, i), &pi[i]) < 0) goto done;
            extra += pi[i].num_tokens - pi[i].computed - 1;
        }
        int r = fp_allocate_prefills(f, c, pi, np, po, pf, extra, budget, threshold, total);
        if (r < 0) goto done;
        if (r) { result = fp_call_python(f->py_schedule_running, f, args, nargs); goto done; }
        total = c->num_decoders;
        context_sum = (long long)c->num_decoders * (u - 1) + c->off_sum;
        if (!(prefill_rows = PyList_New(np))) goto done;
        for (Py_ssize_t i = 0; i < np; i++) {
            PrefillInfo *p = &pi[i];
            PyObject *req = c->rows[p->s].req;
            Py_ssize_t rem = p->num_tokens - p->computed, pos = row_pos(c, running, p->s);
            if (pos < 0) goto done;
            total += rem;
            context_sum += p->computed;
            if (rem > 1 || p->is_first) num_prefill_tokens += rem;
            PyObject *ids = RGET(req, block_ids);
            Py_ssize_t nb = ids ? PyObject_Length(ids) : -1;
            Py_XDECREF(ids);
            if (nb < 0) goto done;
            PyObject *row = Py_BuildValue("(nnnn)", pos, p->computed, rem, nb);
            if (!row) goto done;
            PyList_SET_ITEM(prefill_rows, i, row);
            if (RSET_SSIZE(req, num_computed, p->num_tokens) < 0) goto done;
        }
    } else {
        int preempting = c->count[po] > kv->pool->num_free;
        if (total > budget || (preempting && !f->fcfs))
            return fp_call_python(f->py_schedule_running, f, args, nargs);
        if (preempting) {
            if (fp_allocate_or_preempt(f, c, running, plan, po, pf, kv->enable_caching) < 0) return NULL;
            total = PyList_GET_SIZE(running);  /* (the victims were the tail rows) */
            PyObject *off = PyList_GetSlice(c->off, 0, total), *seq = off ? PyList_GetSlice(c->seq, 0, total) : NULL;
            if (!seq) { Py_XDECREF(off); return NULL; }
            Py_SETREF(c->off, off);
            Py_SETREF(c->seq, seq);
            if (total != c->num_decoders) {
                PyErr_SetString(PyExc_AssertionError, "running rows and decoders differ after preemption");
                return NULL;
            }
        } else {
            Py_ssize_t n = c->count[po], m = kv->enable_caching ? c->count[pf] : 0;
            if (fp_scratch(f, n + m) < 0) return NULL;
            PyObject **objs = f->objs;
            Py_ssize_t k = 0;
            for (Py_ssize_t s = c->head[po]; s >= 0; s = c->rows[s].next) objs[k++] = c->rows[s].req;
            if (m)
                for (Py_ssize_t s = c->head[pf]; s >= 0; s = c->rows[s].next) objs[k++] = c->rows[s].req;
            if (kv_decode_slots(kv, objs, n, objs + n, m) < 0) return NULL;
        }
        context_sum = (long long)c->num_decoders * (u - 1) + c->off_sum;
    }
    /* plan.add_running_columns(running[:], ColumnRows(off, u, bs, prefill_rows, seq, ids), context_sum, total,
       num_prefill_tokens, longest_context where every row decodes) */
    PyObject *rows = colrows_type->tp_alloc(colrows_type, 0);
    if (!rows) goto done;
    if (!prefill_rows && !(prefill_rows = PyList_New(0))) { Py_DECREF(rows); goto done; }
    Py_INCREF(prefill_rows);
    PyObject *vals[6] = {c->off, PyLong_FromSsize_t(u), PyLong_FromSsize_t(bs), prefill_rows, c->seq, c->ids};
    Py_INCREF(c->off); Py_INCREF(c->seq); Py_INCREF(c->ids);
    Py_ssize_t offs[6] = {off_cr_off, off_cr_num_updates, off_cr_block_size, off_cr_prefill_rows, off_cr_seq,
                          off_cr_ids};
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        if (!vals[i]) { bad = 1; continue; }
        *(PyObject **)((char *)rows + offs[i]) = vals[i];  /* (steals: the slot was NULL) */
    }
    if (bad) { Py_DECREF(rows); goto done; }
    if (PSET_NEW(plan, requests, PyList_GetSlice(running, 0, PyList_GET_SIZE(running))) < 0
            || PSET_NEW(plan, num_emitting_seqs, PyLong_FromSsize_t(PyList_GET_SIZE(running))) < 0  /* (all emit) */
            || PSET_NEW(plan, num_seqs, PyLong_FromSsize_t(PyList_GET_SIZE(running))) < 0
            || PSET_NEW(plan, columns, rows) < 0
            || PSET_NEW(plan, bulk_context_sum, PyLong_FromLongLong(context_sum)) < 0)
        goto done;
    if (!np) {
        PyObject *longest = maxplus_new(c->off, u - 1);
        PyObject *decodes = longest ? PyTuple_New(2) : NULL;
        PyObject *count = decodes ? PyLong_FromSsize_t(PyList_GET_SIZE(running)) : NULL;
        if (!count) { Py_XDECREF(decodes); Py_XDECREF(longest); goto done; }
        PyTuple_SET_ITEM(decodes, 0, count);
        PyTuple_SET_ITEM(decodes, 1, longest);
        if (PSET_NEW(plan, bulk_decodes, decodes) < 0) goto done;
    }
    if (PSET_NEW(plan, num_batched_tokens, PyLong_FromSsize_t(total)) < 0
            || PSET_NEW(plan, num_prefill_tokens, PyLong_FromSsize_t(num_prefill_tokens)) < 0
            || PSET_NEW(plan, num_decode_tokens, PyLong_FromSsize_t(total - num_prefill_tokens)) < 0)
        goto done;
    c->scheduled = 1;
    Py_INCREF(Py_True);
    result = Py_True;
done:
    PyMem_Free(pi);
    Py_XDECREF(prefill_rows);
    return result;
}

static int cmp_ssize(const void *a, const void *b) {
    Py_ssize_t x = *(const Py_ssize_t *)a, y = *(const Py_ssize_t *)b;
    return (x > y) - (x < y);
}

/* A list of `src` without the entries at the ascending positions drop[0..nd). */
static PyObject *list_without(PyObject *src, const Py_ssize_t *drop, Py_ssize_t nd) {
    Py_ssize_t n = PyList_GET_SIZE(src);
    PyObject *out = PyList_New(n - nd);
    if (!out) return NULL;
    Py_ssize_t j = 0, d = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (d < nd && drop[d] == i) { d++; continue; }
        PyObject *o = PyList_GET_ITEM(src, i);
        Py_INCREF(o);
        PyList_SET_ITEM(out, j++, o);
    }
    return out;
}

static PyObject *KV_free(KV *kv, PyObject *req);
static Py_ssize_t off_finish_time_s, off_status;  /* (bound by bind_step_types) */
static PyObject *s_finish_time_s, *s_status;

/* `Scheduler.finish_request(req, status, now_s)`: in C inside `update_step` (the scheduler exactly `Scheduler`), else
   the scheduler's method. */
static int fp_finish(FP *f, PyObject *req, PyObject *status, PyObject *now) {
    if (!f->in_step) {
        PyObject *r = PyObject_CallMethodObjArgs(f->sched, s_finish_request, req, status, now, NULL);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    if (FSET(req, status, status) < 0 || FSET(req, finish_time_s, now) < 0) return -1;
    PyObject *r = KV_free((KV *)f->kv, req);
    if (!r) return -1;
    Py_DECREF(r);
    PyObject *requests = PyObject_GetAttr(f->sched, s_requests), *rid = requests ? FGET(req, request_id) : NULL;
    int rc = rid ? PyObject_DelItem(requests, rid) : -1;
    Py_XDECREF(rid);
    Py_XDECREF(requests);
    return rc;
}

/* `FastPath.update(plan, token, now_s)`: in C while a period without prefill rows goes on with the same token and
   every request admitted this step samples its token; the Python method otherwise (a period to start or end, a
   prompt chunk). */
/* `FastPath._start_decoding` of row s: its first sampled token of the period. 1: a decoder now (*off set), 0: it stops
   (its seq, or ~seq where stopped by a stop token, appended to fin), -1: error. Counts first outputs in *num_first. */
static int fp_start_decoding(Cols *c, Py_ssize_t s, Py_ssize_t u, Py_ssize_t *fin, Py_ssize_t *nfin,
                             Py_ssize_t *num_first, int64_t *off) {
    PyObject *req = c->rows[s].req;
    PyObject *outputs = FGET(req, output_ids), *stop_set = NULL;
    if (!outputs) return -1;
    Py_ssize_t num_out = PyObject_Length(outputs);
    Py_DECREF(outputs);
    Py_ssize_t num_prompt = RGET_SSIZE(req, num_prompt_tokens);
    if (num_out < 0 || (num_prompt == -1 && PyErr_Occurred())) return -1;
    Py_ssize_t num_tokens = num_prompt + num_out + 1;
    *off = (int64_t)num_tokens - u;
    if (FSET_NEW(req, col_off, PyLong_FromLongLong(*off)) < 0) return -1;
    *num_first += num_out == 0;
    if (!(stop_set = FGET(req, stop_token_set))) return -1;
    int stops = PySequence_Contains(stop_set, c->token);
    Py_DECREF(stop_set);
    if (stops < 0) return -1;
    if (stops) { fin[(*nfin)++] = ~s; return 0; }
    PyObject *mt = FGET(req, max_num_tokens);
    if (!mt) return -1;
    int64_t max_num_tokens = as_i64(mt);
    Py_DECREF(mt);
    if (max_num_tokens == -1 && PyErr_Occurred()) return -1;
    if ((int64_t)num_tokens >= max_num_tokens) { fin[(*nfin)++] = s; return 0; }
    return cols_add_decoder(c, s, req, *off) < 0 ? -1 : 1;
}

/* `FastPath.update(plan, token, now_s)`: in C while a period goes on with the same token (its prefill rows sampling
   their first token, admissions joining it as decoders or, for a prompt chunk, prefill rows); the Python method
   otherwise (a period to start or to end). */
static PyObject *FP_update(FP *f, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "update(plan, token, now_s)"); return NULL; }
    PyObject *plan = args[0], *token = args[1], *now = args[2];
    if (!PyObject_TypeCheck(f->columns, &ColsType)) return fp_call_python(f->py_update, f, args, nargs);
    Cols *c = (Cols *)f->columns;
    int same = PyLong_CheckExact(token) && PyLong_CheckExact(c->token)
        ? PyObject_RichCompareBool(token, c->token, Py_EQ) : 0;
    if (same < 0) return NULL;
    if (!same || !PyList_CheckExact(c->prefills) || !PyList_CheckExact(c->off) || !PyList_CheckExact(c->seq))
        return fp_call_python(f->py_update, f, args, nargs);
    PyObject *running = fp_running(f, c);
    if (!running) {
        if (PyErr_Occurred()) return NULL;
        return fp_call_python(f->py_update, f, args, nargs);
    }
    Py_ssize_t nrows = PyList_GET_SIZE(c->off), total = PyList_GET_SIZE(running), num_new = total - nrows;
    if (num_new < 0) return fp_call_python(f->py_update, f, args, nargs);
    PyObject *emits = NULL;
    if (num_new) {  /* whether each admission samples its token (plan.emits_after_bulk) */
        emits = obj_get(plan, plan_type, off_p_emits, s_emits);
        if (!emits) return NULL;
        int ok = PyList_CheckExact(emits) && PyList_GET_SIZE(emits) == num_new;
        for (Py_ssize_t i = 0; ok && i < num_new; i++) ok = PyBool_Check(PyList_GET_ITEM(emits, i));
        if (!ok) { Py_DECREF(emits); return fp_call_python(f->py_update, f, args, nargs); }
    }
    double now_v = 0.0;
    if (now != Py_None) {
        now_v = PyFloat_AsDouble(now);
        if (now_v == -1.0 && PyErr_Occurred()) { Py_XDECREF(emits); return NULL; }
    }
    /* From here on, the update (`FastPath._update_columns`). */
    PyObject *new_off = NULL, *new_seq = NULL, *joining = NULL;
    Py_ssize_t first_new = c->num_joined;
    if (num_new && cols_join(c, &PyList_GET_ITEM(running, nrows), num_new) < 0) goto fail;
    Py_ssize_t u = ++c->num_updates;
    c->scheduled = 0;
    if (PyList_Append(c->times, now) < 0) goto fail;
    if (now == Py_None) {
        c->times_complete = 0;
    } else if (c->times_complete) {
        if (u > c->times_cap) {
            PyObject *r = PyObject_CallMethodNoArgs((PyObject *)c, s_grow_times);
            if (!r) goto fail;
            Py_DECREF(r);
            if (u > c->times_cap) { PyErr_SetString(PyExc_AssertionError, "_grow_times did not grow"); goto fail; }
        }
        c->times_data[u - 1] = now_v;
    }
    Py_ssize_t np = PyList_GET_SIZE(c->prefills);
    if (fp_scratch(f, c->num_decoders + np + num_new + 1) < 0) goto fail;
    Py_ssize_t *fin = f->buf;  /* finished rows: seq if capped, ~seq if stopped */
    Py_ssize_t nfin = cols_pop_stops(c, u, fin), num_first = 0;
    int64_t off;
    if (np) {  /* the last step's prefills (all scheduled in full): their first token of the period */
        joining = c->prefills;
        if (!(c->prefills = PyList_New(0))) { c->prefills = joining; joining = NULL; goto fail; }
        PyObject *off2 = NULL;
        for (Py_ssize_t i = 0; i < np; i++) {
            Py_ssize_t s = cols_row(c, PyList_GET_ITEM(joining, i));
            int r = s < 0 ? -1 : fp_start_decoding(c, s, u, fin, &nfin, &num_first, &off);
            if (r < 0) { Py_XDECREF(off2); goto fail; }
            if (!r) continue;
            Py_ssize_t pos = row_pos(c, running, s);
            if (pos < 0 || (!off2 && !(off2 = PyList_GetSlice(c->off, 0, nrows)))) { Py_XDECREF(off2); goto fail; }
            PyObject *o = PyLong_FromLongLong(off);
            if (!o) { Py_DECREF(off2); goto fail; }
            PyList_SetItem(off2, pos, o);
        }
        if (off2) Py_SETREF(c->off, off2);
        Py_CLEAR(joining);
    }
    if (num_new) {
        new_off = PyList_New(num_new);
        new_seq = PyList_New(num_new);
        if (!new_off || !new_seq) goto fail;
        for (Py_ssize_t i = 0; i < num_new; i++) {
            Py_ssize_t s = first_new + i;
            int r = 0;
            if (PyList_GET_ITEM(emits, i) == Py_True) {
                r = fp_start_decoding(c, s, u, fin, &nfin, &num_first, &off);
                if (r < 0) goto fail;
            } else if (PyList_Append(c->prefills, c->rows[s].req) < 0) {  /* a prompt chunk: a prefill row */
                goto fail;
            }
            PyObject *ro = PyLong_FromLongLong(r ? off : 0), *sq = PyLong_FromSsize_t(s);
            if (!ro || !sq) { Py_XDECREF(ro); Py_XDECREF(sq); goto fail; }
            PyList_SET_ITEM(new_off, i, ro);
            PyList_SET_ITEM(new_seq, i, sq);
        }
        Py_ssize_t len;
        PyObject *off2 = PyList_GetSlice(c->off, 0, nrows);
        if (!off2) goto fail;
        len = PyList_GET_SIZE(off2);
        if (PyList_SetSlice(off2, len, len, new_off) < 0) { Py_DECREF(off2); goto fail; }
        Py_SETREF(c->off, off2);
        PyObject *seq2 = PyList_GetSlice(c->seq, 0, PyList_GET_SIZE(c->seq));
        if (!seq2) goto fail;
        len = PyList_GET_SIZE(seq2);
        if (PyList_SetSlice(seq2, len, len, new_seq) < 0) { Py_DECREF(seq2); goto fail; }
        Py_SETREF(c->seq, seq2);
        Py_CLEAR(new_off);
        Py_CLEAR(new_seq);
    }
    Py_CLEAR(emits);
    if (num_first) {
        PyObject *nrwo = PyObject_GetAttr(f->sched, s_num_running_without_output);
        if (!nrwo) goto fail;
        Py_ssize_t v = PyLong_AsSsize_t(nrwo);
        Py_DECREF(nrwo);
        if (v == -1 && PyErr_Occurred()) goto fail;
        PyObject *nv = PyLong_FromSsize_t(v - num_first);
        if (!nv) goto fail;
        int rc = PyObject_SetAttr(f->sched, s_num_running_without_output, nv);
        Py_DECREF(nv);
        if (rc < 0) goto fail;
    }
    if (!nfin) return PyList_New(0);
    /* In queue order (seq); each one's row in the running list by its seq's position in `seq` (ascending). */
    Py_ssize_t *order = PyMem_Malloc(2 * nfin * sizeof(Py_ssize_t));
    if (!order) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < nfin; i++) order[i] = fin[i];
    /* sort by seq (decoding the stopped marks) */
    for (Py_ssize_t i = 1; i < nfin; i++) {
        Py_ssize_t x = order[i], kx = x < 0 ? ~x : x, j = i - 1;
        while (j >= 0 && (order[j] < 0 ? ~order[j] : order[j]) > kx) { order[j + 1] = order[j]; j--; }
        order[j + 1] = x;
    }
    Py_ssize_t *pos = order + nfin;
    PyObject *seq = c->seq, *result = NULL;
    Py_ssize_t nseq = PyList_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < nfin; i++) {
        Py_ssize_t s = order[i] < 0 ? ~order[i] : order[i], lo = 0, hi = nseq;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(seq, mid));
            if (v < s) lo = mid + 1; else hi = mid;
        }
        if (lo >= nseq || PyList_GET_ITEM(running, lo) != c->rows[s].req) {
            PyErr_SetString(PyExc_AssertionError, "a finished row is not in the running list");
            PyMem_Free(order);
            return NULL;
        }
        pos[i] = lo;
    }
    if (!(result = PyList_New(nfin))) { PyMem_Free(order); return NULL; }
    for (Py_ssize_t i = 0; i < nfin; i++) {
        Py_ssize_t s = order[i] < 0 ? ~order[i] : order[i];
        PyObject *req = c->rows[s].req;
        Py_INCREF(req);
        PyList_SET_ITEM(result, i, req);
        PyObject *status = order[i] < 0 ? status_stopped : status_capped;
        if (cols_remove(c, req) < 0 || cols_detach_finished(c, req) < 0) goto fail_result;
        if (fp_finish(f, req, status, now) < 0) goto fail_result;
    }
    qsort(pos, nfin, sizeof(Py_ssize_t), cmp_ssize);
    for (Py_ssize_t i = nfin - 1; i >= 0; i--)
        if (PyList_SetSlice(running, pos[i], pos[i] + 1, NULL) < 0) goto fail_result;
    PyObject *off3 = list_without(c->off, pos, nfin), *seq3 = off3 ? list_without(c->seq, pos, nfin) : NULL;
    if (!seq3) { Py_XDECREF(off3); goto fail_result; }
    Py_SETREF(c->off, off3);
    Py_SETREF(c->seq, seq3);
    PyMem_Free(order);
    return result;
fail_result:
    Py_DECREF(result);
    PyMem_Free(order);
    return NULL;
fail:
    Py_XDECREF(new_off);
    Py_XDECREF(new_seq);
    Py_XDECREF(emits);
    Py_XDECREF(joining);
    return NULL;
}

/* ---- the scheduler's whole step in C (engine.core.scheduler: `Scheduler.schedule`, `update_from_output`) ----

   Where the compiled fast path serves an FCFS `Scheduler` (exactly that class, its waiting queue exactly
   `FCFSRequestQueue`), the scheduler's `schedule`, `update_from_output` and `add_request` are `schedule_step`,
   `update_step` and `add_request_step`: the same statements as the Python methods, in the same order (vLLM's
   `Scheduler.schedule`: the running queue, then, if nothing was preempted, the waiting queue in order while the
   budget, max_num_seqs and the free blocks allow; `_update_after_schedule`), with the plans', the requests' and the
   `_Blocked`s' fields written at their slots' offsets. The running queue is `schedule_running`'s (above;
   `Scheduler._schedule_running` where it declines), a blocked head's failure is carried over by a `_Blocked`
   (`holds` and `of` done here), and an update that is not the fast path's is `Scheduler._update_lists`. The Python methods stay the reference
   (tests/test_core_properties.py, tests/test_compiled_fast.py compare them step by step). */

static PyTypeObject *blocked_type;
/* `_Blocked`'s slots, in order: `blocked_new` fills them directly while the class has exactly these (`blocked_direct`). */
static const char *blocked_slots[] = {"req", "num_tokens", "need", "budget", "threshold", "watermark", "first_hash",
                                      "num_chains"};
static int blocked_direct;
static PyObject *status_running, *status_waiting, *py_add_request;
static Py_ssize_t off_status, off_num_prefix_hit_tokens, off_first_scheduled_time_s, off_next_check_len;
static Py_ssize_t off_b_req, off_b_num_tokens, off_b_need, off_b_budget, off_b_threshold, off_b_watermark,
    off_b_first_hash, off_b_num_chains;
static PyObject *s_sampling, *s_max_tokens, *s_ignore_eos, *s_eos_token_id, *s_stop_token_ids;
static PyObject *s_next_check_len, *s_stop_sets, *s_append, *s_status, *s_num_prefix_hit_tokens,
    *s_first_scheduled_time_s, *s_b_req, *s_b_num_tokens, *s_b_need,
    *s_b_budget, *s_b_threshold, *s_b_watermark, *s_b_first_hash, *s_b_num_chains, *s_pending, *s_pending_aborted,
    *s_num_steps, *s_blocked, *s_waiting, *s_config, *s_popleft, *s_schedule_running_py, *s_update_lists, *s_flush,
    *s_admitted_request_ids, *s_num_new_prefix_hit_tokens, *s_query, *s_context, *s_num_blocks,
    *s_num_kv_blocks_used, *s_num_kv_blocks_total, *s_num_running, *s_num_waiting, *s_empty_tuple;

/* StepPlan's slots as `StepPlan.__init__` sets them, in `__slots__` order: `plan_new` fills them directly while the
   class has exactly these slots (`bind_step_types` checks), else calls the class. */
enum { K_INDEX, K_LIST, K_TUPLE, K_ZERO, K_NONE };
static const struct { const char *name; int kind; } plan_fields[] = {
    {"step_index", K_INDEX}, {"requests", K_LIST}, {"num_batched_tokens", K_ZERO}, {"num_prefill_tokens", K_ZERO},
    {"num_decode_tokens", K_ZERO}, {"preempted_request_ids", K_TUPLE}, {"admitted_request_ids", K_TUPLE},
    {"num_new_prefix_hit_tokens", K_ZERO}, {"num_kv_blocks_used", K_ZERO}, {"num_kv_blocks_total", K_ZERO},
    {"num_running", K_ZERO}, {"num_waiting", K_ZERO}, {"num_emitting_seqs", K_ZERO}, {"num_seqs", K_ZERO},
    {"_query", K_LIST},
    {"_context", K_LIST}, {"_emits", K_LIST},
    {"_num_blocks", K_LIST}, {"_bulk", K_NONE}, {"_columns", K_NONE}, {"_bulk_context_sum", K_NONE},
    {"_bulk_decodes", K_NONE}, {"_arrays", K_NONE}, {"_seqs", K_NONE}, {"_tables", K_NONE},
};
#define NUM_PLAN_FIELDS ((Py_ssize_t)(sizeof(plan_fields) / sizeof(plan_fields[0])))
static Py_ssize_t plan_offs[NUM_PLAN_FIELDS];
static int plan_direct;
static Py_ssize_t off_p_admitted_request_ids, off_p_num_new_prefix_hit_tokens, off_p_query, off_p_context,
    off_p_num_blocks, off_p_num_kv_blocks_used, off_p_num_kv_blocks_total, off_p_num_running, off_p_num_waiting;

#define PGET(plan, field) obj_get((plan), plan_type, off_p_##field, s_##field)
#define BGET(b, field) obj_get((b), blocked_type, off_b_##field, s_b_##field)

static PyObject *mod_bind_step_types(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *bcls, *running, *waiting, *add;
    if (!PyArg_ParseTuple(args, "O!OOO", &PyType_Type, &bcls, &running, &waiting, &add)) return NULL;
    if (!plan_type || !req_type) {
        PyErr_SetString(PyExc_RuntimeError, "bind_step_types: bind_fast_path_types first");
        return NULL;
    }
    struct { PyTypeObject *cls; PyObject *name; Py_ssize_t *off; } fields[] = {
        {req_type, s_status, &off_status}, {req_type, s_num_prefix_hit_tokens, &off_num_prefix_hit_tokens},
        {req_type, s_first_scheduled_time_s, &off_first_scheduled_time_s},
        {req_type, s_next_check_len, &off_next_check_len}, {req_type, s_finish_time_s, &off_finish_time_s},
        {(PyTypeObject *)bcls, s_b_req, &off_b_req}, {(PyTypeObject *)bcls, s_b_num_tokens, &off_b_num_tokens},
        {(PyTypeObject *)bcls, s_b_need, &off_b_need}, {(PyTypeObject *)bcls, s_b_budget, &off_b_budget},
        {(PyTypeObject *)bcls, s_b_threshold, &off_b_threshold}, {(PyTypeObject *)bcls, s_b_watermark, &off_b_watermark},
        {(PyTypeObject *)bcls, s_b_first_hash, &off_b_first_hash},
        {(PyTypeObject *)bcls, s_b_num_chains, &off_b_num_chains},
        {plan_type, s_admitted_request_ids, &off_p_admitted_request_ids},
        {plan_type, s_num_new_prefix_hit_tokens, &off_p_num_new_prefix_hit_tokens},
        {plan_type, s_query, &off_p_query}, {plan_type, s_context, &off_p_context},
        {plan_type, s_num_blocks, &off_p_num_blocks}, {plan_type, s_num_kv_blocks_used, &off_p_num_kv_blocks_used},
        {plan_type, s_num_kv_blocks_total, &off_p_num_kv_blocks_total}, {plan_type, s_num_running, &off_p_num_running},
        {plan_type, s_num_waiting, &off_p_num_waiting},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (slot_offset(fields[i].cls, fields[i].name, fields[i].off) < 0) return NULL;
    /* The plan's slots, checked against `plan_fields` (in order, nothing more: a slot added to StepPlan makes
       `plan_new` call the class). */
    PyObject *slots = PyDict_GetItemString(plan_type->tp_dict, "__slots__");
    int direct = slots && PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == NUM_PLAN_FIELDS
        && plan_type->tp_base == &PyBaseObject_Type && !plan_type->tp_dictoffset;
    for (Py_ssize_t i = 0; direct && i < NUM_PLAN_FIELDS; i++) {
        PyObject *item = PyTuple_GET_ITEM(slots, i);
        direct = PyUnicode_Check(item) && PyUnicode_CompareWithASCIIString(item, plan_fields[i].name) == 0;
        if (!direct) break;
        PyObject *name = PyUnicode_InternFromString(plan_fields[i].name);
        int rc = name ? slot_offset(plan_type, name, &plan_offs[i]) : -1;
        Py_XDECREF(name);
        if (rc < 0) return NULL;
    }
    plan_direct = direct;
    PyObject *bslots = PyDict_GetItemString(((PyTypeObject *)bcls)->tp_dict, "__slots__");
    int bdirect = bslots && PyTuple_Check(bslots) && PyTuple_GET_SIZE(bslots) == 8
        && ((PyTypeObject *)bcls)->tp_base == &PyBaseObject_Type && !((PyTypeObject *)bcls)->tp_dictoffset;
    for (Py_ssize_t i = 0; bdirect && i < 8; i++) {
        PyObject *item = PyTuple_GET_ITEM(bslots, i);
        bdirect = PyUnicode_Check(item) && PyUnicode_CompareWithASCIIString(item, blocked_slots[i]) == 0;
    }
    blocked_direct = bdirect;
    Py_INCREF(bcls); Py_XSETREF(blocked_type, (PyTypeObject *)bcls);
    Py_INCREF(running); Py_XSETREF(status_running, running);
    Py_INCREF(waiting); Py_XSETREF(status_waiting, waiting);
    Py_INCREF(add); Py_XSETREF(py_add_request, add);
    return PyBool_FromLong(plan_direct && blocked_direct);
}

/* `StepPlan(step_index)`. */
static PyObject *plan_new(PyObject *step_index) {
    if (!plan_direct) return PyObject_CallOneArg((PyObject *)plan_type, step_index);
    PyObject *plan = plan_type->tp_alloc(plan_type, 0);
    if (!plan) return NULL;
    for (Py_ssize_t i = 0; i < NUM_PLAN_FIELDS; i++) {
        PyObject *v;
        switch (plan_fields[i].kind) {
            case K_INDEX: v = step_index; Py_INCREF(v); break;
            case K_LIST: v = PyList_New(0); break;
            case K_TUPLE: v = s_empty_tuple; Py_INCREF(v); break;
            case K_ZERO: v = s_zero; Py_INCREF(v); break;
            default: v = Py_None; Py_INCREF(v); break;
        }
        if (!v) { Py_DECREF(plan); return NULL; }
        *(PyObject **)((char *)plan + plan_offs[i]) = v;  /* (the slot was NULL) */
    }
    return plan;
}

/* An int slot's value plus `delta`, written back (the plan's counters). */
static int add_to_int(PyObject *o, PyTypeObject *t, Py_ssize_t off, PyObject *name, Py_ssize_t delta) {
    if (!delta) return 0;
    PyObject *v = obj_get(o, t, off, name);
    if (!v) return -1;
    Py_ssize_t x = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    return obj_set_new(o, t, off, name, PyLong_FromSsize_t(x + delta));
}

static int attr_ssize(PyObject *o, const char *name, Py_ssize_t *out) {
    PyObject *v = PyObject_GetAttrString(o, name);
    if (!v) return -1;
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The scheduler's config, read again if it is another object than last time (a frozen dataclass). */
static int fp_config(FP *f) {
    PyObject *config = PyObject_GetAttr(f->sched, s_config);
    if (!config) return -1;
    if (config == f->config) { Py_DECREF(config); return 0; }
    PyObject *v;
    int rc = 0;
    rc |= attr_ssize(config, "max_num_batched_tokens", &f->max_num_batched_tokens);
    rc |= attr_ssize(config, "long_prefill_token_threshold", &f->long_prefill_token_threshold);
    rc |= attr_ssize(config, "max_num_seqs", &f->max_num_seqs);
    rc |= attr_ssize(config, "max_model_len", &f->max_model_len);
    if (rc < 0) { Py_DECREF(config); return -1; }
    if (!(v = PyObject_GetAttrString(config, "enable_chunked_prefill"))
            || (f->chunked = PyObject_IsTrue(v), Py_DECREF(v), f->chunked < 0)
            || !(v = PyObject_GetAttrString(config, "scheduler_reserve_full_isl"))
            || (f->reserve_full_isl = PyObject_IsTrue(v), Py_DECREF(v), f->reserve_full_isl < 0)) {
        Py_DECREF(config);
        return -1;
    }
    Py_XSETREF(f->config, config);
    return 0;
}

/* `_Blocked.holds(sched, budget, threshold)`: 1 holds, 0 not, -1 error. */
static int blocked_holds(KV *kv, PyObject *b, PyObject *req, Py_ssize_t budget, Py_ssize_t threshold,
                         Py_ssize_t num_running) {
    Pool *pool = kv->pool;
    PyObject *v;
    Py_ssize_t x;
#define B_SSIZE(field) (v = BGET(b, field), v ? (x = PyLong_AsSsize_t(v), Py_DECREF(v), x) : -1)
    if ((x = B_SSIZE(need)) == -1 && PyErr_Occurred()) return -1;
    if (!(pool->num_free < x)) return 0;
    Py_ssize_t nt = req_num_tokens(req);
    if (nt == -1 && PyErr_Occurred()) return -1;
    if ((x = B_SSIZE(num_tokens)) == -1 && PyErr_Occurred()) return -1;
    if (nt != x) return 0;
    if ((x = B_SSIZE(budget)) == -1 && PyErr_Occurred()) return -1;
    if (!(budget >= x)) return 0;
    if ((x = B_SSIZE(threshold)) == -1 && PyErr_Occurred()) return -1;
    if (threshold != x) return 0;
#undef B_SSIZE
    if (!(v = BGET(b, watermark))) return -1;
    int w = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (w < 0) return -1;
    if ((num_running > 0) != w) return 0;
    if (!(v = BGET(b, first_hash))) return -1;
    if (v != Py_None) {
        int hit = PyDict_Contains(pool->starts, v);
        Py_DECREF(v);
        if (hit) return hit < 0 ? -1 : 0;
    } else {
        Py_DECREF(v);
    }
    if (!(v = BGET(b, num_chains))) return -1;
    if (v == Py_None) { Py_DECREF(v); return 1; }
    x = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    return pool->num_chains_made == x;
}

/* `_Blocked.of(sched, req, budget, threshold)` after `req`'s allocation failed (its lookup just done): the new
   `_Blocked` (its slots filled here while the class has exactly `blocked_slots`, else through the class), or None when
   its failure cannot be carried over. */
static PyObject *blocked_new(FP *f, PyObject *req, Py_ssize_t budget, Py_ssize_t threshold, Py_ssize_t num_running) {
    KV *kv = (KV *)f->kv;
    Pool *pool = kv->pool;
    Py_ssize_t nt = req_num_tokens(req);
    if (nt == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t max_num_blocks = nt >= 1 ? (nt - 1) / kv->block_size : -1;
    PyObject *first_hash = Py_None, *num_chains = Py_None, *hashes = NULL;
    Py_INCREF(first_hash); Py_INCREF(num_chains);
    PyObject *vals[8] = {NULL}, *result = NULL;
    if (kv->enable_caching && max_num_blocks > 0) {
        if (!(hashes = RGET(req, block_hashes))) goto done;
        Py_SETREF(first_hash, PySequence_GetItem(hashes, 0));
        if (!first_hash) goto done;
        int hit = PyDict_Contains(pool->starts, first_hash);
        if (hit < 0) goto done;
        if (hit) {  /* then the lookup hashed all it compares */
            int closed = f->reserve_full_isl ? pool_candidates_closed(pool, hashes, max_num_blocks) : 0;
            if (closed < 0) goto done;
            if (!closed) { Py_INCREF(Py_None); result = Py_None; goto done; }
            Py_INCREF(Py_None);
            Py_SETREF(first_hash, Py_None);
            Py_SETREF(num_chains, PyLong_FromLongLong(pool->num_chains_made));
            if (!num_chains) goto done;
        }
    }
    vals[0] = req; Py_INCREF(req);
    vals[1] = PyLong_FromSsize_t(nt);
    vals[2] = PyLong_FromSsize_t(kv->failed_need);
    vals[3] = PyLong_FromSsize_t(budget);
    vals[4] = PyLong_FromSsize_t(threshold);
    vals[5] = num_running > 0 ? Py_True : Py_False; Py_INCREF(vals[5]);
    vals[6] = first_hash; first_hash = NULL;
    vals[7] = num_chains; num_chains = NULL;
    for (int i = 1; i < 5; i++) if (!vals[i]) goto done;
    if (!blocked_direct) {
        PyObject *args[7] = {vals[0], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7]};  /* (its __init__) */
        result = PyObject_Vectorcall((PyObject *)blocked_type, args, 7, NULL);
        goto done;
    }
    if (!(result = blocked_type->tp_alloc(blocked_type, 0))) goto done;
    Py_ssize_t offs[8] = {off_b_req, off_b_num_tokens, off_b_need, off_b_budget, off_b_threshold, off_b_watermark,
                          off_b_first_hash, off_b_num_chains};
    for (int i = 0; i < 8; i++) {
        *(PyObject **)((char *)result + offs[i]) = vals[i];  /* (steals; the slot was NULL) */
        vals[i] = NULL;
    }
done:
    for (int i = 0; i < 8; i++) Py_XDECREF(vals[i]);
    Py_XDECREF(first_hash); Py_XDECREF(num_chains); Py_XDECREF(hashes);
    return result;
}

/* Write `req.num_computed_tokens = value` (the property's setter: the columns must not hold the request). */
static int req_set_computed(PyObject *req, Py_ssize_t value) {
    PyObject *cols = req_slot(req, off_cols);
    if (cols && cols != Py_None) {
        PyErr_SetString(PyExc_AssertionError, "the fast path's columns hold this request's counters");
        return -1;
    }
    if (!cols) return obj_set_new(req, NULL, 0, s_num_computed_tokens, PyLong_FromSsize_t(value));
    return RSET_SSIZE(req, num_computed, value);
}

/* `Scheduler._schedule_waiting(plan, budget, threshold, now_s)` for FCFS: admit waiting requests in queue order until
   one does not fit (with `_admit`, `_add_to_plan` and `StepPlan.add_seq`). */
static int fp_schedule_waiting(FP *f, PyObject *plan, PyObject *running, PyObject *waiting, Py_ssize_t budget,
                               Py_ssize_t threshold, PyObject *now) {
    KV *kv = (KV *)f->kv;
    PyObject *sched = f->sched;
    Py_ssize_t nwait = PyObject_Size(waiting);
    if (nwait < 0) return -1;
    if (!nwait || budget <= 0 || PyList_GET_SIZE(running) >= f->max_num_seqs) return 0;  /* (admitted: ()) */
    PyObject *blocked = PyObject_GetAttr(sched, s_blocked), *req = NULL, *hits = NULL, *admitted = NULL;
    PyObject *requests = NULL, *query = NULL, *context = NULL, *emits = NULL, *num_blocks = NULL;
    if (!blocked) return -1;
    Py_ssize_t d_batched = 0, d_prefill = 0, d_decode = 0, d_hit = 0, d_first = 0, d_emit = 0, d_seqs = 0;
    int rc = -1;
    while (nwait > 0 && budget > 0 && PyList_GET_SIZE(running) < f->max_num_seqs) {
        if (!(req = PySequence_GetItem(waiting, 0))) goto done;
        if (blocked != Py_None) {
            PyObject *breq = BGET(blocked, req);
            if (!breq) goto done;
            Py_DECREF(breq);
            if (breq == req) {
                int h = blocked_holds(kv, blocked, req, budget, threshold, PyList_GET_SIZE(running));
                if (h < 0) goto done;
                if (h) break;  /* the same head fails again (the usual step of a full cache) */
            }
        }
        if (kv_lookup(kv, req, &hits) < 0) goto done;
        Py_ssize_t num_hit = hits ? PyList_GET_SIZE(hits) * kv->block_size : 0;
        Py_ssize_t nt = req_num_tokens(req);
        if (nt == -1 && PyErr_Occurred()) goto done;
        Py_ssize_t num_new = nt - num_hit;
        if (0 < threshold && threshold < num_new) num_new = threshold;
        if (!f->chunked && num_new > budget) break;
        if (num_new > budget) num_new = budget;
        int ok = kv_allocate_slots(kv, req, num_new, hits, f->reserve_full_isl, PyList_GET_SIZE(running) > 0);
        if (ok < 0) goto done;
        Py_CLEAR(hits);
        if (!ok) {
            PyObject *nb = blocked_new(f, req, budget, threshold, PyList_GET_SIZE(running));
            if (!nb) goto done;
            int r = PyObject_SetAttr(sched, s_blocked, nb);
            Py_DECREF(nb);
            if (r < 0) goto done;
            break;
        }
        PyObject *popped = PyObject_CallMethodNoArgs(waiting, s_popleft);
        if (!popped) goto done;
        Py_DECREF(popped);
        nwait--;
        /* `_admit` */
        if (PyList_Append(running, req) < 0) goto done;
        Py_ssize_t num_prompt = RGET_SSIZE(req, num_prompt_tokens);
        if (num_prompt == -1 && PyErr_Occurred()) goto done;
        d_first += nt == num_prompt;
        if (FSET(req, status, status_running) < 0 || req_set_computed(req, num_hit) < 0) goto done;
        PyObject *v = FGET(req, num_prefix_hit_tokens);
        if (!v) goto done;
        Py_DECREF(v);
        if (v == Py_None && FSET_NEW(req, num_prefix_hit_tokens, PyLong_FromSsize_t(num_hit)) < 0) goto done;
        if (now != Py_None) {
            if (!(v = FGET(req, first_scheduled_time_s))) goto done;
            Py_DECREF(v);
            if (v == Py_None && FSET(req, first_scheduled_time_s, now) < 0) goto done;
        }
        /* `_add_to_plan`: `StepPlan.add_seq(req, num_new)`, then the computed tokens advance */
        if (!requests) {
            if (!(requests = PGET(plan, requests)) || !(query = PGET(plan, query)) || !(context = PGET(plan, context))
                    || !(emits = PGET(plan, emits)) || !(num_blocks = PGET(plan, num_blocks))
                    || !(admitted = PyList_New(0)))
                goto done;
        }
        PyObject *ids = RGET(req, block_ids);
        Py_ssize_t held = ids ? PyObject_Length(ids) : -1;
        Py_XDECREF(ids);
        if (held < 0) goto done;
        if (PyList_Append(requests, req) < 0) goto done;
        d_seqs++;
        PyObject *q = PyLong_FromSsize_t(num_new), *c = PyLong_FromSsize_t(num_hit), *nbk = PyLong_FromSsize_t(held);
        int r = q && c && nbk ? 0 : -1;
        if (!r) r = PyList_Append(query, q);
        if (!r) r = PyList_Append(context, c);
        if (!r) r = PyList_Append(emits, num_hit + num_new == nt ? Py_True : Py_False);
        d_emit += num_hit + num_new == nt;
        if (!r) r = PyList_Append(num_blocks, nbk);
        Py_XDECREF(q); Py_XDECREF(c); Py_XDECREF(nbk);
        if (r < 0) goto done;
        d_batched += num_new;
        if (num_new == 1 && num_hit >= num_prompt) d_decode++; else d_prefill += num_new;
        if (req_set_computed(req, num_hit + num_new) < 0) goto done;
        d_hit += num_hit;
        PyObject *rid = FGET(req, request_id);
        r = rid ? PyList_Append(admitted, rid) : -1;
        Py_XDECREF(rid);
        if (r < 0) goto done;
        budget -= num_new;
        Py_CLEAR(req);
    }
    if (admitted && PSET_NEW(plan, admitted_request_ids, PyList_AsTuple(admitted)) < 0) goto done;
    if (add_to_int(plan, plan_type, off_p_num_batched_tokens, s_num_batched_tokens, d_batched) < 0
            || add_to_int(plan, plan_type, off_p_num_prefill_tokens, s_num_prefill_tokens, d_prefill) < 0
            || add_to_int(plan, plan_type, off_p_num_decode_tokens, s_num_decode_tokens, d_decode) < 0
            || add_to_int(plan, plan_type, off_p_num_new_prefix_hit_tokens, s_num_new_prefix_hit_tokens, d_hit) < 0
            || add_to_int(plan, plan_type, off_p_num_emitting_seqs, s_num_emitting_seqs, d_emit) < 0
            || add_to_int(plan, plan_type, off_p_num_seqs, s_num_seqs, d_seqs) < 0
            || add_to_int(sched, NULL, 0, s_num_running_without_output, d_first) < 0)
        goto done;
    rc = 0;
done:
    Py_XDECREF(req);
    Py_XDECREF(hits);
    Py_XDECREF(blocked);
    Py_XDECREF(admitted);
    Py_XDECREF(requests);
    Py_XDECREF(query);
    Py_XDECREF(context);
    Py_XDECREF(emits);
    Py_XDECREF(num_blocks);
    return rc;
}

/* `Scheduler.schedule(now_s)`. */
static PyObject *FP_schedule_step(FP *f, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs > 1) { PyErr_SetString(PyExc_TypeError, "schedule_step(now_s=None)"); return NULL; }
    PyObject *now = nargs ? args[0] : Py_None, *sched = f->sched;
    PyObject *pending = PyObject_GetAttr(sched, s_pending);
    if (!pending) return NULL;
    Py_DECREF(pending);
    if (pending != Py_None) {
        PyErr_SetString(PyExc_AssertionError, "update_from_output() must follow every non-empty schedule()");
        return NULL;
    }
    if (fp_config(f) < 0) return NULL;
    PyObject *num_steps = PyObject_GetAttr(sched, s_num_steps), *plan = NULL, *running = NULL, *waiting = NULL;
    PyObject *b = NULL, *t = NULL, *r = NULL, *v = NULL, *result = NULL;
    if (!num_steps || !(plan = plan_new(num_steps))) goto done;
    if (!(running = PyObject_GetAttr(sched, s_running)) || !(waiting = PyObject_GetAttr(sched, s_waiting))) goto done;
    if (!PyList_CheckExact(running)) { PyErr_SetString(PyExc_TypeError, "Scheduler.running: a list"); goto done; }
    Py_ssize_t nwait = PyObject_Size(waiting);
    if (nwait < 0) goto done;
    Py_ssize_t threshold = f->long_prefill_token_threshold, budget = f->max_num_batched_tokens;
    if (PyList_GET_SIZE(running) + nwait <= 1) threshold = 0;  /* no one to starve (vLLM) */
    if (!(b = PyLong_FromSsize_t(budget)) || !(t = PyLong_FromSsize_t(threshold))) goto done;
    PyObject *sr_args[3] = {plan, b, t};
    if (!(r = FP_schedule_running(f, sr_args, 3))) goto done;
    int done_running = PyObject_IsTrue(r);
    Py_CLEAR(r);
    if (done_running < 0) goto done;
    if (!done_running && !(r = PyObject_CallMethodObjArgs(sched, s_schedule_running_py, plan, b, t, NULL))) goto done;
    Py_CLEAR(r);
    Py_SETREF(running, PyObject_GetAttr(sched, s_running));  /* (the same list: preemptions pop from it) */
    if (!running) goto done;
    if (!PyList_CheckExact(running)) { PyErr_SetString(PyExc_TypeError, "Scheduler.running: a list"); goto done; }
    if (!(v = PGET(plan, preempted_request_ids))) goto done;
    int preempted = PyObject_IsTrue(v);
    Py_CLEAR(v);
    if (preempted < 0) goto done;
    if (!preempted) {
        if (!(v = PGET(plan, num_batched_tokens))) goto done;
        Py_ssize_t nb = PyLong_AsSsize_t(v);
        Py_CLEAR(v);
        if (nb == -1 && PyErr_Occurred()) goto done;
        if (fp_schedule_waiting(f, plan, running, waiting, budget - nb, threshold, now) < 0) goto done;
    }
    Pool *pool = ((KV *)f->kv)->pool;
    if (PSET_NEW(plan, num_kv_blocks_used, PyLong_FromSsize_t(pool->num_blocks - 1 - pool->num_free)) < 0
            || PSET_NEW(plan, num_kv_blocks_total, PyLong_FromSsize_t(pool->num_blocks - 1)) < 0
            || PSET_NEW(plan, num_running, PyLong_FromSsize_t(PyList_GET_SIZE(running))) < 0)
        goto done;
    if ((nwait = PyObject_Size(waiting)) < 0 || PSET_NEW(plan, num_waiting, PyLong_FromSsize_t(nwait)) < 0) goto done;
    if (!(v = PGET(plan, requests))) goto done;
    int nonempty = PyObject_IsTrue(v);
    Py_CLEAR(v);
    if (nonempty < 0) goto done;
    if (nonempty) {
        if (PyObject_SetAttr(sched, s_pending, plan) < 0) goto done;
        Py_ssize_t n = PyLong_AsSsize_t(num_steps);
        if (n == -1 && PyErr_Occurred()) goto done;
        if (!(v = PyLong_FromSsize_t(n + 1)) || PyObject_SetAttr(sched, s_num_steps, v) < 0) goto done;
    }
    Py_INCREF(plan);
    result = plan;
done:
    Py_XDECREF(num_steps); Py_XDECREF(plan); Py_XDECREF(running); Py_XDECREF(waiting);
    Py_XDECREF(b); Py_XDECREF(t); Py_XDECREF(r); Py_XDECREF(v);
    return result;
}

/* `Scheduler.update_from_output(plan, sampled, now_s)`. */
static PyObject *FP_update_step(FP *f, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "update_step(plan, sampled, now_s=None)");
        return NULL;
    }
    PyObject *plan = args[0], *sampled = args[1], *now = nargs > 2 ? args[2] : Py_None, *sched = f->sched;
    PyObject *v = PGET(plan, requests);
    if (!v) return NULL;
    int nonempty = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (nonempty <= 0) return nonempty < 0 ? NULL : PyList_New(0);
    PyObject *pending = PyObject_GetAttr(sched, s_pending);
    if (!pending) return NULL;
    Py_DECREF(pending);
    if (pending != plan) {
        PyErr_SetString(PyExc_AssertionError, "update_from_output() takes the plan of the last schedule()");
        return NULL;
    }
    if (PyObject_SetAttr(sched, s_pending, Py_None) < 0) return NULL;
    if (PyLong_Check(sampled)) {
        PyObject *aborted = PyObject_GetAttr(sched, s_pending_aborted);
        if (!aborted) return NULL;
        int a = PyObject_IsTrue(aborted);
        Py_DECREF(aborted);
        if (a < 0) return NULL;
        if (!a) {
            PyObject *up_args[3] = {plan, sampled, now};
            f->in_step = 1;
            PyObject *finished = FP_update(f, up_args, 3);
            f->in_step = 0;
            if (finished != Py_None) return finished;  /* (or NULL) */
            Py_DECREF(finished);
        }
    }
    PyObject *r = PyObject_CallMethodNoArgs((PyObject *)f, s_flush);
    if (!r) return NULL;
    Py_DECREF(r);
    return PyObject_CallMethodObjArgs(sched, s_update_lists, plan, sampled, now, NULL);
}

/* `Scheduler.add_request(req)` where every check passes (else the Python method, which raises the error): its stop
   rules precomputed, queued, indexed by id. */
static PyObject *FP_add_request_step(FP *f, PyObject *req) {
    PyObject *sched = f->sched, *requests = NULL, *sampling = NULL, *v = NULL, *key = NULL, *stop = NULL;
    PyObject *stop_sets = NULL, *waiting = NULL, *rid = NULL, *result = NULL;
    if (fp_config(f) < 0) return NULL;
    if (!(requests = PyObject_GetAttr(sched, s_requests)) || !(rid = FGET(req, request_id))) goto done;
    int known = PyDict_Check(requests) ? PyDict_Contains(requests, rid) : 1;
    if (known < 0) goto done;
    PyObject *status = req_slot(req, off_status);
    Py_ssize_t nc = req_num_computed(req);
    if (nc == -1 && PyErr_Occurred()) goto done;
    Py_ssize_t nt = req_num_tokens(req), np_ = RGET_SSIZE(req, num_prompt_tokens);
    if ((nt == -1 || np_ == -1) && PyErr_Occurred()) goto done;
    if (!(sampling = PyObject_GetAttr(req, s_sampling)) || !(v = PyObject_GetAttr(sampling, s_max_tokens))) goto done;
    Py_ssize_t max_tokens = PyLong_AsSsize_t(v);
    Py_CLEAR(v);
    if (max_tokens == -1 && PyErr_Occurred()) goto done;
    Py_ssize_t max_len = np_ + max_tokens < f->max_model_len ? np_ + max_tokens : f->max_model_len;
    KV *kv = (KV *)f->kv;
    if (known || status != status_waiting || nc || nt != np_ || np_ >= f->max_model_len
            || CEIL_DIV(max_len, kv->block_size) > kv->pool->num_blocks - 1 || !PyDict_CheckExact(requests)) {
        result = PyObject_CallFunctionObjArgs(py_add_request, sched, req, NULL);  /* (raises the error) */
        goto done;
    }
    if (FSET_NEW(req, max_num_tokens, PyLong_FromSsize_t(max_len)) < 0) goto done;
    if (!(v = PyObject_GetAttr(sampling, s_ignore_eos))) goto done;
    int ignore_eos = PyObject_IsTrue(v);
    Py_CLEAR(v);
    if (ignore_eos < 0) goto done;
    PyObject *eos = Py_None;
    if (!ignore_eos && !(v = eos = PyObject_GetAttr(req, s_eos_token_id))) goto done;
    PyObject *ids = PyObject_GetAttr(sampling, s_stop_token_ids);
    PyObject *ids_tuple = ids ? PySequence_Tuple(ids) : NULL;
    Py_XDECREF(ids);
    if (!ids_tuple) goto done;
    key = PyTuple_Pack(2, ids_tuple, eos);
    Py_DECREF(ids_tuple);
    Py_CLEAR(v);
    if (!key || !(stop_sets = PyObject_GetAttr(sched, s_stop_sets))) goto done;
    if (!PyDict_Check(stop_sets)) { PyErr_SetString(PyExc_TypeError, "Scheduler._stop_sets: a dict"); goto done; }
    stop = PyDict_GetItemWithError(stop_sets, key);
    if (stop) {
        Py_INCREF(stop);
    } else {  /* frozenset(stop_token_ids) | ({eos} or nothing): one set per kind of request */
        if (PyErr_Occurred()) goto done;
        if (!(stop = PyFrozenSet_New(PyTuple_GET_ITEM(key, 0)))) goto done;
        if (PyTuple_GET_ITEM(key, 1) != Py_None && PySet_Add(stop, PyTuple_GET_ITEM(key, 1)) < 0) goto done;
        if (PyDict_SetItem(stop_sets, key, stop) < 0) goto done;
    }
    if (FSET(req, stop_token_set, stop) < 0 || FSET_NEW(req, next_check_len, PyLong_FromSsize_t(np_ + 1)) < 0) goto done;
    if (!(waiting = PyObject_GetAttr(sched, s_waiting))) goto done;
    if (!(v = PyObject_CallMethodOneArg(waiting, s_append, req))) goto done;
    Py_CLEAR(v);
    if (PyDict_SetItem(requests, rid, req) < 0) goto done;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(requests); Py_XDECREF(rid); Py_XDECREF(sampling); Py_XDECREF(v); Py_XDECREF(key); Py_XDECREF(stop);
    Py_XDECREF(stop_sets); Py_XDECREF(waiting);
    return result;
}

/* ---- a lazy request made in C (`Request.lazy`: `Request.__init__` and `_init_fields` in Python) ----

   Every slot of `engine.core.request.Request` set as `_init_fields` sets it, then its prompt source and length, while
   the class has exactly these slots in this order (`bind_lazy_request` checks; otherwise `Request.lazy` stays the
   Python code's). */
enum { RK_WAITING, RK_NO_BLOCK_IDS, RK_LIST, RK_ZERO, RK_NONE, RK_FROZENSET, R_ARG0 = 100 };  /* R_ARG0 + i: argument i */
static const struct { const char *name; int kind; } request_fields[] = {
    {"request_id", R_ARG0 + 0}, {"sampling", R_ARG0 + 3}, {"arrival_time_s", R_ARG0 + 4},
    {"eos_token_id", R_ARG0 + 5}, {"priority", R_ARG0 + 6}, {"num_prompt_tokens", R_ARG0 + 1}, {"status", RK_WAITING},
    {"block_ids", RK_LIST}, {"block_ids_head", RK_NO_BLOCK_IDS}, {"block_hashes", RK_LIST}, {"num_cached_blocks", RK_ZERO},
    {"cache_chain", RK_NONE}, {"sliding_block_ids", RK_LIST}, {"sliding_first_block", RK_ZERO},
    {"max_num_tokens", RK_ZERO}, {"stop_token_set", RK_FROZENSET}, {"next_check_len", RK_ZERO},
    {"first_scheduled_time_s", RK_NONE}, {"finish_time_s", RK_NONE}, {"num_preemptions", RK_ZERO},
    {"num_prefix_hit_tokens", RK_NONE}, {"_prompt", RK_NONE}, {"_prompt_source", R_ARG0 + 2}, {"_output_ids", RK_LIST},
    {"_num_computed", RK_ZERO}, {"_token_times", RK_LIST}, {"_times_array", RK_NONE}, {"_cols", RK_NONE},
    {"_col_off", RK_NONE}, {"_col_seq", RK_ZERO},
};
#define NUM_REQUEST_FIELDS ((Py_ssize_t)(sizeof(request_fields) / sizeof(request_fields[0])))
static Py_ssize_t request_offs[NUM_REQUEST_FIELDS];
static PyTypeObject *lazy_type;
static PyObject *lazy_waiting, *lazy_no_block_ids, *empty_frozenset;

/* new_lazy_request(request_id, num_prompt_tokens, prompt_source, sampling, arrival_time_s, eos_token_id, priority) */
static PyObject *mod_new_lazy_request(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !lazy_type) {
        PyErr_SetString(PyExc_TypeError, nargs != 7 ? "new_lazy_request takes 7 arguments" : "bind_lazy_request first");
        return NULL;
    }
    PyObject *req = lazy_type->tp_alloc(lazy_type, 0);
    if (!req) return NULL;
    for (Py_ssize_t i = 0; i < NUM_REQUEST_FIELDS; i++) {
        int kind = request_fields[i].kind;
        PyObject *v;
        if (kind >= R_ARG0) v = args[kind - R_ARG0];
        else if (kind == RK_WAITING) v = lazy_waiting;
        else if (kind == RK_NO_BLOCK_IDS) v = lazy_no_block_ids;
        else if (kind == RK_ZERO) v = s_zero;
        else if (kind == RK_FROZENSET) v = empty_frozenset;
        else if (kind == RK_LIST) v = NULL;
        else v = Py_None;
        if (v) Py_INCREF(v);
        else if (!(v = PyList_New(0))) { Py_DECREF(req); return NULL; }
        *(PyObject **)((char *)req + request_offs[i]) = v;  /* (the slot was NULL) */
    }
    return req;
}

/* bind_lazy_request(Request, RequestStatus.WAITING, NO_BLOCK_IDS): `new_lazy_request` where Request's slots are the
   ones it fills (in order), else None. */
static PyObject *mod_bind_lazy_request(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *cls, *waiting, *nbi;
    if (!PyArg_ParseTuple(args, "O!OO", &PyType_Type, &cls, &waiting, &nbi)) return NULL;
    PyTypeObject *t = (PyTypeObject *)cls;
    PyObject *slots = PyDict_GetItemString(t->tp_dict, "__slots__");
    int ok = slots && PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == NUM_REQUEST_FIELDS
        && t->tp_base == &PyBaseObject_Type && !t->tp_dictoffset;
    for (Py_ssize_t i = 0; ok && i < NUM_REQUEST_FIELDS; i++) {
        PyObject *item = PyTuple_GET_ITEM(slots, i);
        ok = PyUnicode_Check(item) && PyUnicode_CompareWithASCIIString(item, request_fields[i].name) == 0;
        if (!ok) break;
        PyObject *name = PyUnicode_InternFromString(request_fields[i].name);
        int rc = name ? slot_offset(t, name, &request_offs[i]) : -1;
        Py_XDECREF(name);
        if (rc < 0) return NULL;
    }
    if (!ok) Py_RETURN_NONE;
    if (!empty_frozenset && !(empty_frozenset = PyFrozenSet_New(NULL))) return NULL;
    Py_INCREF(cls); Py_XSETREF(lazy_type, t);
    Py_INCREF(waiting); Py_XSETREF(lazy_waiting, waiting);
    Py_INCREF(nbi); Py_XSETREF(lazy_no_block_ids, nbi);
    static PyMethodDef def = {"new_lazy_request", (PyCFunction)(void (*)(void))mod_new_lazy_request, METH_FASTCALL,
                              "new_lazy_request(request_id, num_prompt_tokens, prompt_source, sampling, arrival_time_s, "
                              "eos_token_id, priority): `Request.lazy` without its checks."};
    return PyCFunction_New(&def, NULL);
}

/* ---- the simulator's requests and prompts made in C (roofline/sim/workload.py, the reference) ----

   `PromptSources(stream, specs, gen, made, ndarray)`: `PromptStream.source` of the PromptStream `stream` (its specs,
   its factory's TokenIdGenerator, its dict of prompts made ahead): called with a spec's index, a `PromptSource`,
   which, called, gives the prompt `PromptStream._prompt(index)` gives. In C where the prompt is the next one in spec
   order, of a spec with no shared prefix, session or trace blocks, and the generator's ids drawn ahead hold it
   (`TokenIdGenerator.unique_array`: a read-only view of them, the same ids, `_ahead_pos` and `_next` advanced as
   the Python code advances them); else `stream._prompt(index)` itself. A `PromptSource` keeps what it gave: a
   second call gives the same array (what the Python code checks, where `load_lazy_prompt` found it not ready).
   `load_lazy_prompt(req)` (the scheduler's first read of a lazy request's prompt, `Request.prompt_array`): a
   `PromptSource`'s prompt checked and kept as `Request._load_prompt` does, without its Python frames (a view of the
   ids drawn ahead is not scanned for an id below 0: `TokenIdGenerator._draw` makes none).
   `LazyRequests(sampling, make_sampling, eos_token_id, lazy)`: `RequestFactory.lazy(spec, prompt_source,
   arrival_s)` with its dict of SamplingParams by output length, `make_sampling(n)` making one, and `Request.lazy`
   (called where num_prompt_tokens is not an int >= 1: its error). */

static PyObject *s_next, *s_ahead, *s_ahead_pos, *s_prompt_method, *s_block_ids_spec, *s_prefix_group, *s_session_id,
    *s_num_output_tokens;

typedef struct {
    PyObject_HEAD
    PyObject *stream;  /* a weak reference: the stream holds this object as its `source` */
    PyObject *specs, *gen, *made, *ndarray;
} PromptSources;

typedef struct {
    PyObject_HEAD
    PromptSources *owner;
    PyObject *stream;  /* (as `functools.partial(stream._prompt, index)` holds it) */
    Py_ssize_t index;
    PyObject *ids;  /* what the first call gave (NULL before) */
    int drawn;      /* ids is a view of the generator's ids drawn ahead (`prompt_in_c`): every id in [0, vocab) */
} PromptSource;

static PyTypeObject PromptSourcesType, PromptSourceType;

static int PS_traverse(PromptSources *o, visitproc visit, void *arg) {
    Py_VISIT(o->stream); Py_VISIT(o->specs); Py_VISIT(o->gen); Py_VISIT(o->made); Py_VISIT(o->ndarray);
    return 0;
}
static int PS_clear(PromptSources *o) {
    Py_CLEAR(o->stream); Py_CLEAR(o->specs); Py_CLEAR(o->gen); Py_CLEAR(o->made); Py_CLEAR(o->ndarray);
    return 0;
}
static void PS_dealloc(PromptSources *o) {
    PyObject_GC_UnTrack(o);
    PS_clear(o);
    Py_TYPE(o)->tp_free((PyObject *)o);
}
static int PS_init(PromptSources *o, PyObject *args, PyObject *kw) {
    PyObject *stream, *specs, *gen, *made, *ndarray;
    if (!PyArg_ParseTuple(args, "OOOO!O!", &stream, &specs, &gen, &PyDict_Type, &made, &PyType_Type, &ndarray))
        return -1;
    PyObject *ref = PyWeakref_NewRef(stream, NULL);
    if (!ref) return -1;
    Py_XSETREF(o->stream, ref);
    Py_INCREF(specs); Py_XSETREF(o->specs, specs);
    Py_INCREF(gen); Py_XSETREF(o->gen, gen);
    Py_INCREF(made); Py_XSETREF(o->made, made);
    Py_INCREF(ndarray); Py_XSETREF(o->ndarray, ndarray);
    return 0;
}
static PyObject *PS_call(PromptSources *o, PyObject *args, PyObject *kw) {
    Py_ssize_t index;
    if (kw && PyDict_GET_SIZE(kw)) { PyErr_SetString(PyExc_TypeError, "source(index)"); return NULL; }
    if (!PyArg_ParseTuple(args, "n", &index)) return NULL;
    PyObject *stream = o->stream ? PyWeakref_GetObject(o->stream) : NULL;  /* (borrowed) */
    if (!stream || stream == Py_None) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "PromptSources: no stream");
        return NULL;
    }
    PromptSource *src = PyObject_New(PromptSource, &PromptSourceType);
    if (!src) return NULL;
    Py_INCREF(o);
    src->owner = o;
    Py_INCREF(stream);
    src->stream = stream;
    src->index = index;
    src->ids = NULL;
    src->drawn = 0;
    return (PyObject *)src;
}

/* An attribute that is None (1), is not (0), or an error (-1). */
static int attr_is_none(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) return -1;
    Py_DECREF(v);
    return v == Py_None;
}

/* An attribute's value as a Py_ssize_t >= 0 where it is exactly an int; -1 otherwise (-2 with an error). */
static Py_ssize_t attr_count(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) return -2;
    Py_ssize_t n = -1;
    if (PyLong_CheckExact(v)) {
        n = PyLong_AsSsize_t(v);
        if (n == -1 && PyErr_Occurred()) { PyErr_Clear(); n = -1; }
        if (n < 0) n = -1;
    }
    Py_DECREF(v);
    return n;
}

/* `PromptStream._prompt(index)` where it is the next unique prompt the ids drawn ahead hold (see above): a new
   reference; NULL without an error where the Python code is to make it; NULL with one on an error. */
static PyObject *prompt_in_c(PromptSources *o, PyObject *stream, Py_ssize_t index) {
    Py_ssize_t next = attr_count(stream, s_next);
    if (next != index) {  /* (not the next prompt: the Python code makes those before it, and keeps them) */
        if (next == -2) PyErr_Clear();
        return NULL;
    }
    PyObject *spec = PySequence_GetItem(o->specs, index);
    if (!spec) { PyErr_Clear(); return NULL; }  /* (the Python code raises it) */
    PyObject *ids = NULL, *ahead = NULL;
    int plain = 1;
    PyObject *names[3] = {s_block_ids_spec, s_prefix_group, s_session_id};
    for (int i = 0; plain == 1 && i < 3; i++) plain = attr_is_none(spec, names[i]);
    if (plain != 1) goto done;
    Py_ssize_t n = attr_count(spec, s_num_prompt_tokens);
    if (n < 0) goto done;
    Py_ssize_t pos = attr_count(o->gen, s_ahead_pos);
    if (pos < 0) goto done;
    if (!(ahead = PyObject_GetAttr(o->gen, s_ahead))) goto done;
    if ((PyObject *)Py_TYPE(ahead) != o->ndarray) goto done;
    Py_ssize_t len = PyObject_Length(ahead);
    if (len < 0 || pos + n > len) goto done;  /* (a draw: the Python code) */
    PyObject *start = PyLong_FromSsize_t(pos), *stop = PyLong_FromSsize_t(pos + n);
    PyObject *slice = start && stop ? PySlice_New(start, stop, NULL) : NULL;
    Py_XDECREF(start);
    PyObject *view = slice ? PyObject_GetItem(ahead, slice) : NULL;
    Py_XDECREF(slice);
    PyObject *next_o = view ? PyLong_FromSsize_t(next + 1) : NULL;
    if (!next_o || PyObject_SetAttr(o->gen, s_ahead_pos, stop) < 0 || PyObject_SetAttr(stream, s_next, next_o) < 0) {
        Py_XDECREF(stop); Py_XDECREF(view); Py_XDECREF(next_o);
        goto done;
    }
    Py_DECREF(stop);
    Py_DECREF(next_o);
    ids = view;
done:
    Py_XDECREF(ahead);
    Py_DECREF(spec);
    if (!ids && PyErr_Occurred()) PyErr_Clear();  /* (the Python code meets the same error, and raises it) */
    return ids;
}

static PyObject *source_ids(PromptSource *src) {  /* new reference */
    if (!src->ids) {
        PyObject *ids = prompt_in_c(src->owner, src->stream, src->index);
        src->drawn = ids != NULL;
        if (!ids) {
            PyObject *i = PyLong_FromSsize_t(src->index);
            if (!i) return NULL;
            ids = PyObject_CallMethodOneArg(src->stream, s_prompt_method, i);
            Py_DECREF(i);
            if (!ids) return NULL;
        }
        src->ids = ids;
    }
    Py_INCREF(src->ids);
    return src->ids;
}

static void PSrc_dealloc(PromptSource *src) {
    Py_XDECREF(src->owner);
    Py_XDECREF(src->stream);
    Py_XDECREF(src->ids);
    PyObject_Free(src);
}
static PyObject *PSrc_call(PromptSource *src, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "a prompt source takes no arguments");
        return NULL;
    }
    return source_ids(src);
}

static PyTypeObject PromptSourcesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.PromptSources",
    .tp_doc = "PromptSources(stream, specs, gen, made, ndarray)(index): `PromptStream.source(index)` in C.",
    .tp_basicsize = sizeof(PromptSources),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PS_init,
    .tp_dealloc = (destructor)PS_dealloc,
    .tp_traverse = (traverseproc)PS_traverse,
    .tp_clear = (inquiry)PS_clear,
    .tp_call = (ternaryfunc)PS_call,
};

static PyTypeObject PromptSourceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.PromptSource",
    .tp_doc = "One spec's prompt (`PromptSources`): called, `PromptStream._prompt(index)`.",
    .tp_basicsize = sizeof(PromptSource),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)PSrc_dealloc,
    .tp_call = (ternaryfunc)PSrc_call,
};

/* `Request.prompt_array` of a request not holding its prompt: a `PromptSource`'s prompt kept as `_load_prompt` keeps
   it where `ready_prompt` holds (`_prompt` set, `_prompt_source` None), else the property (which gets the same
   array from the source and decides). A new reference. */
static PyObject *load_lazy_prompt(PyObject *req) {
    PyObject *src = req_slot(req, off_prompt_source);
    if (src && Py_TYPE(src) == &PromptSourceType) {
        PyObject *ids = source_ids((PromptSource *)src);
        if (!ids) return NULL;
        PyObject *num = req_slot(req, off_num_prompt_tokens);
        Py_ssize_t n = num && PyLong_CheckExact(num) ? PyLong_AsSsize_t(num) : -1;
        if (n == -1 && PyErr_Occurred()) PyErr_Clear();
        PromptSource *ps = (PromptSource *)src;
        if (n >= 0 && prompt_ready(ids, n, ps->owner->ndarray, !ps->drawn)) {
            PyObject **p = (PyObject **)((char *)req + off_prompt), **s = (PyObject **)((char *)req + off_prompt_source);
            PyObject *old_p = *p, *old_s = *s;
            Py_INCREF(ids);
            *p = ids;
            Py_INCREF(Py_None);
            *s = Py_None;
            Py_XDECREF(old_p);
            Py_XDECREF(old_s);  /* (the source, with its reference to ids) */
            return ids;
        }
        Py_DECREF(ids);
    }
    return PyObject_GetAttr(req, s_prompt_array);
}

typedef struct {
    PyObject_HEAD
    PyObject *sampling, *make_sampling, *eos_token_id, *lazy;
    vectorcallfunc vectorcall;
} LazyRequests;

static PyTypeObject LazyRequestsType;

static int LR_traverse(LazyRequests *o, visitproc visit, void *arg) {
    Py_VISIT(o->sampling); Py_VISIT(o->make_sampling); Py_VISIT(o->eos_token_id); Py_VISIT(o->lazy);
    return 0;
}
static int LR_clear(LazyRequests *o) {
    Py_CLEAR(o->sampling); Py_CLEAR(o->make_sampling); Py_CLEAR(o->eos_token_id); Py_CLEAR(o->lazy);
    return 0;
}
static void LR_dealloc(LazyRequests *o) {
    PyObject_GC_UnTrack(o);
    LR_clear(o);
    Py_TYPE(o)->tp_free((PyObject *)o);
}
static int LR_init(LazyRequests *o, PyObject *args, PyObject *kw) {
    PyObject *sampling, *make, *eos, *lazy;
    if (!PyArg_ParseTuple(args, "O!OOO", &PyDict_Type, &sampling, &make, &eos, &lazy)) return -1;
    Py_INCREF(sampling); Py_XSETREF(o->sampling, sampling);
    Py_INCREF(make); Py_XSETREF(o->make_sampling, make);
    Py_INCREF(eos); Py_XSETREF(o->eos_token_id, eos);
    Py_INCREF(lazy); Py_XSETREF(o->lazy, lazy);
    return 0;
}

/* lazy(spec, prompt_source, arrival_s): `RequestFactory.lazy`. */
static PyObject *LR_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    LazyRequests *o = (LazyRequests *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 3 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "lazy(spec, prompt_source, arrival_s)");
        return NULL;
    }
    if (!o->sampling || !lazy_type) {
        PyErr_SetString(PyExc_RuntimeError, "LazyRequests: not initialized, or bind_lazy_request not called");
        return NULL;
    }
    PyObject *spec = args[0], *out = NULL, *rid = NULL, *num_prompt = NULL;
    PyObject *num_out = PyObject_GetAttr(spec, s_num_output_tokens);
    if (!num_out) return NULL;
    PyObject *sampling = PyDict_GetItemWithError(o->sampling, num_out);  /* (borrowed) */
    if (sampling) Py_INCREF(sampling);
    else if (PyErr_Occurred()) goto done;
    else {  /* immutable, so requests of one output length share one */
        if (!(sampling = PyObject_CallOneArg(o->make_sampling, num_out))) goto done;
        if (PyDict_SetItem(o->sampling, num_out, sampling) < 0) goto done;
    }
    if (!(rid = PyObject_GetAttr(spec, s_request_id)) || !(num_prompt = PyObject_GetAttr(spec, s_num_prompt_tokens)))
        goto done;
    int overflow = 0;
    long long npt = PyLong_CheckExact(num_prompt) ? PyLong_AsLongLongAndOverflow(num_prompt, &overflow) : 0;
    if (npt == -1 && PyErr_Occurred()) goto done;
    int ok = npt >= 1 || overflow > 0;  /* an int >= 1 */
    if (ok) {
        PyObject *a[7] = {rid, num_prompt, args[1], sampling, args[2], o->eos_token_id, s_zero};
        out = mod_new_lazy_request(NULL, a, 7);
    } else {  /* `Request.lazy`: its error */
        PyObject *a[6] = {rid, num_prompt, args[1], sampling, args[2], o->eos_token_id};
        out = PyObject_Vectorcall(o->lazy, a, 6, NULL);
    }
done:
    Py_XDECREF(sampling);
    Py_XDECREF(num_out);
    Py_XDECREF(rid);
    Py_XDECREF(num_prompt);
    return out;
}
static PyObject *LR_new(PyTypeObject *t, PyObject *args, PyObject *kw) {
    PyObject *o = PyType_GenericNew(t, args, kw);
    if (o) *(vectorcallfunc *)((char *)o + offsetof(LazyRequests, vectorcall)) = LR_vectorcall;
    return o;
}

static PyTypeObject LazyRequestsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.LazyRequests",
    .tp_doc = "LazyRequests(sampling, make_sampling, eos_token_id, Request.lazy)(spec, prompt_source, arrival_s): "
              "`RequestFactory.lazy` in C.",
    .tp_basicsize = sizeof(LazyRequests),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(LazyRequests, vectorcall),
    .tp_new = LR_new,
    .tp_init = (initproc)LR_init,
    .tp_dealloc = (destructor)LR_dealloc,
    .tp_traverse = (traverseproc)LR_traverse,
    .tp_clear = (inquiry)LR_clear,
    .tp_call = PyVectorcall_Call,
};

static PyMethodDef FP_methods[] = {
    {"schedule_running", (PyCFunction)(void (*)(void))FP_schedule_running, METH_FASTCALL,
     "`FastPath.schedule_running`: in C for a step of decoders that the free blocks cover."},
    {"update", (PyCFunction)(void (*)(void))FP_update, METH_FASTCALL,
     "`FastPath.update`: in C while the period goes on without prompt chunks."},
    {"schedule_step", (PyCFunction)(void (*)(void))FP_schedule_step, METH_FASTCALL,
     "`Scheduler.schedule(now_s)` in C (an FCFS `Scheduler`, engine.core.scheduler)."},
    {"add_request_step", (PyCFunction)FP_add_request_step, METH_O,
     "`Scheduler.add_request(req)` in C (the Python method where a check fails: its error)."},
    {"update_step", (PyCFunction)(void (*)(void))FP_update_step, METH_FASTCALL,
     "`Scheduler.update_from_output(plan, sampled, now_s)` in C (an FCFS `Scheduler`)."},
    {NULL, NULL, 0, NULL},
};
static PyMemberDef FP_members[] = {
    {"sched", T_OBJECT_EX, offsetof(FP, sched), READONLY, NULL},
    {"columns", T_OBJECT, offsetof(FP, columns), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};
static PyTypeObject FPType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "engine.core._kvcore.FastPathCore",
    .tp_basicsize = sizeof(FP),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "`FastPath.schedule_running` and `update` in C on `ColumnsCore` (engine.core.compiled_fast).",
    .tp_traverse = (traverseproc)FP_traverse,
    .tp_clear = (inquiry)FP_clear,
    .tp_dealloc = (destructor)FP_dealloc,
    .tp_init = (initproc)FP_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = FP_methods,
    .tp_members = FP_members,
};

static PyMethodDef module_methods[] = {
    {"bind_request_type", (PyCFunction)mod_bind_request_type, METH_O,
     "bind_request_type(Request): read and write its slots at their offsets."},
#ifdef __SIZEOF_INT128__
    {"draw_token_ids", (PyCFunction)mod_draw_token_ids, METH_VARARGS,
     "draw_token_ids(state, inc, has_uint32, uinteger, num_allowed, bounds, out): `TokenIdGenerator._draw` on PCG64."},
    {"join_draws", (PyCFunction)mod_join_draws, METH_NOARGS,
     "join_draws(): wait for every `DrawAhead` draw of this process (at exit, before a fork)."},
#endif
    {"any_negative_id", (PyCFunction)mod_any_negative_id, METH_O, "any_negative_id(ids): an int64 array's id < 0."},
    {"ready_prompt", (PyCFunction)(void (*)(void))mod_ready_prompt, METH_FASTCALL,
     "ready_prompt(prompt, num_prompt_tokens, ndarray): an int64 array `Request._load_prompt` keeps as it is."},
    {"bind_fast_path_types", (PyCFunction)mod_bind_fast_path_types, METH_VARARGS,
     "bind_fast_path_types(Request, StepPlan, ColumnRows, stopped, capped): the fast path's slots and statuses."},
    {"bind_step_types", (PyCFunction)mod_bind_step_types, METH_VARARGS,
     "bind_step_types(_Blocked, RequestStatus.RUNNING, RequestStatus.WAITING, Scheduler.add_request): the scheduler's "
     "step in C; whether its plans and `_Blocked`s are made directly (their slots as expected)."},
    {"bind_lazy_request", (PyCFunction)mod_bind_lazy_request, METH_VARARGS,
     "bind_lazy_request(Request, RequestStatus.WAITING, NO_BLOCK_IDS): `new_lazy_request`, or None where Request's "
     "slots are not the ones it fills."},
    {"prompt_block_hashes", (PyCFunction)mod_prompt_block_hashes, METH_VARARGS,
     "prompt_block_hashes(hashes, prompt, num_blocks, block_size): extend the list `hashes` to num_blocks hashes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kvcore_module = {
    PyModuleDef_HEAD_INIT, "engine.core._kvcore",
    "Compiled BlockPool and KVCacheManager operations (see engine/core/compiled_kv.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__kvcore(void) {
    (void)ceil_div;
    if (PyType_Ready(&PoolType) < 0 || PyType_Ready(&KVType) < 0 || PyType_Ready(&ColsType) < 0 || PyType_Ready(&FinishedTokensType) < 0
            || PyType_Ready(&FPType) < 0 || PyType_Ready(&MaxPlusType) < 0 || PyType_Ready(&PromptSourcesType) < 0
            || PyType_Ready(&PromptSourceType) < 0 || PyType_Ready(&LazyRequestsType) < 0)
        return NULL;
#ifdef __SIZEOF_INT128__
    if (PyType_Ready(&DrawAheadType) < 0) return NULL;
#endif
#define INTERN(var, text) if (!(var = PyUnicode_InternFromString(text))) return NULL
    INTERN(s_block_ids, "block_ids");
    INTERN(s_block_ids_head, "block_ids_head");
    INTERN(s_block_hashes, "block_hashes");
    INTERN(s_num_cached_blocks, "num_cached_blocks");
    INTERN(s_cache_chain, "cache_chain");
    INTERN(s_sliding_block_ids, "sliding_block_ids");
    INTERN(s_sliding_first_block, "sliding_first_block");
    INTERN(s_num_tokens, "num_tokens");
    INTERN(s_num_computed_tokens, "num_computed_tokens");
    INTERN(s_num_prompt_tokens, "num_prompt_tokens");
    INTERN(s_prompt, "_prompt");
    INTERN(s_prompt_source, "_prompt_source");
    INTERN(s_next, "_next");
    INTERN(s_ahead, "_ahead");
    INTERN(s_ahead_pos, "_ahead_pos");
    INTERN(s_prompt_method, "_prompt");
    INTERN(s_block_ids_spec, "block_ids");
    INTERN(s_prefix_group, "prefix_group");
    INTERN(s_session_id, "session_id");
    INTERN(s_num_output_tokens, "num_output_tokens");
    INTERN(s_output_ids, "_output_ids");
    INTERN(s_num_computed, "_num_computed");
    INTERN(s_cols, "_cols");
    INTERN(s_prompt_array, "prompt_array");
    INTERN(s_ensure_block_hashes, "ensure_block_hashes");
    INTERN(s_col_off, "_col_off");
    INTERN(s_col_seq, "_col_seq");
    INTERN(s_request_id, "request_id");
    INTERN(s_max_num_tokens, "max_num_tokens");
    INTERN(s_stop_token_set, "stop_token_set");
    INTERN(s_token_times, "_token_times");
    INTERN(s_times_array, "_times_array");
    INTERN(s_requests, "requests");
    INTERN(s_columns, "_columns");
    INTERN(s_bulk_context_sum, "_bulk_context_sum");
    INTERN(s_bulk_decodes, "_bulk_decodes");
    INTERN(s_num_batched_tokens, "num_batched_tokens");
    INTERN(s_num_prefill_tokens, "num_prefill_tokens");
    INTERN(s_num_decode_tokens, "num_decode_tokens");
    INTERN(s_emits, "_emits");
    INTERN(s_num_emitting_seqs, "num_emitting_seqs");
    INTERN(s_num_seqs, "num_seqs");
    INTERN(s_running, "running");
    INTERN(s_num_running_without_output, "num_running_without_output");
    INTERN(s_finish_request, "finish_request");
    INTERN(s_grow_times, "_grow_times");
    INTERN(s_remove, "remove");
    INTERN(s_preempted_request_ids, "preempted_request_ids");
    INTERN(s_preempt_request, "preempt_request");
    INTERN(s_status, "status");
    INTERN(s_next_check_len, "next_check_len");
    INTERN(s_sampling, "sampling");
    INTERN(s_max_tokens, "max_tokens");
    INTERN(s_ignore_eos, "ignore_eos");
    INTERN(s_eos_token_id, "eos_token_id");
    INTERN(s_stop_token_ids, "stop_token_ids");
    INTERN(s_finish_time_s, "finish_time_s");
    INTERN(s_stop_sets, "_stop_sets");
    INTERN(s_append, "append");
    INTERN(s_num_prefix_hit_tokens, "num_prefix_hit_tokens");
    INTERN(s_first_scheduled_time_s, "first_scheduled_time_s");
    INTERN(s_b_req, "req");
    INTERN(s_b_num_tokens, "num_tokens");
    INTERN(s_b_need, "need");
    INTERN(s_b_budget, "budget");
    INTERN(s_b_threshold, "threshold");
    INTERN(s_b_watermark, "watermark");
    INTERN(s_b_first_hash, "first_hash");
    INTERN(s_b_num_chains, "num_chains");
    INTERN(s_pending, "_pending");
    INTERN(s_pending_aborted, "_pending_aborted");
    INTERN(s_num_steps, "num_steps");
    INTERN(s_blocked, "_blocked");
    INTERN(s_waiting, "waiting");
    INTERN(s_config, "config");
    INTERN(s_popleft, "popleft");
    INTERN(s_schedule_running_py, "_schedule_running");
    INTERN(s_update_lists, "_update_lists");
    INTERN(s_flush, "flush");
    INTERN(s_admitted_request_ids, "admitted_request_ids");
    INTERN(s_num_new_prefix_hit_tokens, "num_new_prefix_hit_tokens");
    INTERN(s_query, "_query");
    INTERN(s_context, "_context");
    INTERN(s_num_blocks, "_num_blocks");
    INTERN(s_num_kv_blocks_used, "num_kv_blocks_used");
    INTERN(s_num_kv_blocks_total, "num_kv_blocks_total");
    INTERN(s_num_running, "num_running");
    INTERN(s_num_waiting, "num_waiting");
#undef INTERN
    if (!(s_zero = PyLong_FromLong(0))) return NULL;
    if (!(s_empty_tuple = PyTuple_New(0))) return NULL;
    PyObject *m = PyModule_Create(&kvcore_module);
    if (!m) return NULL;
    Py_INCREF(&PoolType);
    if (PyModule_AddObject(m, "BlockPoolCore", (PyObject *)&PoolType) < 0) return NULL;
    Py_INCREF(&PromptSourcesType);
    if (PyModule_AddObject(m, "PromptSources", (PyObject *)&PromptSourcesType) < 0) return NULL;
    Py_INCREF(&PromptSourceType);
    if (PyModule_AddObject(m, "PromptSource", (PyObject *)&PromptSourceType) < 0) return NULL;
    Py_INCREF(&LazyRequestsType);
    if (PyModule_AddObject(m, "LazyRequests", (PyObject *)&LazyRequestsType) < 0) return NULL;
#ifdef __SIZEOF_INT128__
    Py_INCREF(&DrawAheadType);
    if (PyModule_AddObject(m, "DrawAhead", (PyObject *)&DrawAheadType) < 0) return NULL;
#endif
    Py_INCREF(&KVType);
    if (PyModule_AddObject(m, "KVCacheManagerCore", (PyObject *)&KVType) < 0) return NULL;
    Py_INCREF(&ColsType);
    if (PyModule_AddObject(m, "ColumnsCore", (PyObject *)&ColsType) < 0) return NULL;
    Py_INCREF(&FinishedTokensType);
    if (PyModule_AddObject(m, "FinishedTokens", (PyObject *)&FinishedTokensType) < 0) return NULL;
    Py_INCREF(&FPType);
    if (PyModule_AddObject(m, "FastPathCore", (PyObject *)&FPType) < 0) return NULL;
    return m;
}
