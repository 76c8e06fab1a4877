/* The optimal partitioner's node loop in C (included by _native.c; kernel `branch_and_bound`):
 * fasop.partition.splits._Search.run with its dives, the open-node heap, the families of
 * children, `last_splits`, `child_bounds`, `known_dots` and `cut_bound`, the bound of a node
 * being one of the compositions fasop.partition.compiled recognises:
 *
 *   chains (one_f_one_b_bound) [raised to the backward sweep (SweepBound.at)] [raised to the
 *   zigzag chains (ZigzagBound)], or the reverse sweep alone (ReverseSweepBound over the
 *   flipped stages).
 *
 * Each node's arithmetic is the kernels above called on the same arrays the Python code passes
 * them (chain_terms once per node's children, chain_bounds, sweep_at, zigzag, reverse_sweep,
 * cut_raise), so every bound is the same bits; the order of the nodes (a stable sort of the
 * children's bounds, a heap by (bound, order opened)) and every test (`hopeless`, `beyond`)
 * are the Python code's, so the same nodes are visited and the same splits sent to be
 * evaluated. What needs the cost model stays in Python, called back: the objectives of the
 * splits found (`flush`: evaluate, keep the best, learn a cut) and stage 0's extra. */

#define BB_MAX_CUTS 64

typedef struct {
    Py_ssize_t n;                       /* children; 0: none */
    int64_t *stops;
    double *t, *sum, *most, *wmax, *capped, *extra; /* capped J x n; extra n at stage 0 */
    double *terms, least[2];            /* chain_terms' rows (6 x n), once needed */
    double *g, *below;                  /* the sweep's rows (n x P each), once needed */
    double *free_;                      /* the zigzag's free stages' rows (n x (pp - k - 1)) */
    Py_ssize_t ncuts;                   /* cuts known when `cuts` was made */
    double *cuts;                       /* C x n */
} bb_rest;

typedef struct {
    int refs;                           /* heap entries + dives holding it */
    int k, num_cuts;
    Py_ssize_t first, n, ndots;
    double before, own, steady, trips;  /* the expanded node's: stages < k, its chain */
    bb_rest *rest;
    int64_t *order, *counts;            /* n, k */
    double *lbs, *prefixes, *turns, *zfixed, *ztop, *dots;
} bb_family;

typedef struct {
    int k;
    Py_ssize_t first, ndots;
    double before, own, steady, trips, zfixed, ztop;
    const double *prefix, *zrow;
    double dots[BB_MAX_CUTS];
} bb_node;

typedef struct {
    double lb;
    int64_t opened;
    bb_family *family;
    Py_ssize_t position;
} bb_entry;

typedef struct {
    const double *times, *lsum, *lmax, *lwmax, *capped, *below;
    int n, last_stages, settle, chain, sweep, zig, reverse;
    Py_ssize_t size, L, J, P, batch;
    const double *cw, *rtw, *sw, *sh, *stable, *sstart, *zsteady, *zturn, *znoturn, *ztable, *zstart;
    const double *rw, *rh, *rtable, *rstart;
    double send_first, send_last, m, ssends, zsends, rsends, margin, above, least, best;
    int64_t max_nodes, visited, opened;
    PyObject *extra_cb, *flush_cb, *evaluate_cb, *pending;
    Py_ssize_t C;                       /* cuts */
    Py_buffer cut_views[3];             /* cut_w (C x n), cut_c (C), cut_tables (C x (n + 1) x size) */
    int have_cuts;
    bb_rest **rests;                    /* (n + 1) x size; &bb_none: no child */
    double *extras;                     /* by layer count; NaN: not yet asked (the caller's, kept between calls) */
    int64_t *counts;                    /* n + 1 */
    double *scratch;                    /* size */
    int64_t *firsts;                    /* size */
    bb_entry *heap;
    Py_ssize_t heap_len, heap_cap;
} bb_search;

static bb_rest bb_none;

#define BB_T3(s, k, a, b) (s)->times[((size_t)(k) * (size_t)(s)->size + (size_t)(a)) * (size_t)(s)->size + (size_t)(b)]
#define BB_CUT_W(s) ((const double *)(s)->cut_views[0].buf)
#define BB_CUT_C(s) ((const double *)(s)->cut_views[1].buf)
#define BB_CUT_T(s) ((const double *)(s)->cut_views[2].buf)

/* _Search.hopeless and beyond: the same float operations. */
static inline int bb_hopeless(const bb_search *s, double value)
{
    if (s->settle) return value >= s->best * (1 - s->margin);
    return value * (1 - s->margin) > s->best;
}

static inline int bb_beyond(const bb_search *s, double value) { return value * (1 - s->margin) > s->above; }

