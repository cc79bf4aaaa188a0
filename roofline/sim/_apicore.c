/* The API server's threads in C: roofline/sim/api_server.py's `_Threads` (processor sharing of the processes' loop,
 * renderer and the client's threads, the waits, the output passes taken while no input is under way, the
 * projections) and `ApiServer`'s per-request and per-step calls (`take_request`, `reach_s` with `reach_after`,
 * `stream_outputs`, `release`; `Connections`). The Python classes are the reference: this file follows them statement by statement, the same
 * float operations in the same order (built with -ffp-contract=off: no fused multiply-adds), so every time is the
 * same double. tests/test_api_server_compiled.py drives both with the same random calls and compares every float.
 *
 * Server(num_processes, num_cores, client_shares, chain_parts, costs[, by_connection, keep_alive_s]):
 *   num_cores: None (a core per thread) or a positive int; chain_parts: per process (before, renderer, after), the
 *   parts of a request's chain around its render as `ApiServer._chain_around_render` makes them; costs: the floats
 *   (render_request_s, prompt_token_s, hash_token_s, client_s, request_s, latency_s, accept_gap_s,
 *   output_latency_s, output_pass_s, output_token_s, refill_s, first_output_s) of `ApiServer`; by_connection: the processes take requests by
 *   connection (`Connections`, their keep-alive `keep_alive_s`), else round robin.
 * ApiServer's: take_request(now_s, num_prompt_tokens), take_request_on(process, now_s, num_prompt_tokens) (a
 *   process chosen by the caller), reach_s(now_s, process, ticket), stream_outputs(now_s, process, num_tokens[,
 *   num_first]),
 *   release(process, at_s).
 * _Threads's (for the tests): arrive(at_s, ticket, chain), add_output(now_s, at_s, process, ticket, work_s[, refill]),
 *   advance(to_s), projected_end(ticket), reach(now_s, ticket, latency_s) (`reach_after`), finished(ticket) (the
 *   `finished_s` entry or None), and the attributes now_s, num_inputs, num_arrivals, num_chains.
 *
 * The state as in Python, with a chain held in a slot of a pool instead of a dict entry: a job (a queue's entry)
 * and an arrival (an `io` entry) name the chain's slot, whose ticket is the dict's key; `_wait`'s `chains[ticket] =
 * chain[part + 1:]` moves the slot's first part (`base`). The `io` heap is keyed (time, order, ticket) as Python's
 * tuples, so it pops in the same order (an order can repeat: `_wait` counts before taking it, `arrive` after).
 * `finished_s` and `ApiServer.hash_s` are one open-addressing table keyed by ticket. A projection copies the queues, `io` and the chains into scratch
 * buffers and runs there; like Python's it counts its waits in `num_arrivals`.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { OUTPUTS = 0, LOOP = 1, RENDERER = 2 };
#define WAIT (-1)
#define ACCEPT (-2) /* api_server.py's ACCEPT */
#define DONE_S 1e-12 /* api_server.py's _DONE_S */
#define ACCEPT_DEFER_CHECKS 5 /* api_server.py's */
#define ACCEPT_DEFER_S 0.001  /* api_server.py's */
#define MAX_PARTS 16

typedef struct {
    int queue; /* a queue's index, or WAIT */
    double work;
} Part;

typedef struct {
    int64_t ticket;
    int base;      /* the first part still in the chain (`_wait` drops those before) */
    int num_parts; /* of `parts`, from 0 */
    double refill; /* an output pass's `_Threads.refills` entry, else 0 */
    Part parts[MAX_PARTS];
} Chain;

typedef struct {
    int32_t chain; /* its slot */
    int part;      /* from `base` */
    double left;
} Job;

typedef struct {
    Job *items;
    Py_ssize_t head, size, cap; /* a ring */
} Queue;

typedef struct {
    double at;
    int64_t order;
    int64_t ticket; /* (Python's tuples compare it where two orders are equal: `arrive` takes the order a wait
                       took just before) */
    int32_t chain;
} Arrival;

/* The queues, the arrivals and the chains: `_run`'s arguments (the state, or a projection's copies), and the accepts
 * (`_Threads.accepts`, which a projection copies too): per process the chain slot of `reading` (-1: None), the
 * `pending` chains, each a Job (its slot, the part to go on at; `left` unused), `loads` and `checks`. */
typedef struct {
    Queue *queues;
    int num_queues;
    int32_t *reading;
    Queue *pending;
    int64_t *loads;
    int *checks;
    int num_processes;
    int num_reading; /* processes whose `reading` is set (0: no accept to check when a loop's part ends) */
    Arrival *io;
    Py_ssize_t io_size, io_cap;
    Chain *chains;
    int32_t chains_high; /* slots in use are below this */
    int32_t chains_cap;
} Work;

typedef struct {
    double start, end;
} Pass;

typedef struct {
    double at;
    int process;
} Idle;

typedef struct {
    double at;
    int64_t order;
    int process;
} Ending;

typedef struct {
    Pass *items;
    Py_ssize_t head, size, cap;
} Passes;

/* ticket -> (finished at, its hashing): `finished_s` and `ApiServer.hash_s`. */
typedef struct {
    int64_t key;
    double finished_s, hash_s;
    uint8_t used, has_finished, has_hash;
} Entry;

typedef struct {
    Entry *slots;
    Py_ssize_t cap, size; /* cap a power of two */
} Table;

typedef struct {
    PyObject_HEAD
    int num_processes, client, has_cores, client_shares;
    long num_cores;
    Work work, scratch;
    int32_t *free_slots; /* the pool's free slots (a stack) */
    int32_t num_free, free_cap;
    Py_ssize_t num_chains; /* len(chains) */
    int64_t num_arrivals, num_inputs, num_taken, num_outputs;
    double now_s, last_connect_s;
    int accept_per_turn, opened; /* `ApiServer.accept_per_turn`; `Connections.opened` */
    Table table;
    double *output_until_s;
    Passes *unqueued;
    /* `Connections` (by_connection): the processes' open connections, the idle ones (a ring of (since, process),
     * oldest first), the requests not yet read (a heap of (from, order, process)) */
    int by_connection, started;
    double keep_alive_s;
    int64_t *open, num_released;
    int64_t *closed; /* per process, the connections closed since the last request (`Connections.closed`) */
    int any_closed;
    Idle *idle;
    Py_ssize_t idle_head, idle_size, idle_cap;
    Ending *ending;
    Py_ssize_t ending_size, ending_cap;
    /* per process: a request's chain around its render */
    Part (*before)[MAX_PARTS];
    Part (*after)[MAX_PARTS];
    int *num_before, *num_after;
    double render_request_s, prompt_token_s, hash_token_s, client_s, request_s, latency_s, accept_gap_s,
        output_latency_s, output_pass_s, output_token_s, refill_s, first_output_s;
} Server;

/* ---- containers ---------------------------------------------------------------------------------------------- */

/* Room for one more item in a ring (`*items`, `cap` items of `item_size` bytes, `size` of them from `*head` on): a
   full ring is copied, in order from its head, into one twice as large (`first_cap` the first time). */