/* SplitSearch.extra(layers), asked once per layer count. */
static int bb_extra(bb_search *s, Py_ssize_t layers, double *out)
{
    if (layers < 0 || layers >= s->size) {
        PyErr_SetString(PyExc_ValueError, "branch_and_bound: layer count out of range");
        return -1;
    }
    if (isnan(s->extras[layers])) {
        PyObject *v = PyObject_CallFunction(s->extra_cb, "n", layers);
        if (!v) return -1;
        const double x = PyFloat_AsDouble(v);
        Py_DECREF(v);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        s->extras[layers] = x;
    }
    *out = s->extras[layers];
    return 0;
}

static void bb_rest_free(bb_rest *r)
{
    if (!r || r == &bb_none) return;
    free(r->stops);
    free(r->t);
    free(r->terms);
    free(r->g);
    free(r->free_);
    free(r->cuts);
    free(r);
}

/* _Search.children: the feasible stops of stage k from layer `first`, their stage times and the
 * least completions after them; NULL with no exception: no child. */
static bb_rest *bb_children(bb_search *s, int k, Py_ssize_t first)
{
    bb_rest **slot = s->rests + (size_t)k * (size_t)s->size + (size_t)first;
    if (*slot) return *slot == &bb_none ? NULL : *slot;
    const Py_ssize_t hi = k == s->n - 1 ? s->L : s->L - (s->n - k - 1);
    Py_ssize_t n = 0;
    const double *next = s->lsum + (size_t)(k + 1) * (size_t)s->size;
    for (Py_ssize_t stop = first + 1; stop <= hi; stop++)
        if (isfinite(BB_T3(s, k, first, stop)) && isfinite(next[stop])) n++;
    if (!n) {
        *slot = &bb_none;
        return NULL;
    }
    bb_rest *r = calloc(1, sizeof(bb_rest));
    if (!r) return (bb_rest *)PyErr_NoMemory();
    r->n = n;
    r->stops = malloc((size_t)n * sizeof(int64_t));
    r->t = malloc((size_t)n * (5 + (size_t)s->J) * sizeof(double));
    if (!r->stops || !r->t) {
        bb_rest_free(r);
        return (bb_rest *)PyErr_NoMemory();
    }
    r->sum = r->t + n, r->most = r->t + 2 * n, r->wmax = r->t + 3 * n, r->extra = r->t + 4 * n;
    r->capped = r->t + 5 * n;
    Py_ssize_t i = 0;
    const size_t row = (size_t)(k + 1) * (size_t)s->size;
    for (Py_ssize_t stop = first + 1; stop <= hi; stop++) {
        const double t = BB_T3(s, k, first, stop);
        if (!(isfinite(t) && isfinite(next[stop]))) continue;
        r->stops[i] = stop, r->t[i] = t;
        r->sum[i] = s->lsum[row + stop], r->most[i] = s->lmax[row + stop], r->wmax[i] = s->lwmax[row + stop];
        for (Py_ssize_t j = 0; j < s->J; j++)
            r->capped[j * n + i] = s->capped[(size_t)j * (size_t)(s->n + 1) * (size_t)s->size + row + stop];
        i++;
    }
    if (k == 0)
        for (i = 0; i < n; i++)
            if (bb_extra(s, r->stops[i], r->extra + i) < 0) {
                bb_rest_free(r);
                return NULL;
            }
    *slot = r;
    return r;
}

static void bb_release(bb_family *f)
{
    if (f && --f->refs == 0) free(f);
}

/* A family for the n children of `node` (one block), holding its state for the children taken later. */
static bb_family *bb_family_new(bb_search *s, const bb_node *node, bb_rest *rest, const int64_t *counts)
{
    const size_t n = (size_t)rest->n, J = s->zig ? (size_t)(s->n - node->k) : 0, P = (size_t)s->P;
    const size_t doubles = n * (1 + P + J + 2) + (size_t)node->ndots, ints = n + (size_t)(node->k > 0 ? node->k : 0);
    bb_family *f = malloc(sizeof(bb_family) + doubles * sizeof(double) + ints * sizeof(int64_t));
    if (!f) return (bb_family *)PyErr_NoMemory();
    double *d = (double *)(f + 1);
    f->lbs = d, f->prefixes = d + n, f->turns = f->prefixes + n * P, f->zfixed = f->turns + n * J;
    f->ztop = f->zfixed + n, f->dots = f->ztop + n;
    f->order = (int64_t *)(f->dots + node->ndots), f->counts = f->order + n;
    f->refs = 1, f->k = node->k, f->first = node->first, f->n = (Py_ssize_t)n, f->rest = rest;
    f->before = node->before, f->own = node->own, f->steady = node->steady, f->trips = node->trips;
    f->ndots = node->ndots, f->num_cuts = (int)s->C;
    memcpy(f->dots, node->dots, (size_t)node->ndots * sizeof(double));
    if (node->k > 0) memcpy(f->counts, counts, (size_t)node->k * sizeof(int64_t));
    return f;
}

/* The cuts' share of a node's children (child_bounds: rest.cuts), for the cuts known now. */
static int bb_rest_cuts(bb_search *s, int k, bb_rest *r)
{
    if (r->ncuts == s->C) return 0;
    free(r->cuts);
    r->cuts = malloc((size_t)s->C * (size_t)r->n * sizeof(double));
    if (!r->cuts) {
        PyErr_NoMemory();
        return -1;
    }
    const double *w = BB_CUT_W(s), *c = BB_CUT_C(s), *tab = BB_CUT_T(s);
    for (Py_ssize_t j = 0; j < s->C; j++)
        for (Py_ssize_t i = 0; i < r->n; i++)
            r->cuts[j * r->n + i] = (w[j * s->n + k] * r->t[i] +
                                     tab[((size_t)j * (size_t)(s->n + 1) + (size_t)(k + 1)) * (size_t)s->size +
                                         (size_t)r->stops[i]]) + c[j];
    r->ncuts = s->C;
    return 0;
}

/* _Search.child_bounds into the family: its children's bounds (lbs) and their chains. */
static int bb_bounds(bb_search *s, const bb_node *node, bb_family *f)
{
    bb_rest *r = f->rest;
    const int k = node->k, pp = s->n;
    const Py_ssize_t n = r->n, P = s->P;
    double *lb = f->lbs;
    if (s->reverse) {
        const int j = pp - 1 - k;
        for (Py_ssize_t i = 0; i < n; i++) {
            s->firsts[i] = s->L - r->stops[i];
            if (s->firsts[i] < 0 || s->firsts[i] >= s->size) {
                PyErr_SetString(PyExc_ValueError, "branch_and_bound: first layer out of range");
                return -1;
            }
        }
        reverse_sweep(node->prefix, r->t, s->rw + (size_t)j * (size_t)P, s->rh + (size_t)j * (size_t)P,
                      s->rtable + (size_t)j * (size_t)s->size * (size_t)P, s->firsts, s->rsends, n, P, f->prefixes, lb);
    } else {
        if (!r->terms) {
            if (!(r->terms = malloc(6 * (size_t)n * sizeof(double)))) {
                PyErr_NoMemory();
                return -1;
            }
            chain_terms(r->t, r->sum, r->most, r->wmax, r->capped, s->below, s->J, n, s->cw[k], s->send_first,
                        s->send_last, s->m, k, pp, s->rtw[k], r->terms, r->least);
        }
        chain_bounds(node->before, node->own, node->steady, node->trips, r->least[0], r->least[1], r->terms + 3 * n,
                     r->terms + n, r->terms + 4 * n, n, lb);
        if (s->sweep) {
            if (!r->g) {
                if (!(r->g = malloc(2 * (size_t)n * (size_t)P * sizeof(double)))) {
                    PyErr_NoMemory();
                    return -1;
                }
                r->below = r->g + n * P;
                for (Py_ssize_t i = 0; i < n; i++)
                    for (Py_ssize_t x = 0; x < P; x++) {
                        r->g[i * P + x] = r->t[i] * s->sw[k * P + x] + s->sh[k * P + x];
                        r->below[i * P + x] = s->stable[((size_t)(k + 1) * (size_t)s->size + (size_t)r->stops[i]) * (size_t)P + (size_t)x];
                    }
            }
            sweep_at(node->prefix, r->g, r->t, r->below, s->ssends, lb, n, P, f->prefixes, lb);
        }
        if (s->zig) {
            const Py_ssize_t J = pp - k;
            if (J > 1 && !r->free_) {
                if (!(r->free_ = malloc((size_t)n * (size_t)(J - 1) * sizeof(double)))) {
                    PyErr_NoMemory();
                    return -1;
                }
                for (Py_ssize_t i = 0; i < n; i++)
                    for (Py_ssize_t j = 0; j < J - 1; j++)
                        r->free_[i * (J - 1) + j] = s->ztable[((size_t)(k + 1 + j) * (size_t)(pp + 1) + (size_t)(k + 1)) *
                                                                  (size_t)s->size + (size_t)r->stops[i]];
            }
            zigzag(node->zrow, node->zfixed, node->ztop, r->t, s->zsteady[k], s->zturn + k, s->znoturn + k, r->sum,
                   r->free_, s->zsends, n, J, s->scratch, f->turns, f->zfixed, f->ztop);
            for (Py_ssize_t i = 0; i < n; i++) lb[i] = np_max(lb[i], node->before + s->scratch[i]);
        }
    }
    double extra0 = 0.0;
    if (k > 0 && bb_extra(s, (Py_ssize_t)s->counts[0], &extra0) < 0) return -1;
    if (s->C && bb_rest_cuts(s, k, r) < 0) return -1;
    cut_raise(lb, node->dots, r->cuts, s->C, k == 0 ? r->extra : NULL, extra0, n, lb);
    return 0;
}