static int ring_reserve(void **items, Py_ssize_t *head, Py_ssize_t size, Py_ssize_t *cap, size_t item_size,
                        Py_ssize_t first_cap) {
    if (size < *cap)
        return 0;
    Py_ssize_t new_cap = *cap ? 2 * *cap : first_cap;
    char *grown = PyMem_Malloc(item_size * (size_t)new_cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const char *old = *items;
    for (Py_ssize_t i = 0; i < size; i++)
        memcpy(grown + item_size * (size_t)i, old + item_size * (size_t)((*head + i) % *cap), item_size);
    PyMem_Free(*items);
    *items = grown;
    *head = 0;
    *cap = new_cap;
    return 0;
}

static int queue_push(Queue *q, int32_t chain, int part, double left) {
    if (ring_reserve((void **)&q->items, &q->head, q->size, &q->cap, sizeof(Job), 8) < 0)
        return -1;
    Job *job = &q->items[(q->head + q->size) % q->cap];
    job->chain = chain;
    job->part = part;
    job->left = left;
    q->size++;
    return 0;
}

static inline Job *queue_head(Queue *q) { return &q->items[q->head]; }

static inline void queue_popleft(Queue *q) {
    q->head = (q->head + 1) % q->cap;
    q->size--;
}

/* Room for one more item in the array `*items` of `size` items (`*cap` allocated, doubled when full, 16 at first);
   -1 with MemoryError set. */
static int array_reserve(void **items, Py_ssize_t size, Py_ssize_t *cap, size_t item_size) {
    if (size < *cap)
        return 0;
    Py_ssize_t grown = *cap ? 2 * *cap : 16;
    void *more = PyMem_Realloc(*items, item_size * grown);
    if (more == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *items = more;
    *cap = grown;
    return 0;
}

/* A binary min-heap in `arr` ordered by `less`, as heapq keeps one. HEAP_SIFT_UP places `item` at index `at` (the
   heap's old size, its size already one more) and moves it up; HEAP_SIFT_DOWN, after the root is taken and `last` (the
   old last item) removed from the `n` left, moves `last` down from the root. Macros: the heaps hold different types. */
#define HEAP_SIFT_UP(arr, at, item, less)                                                                      \
    do {                                                                                                       \
        Py_ssize_t i_ = (at);                                                                                  \
        while (i_ > 0) {                                                                                       \
            Py_ssize_t parent_ = (i_ - 1) / 2;                                                                 \
            if (!less(&(item), &(arr)[parent_]))                                                               \
                break;                                                                                         \
            (arr)[i_] = (arr)[parent_];                                                                        \
            i_ = parent_;                                                                                      \
        }                                                                                                      \
        (arr)[i_] = (item);                                                                                    \
    } while (0)

#define HEAP_SIFT_DOWN(arr, n, last, less)                                                                     \
    do {                                                                                                       \
        Py_ssize_t n_ = (n), i_ = 0;                                                                           \
        while (1) {                                                                                            \
            Py_ssize_t child_ = 2 * i_ + 1;                                                                    \
            if (child_ >= n_)                                                                                  \
                break;                                                                                         \
            if (child_ + 1 < n_ && less(&(arr)[child_ + 1], &(arr)[child_]))                                   \
                child_++;                                                                                      \
            if (!less(&(arr)[child_], &(last)))                                                                \
                break;                                                                                         \
            (arr)[i_] = (arr)[child_];                                                                         \
            i_ = child_;                                                                                       \
        }                                                                                                      \
        if (n_ > 0)                                                                                            \
            (arr)[i_] = (last);                                                                                \
    } while (0)

static inline int arrival_less(const Arrival *a, const Arrival *b) {
    return a->at < b->at || (a->at == b->at && (a->order < b->order || (a->order == b->order
                                                                       && a->ticket < b->ticket)));
}

static int io_push(Work *w, double at, int64_t order, int32_t chain) {
    if (array_reserve((void **)&w->io, w->io_size, &w->io_cap, sizeof(Arrival)) < 0)
        return -1;
    Arrival item = {at, order, w->chains[chain].ticket, chain};
    HEAP_SIFT_UP(w->io, w->io_size++, item, arrival_less);
    return 0;
}

static int32_t io_pop(Work *w) {
    int32_t chain = w->io[0].chain;
    Arrival last = w->io[--w->io_size];
    HEAP_SIFT_DOWN(w->io, w->io_size, last, arrival_less);
    return chain;
}

static int passes_push(Passes *p, double start, double end) {
    if (ring_reserve((void **)&p->items, &p->head, p->size, &p->cap, sizeof(Pass), 8) < 0)
        return -1;
    Pass *item = &p->items[(p->head + p->size) % p->cap];
    item->start = start;
    item->end = end;
    p->size++;
    return 0;
}

static inline uint64_t table_hash(int64_t key) {
    uint64_t x = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

/* The entry of `key`, made (empty) with `make`; NULL if absent (or out of memory, with an exception set). */
static Entry *table_find(Table *t, int64_t key, int make) {
    if (t->cap == 0) {
        if (!make)
            return NULL;
        t->slots = PyMem_Calloc(64, sizeof(Entry));
        if (t->slots == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        t->cap = 64;
    }
    Py_ssize_t mask = t->cap - 1, i = (Py_ssize_t)(table_hash(key) & (uint64_t)mask);
    while (t->slots[i].used) {
        if (t->slots[i].key == key)
            return &t->slots[i];
        i = (i + 1) & mask;
    }
    if (!make)
        return NULL;
    if (2 * (t->size + 1) > t->cap) { /* grow, then look again */
        Entry *old = t->slots;
        Py_ssize_t old_cap = t->cap;
        t->slots = PyMem_Calloc(2 * old_cap, sizeof(Entry));
        if (t->slots == NULL) {
            t->slots = old;
            PyErr_NoMemory();
            return NULL;
        }
        t->cap = 2 * old_cap;
        mask = t->cap - 1;
        for (Py_ssize_t j = 0; j < old_cap; j++) {
            if (!old[j].used)
                continue;
            Py_ssize_t k = (Py_ssize_t)(table_hash(old[j].key) & (uint64_t)mask);
            while (t->slots[k].used)
                k = (k + 1) & mask;
            t->slots[k] = old[j];
        }
        PyMem_Free(old);
        i = (Py_ssize_t)(table_hash(key) & (uint64_t)mask);
        while (t->slots[i].used)
            i = (i + 1) & mask;
    }
    memset(&t->slots[i], 0, sizeof(Entry));
    t->slots[i].used = 1;
    t->slots[i].key = key;
    t->size++;
    return &t->slots[i];
}

/* Drops `e` where it holds neither a finish nor a hashing (linear probing's deletion by shifting back). */
static void table_tidy(Table *t, Entry *e) {
    if (e->has_finished || e->has_hash)
        return;
    Py_ssize_t mask = t->cap - 1, i = e - t->slots, j = i;
    t->slots[i].used = 0;
    t->size--;
    while (1) {
        j = (j + 1) & mask;
        if (!t->slots[j].used)
            return;
        Py_ssize_t home = (Py_ssize_t)(table_hash(t->slots[j].key) & (uint64_t)mask);
        /* move j to i where its home is not cyclically in (i, j] */
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            t->slots[i] = t->slots[j];
            t->slots[j].used = 0;
            i = j;
        }
    }
}

/* ---- the chains' pool ---------------------------------------------------------------------------------------- */

static int32_t chain_new(Server *s) {
    Work *w = &s->work;
    if (s->num_free)
        return s->free_slots[--s->num_free];
    if (w->chains_high == w->chains_cap) {
        int32_t cap = w->chains_cap ? 2 * w->chains_cap : 16;
        Chain *chains = PyMem_Realloc(w->chains, sizeof(Chain) * cap);
        int32_t *free_slots = PyMem_Realloc(s->free_slots, sizeof(int32_t) * cap);
        if (chains)
            w->chains = chains;
        if (free_slots)
            s->free_slots = free_slots;
        if (chains == NULL || free_slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->chains_cap = cap;
    }
    return w->chains_high++;
}

/* `del chains[ticket]`: in the state, its slot freed; a projection's copies are thrown away whole. */
static inline void chain_del(Server *s, Work *w, int32_t chain) {
    if (w == &s->work) {
        s->free_slots[s->num_free++] = chain;
        s->num_chains--;
    }
}

/* A new chain's slot in `w`: the state's pool (counted in `num_chains`), or a projection's, past its copies. */
static int32_t chain_make(Server *s, Work *w) {
    if (w == &s->work) {
        int32_t c = chain_new(s);
        if (c >= 0)
            s->num_chains++;
        return c;
    }
    if (w->chains_high == w->chains_cap) {
        int32_t cap = w->chains_cap ? 2 * w->chains_cap : 16;
        Chain *chains = PyMem_Realloc(w->chains, sizeof(Chain) * cap);
        if (chains == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->chains = chains;
        w->chains_cap = cap;
    }
    return w->chains_high++;
}

/* ---- _Threads ------------------------------------------------------------------------------------------------ */

/* `_Threads._wait`: chain `c` reached its WAIT part `part` (from its base) at `t`. */
static int threads_wait(Server *s, Work *w, int32_t c, int part, double t) {
    Chain *chain = &w->chains[c];
    double wait_s = chain->parts[chain->base + part].work;
    chain->base += part + 1;
    int queue = chain->parts[chain->base].queue;
    int busy = w->queues[queue].size
               || (queue % 3 == LOOP && queue < s->client && w->queues[queue - LOOP + OUTPUTS].size);
    if (busy)
        return queue_push(&w->queues[queue], c, 0, chain->parts[chain->base].work);
    s->num_arrivals += 1;
    return io_push(w, t + wait_s, s->num_arrivals, c);
}

/* `_Threads._go_on`: chain `c` goes on at its part `part` (from its base) at `t`. */
static int threads_go_on(Server *s, Work *w, int32_t c, int part, double t) {
    Chain *chain = &w->chains[c];
    Part next = chain->parts[chain->base + part];
    if (next.queue == WAIT)
        return threads_wait(s, w, c, part, t);
    return queue_push(&w->queues[next.queue], c, part, next.work);
}

/* `_Accepts.defers`, with more than one process. */
static inline int accepts_defers(const Work *w, int process) {
    if (w->checks[process] >= ACCEPT_DEFER_CHECKS)
        return 0;
    int64_t least = w->loads[0];
    for (int p = 1; p < w->num_processes; p++)
        if (w->loads[p] < least)
            least = w->loads[p];
    return w->loads[process] > least;
}

/* `_Threads._defer`: `process` checks again ACCEPT_DEFER_S after `t`, its check a chain of its own (a new slot: the
 * callers take their chain's pointer again after it). */
static int threads_defer(Server *s, Work *w, int process, double t) {
    w->checks[process] += 1;
    s->num_arrivals += 1;
    int32_t c = chain_make(s, w);
    if (c < 0)
        return -1;
    Chain *chain = &w->chains[c];
    chain->ticket = -((int64_t)1 << 61) - s->num_arrivals; /* apart from the passes' tickets */
    chain->base = 0;
    chain->num_parts = 1;
    chain->refill = 0.0;
    chain->parts[0].queue = 3 * process + LOOP;
    chain->parts[0].work = 0.0;
    w->reading[process] = c;
    return io_push(w, t + ACCEPT_DEFER_S, s->num_arrivals, c);
}

/* `_Threads._accept`: chain `c` reached its ACCEPT part `part` at `t`. */
static int threads_accept(Server *s, Work *w, int32_t c, int part, double t) {
    Chain *chain = &w->chains[c];
    int k = chain->base + part + 1;
    while (chain->parts[k].queue < 0) /* (checked: a thread's part follows) */
        k++;
    int process = chain->parts[k].queue / 3;
    if (w->reading[process] >= 0)
        return queue_push(&w->pending[process], c, part + 1, 0.0);
    w->num_reading += 1;
    if (w->num_processes > 1) {
        if (accepts_defers(w, process)) {
            if (queue_push(&w->pending[process], c, part + 1, 0.0) < 0)
                return -1;
            return threads_defer(s, w, process, t);
        }
        w->loads[process] += 1;
    }
    w->reading[process] = c;
    return threads_go_on(s, w, c, part + 1, t);
}

/* `_Threads._accept_next`'s accept of the next waiting connection with more than one process: deferred, or counted
 * in the loads (apart: the one process's path keeps its few instructions). */
static Py_NO_INLINE int threads_accept_coupled(Server *s, Work *w, int process, double t) {
    if (accepts_defers(w, process))
        return threads_defer(s, w, process, t);
    w->loads[process] += 1;
    w->checks[process] = 0;
    Queue *pending = &w->pending[process];
    Job job = *queue_head(pending);
    queue_popleft(pending);
    w->reading[process] = job.chain;
    return threads_go_on(s, w, job.chain, job.part, t);
}

/* `_Threads._accept_next`: `process`'s loop has read the connection it accepted last (its first loop part ended at
 * `t`), or has run its deferred check. */
static int threads_accept_next(Server *s, Work *w, int process, double t) {
    Queue *pending = &w->pending[process];
    w->reading[process] = -1;
    if (!pending->size) {
        w->num_reading -= 1;
        return 0;
    }
    if (w->num_processes > 1)
        return threads_accept_coupled(s, w, process, t);
    Job job = *queue_head(pending);
    queue_popleft(pending);
    w->reading[process] = job.chain;
    return threads_go_on(s, w, job.chain, job.part, t);
}

/* `_Threads._through`: chain `c` reached its part `part` that occupies no thread (WAIT or ACCEPT) at `t`. */
static int threads_through(Server *s, Work *w, int32_t c, int part, double t) {
    Chain *chain = &w->chains[c];
    if (chain->parts[chain->base + part].queue == WAIT)
        return threads_wait(s, w, c, part, t);
    return threads_accept(s, w, c, part, t);
}

/* A chain's last part ended at `t`: `del chains[ticket]` and its finish noted. */
static int chain_ended(Server *s, Work *w, int32_t c, double t, int has_stop) {
    int64_t ticket = w->chains[c].ticket;
    chain_del(s, w, c);
    if (ticket >= 0 && !has_stop) {
        s->num_inputs -= 1;
        Entry *e = table_find(&s->table, ticket, 1);
        if (e == NULL)
            return -1;
        e->finished_s = t;
        e->has_finished = 1;
    }
    return 0;
}

/* `_Threads._alone`; returns -1 on error, 1 if chain `stop` ended, else 0; `*t` the time reached. */
static int threads_alone(Server *s, Work *w, int q, double *tp, double limit_s, int has_stop, int64_t stop) {
    Job *job = queue_head(&w->queues[q]);
    int32_t c = job->chain;
    int part = job->part;
    Chain *chain = &w->chains[c];
    double t = *tp + job->left;
    int queue = chain->parts[chain->base + part].queue;
    Queue *left = &w->queues[queue];
    queue_popleft(left);
    if (w->num_reading && queue < s->client && queue % 3 == LOOP && w->reading[queue / 3] == c) {
        if (threads_accept_next(s, w, queue / 3, t) < 0)
            return -1;
        chain = &w->chains[c]; /* (a deferred check's slot may have moved the pool) */
    }
    int len = chain->num_parts - chain->base;
    while (part + 1 < len) {
        Part next = chain->parts[chain->base + part + 1];
        if (next.queue < 0) {
            *tp = t;
            return threads_through(s, w, c, part + 1, t);
        }
        if (left->size || w->queues[next.queue].size || t + next.work > limit_s) {
            *tp = t;
            return queue_push(&w->queues[next.queue], c, part + 1, next.work);
        }
        part += 1;
        t += next.work;
    }
    int64_t ticket = chain->ticket;
    *tp = t;
    if (chain_ended(s, w, c, t, has_stop) < 0)
        return -1;
    return has_stop && ticket == stop;
}

/* The rate of queue `q`'s head job on shared cores (`_run` with `_shared_rates`): 1 for the client's thread on its own
 * core (`own`), `rate` / (1 + refill x after_other) for an output pass with a refill while other processes have work
 * (`after_other` > 0), else `rate`. */
static inline double shared_rate(Work *w, Queue *queues, int q, int client, double rate, double after_other, int own) {
    if (own)
        return 1.0;
    if (after_other > 0.0 && q < client && q % 3 == OUTPUTS) {
        double refill = w->chains[queue_head(&queues[q])->chain].refill;
        if (refill > 0.0)
            return rate / (1.0 + refill * after_other);
    }
    return rate;
}

/* `_Threads._run` on `w` from `now_s` until `to_s`, or until chain `stop` ends (`*stopped` then 1). Returns the time
 * reached; NaN with an exception set on error. */
static double threads_run(Server *s, Work *w, double to_s, int has_stop, int64_t stop, int *stopped) {
    double t = s->now_s;
    int num_procs = s->num_processes, client = s->client;
    Queue *queues = w->queues, *client_queue = &w->queues[client];
    int running[3 * 64 + 1]; /* queue indices: at most two threads per process, and the client */
    int *run = running, *run_heap = NULL;
    if (2 * num_procs + 1 > (int)(sizeof(running) / sizeof(running[0]))) {
        run_heap = PyMem_Malloc(sizeof(int) * (2 * num_procs + 1));
        if (run_heap == NULL) {
            PyErr_NoMemory();
            return NAN;
        }
        run = run_heap;
    }
    double result = NAN;
    while (1) {
        while (w->io_size && w->io[0].at <= t) {
            int32_t c = io_pop(w);
            Chain *chain = &w->chains[c];
            Part first = chain->parts[chain->base];
            if (first.queue < 0) { /* (a chain that starts with a wait or an accept) */
                if (threads_through(s, w, c, 0, t) < 0)
                    goto done;
            } else if (queue_push(&queues[first.queue], c, 0, first.work) < 0)
                goto done;
        }
        int n = 0, busy = 0; /* busy: the processes with work (`_shared_rates`) */
        for (int p = 0; p < num_procs; p++) {
            int i = 3 * p, n0 = n;
            if (queues[i + OUTPUTS].size)
                run[n++] = i + OUTPUTS;
            else if (queues[i + LOOP].size)
                run[n++] = i + LOOP;
            if (queues[i + RENDERER].size)
                run[n++] = i + RENDERER;
            busy += n > n0;
        }
        int client_running = client_queue->size > 0;
        if (client_running)
            run[n++] = client;
        double nxt = w->io_size ? w->io[0].at : INFINITY;
        if (n == 0) {
            if (nxt >= to_s) {
                result = to_s;
                goto done;
            }
            t = nxt;
            continue;
        }
        double limit_s = nxt < to_s ? nxt : to_s;
        if (n == 1 && t + queue_head(&queues[run[0]])->left <= limit_s) {
            int ended = threads_alone(s, w, run[0], &t, limit_s, has_stop, stop);
            if (ended < 0)
                goto done;
            if (ended) {
                *stopped = 1;
                result = t;
                goto done;
            }
            continue;
        }
        int num_shared = n - (client_running && !s->client_shares ? 1 : 0);
        double dt;
        if (!s->has_cores || num_shared <= s->num_cores) { /* every thread at a core's speed */
            double least = queue_head(&queues[run[0]])->left;
            for (int k = 1; k < n; k++) {
                double left = queue_head(&queues[run[k]])->left;
                if (left < least)
                    least = left;
            }
            dt = nxt - t;
            if (to_s - t < dt)
                dt = to_s - t;
            if (least < dt)
                dt = least;
            for (int k = 0; k < n; k++)
                queue_head(&queues[run[k]])->left -= dt;
        } else {
            double rate = (double)s->num_cores / (double)num_shared;
            int last_own = client_running && !s->client_shares; /* the client's thread on a core of its own */
            /* `_shared_rates`: an output pass with a refill, while other processes have work */
            double after_other = busy > 1 ? (double)(busy - 1) / (double)busy : 0.0;
            double least = INFINITY;
            for (int k = 0; k < n; k++) {
                double r = shared_rate(w, queues, run[k], client, rate, after_other, k == n - 1 && last_own);
                double v = queue_head(&queues[run[k]])->left / r;
                if (k == 0 || v < least)
                    least = v;
            }
            dt = nxt - t;
            if (to_s - t < dt)
                dt = to_s - t;
            if (least < dt)
                dt = least;
            for (int k = 0; k < n; k++) {
                double r = shared_rate(w, queues, run[k], client, rate, after_other, k == n - 1 && last_own);
                queue_head(&queues[run[k]])->left -= dt * r;
            }
        }
        t += dt;
        int num_done = 0;
        for (int k = 0; k < n; k++) {
            Job *job = queue_head(&queues[run[k]]);
            if (job->left > DONE_S)
                continue;
            num_done += 1;
            int32_t c = job->chain;
            int part = job->part;
            Chain *chain = &w->chains[c];
            int queue = chain->parts[chain->base + part].queue;
            queue_popleft(&queues[queue]);
            /* (the loop has read the connection it accepted last: it accepts the next) */
            if (w->num_reading && queue < client && queue % 3 == LOOP && w->reading[queue / 3] == c) {
                if (threads_accept_next(s, w, queue / 3, t) < 0)
                    goto done;
                chain = &w->chains[c]; /* (a deferred check's slot may have moved the pool) */
            }
            if (part + 1 < chain->num_parts - chain->base) {
                Part next = chain->parts[chain->base + part + 1];
                if (next.queue < 0) {
                    if (threads_through(s, w, c, part + 1, t) < 0)
                        goto done;
                } else if (queue_push(&queues[next.queue], c, part + 1, next.work) < 0)
                    goto done;
                continue;
            }
            int64_t ticket = chain->ticket;
            if (chain_ended(s, w, c, t, has_stop) < 0)
                goto done;
            if (has_stop && ticket == stop) {
                *stopped = 1;
                result = t;
                goto done;
            }
        }
        if (t >= to_s && !num_done) {
            result = t;
            goto done;
        }
    }
done:
    PyMem_Free(run_heap);
    return result;
}

static int threads_advance(Server *s, double to_s) {
    if (s->num_chains == 0) { /* nothing under way or due */
        if (to_s > s->now_s)
            s->now_s = to_s;
    } else if (to_s >= s->now_s) {
        int stopped = 0;
        double t = threads_run(s, &s->work, to_s, 0, 0, &stopped);
        if (isnan(t) && PyErr_Occurred())
            return -1;
        s->now_s = t;
    }
    return 0;
}

/* `to` made a copy of `from`, in order from its head; -1 with MemoryError set. */
static int queue_copy(const Queue *from, Queue *to) {
    if (to->cap < from->size || to->cap == 0) {
        Py_ssize_t cap = from->size > 8 ? from->size : 8;
        PyMem_Free(to->items);
        to->items = PyMem_Malloc(sizeof(Job) * cap);
        if (to->items == NULL) {
            to->cap = 0;
            PyErr_NoMemory();
            return -1;
        }
        to->cap = cap;
    }
    for (Py_ssize_t k = 0; k < from->size; k++)
        to->items[k] = from->items[(from->head + k) % from->cap];
    to->head = 0;
    to->size = from->size;
    return 0;
}

/* `_Threads.projected_end`: 0 with `*end_s`, -1 with an exception (KeyError where `ticket` never ends). */
static int threads_projected_end(Server *s, int64_t ticket, double *end_s) {
    Work *src = &s->work, *dst = &s->scratch;
    for (int i = 0; i < src->num_queues; i++)
        if (queue_copy(&src->queues[i], &dst->queues[i]) < 0)
            return -1;
    dst->num_reading = src->num_reading;
    for (int p = 0; p < src->num_processes; p++) {
        dst->reading[p] = src->reading[p];
        dst->loads[p] = src->loads[p];
        dst->checks[p] = src->checks[p];
        if (!src->pending[p].size)
            dst->pending[p].size = 0;
        else if (queue_copy(&src->pending[p], &dst->pending[p]) < 0)
            return -1;
    }
    if (dst->io_cap < src->io_size) {
        Arrival *io = PyMem_Realloc(dst->io, sizeof(Arrival) * src->io_cap);
        if (io == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        dst->io = io;
        dst->io_cap = src->io_cap;
    }
    if (src->io_size)
        memcpy(dst->io, src->io, sizeof(Arrival) * src->io_size);
    dst->io_size = src->io_size;
    if (dst->chains_cap < src->chains_high) {
        Chain *chains = PyMem_Realloc(dst->chains, sizeof(Chain) * src->chains_cap);
        if (chains == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        dst->chains = chains;
        dst->chains_cap = src->chains_cap;
    }
    if (src->chains_high)
        memcpy(dst->chains, src->chains, sizeof(Chain) * src->chains_high);
    dst->chains_high = src->chains_high;
    int stopped = 0;
    double t = threads_run(s, dst, INFINITY, 1, ticket, &stopped);
    if (isnan(t) && PyErr_Occurred())
        return -1;
    if (!stopped) {
        PyObject *key = PyLong_FromLongLong(ticket);
        if (key != NULL) {
            PyErr_SetObject(PyExc_KeyError, key);
            Py_DECREF(key);
        }
        return -1;
    }
    *end_s = t;
    return 0;
}

/* `_Threads._queue_outputs`. */
static int threads_queue_outputs(Server *s) {
    for (int p = 0; p < s->num_processes; p++) {
        Passes *passes = &s->unqueued[p];
        /* the blocks in place of the passes already read (at most as many) */
        Py_ssize_t num_blocks = 0;
        Pass *blocks = passes->size ? PyMem_Malloc(sizeof(Pass) * passes->size) : NULL;
        if (passes->size && blocks == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t k = 0; k < passes->size; k++) {
            Pass pass = passes->items[(passes->head + k) % passes->cap];
            if (pass.end <= s->now_s)
                continue;
            if (num_blocks && pass.start <= blocks[num_blocks - 1].end)
                blocks[num_blocks - 1].end = pass.end;
            else {
                blocks[num_blocks].start = pass.start > s->now_s ? pass.start : s->now_s;
                blocks[num_blocks].end = pass.end;
                num_blocks++;
            }
        }
        for (Py_ssize_t k = 0; k < num_blocks; k++) {
            s->num_arrivals += 1;
            int32_t c = chain_new(s);
            if (c < 0) {
                PyMem_Free(blocks);
                return -1;
            }
            Chain *chain = &s->work.chains[c];
            chain->ticket = -((int64_t)1 << 62) - s->num_arrivals; /* apart from the passes' own tickets */
            chain->base = 0;
            chain->num_parts = 1;
            chain->refill = 0.0;
            chain->parts[0].queue = 3 * p + OUTPUTS;
            chain->parts[0].work = blocks[k].end - blocks[k].start;
            s->num_chains++;
            if (io_push(&s->work, blocks[k].start, s->num_arrivals, c) < 0) {
                PyMem_Free(blocks);
                return -1;
            }
        }
        PyMem_Free(blocks);
        passes->head = 0;
        passes->size = 0;
    }
    return 0;
}

/* `_Threads.arrive`, the chain's parts given. */
static int threads_arrive(Server *s, double at_s, int64_t ticket, const Part *parts, int num_parts, double refill) {
    if (ticket >= 0) {
        if (!s->has_cores && s->num_inputs == 0 && threads_queue_outputs(s) < 0)
            return -1;
        s->num_inputs += 1;
    }
    int32_t c = chain_new(s);
    if (c < 0)
        return -1;
    Chain *chain = &s->work.chains[c];
    chain->ticket = ticket;
    chain->base = 0;
    chain->num_parts = num_parts;
    chain->refill = refill;
    memcpy(chain->parts, parts, sizeof(Part) * num_parts);
    s->num_chains++;
    if (io_push(&s->work, at_s, s->num_arrivals, c) < 0)
        return -1;
    s->num_arrivals += 1;
    return 0;
}

/* `_Threads.add_output`: 0 with `*end_s`, -1 on error. */
static int threads_add_output(Server *s, double now_s, double at_s, int process, int64_t ticket, double work_s,
                              double refill, double *end_s) {
    if (s->num_chains == 0) {
        if (now_s > s->now_s)
            s->now_s = now_s;
    } else if (now_s >= s->now_s) {
        int stopped = 0;
        double t = threads_run(s, &s->work, now_s, 0, 0, &stopped);
        if (isnan(t) && PyErr_Occurred())
            return -1;
        s->now_s = t;
    }
    Part part = {3 * process + OUTPUTS, work_s};
    if (!s->has_cores) {
        double until = s->output_until_s[process];
        double start = until > at_s ? until : at_s;
        double end = start + work_s;
        s->output_until_s[process] = end;
        if (s->num_inputs) {
            if (threads_arrive(s, at_s, ticket, &part, 1, 0.0) < 0)
                return -1;
        } else {
            Passes *passes = &s->unqueued[process];
            while (passes->size && passes->items[passes->head].end <= now_s) { /* over: nothing left to queue */
                passes->head = (passes->head + 1) % passes->cap;
                passes->size--;
            }
            if (passes_push(passes, start, end) < 0)
                return -1;
        }
        *end_s = end;
        return 0;
    }
    if (threads_arrive(s, at_s, ticket, &part, 1, refill > 0 ? refill : 0.0) < 0)
        return -1;
    return threads_projected_end(s, ticket, end_s);
}

/* `reach_after(threads, now_s, ticket, latency_s)`: 0 with `*reach_s`, -1 on error. */
static int threads_reach(Server *s, double now_s, int64_t ticket, double latency_s, double *reach_s) {
    if (threads_advance(s, now_s) < 0)
        return -1;
    Entry *e = table_find(&s->table, ticket, 0);
    double end_s;
    if (e != NULL && e->has_finished)
        end_s = e->finished_s;
    else if (threads_projected_end(s, ticket, &end_s) < 0)
        return -1;
    double reach = end_s + latency_s;
    if (reach <= now_s) {
        e = table_find(&s->table, ticket, 0);
        if (e == NULL || !e->has_finished) {
            PyObject *key = PyLong_FromLongLong(ticket);
            if (key != NULL) {
                PyErr_SetObject(PyExc_KeyError, key);
                Py_DECREF(key);
            }
            return -1;
        }
        e->has_finished = 0;
        table_tidy(&s->table, e);
    }
    *reach_s = reach;
    return 0;
}

/* ---- Connections -------------------------------------------------------------------------------------------- */

static inline int ending_less(const Ending *a, const Ending *b) {
    return a->at < b->at || (a->at == b->at && (a->order < b->order || (a->order == b->order
                                                                       && a->process < b->process)));
}

static int idle_append(Server *s, double at, int process) {
    if (ring_reserve((void **)&s->idle, &s->idle_head, s->idle_size, &s->idle_cap, sizeof(Idle), 16) < 0)
        return -1;
    Idle *item = &s->idle[(s->idle_head + s->idle_size) % s->idle_cap];
    item->at = at;
    item->process = process;
    s->idle_size++;
    return 0;
}

/* `Connections.take`: the process of the connection the request sent at `now_s` goes out on; -1 on error. */
static int connections_take(Server *s, double now_s) {
    if (!s->started) { /* the client's test request's connection, idle since just before the run */
        s->started = 1;
        s->open[0] += 1;
        if (idle_append(s, now_s, 0) < 0)
            return -1;
    }
    while (s->ending_size && s->ending[0].at <= now_s) {
        Ending top = s->ending[0], last = s->ending[--s->ending_size];
        HEAP_SIFT_DOWN(s->ending, s->ending_size, last, ending_less);
        if (idle_append(s, top.at, top.process) < 0)
            return -1;
    }
    while (s->idle_size) {
        Idle item = s->idle[s->idle_head];
        s->idle_head = (s->idle_head + 1) % s->idle_cap;
        s->idle_size--;
        if (now_s - item.at < s->keep_alive_s) {
            s->opened = 0;
            return item.process;
        }
        s->open[item.process] -= 1; /* closed by the server meanwhile: aiohttp drops it */
        s->closed[item.process] += 1;
        s->any_closed = 1;
    }
    int process = 0;
    for (int p = 1; p < s->num_processes; p++)
        if (s->open[p] < s->open[process])
            process = p;
    s->open[process] += 1;
    s->opened = 1;
    return process;
}

/* `Connections.release`. */
static int connections_release(Server *s, int process, double at_s) {
    if (array_reserve((void **)&s->ending, s->ending_size, &s->ending_cap, sizeof(Ending)) < 0)
        return -1;
    Ending item = {at_s, s->num_released, process};
    HEAP_SIFT_UP(s->ending, s->ending_size++, item, ending_less);
    s->num_released += 1;
    return 0;
}

/* ---- the Python type ----------------------------------------------------------------------------------------- */

static void work_free(Work *w) {
    if (w->queues != NULL)
        for (int i = 0; i < w->num_queues; i++)
            PyMem_Free(w->queues[i].items);
    if (w->pending != NULL)
        for (int p = 0; p < w->num_processes; p++)
            PyMem_Free(w->pending[p].items);
    PyMem_Free(w->pending);
    PyMem_Free(w->reading);
    PyMem_Free(w->loads);
    PyMem_Free(w->checks);
    PyMem_Free(w->queues);
    PyMem_Free(w->io);
    PyMem_Free(w->chains);
    memset(w, 0, sizeof(Work));
}

static void Server_clear(Server *s) {
    work_free(&s->work);
    work_free(&s->scratch);
    PyMem_Free(s->free_slots);
    PyMem_Free(s->table.slots);
    PyMem_Free(s->output_until_s);
    if (s->unqueued != NULL)
        for (int p = 0; p < s->num_processes; p++)
            PyMem_Free(s->unqueued[p].items);
    PyMem_Free(s->unqueued);
    PyMem_Free(s->before);
    PyMem_Free(s->after);
    PyMem_Free(s->num_before);
    PyMem_Free(s->num_after);
    PyMem_Free(s->open);
    PyMem_Free(s->closed);
    PyMem_Free(s->idle);
    PyMem_Free(s->ending);
    s->open = NULL;
    s->closed = NULL;
    s->idle = NULL;
    s->ending = NULL;
    s->free_slots = NULL;
    s->table.slots = NULL;
    s->output_until_s = NULL;
    s->unqueued = NULL;
    s->before = s->after = NULL;
    s->num_before = s->num_after = NULL;
}

static void Server_dealloc(Server *s) {
    Server_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* A chain's parts from a sequence of (queue, seconds); `num_queues` bounds the queue's index. */
static int parts_from(Server *s, PyObject *seq, Part *parts, int *num_parts, int at_least_one) {
    PyObject *fast = PySequence_Fast(seq, "a chain: a sequence of (queue, seconds)");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > MAX_PARTS || (at_least_one && n < 1)) {
        PyErr_Format(PyExc_ValueError, "a chain of 1 to %d parts, got %zd", MAX_PARTS, n);
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        int queue;
        double work;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "id", &queue, &work)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a chain's part: (queue, seconds)");
            Py_DECREF(fast);
            return -1;
        }
        if (queue != WAIT && queue != ACCEPT && (queue < 0 || queue > s->client)) {
            PyErr_Format(PyExc_ValueError, "a chain's queue: WAIT, ACCEPT or 0 to %d, got %d", s->client, queue);
            Py_DECREF(fast);
            return -1;
        }
        parts[i].queue = queue;
        parts[i].work = work;
    }
    Py_DECREF(fast);
    *num_parts = (int)n;
    return 0;
}

/* A whole chain's waits each followed by a thread's part (what `_wait` relies on), its accepts each by a loop's part,
 * maybe after a wait (`_accept`: the process whose loop accepts). */
static int check_waits(const Part *parts, int num_parts, int client) {
    for (int i = 0; i < num_parts; i++) {
        if (parts[i].queue == WAIT && (i + 1 == num_parts || parts[i + 1].queue < 0)) {
            PyErr_SetString(PyExc_ValueError, "a chain's WAIT part: followed by a thread's part");
            return -1;
        }
        if (parts[i].queue == ACCEPT) {
            int k = i + 1 < num_parts && parts[i + 1].queue == WAIT ? i + 2 : i + 1;
            if (k >= num_parts || parts[k].queue < 0 || parts[k].queue >= client || parts[k].queue % 3 != LOOP) {
                PyErr_SetString(PyExc_ValueError, "a chain's ACCEPT part: followed by a loop's part (maybe after a "
                                                  "WAIT)");
                return -1;
            }
        }
    }
    return 0;
}

static int Server_init(Server *s, PyObject *args, PyObject *kwds) {
    int num_processes, client_shares, by_connection = 0, accept_per_turn = 0;
    PyObject *num_cores, *chain_parts;
    double c[12], keep_alive_s = 0.0;
    if (!PyArg_ParseTuple(args, "iOpO(dddddddddddd)|pdp", &num_processes, &num_cores, &client_shares, &chain_parts,
                          &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8], &c[9], &c[10], &c[11],
                          &by_connection, &keep_alive_s, &accept_per_turn))
        return -1;
    if (num_processes < 1) {
        PyErr_SetString(PyExc_ValueError, "num_processes: a positive integer");
        return -1;
    }
    Server_clear(s);
    memset(&s->work, 0, sizeof(Work));
    memset(&s->scratch, 0, sizeof(Work));
    memset(&s->table, 0, sizeof(Table));
    s->num_free = s->free_cap = 0;
    s->num_processes = num_processes;
    s->client = 3 * num_processes;
    s->client_shares = client_shares;
    if (num_cores == Py_None) {
        s->has_cores = 0;
        s->num_cores = 0;
    } else {
        s->has_cores = 1;
        s->num_cores = PyLong_AsLong(num_cores);
        if (s->num_cores == -1 && PyErr_Occurred())
            return -1;
        if (s->num_cores < 1) {
            PyErr_SetString(PyExc_ValueError, "num_cores: None or a positive integer");
            return -1;
        }
    }
    s->render_request_s = c[0];
    s->prompt_token_s = c[1];
    s->hash_token_s = c[2];
    s->client_s = c[3];
    s->request_s = c[4];
    s->latency_s = c[5];
    s->accept_gap_s = c[6];
    s->output_latency_s = c[7];
    s->output_pass_s = c[8];
    s->output_token_s = c[9];
    s->refill_s = c[10];
    s->first_output_s = c[11];
    s->num_chains = 0;
    s->num_arrivals = s->num_inputs = s->num_taken = s->num_outputs = 0;
    s->now_s = 0.0;
    s->last_connect_s = -INFINITY;
    s->by_connection = by_connection;
    s->keep_alive_s = keep_alive_s;
    s->accept_per_turn = accept_per_turn && by_connection; /* (`ApiServer`: only where connections are tracked) */
    s->opened = 0;
    s->started = 0;
    s->num_released = 0;
    s->idle_head = s->idle_size = s->idle_cap = 0;
    s->ending_size = s->ending_cap = 0;
    s->any_closed = 0;
    s->open = PyMem_Calloc(num_processes, sizeof(int64_t));
    s->closed = PyMem_Calloc(num_processes, sizeof(int64_t));
    if (s->open == NULL || s->closed == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int num_queues = s->client + 1;
    s->work.num_queues = s->scratch.num_queues = num_queues;
    s->work.queues = PyMem_Calloc(num_queues, sizeof(Queue));
    s->scratch.queues = PyMem_Calloc(num_queues, sizeof(Queue));
    s->work.num_processes = s->scratch.num_processes = num_processes;
    s->work.pending = PyMem_Calloc(num_processes, sizeof(Queue));
    s->scratch.pending = PyMem_Calloc(num_processes, sizeof(Queue));
    s->work.reading = PyMem_Malloc(sizeof(int32_t) * num_processes);
    s->scratch.reading = PyMem_Malloc(sizeof(int32_t) * num_processes);
    if (s->work.reading != NULL && s->scratch.reading != NULL)
        for (int p = 0; p < num_processes; p++)
            s->work.reading[p] = s->scratch.reading[p] = -1;
    s->work.loads = PyMem_Calloc(num_processes, sizeof(int64_t));
    s->scratch.loads = PyMem_Calloc(num_processes, sizeof(int64_t));
    s->work.checks = PyMem_Calloc(num_processes, sizeof(int));
    s->scratch.checks = PyMem_Calloc(num_processes, sizeof(int));
    if (s->work.loads != NULL && s->accept_per_turn) /* the loads: the test connection's (`ApiServer`) */
        s->work.loads[0] = 1;
    s->output_until_s = PyMem_Calloc(num_processes, sizeof(double));
    s->unqueued = PyMem_Calloc(num_processes, sizeof(Passes));
    s->before = PyMem_Calloc(num_processes, sizeof(*s->before));
    s->after = PyMem_Calloc(num_processes, sizeof(*s->after));
    s->num_before = PyMem_Calloc(num_processes, sizeof(int));
    s->num_after = PyMem_Calloc(num_processes, sizeof(int));
    if (!s->work.queues || !s->scratch.queues || !s->work.pending || !s->scratch.pending || !s->work.reading
        || !s->scratch.reading || !s->work.loads || !s->scratch.loads || !s->work.checks || !s->scratch.checks
        || !s->output_until_s || !s->unqueued || !s->before || !s->after
        || !s->num_before || !s->num_after) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *fast = PySequence_Fast(chain_parts, "chain_parts: per process (before, renderer, after)");
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != num_processes) {
        PyErr_SetString(PyExc_ValueError, "chain_parts: one (before, renderer, after) per process");
        Py_DECREF(fast);
        return -1;
    }
    for (int p = 0; p < num_processes; p++) {
        PyObject *before, *after;
        int renderer;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, p), "OiO", &before, &renderer, &after)
            || parts_from(s, before, s->before[p], &s->num_before[p], 0) < 0
            || parts_from(s, after, s->after[p], &s->num_after[p], 0) < 0) {
            Py_DECREF(fast);
            return -1;
        }
        if (renderer != 3 * p + RENDERER || s->num_before[p] + 2 + s->num_after[p] > MAX_PARTS) { /* (+ an ACCEPT) */
            PyErr_SetString(PyExc_ValueError, "chain_parts: the process's renderer, at most 16 parts");
            Py_DECREF(fast);
            return -1;
        }
        Part whole[MAX_PARTS];
        int n = 0;
        for (int i = 0; i < s->num_before[p]; i++)
            whole[n++] = s->before[p][i];
        whole[n].queue = renderer;
        whole[n++].work = 0.0;
        for (int i = 0; i < s->num_after[p]; i++)
            whole[n++] = s->after[p][i];
        if (check_waits(whole, n, s->client) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* The `n` arguments of a METH_FASTCALL | METH_KEYWORDS call by position or by the names `names` (the Python
 * methods' parameter names) into `out`; -1 with a TypeError naming `signature` where they do not fit. The last
 * `num_optional` may be left out (NULL in `out`). */
static int call_args_opt(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names, int n,
                         int num_optional, PyObject **out, const char *signature) {
    Py_ssize_t num_kw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > n)
        goto bad;
    for (int i = 0; i < n; i++)
        out[i] = i < nargs ? args[i] : NULL;
    for (Py_ssize_t k = 0; k < num_kw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < n && PyUnicode_CompareWithASCIIString(name, names[i]) != 0)
            i++;
        if (i == n || out[i] != NULL)
            goto bad;
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < n - num_optional; i++)
        if (out[i] == NULL)
            goto bad;
    return 0;
bad:
    PyErr_Format(PyExc_TypeError, "%s: wrong arguments", signature);
    return -1;
}

static int call_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names, int n,
                     PyObject **out, const char *signature) {
    return call_args_opt(args, nargs, kwnames, names, n, 0, out, signature);
}

static int64_t ticket_of(PyObject *obj) { return PyLong_AsLongLong(obj); }

static int process_of(Server *s, PyObject *obj, int *process) {
    long p = PyLong_AsLong(obj);
    if (p == -1 && PyErr_Occurred())
        return -1;
    if (p < 0 || p >= s->num_processes) {
        PyErr_Format(PyExc_IndexError, "process %ld of %d", p, s->num_processes);
        return -1;
    }
    *process = (int)p;
    return 0;
}

static PyObject *take_on(Server *s, int process, double now_s, PyObject *tokens) {
    long long num_prompt_tokens = PyLong_AsLongLong(tokens);
    if (num_prompt_tokens == -1 && PyErr_Occurred())
        return NULL;
    int64_t ticket = s->num_taken;
    s->num_taken += 1;
    if (threads_advance(s, now_s) < 0)
        return NULL;
    if (s->any_closed) { /* closed since the last request: the processes' loads (`ApiServer.take_request`) */
        for (int p = 0; p < s->num_processes; p++) {
            if (s->accept_per_turn)
                s->work.loads[p] -= s->closed[p];
            s->closed[p] = 0;
        }
        s->any_closed = 0;
    }
    double connect_s = s->last_connect_s + s->accept_gap_s;
    s->last_connect_s = connect_s > now_s ? connect_s : now_s;
    double render_s = s->render_request_s + s->prompt_token_s * (double)num_prompt_tokens;
    Part parts[MAX_PARTS];
    int n = 0;
    /* a new connection: the loop accepts it in its turn, after the client's part (`ApiServer.take_request`) */
    int accept_at = -1;
    if (s->accept_per_turn && s->opened) /* after the client's parts */
        for (accept_at = 0; accept_at < s->num_before[process] && s->before[process][accept_at].queue == s->client;)
            accept_at++;
    for (int i = 0; i < s->num_before[process]; i++) {
        if (i == accept_at) {
            parts[n].queue = ACCEPT;
            parts[n++].work = 0.0;
        }
        parts[n++] = s->before[process][i];
    }
    if (accept_at == s->num_before[process]) {
        parts[n].queue = ACCEPT;
        parts[n++].work = 0.0;
    }
    parts[n].queue = 3 * process + RENDERER;
    parts[n++].work = render_s;
    for (int i = 0; i < s->num_after[process]; i++)
        parts[n++] = s->after[process][i];
    if (threads_arrive(s, s->last_connect_s, ticket, parts, n, 0.0) < 0)
        return NULL;
    double hash_s = s->hash_token_s * (double)num_prompt_tokens;
    if (hash_s > 0) {
        Entry *e = table_find(&s->table, ticket, 1);
        if (e == NULL)
            return NULL;
        e->hash_s = hash_s;
        e->has_hash = 1;
    }
    double reach = s->last_connect_s + s->client_s + s->request_s + render_s + s->latency_s + hash_s;
    return Py_BuildValue("(iLd)", process, (long long)ticket, reach);
}

static const char *const take_names[] = {"now_s", "num_prompt_tokens"};
static const char *const take_on_names[] = {"process", "now_s", "num_prompt_tokens"};
static const char *const reach_names[] = {"now_s", "process", "ticket"};
static const char *const stream_names[] = {"now_s", "process", "num_tokens", "num_first"};

static PyObject *Server_take_request(Server *s, PyObject *const *fast, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *args[2];
    if (call_args(fast, nargs, kwnames, take_names, 2, args, "take_request(now_s, num_prompt_tokens)") < 0)
        return NULL;
    double now_s = PyFloat_AsDouble(args[0]);
    if (now_s == -1.0 && PyErr_Occurred())
        return NULL;
    int process = s->by_connection ? connections_take(s, now_s) : (int)(s->num_taken % s->num_processes);
    if (process < 0)
        return NULL;
    return take_on(s, process, now_s, args[1]);
}

static PyObject *Server_take_request_on(Server *s, PyObject *const *fast, Py_ssize_t nargs, PyObject *kwnames) {
    int process;
    PyObject *args[3];
    if (call_args(fast, nargs, kwnames, take_on_names, 3, args, "take_request_on(process, now_s, num_prompt_tokens)")
        < 0)
        return NULL;
    if (process_of(s, args[0], &process) < 0)
        return NULL;
    double now_s = PyFloat_AsDouble(args[1]);
    if (now_s == -1.0 && PyErr_Occurred())
        return NULL;
    return take_on(s, process, now_s, args[2]);
}

static PyObject *Server_reach_s(Server *s, PyObject *const *fast, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *args[3];
    if (call_args(fast, nargs, kwnames, reach_names, 3, args, "reach_s(now_s, process, ticket)") < 0)
        return NULL;
    double now_s = PyFloat_AsDouble(args[0]);
    if (now_s == -1.0 && PyErr_Occurred())
        return NULL;
    int64_t ticket = ticket_of(args[2]);
    if (ticket == -1 && PyErr_Occurred())
        return NULL;
    Entry *e = table_find(&s->table, ticket, 0);
    double hash_s = e != NULL && e->has_hash ? e->hash_s : 0.0;
    double reach;
    if (threads_reach(s, now_s, ticket, s->latency_s + hash_s, &reach) < 0)
        return NULL;
    if (hash_s != 0.0 && reach <= now_s) {
        e = table_find(&s->table, ticket, 0); /* (the table may have moved) */
        if (e == NULL || !e->has_hash) {
            PyObject *key = PyLong_FromLongLong(ticket);
            if (key != NULL) {
                PyErr_SetObject(PyExc_KeyError, key);
                Py_DECREF(key);
            }
            return NULL;
        }
        e->has_hash = 0;
        table_tidy(&s->table, e);
    }
    return PyFloat_FromDouble(reach);
}

static PyObject *Server_stream_outputs(Server *s, PyObject *const *fast, Py_ssize_t nargs, PyObject *kwnames) {
    int process;
    PyObject *args[4];
    if (call_args_opt(fast, nargs, kwnames, stream_names, 4, 1, args,
                      "stream_outputs(now_s, process, num_tokens, num_first=0)") < 0)
        return NULL;
    double now_s = PyFloat_AsDouble(args[0]);
    if (now_s == -1.0 && PyErr_Occurred())
        return NULL;
    if (process_of(s, args[1], &process) < 0)
        return NULL;
    long long num_tokens = PyLong_AsLongLong(args[2]);
    if (num_tokens == -1 && PyErr_Occurred())
        return NULL;
    long long num_first = 0;
    if (args[3] != NULL && (num_first = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
        return NULL;
    s->num_outputs += 1;
    double end_s, work_s = s->output_pass_s + s->output_token_s * (double)num_tokens, refill = 0.0;
    if (num_first != 0) /* the chat endpoint's first outputs (`ApiServer.stream_outputs`) */
        work_s += s->first_output_s * (double)num_first;
    if (s->refill_s > 0 && work_s > 0) /* `ApiServer.stream_outputs`' turns: its wake-up and, where the client shares
                                          the cores, one per chunk (a first output's role chunk one more) */
        refill = s->refill_s * (double)(1 + (s->client_shares ? num_tokens + num_first : 0)) / work_s;
    if (threads_add_output(s, now_s, now_s + s->output_latency_s, process, -s->num_outputs, work_s, refill, &end_s)
        < 0)
        return NULL;
    return PyFloat_FromDouble(end_s);
}

static const char *const release_names[] = {"process", "at_s"};

static PyObject *Server_release(Server *s, PyObject *const *fast, Py_ssize_t nargs, PyObject *kwnames) {
    int process;
    PyObject *args[2];
    if (call_args(fast, nargs, kwnames, release_names, 2, args, "release(process, at_s)") < 0
        || process_of(s, args[0], &process) < 0)
        return NULL;
    double at_s = PyFloat_AsDouble(args[1]);
    if (at_s == -1.0 && PyErr_Occurred())
        return NULL;
    if (s->by_connection && connections_release(s, process, at_s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Server_arrive(Server *s, PyObject *args) {
    double at_s;
    long long ticket;
    PyObject *seq;
    Part parts[MAX_PARTS];
    int n;
    if (!PyArg_ParseTuple(args, "dLO", &at_s, &ticket, &seq) || parts_from(s, seq, parts, &n, 1) < 0
        || check_waits(parts, n, s->client) < 0)
        return NULL;
    if (threads_arrive(s, at_s, ticket, parts, n, 0.0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Server_add_output(Server *s, PyObject *args) {
    double now_s, at_s, work_s, end_s, refill = 0.0;
    int process;
    long long ticket;
    if (!PyArg_ParseTuple(args, "ddiLd|d", &now_s, &at_s, &process, &ticket, &work_s, &refill))
        return NULL;
    if (process < 0 || process >= s->num_processes) {
        PyErr_Format(PyExc_IndexError, "process %d of %d", process, s->num_processes);
        return NULL;
    }
    if (threads_add_output(s, now_s, at_s, process, ticket, work_s, refill, &end_s) < 0)
        return NULL;
    return PyFloat_FromDouble(end_s);
}

static PyObject *Server_advance(Server *s, PyObject *arg) {
    double to_s = PyFloat_AsDouble(arg);
    if ((to_s == -1.0 && PyErr_Occurred()) || threads_advance(s, to_s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Server_projected_end(Server *s, PyObject *arg) {
    int64_t ticket = ticket_of(arg);
    double end_s;
    if ((ticket == -1 && PyErr_Occurred()) || threads_projected_end(s, ticket, &end_s) < 0)
        return NULL;
    return PyFloat_FromDouble(end_s);
}

static PyObject *Server_reach(Server *s, PyObject *args) {
    double now_s, latency_s, reach;
    long long ticket;
    if (!PyArg_ParseTuple(args, "dLd", &now_s, &ticket, &latency_s) || threads_reach(s, now_s, ticket, latency_s,
                                                                                     &reach) < 0)
        return NULL;
    return PyFloat_FromDouble(reach);
}

static PyObject *Server_finished(Server *s, PyObject *arg) {
    int64_t ticket = ticket_of(arg);
    if (ticket == -1 && PyErr_Occurred())
        return NULL;
    Entry *e = table_find(&s->table, ticket, 0);
    if (e == NULL || !e->has_finished)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(e->finished_s);
}

static PyObject *Server_get_now_s(Server *s, void *closure) { return PyFloat_FromDouble(s->now_s); }
static PyObject *Server_get_num_inputs(Server *s, void *closure) { return PyLong_FromLongLong(s->num_inputs); }
static PyObject *Server_get_num_arrivals(Server *s, void *closure) { return PyLong_FromLongLong(s->num_arrivals); }
static PyObject *Server_get_num_chains(Server *s, void *closure) { return PyLong_FromSsize_t(s->num_chains); }

static PyGetSetDef Server_getset[] = {
    {"now_s", (getter)Server_get_now_s, NULL, "the time the threads are advanced to", NULL},
    {"num_inputs", (getter)Server_get_num_inputs, NULL, "requests whose input work is under way", NULL},
    {"num_arrivals", (getter)Server_get_num_arrivals, NULL, "the arrivals' order so far", NULL},
    {"num_chains", (getter)Server_get_num_chains, NULL, "len(chains)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Server_methods[] = {
    {"take_request", (PyCFunction)(void (*)(void))Server_take_request, METH_FASTCALL | METH_KEYWORDS,
     "take_request(now_s, num_prompt_tokens) -> (process, ticket, earliest reach): ApiServer.take_request"},
    {"take_request_on", (PyCFunction)(void (*)(void))Server_take_request_on, METH_FASTCALL | METH_KEYWORDS,
     "take_request_on(process, now_s, num_prompt_tokens): take_request on a process chosen by the caller"},
    {"reach_s", (PyCFunction)(void (*)(void))Server_reach_s, METH_FASTCALL | METH_KEYWORDS,
     "reach_s(now_s, process, ticket) -> float: ApiServer.reach_s"},
    {"stream_outputs", (PyCFunction)(void (*)(void))Server_stream_outputs, METH_FASTCALL | METH_KEYWORDS,
     "stream_outputs(now_s, process, num_tokens, num_first=0) -> float: ApiServer.stream_outputs"},
    {"release", (PyCFunction)(void (*)(void))Server_release, METH_FASTCALL | METH_KEYWORDS,
     "release(process, at_s): ApiServer.release (Connections.release)"},
    {"arrive", (PyCFunction)Server_arrive, METH_VARARGS, "arrive(at_s, ticket, chain): _Threads.arrive"},
    {"add_output", (PyCFunction)Server_add_output, METH_VARARGS,
     "add_output(now_s, at_s, process, ticket, work_s) -> float: _Threads.add_output"},
    {"advance", (PyCFunction)Server_advance, METH_O, "advance(to_s): _Threads.advance"},
    {"projected_end", (PyCFunction)Server_projected_end, METH_O, "projected_end(ticket): _Threads.projected_end"},
    {"reach", (PyCFunction)Server_reach, METH_VARARGS, "reach(now_s, ticket, latency_s): api_server.reach_after"},
    {"finished", (PyCFunction)Server_finished, METH_O, "finished(ticket): _Threads.finished_s.get(ticket)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ServerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "roofline.sim._apicore.Server",
    .tp_doc = "ApiServer's threads and per-request calls in C (roofline/sim/_apicore.c)",
    .tp_basicsize = sizeof(Server),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Server_init,
    .tp_dealloc = (destructor)Server_dealloc,
    .tp_methods = Server_methods,
    .tp_getset = Server_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_apicore", "The API server's threads in C (roofline/sim/api_server.py's reference).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__apicore(void) {
    if (PyType_Ready(&ServerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ServerType);
    if (PyModule_AddObject(m, "Server", (PyObject *)&ServerType) < 0) {
        Py_DECREF(&ServerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "WAIT", WAIT) < 0 || PyModule_AddIntConstant(m, "ACCEPT", ACCEPT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