/* _Family.child: the node of the child at `position` in the family's order (its layer count
 * written to s->counts[f->k]). */
static void bb_child(bb_search *s, const bb_family *f, Py_ssize_t position, bb_node *node)
{
    if (f->k < 0) {  /* the root's one child: the root */
        node->k = 0, node->first = 0, node->before = 0.0, node->own = 0.0, node->steady = 0.0, node->trips = -INFINITY;
        node->prefix = s->reverse ? s->rstart : s->sstart, node->zrow = s->zstart, node->zfixed = -INFINITY;
        node->ztop = 0.0, node->ndots = 0;
        return;
    }
    const Py_ssize_t i = (Py_ssize_t)f->order[position], P = s->P, J = s->zig ? s->n - f->k : 0;
    const bb_rest *r = f->rest;
    const double time = r->t[i];
    node->k = f->k + 1, node->first = (Py_ssize_t)r->stops[i], node->before = f->before + time;
    s->counts[f->k] = r->stops[i] - f->first;
    if (r->terms) {  /* _Chains.__getitem__: max(own, before + busy), max(steady), max(trips, trips - before) */
        node->own = mx(f->own, f->before + r->terms[2 * r->n + i]);
        node->steady = mx(f->steady, r->terms[i]);
        node->trips = mx(f->trips, r->terms[5 * r->n + i] - f->before);
    }
    node->prefix = f->prefixes + i * P;
    if (J) node->zrow = f->turns + i * J + 1, node->zfixed = f->zfixed[i], node->ztop = f->ztop[i];
    node->ndots = f->ndots;
    const double *w = BB_CUT_W(s);
    for (Py_ssize_t c = 0; c < f->ndots; c++) node->dots[c] = f->dots[c] + w[c * s->n + f->k] * time;
}

/* A stable argsort of the family's bounds (numpy's kind="stable"; NaN last). */
static void bb_order(bb_family *f)
{
    for (Py_ssize_t i = 0; i < f->n; i++) {
        const double v = f->lbs[i];
        Py_ssize_t j = i;
        while (j > 0) {
            const double u = f->lbs[f->order[j - 1]];
            if (!(v < u || (isnan(u) && !isnan(v)))) break;
            f->order[j] = f->order[j - 1];
            j--;
        }
        f->order[j] = i;
    }
}

static inline int bb_less(const bb_entry *a, const bb_entry *b)
{
    return a->lb < b->lb || (a->lb == b->lb && a->opened < b->opened);
}

/* _Search.push: the family's child at `position` becomes an open node. */
static int bb_push(bb_search *s, bb_family *f, Py_ssize_t position)
{
    if (s->heap_len == s->heap_cap) {
        const Py_ssize_t cap = s->heap_cap ? 2 * s->heap_cap : 256;
        bb_entry *h = realloc(s->heap, (size_t)cap * sizeof(bb_entry));
        if (!h) {
            PyErr_NoMemory();
            return -1;
        }
        s->heap = h, s->heap_cap = cap;
    }
    s->opened++;
    bb_entry e = {f->lbs[f->order[position]], s->opened, f, position};
    Py_ssize_t i = s->heap_len++;
    while (i > 0) {
        const Py_ssize_t up = (i - 1) / 2;
        if (!bb_less(&e, &s->heap[up])) break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = e;
    f->refs++;
    return 0;
}

static bb_entry bb_pop(bb_search *s)
{
    bb_entry top = s->heap[0], last = s->heap[--s->heap_len];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= s->heap_len) break;
        if (c + 1 < s->heap_len && bb_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bb_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->heap_len) s->heap[i] = last;
    return top;
}

/* The split counts[0..k-1] + tail as a tuple appended to the pending list. */
static int bb_append(bb_search *s, int k, const int64_t *tail, int extra)
{
    PyObject *split = PyTuple_New(k + extra);
    if (!split) return -1;
    for (int i = 0; i < k + extra; i++) {
        PyObject *v = PyLong_FromLongLong(i < k ? s->counts[i] : tail[i - k]);
        if (!v) {
            Py_DECREF(split);
            return -1;
        }
        PyTuple_SET_ITEM(split, i, v);
    }
    const int status = PyList_Append(s->pending, split);
    Py_DECREF(split);
    return status;
}

/* The cut arrays after a flush: (best, cut_w, cut_c, cut_tables) from the Python side. */
static int bb_take_state(bb_search *s, PyObject *state)
{
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 4) {
        PyErr_SetString(PyExc_TypeError, "branch_and_bound: flush must return (best, cut_w, cut_c, cut_tables)");
        return -1;
    }
    const double best = PyFloat_AsDouble(PyTuple_GET_ITEM(state, 0));
    if (best == -1.0 && PyErr_Occurred()) return -1;
    s->best = best;
    Py_buffer views[3];
    for (int i = 0; i < 3; i++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(state, i + 1), &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            while (i--) PyBuffer_Release(&views[i]);
            return -1;
        }
    const Py_ssize_t C = views[1].len / (Py_ssize_t)sizeof(double);
    if (C > BB_MAX_CUTS || views[0].len != C * s->n * (Py_ssize_t)sizeof(double) ||
        views[2].len != C * (s->n + 1) * s->size * (Py_ssize_t)sizeof(double)) {
        for (int i = 0; i < 3; i++) PyBuffer_Release(&views[i]);
        PyErr_SetString(PyExc_ValueError, "branch_and_bound: cut arrays of the wrong size");
        return -1;
    }
    if (s->have_cuts)
        for (int i = 0; i < 3; i++) PyBuffer_Release(&s->cut_views[i]);
    memcpy(s->cut_views, views, sizeof(views));
    s->have_cuts = 1, s->C = C;
    return 0;
}

/* _Search.flush, in Python: evaluate the pending splits, keep the best, learn a cut. */
static int bb_flush(bb_search *s)
{
    if (!PyList_GET_SIZE(s->pending)) return 0;
    PyObject *state = PyObject_CallFunction(s->flush_cb, "OL", s->pending, (long long)s->visited);
    if (!state) return -1;
    const int status = bb_take_state(s, state);
    Py_DECREF(state);
    return status;
}

/* _Search.last_splits: the splits below a node over the last stages whose bounds (and their
 * parents') are not hopeless, depth first, appended to the pending list. */
static int bb_last(bb_search *s, const bb_node *node)
{
    bb_rest *r = bb_children(s, node->k, node->first);
    if (!r) return PyErr_Occurred() ? -1 : 0;
    bb_family *f = bb_family_new(s, node, r, s->counts);
    if (!f) return -1;
    int status = bb_bounds(s, node, f);
    for (Py_ssize_t i = 0; i < f->n && status == 0; i++) {
        f->order[i] = i;
        if (bb_hopeless(s, f->lbs[i])) continue;
        if (node->k == s->n - 2) {
            const int64_t tail[2] = {r->stops[i] - node->first, s->L - r->stops[i]};
            status = bb_append(s, node->k, tail, 2);
        } else {
            bb_node child;
            bb_child(s, f, i, &child);
            status = bb_last(s, &child);
        }
    }
    bb_release(f);
    return status;
}

enum { BB_DONE = 0, BB_BUDGET = 1, BB_ABOVE = 2, BB_NO_CHILD = 3, BB_ERROR = -1 };

/* _Search.dive: follow a node down to a split, always into its lowest-bound child, its next
 * child becoming an open node. `holder`: the family the node's chains point into (released). */
static int bb_dive(bb_search *s, bb_node *node, bb_family *holder)
{
    for (;;) {
        s->visited++;
        if (s->max_nodes >= 0 && s->visited > s->max_nodes) {
            bb_release(holder);
            return BB_BUDGET;
        }
        const int k = node->k;
        if (k >= s->n - s->last_stages && k != s->n - 1) {
            int status = k < s->n ? bb_last(s, node) : bb_append(s, k, NULL, 0);
            if (status == 0 && PyList_GET_SIZE(s->pending) >= s->batch) status = bb_flush(s);
            bb_release(holder);
            return status < 0 ? BB_ERROR : BB_DONE;
        }
        bb_rest *r = bb_children(s, k, node->first);
        if (!r) {
            bb_release(holder);
            return PyErr_Occurred() ? BB_ERROR : BB_DONE;
        }
        bb_family *f = bb_family_new(s, node, r, s->counts);
        if (!f || bb_bounds(s, node, f) < 0) {
            bb_release(f);
            bb_release(holder);
            return BB_ERROR;
        }
        bb_order(f);
        if (bb_hopeless(s, f->lbs[f->order[0]])) {
            bb_release(f);
            bb_release(holder);
            return BB_DONE;
        }
        if (f->n > 1 && !bb_hopeless(s, f->lbs[f->order[1]]) && bb_push(s, f, 1) < 0) {
            bb_release(f);
            bb_release(holder);
            return BB_ERROR;
        }
        bb_child(s, f, 0, node);
        bb_release(holder);
        holder = f;
    }
}

/* _Search.known_dots and cut_bound for a node taken from the heap after new cuts. */
static double bb_cut_bound(bb_search *s, bb_node *node, int *err)
{
    const double *w = BB_CUT_W(s), *c = BB_CUT_C(s), *tab = BB_CUT_T(s);
    int64_t edge = 0;
    for (Py_ssize_t j = 0; j < s->C; j++) node->dots[j] = 0.0;
    for (int i = 0; i < node->k; i++) {
        const double t = BB_T3(s, i, edge, edge + s->counts[i]);
        for (Py_ssize_t j = 0; j < s->C; j++) node->dots[j] = node->dots[j] + w[j * s->n + i] * t;
        edge += s->counts[i];
    }
    node->ndots = s->C;
    if (!s->C) return -INFINITY;
    double value = 0.0;
    for (Py_ssize_t j = 0; j < s->C; j++) {
        const double v = (node->dots[j] + tab[((size_t)j * (size_t)(s->n + 1) + (size_t)node->k) * (size_t)s->size +
                                              (size_t)node->first]) + c[j];
        value = j ? np_max(value, v) : v;
    }
    double extra = 0.0;
    if (node->k > 0 && bb_extra(s, (Py_ssize_t)s->counts[0], &extra) < 0) *err = 1;
    return value + extra;
}

/* Whether any pending split's objective is at most `above` (run's early stop). */
static int bb_any_within(bb_search *s)
{
    PyObject *values = PyObject_CallFunctionObjArgs(s->evaluate_cb, s->pending, NULL);
    if (!values) return -1;
    PyObject *seq = PySequence_Fast(values, "branch_and_bound: evaluate must return a sequence");
    Py_DECREF(values);
    if (!seq) return -1;
    int found = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && !found; i++) {
        const double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        found = v <= s->above;
    }
    Py_DECREF(seq);
    return found;
}

/* partition.optimal's `least`: the least bound of the root's children (numpy's min: NaN
 * propagated), before any cut; BB_NO_CHILD: the root has none. */
static int bb_root(bb_search *s, double *least)
{
    bb_rest *r = bb_children(s, 0, 0);
    if (!r) return PyErr_Occurred() ? BB_ERROR : BB_NO_CHILD;
    bb_node node = {0};
    node.trips = node.zfixed = -INFINITY;
    node.prefix = s->reverse ? s->rstart : s->sstart, node.zrow = s->zstart;
    bb_family *f = bb_family_new(s, &node, r, s->counts);
    if (!f || bb_bounds(s, &node, f) < 0) {
        bb_release(f);
        return BB_ERROR;
    }
    for (Py_ssize_t i = 0; i < f->n; i++) *least = i ? np_min(*least, f->lbs[i]) : f->lbs[i];
    bb_release(f);
    return BB_DONE;
}

/* _Search.run's loop: best-first with dives from the root; *floor: the lowest bound of an open
 * node when it stopped. */
static int bb_run(bb_search *s, double *floor)
{
    bb_family *root = malloc(sizeof(bb_family) + sizeof(double) + 2 * sizeof(int64_t));
    if (!root) {
        PyErr_NoMemory();
        return BB_ERROR;
    }
    static bb_rest root_rest;
    static int64_t root_stop = 0;
    static double root_t = 0.0;
    root_rest.n = 1, root_rest.stops = &root_stop, root_rest.t = &root_t;
    memset(root, 0, sizeof(bb_family));
    root->lbs = (double *)(root + 1), root->order = (int64_t *)(root->lbs + 1);
    root->lbs[0] = 0.0, root->order[0] = 0, root->refs = 1, root->k = -1, root->n = 1, root->rest = &root_rest;
    int status = bb_push(s, root, 0);
    bb_release(root);
    if (status < 0) return BB_ERROR;
    *floor = -INFINITY;
    int result = BB_DONE;
    while (s->heap_len) {
        bb_entry e = bb_pop(s);
        bb_family *f = e.family;
        *floor = mx(e.lb, s->least);
        if (bb_hopeless(s, e.lb)) {
            bb_release(f);
            break;
        }
        if (bb_beyond(s, e.lb) && s->best > s->above) {
            const int within = bb_any_within(s);
            if (within <= 0) {
                bb_release(f);
                return within < 0 ? BB_ERROR : BB_ABOVE;
            }
        }
        if (e.position + 1 < f->n && !bb_hopeless(s, f->lbs[f->order[e.position + 1]]) &&
            bb_push(s, f, e.position + 1) < 0) {
            bb_release(f);
            return BB_ERROR;
        }
        bb_node node;
        if (f->k > 0) memcpy(s->counts, f->counts, (size_t)f->k * sizeof(int64_t));
        bb_child(s, f, e.position, &node);
        if (f->num_cuts != s->C) {  /* cuts learned since its parent was expanded: bound it again */
            int err = 0;
            const double cut = bb_cut_bound(s, &node, &err);
            if (err) {
                bb_release(f);
                return BB_ERROR;
            }
            if (bb_hopeless(s, mx(e.lb, cut))) {
                bb_release(f);
                continue;
            }
        }
        result = bb_dive(s, &node, f);
        if (result != BB_DONE) break;
    }
    return result;
}

PyDoc_STRVAR(branch_and_bound_doc,
"branch_and_bound(times, n, size, least_sum, least_max, least_wmax, capped, below, parts, options,\n"
"                 callbacks, state) -> (status, floor, visited)\n\n"
"fasop.partition.splits._Search.run in C (fasop.partition.compiled builds the arguments): times\n"
"float64 n x size x size; least_* (n + 1) x size; capped J x (n + 1) x size and below J (J = 0:\n"
"none); parts: (chain, sweep, zigzag, reverse) argument tuples or None; options: (margin, settle,\n"
"above, least, batch, last_stages, max_nodes, root_only); callbacks: (extra, flush, evaluate,\n"
"pending, extras: writable float64 size, extra(n) by n, NaN where not yet asked); state: (best, cut_w, cut_c, cut_tables). status 0: searched to the end, 1: stopped at\n"
"max_nodes, 2: every open node above `above` and nothing found at or below it, 3 (root_only): the\n"
"root has no child. root_only: floor is the least bound of the root's children, nothing searched.");

/* The buffers' slots in `views`: times, the least tables, capped, below (0-5), the chains' (6-7),
 * the sweep's (8-11), the zigzag's (12-16), the reverse sweep's (BB_RW...). */
enum { BB_RW = 17, BB_RH, BB_RT, BB_RS, BB_VIEWS };

#define BB_BUF(i, name, count) check_buffer(&views[i], (count), sizeof(double), name)

static int bb_parse_parts(bb_search *s, PyObject *parts, Py_buffer *views)
{
    PyObject *chain, *sweep, *zig, *rev;
    if (!PyArg_ParseTuple(parts, "OOOO", &chain, &sweep, &zig, &rev)) return -1;
    const Py_ssize_t n = s->n, size = s->size;
    s->chain = chain != Py_None, s->sweep = sweep != Py_None, s->zig = zig != Py_None, s->reverse = rev != Py_None;
    if (s->chain && (!PyArg_ParseTuple(chain, "y*y*ddd", &views[6], &views[7], &s->send_first, &s->send_last, &s->m) ||
                     BB_BUF(6, "weights", n) < 0 || BB_BUF(7, "round trips", n) < 0))
        return -1;
    if (s->sweep) {
        if (!PyArg_ParseTuple(sweep, "y*y*y*y*d", &views[8], &views[9], &views[10], &views[11], &s->ssends)) return -1;
        s->P = views[11].len / (Py_ssize_t)sizeof(double);
        if (s->P < 1 || BB_BUF(8, "sweep weights", n * s->P) < 0 || BB_BUF(9, "sweep waits", n * s->P) < 0 ||
            BB_BUF(10, "sweep table", (n + 1) * size * s->P) < 0)
            return -1;
    }
    if (s->zig && (!PyArg_ParseTuple(zig, "y*y*y*y*y*d", &views[12], &views[13], &views[14], &views[15], &views[16],
                                     &s->zsends) ||
                   BB_BUF(12, "steady", n) < 0 || BB_BUF(13, "turn", n) < 0 ||
                   BB_BUF(14, "no_turn", n) < 0 || BB_BUF(15, "zigzag table", n * (n + 1) * size) < 0 ||
                   BB_BUF(16, "zigzag start", n) < 0))
        return -1;
    if (s->reverse) {
        if (!PyArg_ParseTuple(rev, "y*y*y*y*d", &views[BB_RW], &views[BB_RH], &views[BB_RT], &views[BB_RS], &s->rsends)) return -1;
        s->P = views[BB_RS].len / (Py_ssize_t)sizeof(double);
        if (s->P < 1 || BB_BUF(BB_RW, "reverse weights", n * s->P) < 0 || BB_BUF(BB_RH, "reverse waits", n * s->P) < 0 ||
            BB_BUF(BB_RT, "reverse table", (n + 1) * size * s->P) < 0)
            return -1;
    }
    if (s->reverse == (s->chain || s->sweep || s->zig) || (s->sweep && !s->chain) || (s->zig && !s->chain)) {
        PyErr_SetString(PyExc_ValueError, "branch_and_bound: chains [+ sweep] [+ zigzag], or the reverse sweep alone");
        return -1;
    }
    s->cw = views[6].buf, s->rtw = views[7].buf, s->sw = views[8].buf, s->sh = views[9].buf, s->stable = views[10].buf;
    s->sstart = views[11].buf, s->zsteady = views[12].buf, s->zturn = views[13].buf, s->znoturn = views[14].buf;
    s->ztable = views[15].buf, s->zstart = views[16].buf, s->rw = views[BB_RW].buf, s->rh = views[BB_RH].buf;
    s->rtable = views[BB_RT].buf, s->rstart = views[BB_RS].buf;
    return 0;
}

static void bb_free(bb_search *s)
{
    if (s->rests)
        for (size_t i = 0; i < (size_t)(s->n + 1) * (size_t)s->size; i++) bb_rest_free(s->rests[i]);
    for (Py_ssize_t i = 0; i < s->heap_len; i++) bb_release(s->heap[i].family);
    free(s->heap);
    free(s->rests);
    free(s->counts);
    free(s->scratch);
    free(s->firsts);
    if (s->have_cuts)
        for (int i = 0; i < 3; i++) PyBuffer_Release(&s->cut_views[i]);
}

static PyObject *py_branch_and_bound(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer views[BB_VIEWS];
    memset(views, 0, sizeof(views));
    bb_search s;
    memset(&s, 0, sizeof(s));
    PyObject *parts, *options, *callbacks, *state, *result = NULL;
    Py_buffer extras = {0};
    if (!PyArg_ParseTuple(args, "y*iny*y*y*y*y*OOOO", &views[0], &s.n, &s.size, &views[1], &views[2], &views[3],
                          &views[4], &views[5], &parts, &options, &callbacks, &state))
        return NULL;
    const Py_ssize_t n = s.n, size = s.size;
    s.J = views[5].len / (Py_ssize_t)sizeof(double), s.L = size - 1;
    if (check_stage_times(&views[0], s.n, size, NULL, "branch_and_bound") < 0 || BB_BUF(1, "least_sum", (n + 1) * size) < 0 ||
        BB_BUF(2, "least_max", (n + 1) * size) < 0 || BB_BUF(3, "least_wmax", (n + 1) * size) < 0 ||
        BB_BUF(4, "capped", s.J * (n + 1) * size) < 0 || bb_parse_parts(&s, parts, views) < 0)
        goto done;
    s.times = views[0].buf, s.lsum = views[1].buf, s.lmax = views[2].buf, s.lwmax = views[3].buf;
    s.capped = views[4].buf, s.below = views[5].buf;
    long long max_nodes;
    int root_only;
    if (!PyArg_ParseTuple(options, "dpddniLp", &s.margin, &s.settle, &s.above, &s.least, &s.batch, &s.last_stages,
                          &max_nodes, &root_only) ||
        !PyArg_ParseTuple(callbacks, "OOOO!w*", &s.extra_cb, &s.flush_cb, &s.evaluate_cb, &PyList_Type, &s.pending,
                          &extras) ||
        check_buffer(&extras, size, sizeof(double), "extras") < 0)
        goto done;
    s.max_nodes = max_nodes;
    s.rests = calloc((size_t)(n + 1) * (size_t)size, sizeof(bb_rest *));
    s.extras = extras.buf;
    s.counts = calloc((size_t)n + 1, sizeof(int64_t));
    s.scratch = malloc((size_t)size * sizeof(double));
    s.firsts = malloc((size_t)size * sizeof(int64_t));
    if (!s.rests || !s.counts || !s.scratch || !s.firsts) {
        PyErr_NoMemory();
        goto done;
    }
    if (bb_take_state(&s, state) < 0) goto done;
    double floor = -INFINITY;
    const int status = root_only ? bb_root(&s, &floor) : bb_run(&s, &floor);
    if (status != BB_ERROR) result = Py_BuildValue("idL", status, floor, (long long)s.visited);
done:
    bb_free(&s);
    for (int i = 0; i < BB_VIEWS; i++) PyBuffer_Release(&views[i]);
    PyBuffer_Release(&extras);
    return result;
}
#undef BB_BUF
#undef BB_T3
