/* _fasop_native: compiled generic kernels of fasop's hot loops (optional; see fasop/schedule/native.py).
 *
 * Plain arrays in, plain arrays out; nothing here knows a cost model. Each kernel computes what
 * a Python function of fasop computes, with the same float64 operations in the same order, so
 * the results are the same bits (tests/test_native.py compares them):
 *
 * - one_f_one_b: the 1F1B event recurrences over given forward, backward and send durations
 *   (fasop.schedule.recurrences.run, docs/estimators.md section 5), many pipelines of one (pp, m) at once.
 *   Every event end is (the largest of the events it waits for) + its duration: comparisons,
 *   exact, and one IEEE double addition. one_f_one_b_many: the same for pipelines of mixed
 *   (pp, m) in one call.
 * - one_f_one_b_traced: one pipeline's run that also returns the critical path of stage 0's end
 *   (fasop.schedule.pipeline.critical_path: the proven-split search's cuts).
 * - split_ends: one_f_one_b of many layer splits of one pipeline, their stage times read from a
 *   table of stage times by first and last layer (the proven-split search's candidate splits);
 *   polish_moves: the splits one layer away from a split that fit, and their stage times
 *   (fasop.partition.polish.move_rows); fit_table: a plan's stage times where its layers fit, with
 *   their finite runs (fasop.estimators.fasop2024.optimal.SplitSearch._tables).
 * - completion, capped_completion, bottleneck_split: the layer partitioner's dynamic programmes
 *   over (stage, first layer) (fasop.partition.splits), sums, maxima and exact minima, reading
 *   only where finite_runs found the stage times finite;
 *   sweep_completion: the backward sweep's table (fasop.schedule.bounds), the same kind;
 *   sweep_at: that sweep's bound at one node of the partitioner's search (SweepBound.at);
 *   chain_terms, chain_bounds: one_f_one_b_bound's chains at a node (fasop.schedule.bounds);
 *   reverse_sweep, zigzag: the reverse sweep's and the zigzag chains' bounds at a node; cut_raise:
 *   a node's child bounds raised to the learnt cuts (fasop.partition.splits); branch_and_bound:
 *   the partitioner's whole node loop over those kernels (_node_loop.h).
 *
 * Arrays are C-contiguous buffers (numpy arrays) read without numpy's C API, so building needs
 * only a C compiler and Python's headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Python's max(a, b) for the non-negative, non-NaN values here: a unless b is larger. */
static inline double mx(double a, double b) { return b > a ? b : a; }

/* ------------------------------------------------------------------------------- 1F1B */

/* LANES pipelines of the same pp and m run in lockstep, lane l of every time holding pipeline
 * l's: the same operations per lane, so each lane's values are those of its pipeline run
 * alone, and the compiler turns the lane loops into vector instructions. */
#define LANES 4
typedef struct { double v[LANES]; } lanes_t;
_Static_assert(sizeof(lanes_t) == LANES * sizeof(double), "lanes_t is read as an array of doubles");

/* Does any lane of x differ from +0.0? Durations are >= 0 and never -0.0, so adding one that
 * is 0 in every lane leaves every value as it is: such additions are skipped. */
static inline int any(const lanes_t *x)
{
    int some = 0;
    for (int l = 0; l < LANES; l++) some |= x->v[l] != 0.0;
    return some;
}

/* t = max(a, b), then + d when add, per lane */
static inline void maxadd(lanes_t *t, const lanes_t *a, const lanes_t *b, const lanes_t *d, int add)
{
    for (int l = 0; l < LANES; l++) t->v[l] = mx(a->v[l], b->v[l]);
    if (add)
        for (int l = 0; l < LANES; l++) t->v[l] += d->v[l];
}

/* Scratch of the recurrences for one (pp, m): the durations and ends of LANES pipelines. */
typedef struct {
    int pp, m;
    lanes_t *grid;  /* 6 * pp * m */
    int *flags;     /* 3 * pp */
    lanes_t *dur;   /* 4 * pp rows: F, B, SF, SB of each stage */
    lanes_t *ends;  /* pp */
} sched_t;

/* Scratch for pipelines of up to max_pp stages and max_cells = pp x m; set s->pp, s->m before
 * each run. */
static int sched_init(sched_t *s, int max_pp, int64_t max_cells)
{
    const int pp = max_pp;
    s->pp = pp;
    s->m = 1;
    s->grid = malloc(6 * (size_t)max_cells * sizeof(lanes_t));
    s->flags = malloc(3 * (size_t)pp * sizeof(int));
    s->dur = malloc(4 * (size_t)pp * sizeof(lanes_t));
    s->ends = malloc((size_t)pp * sizeof(lanes_t));
    return (s->grid && s->flags && s->dur && s->ends) ? 0 : -1;
}

static void sched_free(sched_t *s)
{
    free(s->grid);
    free(s->flags);
    free(s->dur);
    free(s->ends);
}

/* Set by _set_poison (tests only): the 1F1B runs (run_1f1b, run_traced) fill the cells they do
 * not zero with 1e300. */
static int poison = 0;

/* run_1f1b: the recurrences of fasop.schedule.recurrences.run (_one_f_one_b.h) on the LANES pipelines of
 * s->dur, into s->ends. */
#define ONE_F_ONE_B_NAME run_1f1b
#define ONE_F_ONE_B_STATE sched_t
#define CELL lanes_t
#define MAXADD(t, a, b, row, add) maxadd(t, a, b, &s->dur[row], add)
#define ONE_F_ONE_B_SENDS(row) any(&s->dur[row])
#define ONE_F_ONE_B_END(cell) (cell)
#define ONE_F_ONE_B_ZERO {{0.0}}
#define ONE_F_ONE_B_BIG {{1e300, 1e300, 1e300, 1e300}}
#include "_one_f_one_b.h"

/* ------------------------------------------------------------------------ traced 1F1B */

/* One pipeline's 1F1B run that also records which event set each value, so that the chain of
 * events that sets stage 0's end (its critical path) can be read back. Every event of the
 * recurrences is (the latest of its inputs) + its duration, and rounding is monotone, so for
 * any chain of events the float sum of its durations, added in chain order from 0.0, is at most
 * the run's value at its last event, for whatever durations the run is given (the events and
 * their inputs depend only on pp, m and which sends are 0). Summed with another pipeline's
 * durations, a critical path is thus an exact lower bound on that pipeline's stage-0 end, equal
 * to it when its own critical path is the same chain (the partitioner's cuts,
 * fasop.schedule.pipeline.critical_path). */

#define TRACE_MAX_CELLS ((INT32_MAX - 2) / 4) /* event ids are int32 */

typedef struct {
    double v;
    int32_t id; /* the event that set v (0: none, v is 0.0) */
} ev_t;

typedef struct {
    int pp, m;
    ev_t *grid;              /* 6 * pp * m */
    int *flags;              /* 3 * pp */
    double *dur;             /* 4 * pp: F, B, SF, SB of each stage */
    double *ends;            /* pp: each stage's last backward end */
    int32_t *pred, *code;    /* event k: the event its value came from, its duration (index into dur) */
    int32_t events;          /* events so far (event 0: none) */
    int32_t *path, length;   /* the critical path: duration indices, first event first */
} trace_t;

static int trace_init(trace_t *s, int max_pp, int64_t max_cells)
{
    const size_t events = 4 * (size_t)max_cells + 2;
    s->grid = malloc(6 * (size_t)max_cells * sizeof(ev_t));
    s->flags = malloc(3 * (size_t)max_pp * sizeof(int));
    s->dur = malloc(4 * (size_t)max_pp * sizeof(double));
    s->ends = malloc((size_t)max_pp * sizeof(double));
    s->pred = malloc(events * sizeof(int32_t));
    s->code = malloc(events * sizeof(int32_t));
    s->path = malloc(events * sizeof(int32_t));
    return (s->grid && s->flags && s->dur && s->ends && s->pred && s->code && s->path) ? 0 : -1;
}

static void trace_free(trace_t *s)
{
    free(s->grid);
    free(s->flags);
    free(s->dur);
    free(s->ends);
    free(s->pred);
    free(s->code);
    free(s->path);
}

/* t = max(a, b) (a unless b is later), then + dur[code] as a new event when add */
static inline void traced_maxadd(trace_t *s, ev_t *t, const ev_t *a, const ev_t *b, int code, int add)
{
    /* selected without branches: which input is later is as good as random */
    const double av = a->v, bv = b->v;
    const int later = bv > av;
    const double v = later ? bv : av;
    const int32_t id = later ? b->id : a->id;
    if (add) {
        const int32_t k = s->events++;
        s->pred[k] = id;
        s->code[k] = code;
        t->v = v + s->dur[code];
        t->id = k;
    } else {
        t->v = v;
        t->id = id;
    }
}

/* run_1f1b's recurrences (_one_f_one_b.h), the same operations in the same order, on one
 * pipeline, every event recorded. */
#define ONE_F_ONE_B_NAME traced_recurrences
#define ONE_F_ONE_B_STATE trace_t
#define CELL ev_t
#define MAXADD(t, a, b, row, add) traced_maxadd(s, t, a, b, row, add)
#define ONE_F_ONE_B_SENDS(row) (s->dur[row] != 0.0)
#define ONE_F_ONE_B_END(cell) ((cell).v)
#define ONE_F_ONE_B_ZERO {0.0, 0}
#define ONE_F_ONE_B_BIG {1e300, 0}
#include "_one_f_one_b.h"

/* A traced run of s->dur: s->ends, and the critical path of stage 0's end. */
static void run_traced(trace_t *s)
{
    s->events = 1;
    traced_recurrences(s);
    /* stage 0's critical path, read back from its end */
    const size_t size = (size_t)s->pp * (size_t)s->m;
    const ev_t *end = &s->grid[3 * size + (size_t)(s->m - 1) * (size_t)s->pp];  /* bce[0][m - 1] */
    int32_t length = 0;
    for (int32_t k = end->id; k; k = s->pred[k]) s->path[length++] = s->code[k];
    for (int32_t a = 0, b = length - 1; a < b; a++, b--) {
        const int32_t c = s->path[a];
        s->path[a] = s->path[b];
        s->path[b] = c;
    }
    s->length = length;
}

/* ----------------------------------------------------------- the optimal partitioner's tables */

/* fasop.partition.splits's dynamic programmes over (stage k, first layer a) on stage times
 * times[k][a][b] (layers a..b-1 on stage k; inf where b <= a or they do not fit), n stages of
 * size = layers + 1 entries: the same float operations per entry as its numpy code (one
 * product, one sum or maximum), minima taken exactly, so the same bits. */

#define T3(k, a, b) times[((size_t)(k) * (size_t)size + (size_t)(a)) * (size_t)size + (size_t)(b)]

/* finite_runs: runs[2 (k size + a)], runs[2 (k size + a) + 1] = the first b where times[k][a][b] is
 * finite and the last one + 1 (0, 0: none). The tables below read only the b in that range when
 * given it (runs, else NULL: every b): every entry outside is inf or NaN, which each of them
 * skips, so the values are the same; a search's tables over one `times` share one scan. */
static void finite_runs(const double *times, int n, Py_ssize_t size, int64_t *runs)
{
    for (int k = 0; k < n; k++)
        for (Py_ssize_t a = 0; a < size; a++) {
            Py_ssize_t lo = 0, hi = 0;
            for (Py_ssize_t b = 0; b < size; b++)
                if (isfinite(T3(k, a, b))) {
                    if (hi == 0) lo = b;
                    hi = b + 1;
                }
            runs[2 * ((size_t)k * (size_t)size + (size_t)a)] = lo;
            runs[2 * ((size_t)k * (size_t)size + (size_t)a) + 1] = hi;
        }
}

/* The range of b that (k, a)'s loops read: `finite_runs`', or every b without runs. */
#define B_LO(k, a) (runs ? (Py_ssize_t)runs[2 * ((size_t)(k) * (size_t)size + (size_t)(a))] : 0)
#define B_HI(k, a) (runs ? (Py_ssize_t)runs[2 * ((size_t)(k) * (size_t)size + (size_t)(a)) + 1] : size)

/* partition._weighted: w x t; w == 1: t; w == 0: 0 where t is finite (0 x inf would be nan). */
static inline double weighted_time(double t, double w)
{
    if (w == 1.0) return t;
    if (w > 0.0) return t * w;
    return isfinite(t) ? 0.0 : INFINITY;
}

/* partition.completion: table[k][a] = least over the splits of layers a.. into stages k.. of the
 * sum (largest: the largest) of weights[i] x stage time; table (n + 1) x size. */
static void completion_table(const double *times, int n, Py_ssize_t size, const double *weights, int largest,
                             const int64_t *runs, double *table)
{
    for (Py_ssize_t q = 0; q < (Py_ssize_t)(n + 1) * size; q++) table[q] = INFINITY;
    table[(size_t)n * (size_t)size + (size_t)(size - 1)] = 0.0;
    for (int k = n - 1; k >= 0; k--) {
        const double w = weights[k], *next = table + (size_t)(k + 1) * (size_t)size;
        double *row = table + (size_t)k * (size_t)size;
        for (Py_ssize_t a = 0; a < size; a++) {
            double least = INFINITY;
            for (Py_ssize_t b = B_LO(k, a), hi = B_HI(k, a); b < hi; b++) {
                const double t = T3(k, a, b);
                if (!isfinite(t)) continue;  /* x inf or NaN: v never below `least` */
                const double x = weighted_time(t, w);
                const double v = largest ? mx(x, next[b]) : x + next[b];
                if (v < least) least = v;
            }
            row[a] = least;
        }
    }
}

/* partition.capped_completion: table[j][k][a] = least sum of stage times over the splits of
 * layers a.. into stages k.. whose every weights[i] x stage time is at most caps[j]; table
 * J x (n + 1) x size. Each entry's weighted time is compared with every cap in turn (minima are
 * exact: the order they are taken in changes no bit). */
static void capped_table(const double *times, int n, Py_ssize_t size, const double *weights, const double *caps,
                         Py_ssize_t J, const int64_t *runs, double *table)
{
    const size_t plane = (size_t)(n + 1) * (size_t)size;
    for (size_t q = 0; q < (size_t)J * plane; q++) table[q] = INFINITY;
    for (Py_ssize_t j = 0; j < J; j++) table[(size_t)j * plane + (size_t)n * (size_t)size + (size_t)(size - 1)] = 0.0;
    for (int k = n - 1; k >= 0; k--) {
        const double w = weights[k];
        for (Py_ssize_t a = 0; a < size; a++) {
            double *least = table + (size_t)k * (size_t)size + (size_t)a;  /* + j * plane: cap j's, from inf */
            const Py_ssize_t lo = B_LO(k, a), hi = B_HI(k, a);
            for (Py_ssize_t b = lo; b < hi; b++) {
                const double t = T3(k, a, b);
                if (!isfinite(t)) continue;  /* x inf or NaN: above every cap */
                const double x = weighted_time(t, w);
                const double *next = table + (size_t)(k + 1) * (size_t)size + (size_t)b;
                for (Py_ssize_t j = 0; j < J; j++) {
                    if (!(x <= caps[j])) continue;  /* numpy: inf there */
                    const double v = t + next[(size_t)j * plane];
                    if (v < least[(size_t)j * plane]) least[(size_t)j * plane] = v;
                }
            }
        }
    }
}

/* partition.bottleneck_split: a split minimising the largest stage time, among the suffixes of
 * the same largest the one of least sum, then the first stop; counts (n) written, 0 when no
 * split fits. most, sum: (n + 1) x size scratch; stop: n x size. */
static int bottleneck_counts(const double *times, int n, Py_ssize_t size, const int64_t *runs, double *most,
                             double *sum, int64_t *stop, int64_t *counts)
{
    for (Py_ssize_t q = 0; q < (Py_ssize_t)(n + 1) * size; q++) most[q] = sum[q] = INFINITY;
    for (Py_ssize_t q = 0; q < (Py_ssize_t)n * size; q++) stop[q] = 0;
    most[(size_t)n * (size_t)size + (size_t)(size - 1)] = sum[(size_t)n * (size_t)size + (size_t)(size - 1)] = 0.0;
    for (int k = n - 1; k >= 0; k--) {
        const double *next_most = most + (size_t)(k + 1) * (size_t)size, *next_sum = sum + (size_t)(k + 1) * (size_t)size;
        for (Py_ssize_t a = 0; a < size; a++) {
            double lowest = INFINITY;  /* an inf or NaN time gives x inf or NaN: never below it */
            const Py_ssize_t lo = B_LO(k, a), hi = B_HI(k, a);
            for (Py_ssize_t b = lo; b < hi; b++) {
                const double x = mx(T3(k, a, b), next_most[b]);
                if (x < lowest) lowest = x;
            }
            if (!isfinite(lowest)) continue;
            /* numpy's argmin of (total where the largest is lowest, else inf): the first least */
            Py_ssize_t best = 0;
            double least = INFINITY;
            for (Py_ssize_t b = lo; b < hi; b++) {  /* lowest is finite: never equal outside */
                const double t = T3(k, a, b);
                if (mx(t, next_most[b]) != lowest) continue;
                const double total = t + next_sum[b];
                if (total < least) {
                    least = total;
                    best = b;
                }
            }
            most[(size_t)k * (size_t)size + (size_t)a] = mx(T3(k, a, best), next_most[best]);
            sum[(size_t)k * (size_t)size + (size_t)a] = T3(k, a, best) + next_sum[best];
            stop[(size_t)k * (size_t)size + (size_t)a] = best;
        }
    }
    if (!isfinite(most[0])) return 0;
    int64_t first = 0;
    for (int k = 0; k < n; k++) {
        const int64_t next = stop[(size_t)k * (size_t)size + (size_t)first];
        counts[k] = next - first;
        first = next;
    }
    return 1;
}

#undef B_LO
#undef B_HI
#undef T3

/* ------------------------------------------------------------------------------ Python */

static int check_buffer(const Py_buffer *view, Py_ssize_t count, Py_ssize_t itemsize, const char *name)
{
    if (view->len != count * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, count * itemsize, view->len);
        return -1;
    }
    return 0;
}

/* The pipeline shape of a 1F1B entry point: pp, m >= 1. */
static int check_pipeline(int pp, int m, const char *name)
{
    if (pp < 1 || m < 1) {
        PyErr_Format(PyExc_ValueError, "%s: pp and m must be >= 1", name);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(one_f_one_b_doc,
"one_f_one_b(durations, pp, m, ends)\n\n"
"The 1F1B recurrences for n pipelines of pp stages and m micro-batches. durations: float64,\n"
"C-contiguous, n rows of 4*pp (F, B, SF, SB of each stage); ends: writable float64 buffer of n*pp,\n"
"filled with each stage's last backward end, pipeline by pipeline.");

static PyObject *py_one_f_one_b(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer durations, ends;
    int pp, m;
    if (!PyArg_ParseTuple(args, "y*iiw*", &durations, &pp, &m, &ends)) return NULL;
    PyObject *result = NULL;
    sched_t s = {0};
    if (check_pipeline(pp, m, "one_f_one_b") < 0) goto done;
    const Py_ssize_t row = 4 * (Py_ssize_t)pp;
    const Py_ssize_t n = durations.len / (row * (Py_ssize_t)sizeof(double));
    if (check_buffer(&durations, n * row, sizeof(double), "durations") < 0 ||
        check_buffer(&ends, n * pp, sizeof(double), "ends") < 0)
        goto done;
    if (sched_init(&s, pp, (int64_t)pp * m) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    s.m = m;
    const double *d = durations.buf;
    double *out = ends.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k0 = 0; k0 < n; k0 += LANES) {
        for (int l = 0; l < LANES; l++) {  /* lanes past the last pipeline repeat it, unread */
            const double *r = d + (k0 + l < n ? k0 + l : n - 1) * row;
            for (Py_ssize_t q = 0; q < row; q++) s.dur[q].v[l] = r[q];
        }
        run_1f1b(&s);
        for (int l = 0; l < LANES && k0 + l < n; l++)
            for (int i = 0; i < pp; i++) out[(k0 + l) * pp + i] = s.ends[i].v[l];
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    sched_free(&s);
    PyBuffer_Release(&durations);
    PyBuffer_Release(&ends);
    return result;
}

#include "_splits.h"

/* Pipelines of one_f_one_b_many, ordered by stage count, then micro-batch count, then index. */
typedef struct {
    int64_t pp, m;
    Py_ssize_t index;
} shape_t;

static int by_shape(const void *a, const void *b)
{
    const shape_t *x = a, *y = b;
    if (x->pp != y->pp) return x->pp < y->pp ? -1 : 1;
    if (x->m != y->m) return x->m < y->m ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

PyDoc_STRVAR(one_f_one_b_many_doc,
"one_f_one_b_many(durations, width, pps, ms, ends)\n\n"
"one_f_one_b for n pipelines of their own stage and micro-batch counts: pps, ms int64 n (1 <=\n"
"pp <= width, m >= 1); durations float64, n rows of 4 blocks of width entries (F, B, SF, SB of\n"
"each stage, the first pp of each block read); ends: writable float64 n x width, the first pp\n"
"entries of each row written. Pipelines of equal (pp, m) run together, LANES at a time.");

static PyObject *py_one_f_one_b_many(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer durations, pps, ms, ends;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*ny*y*w*", &durations, &width, &pps, &ms, &ends)) return NULL;
    PyObject *result = NULL;
    sched_t s = {0};
    shape_t *order = NULL;
    const Py_ssize_t n = pps.len / (Py_ssize_t)sizeof(int64_t);
    if (width < 1 || check_buffer(&pps, n, sizeof(int64_t), "pps") < 0 ||
        check_buffer(&ms, n, sizeof(int64_t), "ms") < 0 ||
        check_buffer(&durations, n * 4 * width, sizeof(double), "durations") < 0 ||
        check_buffer(&ends, n * width, sizeof(double), "ends") < 0) {
        if (width < 1 && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "one_f_one_b_many: width must be >= 1");
        goto done;
    }
    const int64_t *pp_of = pps.buf, *m_of = ms.buf;
    int64_t most_pp = 1, most_cells = 1;
    order = malloc((size_t)(n ? n : 1) * sizeof(shape_t));
    if (!order) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (pp_of[k] < 1 || pp_of[k] > width || m_of[k] < 1 || m_of[k] > (int64_t)1 << 30) {
            PyErr_SetString(PyExc_ValueError, "one_f_one_b_many: need 1 <= pp <= width and 1 <= m <= 2^30");
            goto done;
        }
        if (pp_of[k] > most_pp) most_pp = pp_of[k];
        if (pp_of[k] * m_of[k] > most_cells) most_cells = pp_of[k] * m_of[k];
        order[k] = (shape_t){pp_of[k], m_of[k], k};
    }
    qsort(order, (size_t)n, sizeof(shape_t), by_shape);
    if (sched_init(&s, (int)most_pp, most_cells) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    const double *d = durations.buf;
    double *out = ends.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r0 = 0, r1; r0 < n; r0 = r1) {
        const int pp = (int)order[r0].pp, m = (int)order[r0].m;
        for (r1 = r0; r1 < n && order[r1].pp == pp && order[r1].m == m; r1++) {}
        s.pp = pp;
        s.m = m;
        for (Py_ssize_t q0 = r0; q0 < r1; q0 += LANES) {
            for (int l = 0; l < LANES; l++) {  /* lanes past the group's last pipeline repeat it, unread */
                const double *row = d + order[q0 + l < r1 ? q0 + l : r1 - 1].index * 4 * width;
                for (int b = 0; b < 4; b++)
                    for (int i = 0; i < pp; i++) s.dur[b * pp + i].v[l] = row[b * width + i];
            }
            run_1f1b(&s);
            for (int l = 0; l < LANES && q0 + l < r1; l++)
                for (int i = 0; i < pp; i++) out[order[q0 + l].index * width + i] = s.ends[i].v[l];
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    free(order);
    sched_free(&s);
    PyBuffer_Release(&durations);
    PyBuffer_Release(&pps);
    PyBuffer_Release(&ms);
    PyBuffer_Release(&ends);
    return result;
}

PyDoc_STRVAR(set_poison_doc,
"_set_poison(flag) -> None\n\n"
"Tests only: with flag true, the 1F1B recurrences start every cell they do not zero as 1e300,\n"
"so that a cell read before it is written shows in the results.");

static PyObject *py_set_poison(PyObject *self, PyObject *args)
{
    (void)self;
    int flag;
    if (!PyArg_ParseTuple(args, "p", &flag)) return NULL;
    poison = flag;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(one_f_one_b_traced_doc,
"one_f_one_b_traced(durations, pp, m, ends) -> list[int]\n\n"
"One pipeline's 1F1B run as one_f_one_b's (durations: its 4 pp rows F, B, SF, SB; ends: pp\n"
"float64, written) that also returns the critical path of stage 0's end: the indices into\n"
"durations of the events of the chain that sets it, first first. Summed in that order from\n"
"0.0, any durations' entries on the path are at most the stage-0 end of a run on those\n"
"durations (the same pp, m and zero sends), and equal to it for these. ValueError past\n"
"TRACE_MAX_CELLS pp x m cells (event ids are int32).");

static PyObject *py_one_f_one_b_traced(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer durations, ends;
    int pp, m;
    if (!PyArg_ParseTuple(args, "y*iiw*", &durations, &pp, &m, &ends)) return NULL;
    PyObject *result = NULL;
    trace_t tr = {0};
    if (check_pipeline(pp, m, "one_f_one_b_traced") < 0) goto done;
    if (check_buffer(&durations, 4 * (Py_ssize_t)pp, sizeof(double), "durations") < 0 ||
        check_buffer(&ends, pp, sizeof(double), "ends") < 0)
        goto done;
    if ((int64_t)pp * m > TRACE_MAX_CELLS) {
        PyErr_SetString(PyExc_ValueError, "one_f_one_b_traced: too many events for int32 ids");
        goto done;
    }
    if (trace_init(&tr, pp, (int64_t)pp * m) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    tr.pp = pp;
    tr.m = m;
    memcpy(tr.dur, durations.buf, 4 * (size_t)pp * sizeof(double));
    run_traced(&tr);
    memcpy(ends.buf, tr.ends, (size_t)pp * sizeof(double));
    result = PyList_New(tr.length);
    for (int32_t k = 0; result && k < tr.length; k++) {
        PyObject *code = PyLong_FromLong(tr.path[k]);
        if (!code) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, k, code);
    }
done:
    trace_free(&tr);
    PyBuffer_Release(&durations);
    PyBuffer_Release(&ends);
    return result;
}

/* The stage-time array (n x size x size float64) and, when given, the stage weights (n) of the
 * partitioner's tables; n, size >= 1. */
static int check_stage_times(const Py_buffer *times, int n, Py_ssize_t size, const Py_buffer *weights, const char *name)
{
    if (n < 1 || size < 1) {
        PyErr_Format(PyExc_ValueError, "%s: n and size must be >= 1", name);
        return -1;
    }
    if (check_buffer(times, (Py_ssize_t)n * size * size, sizeof(double), "times") < 0) return -1;
    return weights ? check_buffer(weights, n, sizeof(double), "weights") : 0;
}

/* A runs buffer (finite_runs) for n x size stage times: empty (NULL: every b), or 2 n size int64
 * ranges inside [0, size]. */
static int check_runs(const Py_buffer *runs, int n, Py_ssize_t size, const int64_t **out)
{
    *out = NULL;
    if (!runs->len) return 0;
    if (check_buffer(runs, 2 * (Py_ssize_t)n * size, sizeof(int64_t), "runs") < 0) return -1;
    const int64_t *r = runs->buf;
    for (Py_ssize_t q = 0; q < (Py_ssize_t)n * size; q++)
        if (r[2 * q] < 0 || r[2 * q] > r[2 * q + 1] || r[2 * q + 1] > size) {
            PyErr_SetString(PyExc_ValueError, "runs: a range outside [0, size]");
            return -1;
        }
    *out = r;
    return 0;
}

PyDoc_STRVAR(finite_runs_doc,
"finite_runs(times, n, size, runs)\n\n"
"For stage times as for completion: runs (writable int64 n x size x 2) = the first b where\n"
"times[k][a][b] is finite and the last one + 1 (0, 0: none), what completion, capped_completion\n"
"and bottleneck_split read when given it.");

static PyObject *py_finite_runs(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, runs;
    int n;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*inw*", &times, &n, &size, &runs)) return NULL;
    PyObject *result = NULL;
    if (check_stage_times(&times, n, size, NULL, "finite_runs") < 0 ||
        check_buffer(&runs, 2 * (Py_ssize_t)n * size, sizeof(int64_t), "runs") < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    finite_runs(times.buf, n, size, runs.buf);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&times);
    PyBuffer_Release(&runs);
    return result;
}

/* fasop.schedule.bounds.sweep_completion's stages (its numpy loop over the runs that fit, one
 * stage at a time from the last): table ((pp + 1) x size x points) comes with its last stage's
 * row set and inf elsewhere; for stage k (longest[k] > 0) and each first layer a in
 * [lo[k], hi[k]), each run a..stop-1 (stop <= size - 1, up to longest[k] layers) whose time t is
 * finite: entering[x] = the running maximum over x' <= x of (table[k+1][stop][x'] - t g[x']) -
 * h[x'], then (entering[x] + t (g[x] + 1.0)) + h[x]; table[k][a][x] the least over the runs of
 * a (in run order), numpy's operations one by one (maxima and minima exact, NaN propagated as
 * numpy's maximum and minimum do), so the same bits. g, h: weights and waits, pp x points. */
#define T3(k, a, b) times[((size_t)(k) * (size_t)size + (size_t)(a)) * (size_t)size + (size_t)(b)]
static inline double np_max(double a, double b) { return (isnan(a) || a >= b) ? a : b; }
static inline double np_min(double a, double b) { return (isnan(a) || a <= b) ? a : b; }

static void sweep_table(const double *times, int pp, Py_ssize_t size, const double *weights, const double *waits,
                        const int64_t *lo, const int64_t *hi, const int64_t *longest, Py_ssize_t points,
                        double *table)
{
    for (int k = pp - 1; k >= 0; k--) {
        if (!longest[k] || hi[k] <= lo[k]) continue;
        const double *g = weights + (size_t)k * (size_t)points, *h = waits + (size_t)k * (size_t)points;
        const double *next = table + (size_t)(k + 1) * (size_t)size * (size_t)points;
        for (Py_ssize_t a = lo[k]; a < hi[k]; a++) {
            double *row = table + ((size_t)k * (size_t)size + (size_t)a) * (size_t)points;
            int seen = 0;
            for (int64_t length = 1; length <= longest[k]; length++) {
                const Py_ssize_t stop = a + (Py_ssize_t)length;
                if (stop > size - 1) break;
                const double t = T3(k, a, stop);
                if (!isfinite(t)) continue;
                const double *later = next + (size_t)stop * (size_t)points;
                double entering = 0.0;
                for (Py_ssize_t x = 0; x < points; x++) {
                    const double v = (later[x] - t * g[x]) - h[x];
                    entering = x ? np_max(entering, v) : v;
                    const double c = (entering + t * (g[x] + 1.0)) + h[x];
                    row[x] = seen ? np_min(row[x], c) : c;
                }
                seen = 1;
            }
        }
    }
}
#undef T3

/* fasop.schedule.bounds.SweepBound.at's numpy operations at one node of n choices and P points:
 * prefixes[i][x] = (acc[i][x] - g[i][x]) + col[i] with acc[i][x] the running maximum over x' <= x
 * of later[x'] + g[i][x']; bounds[i] = (the largest over x of prefixes[i][x] + below[i][x]) +
 * sends, raised to floor[i] (max(floor, bound), floor first) where floor is given. Maxima as
 * numpy's (NaN propagated), so the same bits. */
static void sweep_at(const double *later, const double *g, const double *col, const double *below, double sends,
                     const double *floor, Py_ssize_t n, Py_ssize_t points, double *prefixes, double *bounds)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const double *gi = g + i * points, *bi = below + i * points;
        double *pi = prefixes + i * points, acc = 0.0, most = 0.0;
        for (Py_ssize_t x = 0; x < points; x++) {
            const double v = later[x] + gi[x];
            acc = x ? np_max(acc, v) : v;
            pi[x] = (acc - gi[x]) + col[i];
            const double w = pi[x] + bi[x];
            most = x ? np_max(most, w) : w;
        }
        bounds[i] = floor ? np_max(floor[i], most + sends) : most + sends;
    }
}

/* fasop.schedule.bounds._shared's operations (what the nodes of one_f_one_b_bound with the same
 * choices share) on n choices t of stage k and J caps: out rows (6 x n) steady, everything, busy,
 * terms, twice, trips; least[0] the least of max(steady, wmax), least[1] the least term. The
 * float operations of the numpy code one by one, maxima and minima as numpy's. capped: J x n
 * (J = 0: none), below: J. */
static void chain_terms(const double *t, const double *sum, const double *most, const double *wmax,
                        const double *capped, const double *below, Py_ssize_t J, Py_ssize_t n,
                        double c, double send_first, double send_last, double m, int k, int pp, double a,
                        double *out, double *least)
{
    double *steady = out, *everything = out + n, *busy = out + 2 * n, *terms = out + 3 * n;
    double *twice = out + 4 * n, *trips = out + 5 * n;
    const double sends = send_first + send_last;
    const double own = (k > 0 ? send_first : 0.0) + (k == pp - 1 ? send_last : 0.0);
    const double trip_sends = (k > 0 ? send_first : 0.0) + (k < pp - 1 ? send_last : 0.0);
    double least_steady = 0.0, least_terms = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        steady[i] = c * t[i];
        everything[i] = (t[i] + sum[i]) + sends;
        busy[i] = m * t[i] + own;
        const double top = np_max(steady[i], wmax[i]);
        double chain = everything[i] + top;
        if (J) {
            double low = 0.0;
            for (Py_ssize_t j = 0; j < J; j++) {
                const double largest = np_max(np_max(steady[i], below[j]), wmax[i]);
                const double v = capped[j * n + i] + largest;
                low = j ? np_min(low, v) : v;
            }
            chain = np_max(chain, (t[i] + sends) + low);
        }
        double term = np_max(chain, busy[i]);
        if (k < pp - 1) term = np_max(term, (t[i] + send_first) + m * most[i]);
        twice[i] = 2.0 * (t[i] + sum[i]);
        trips[i] = -INFINITY;
        if (a >= 0.0) {
            trips[i] = a * t[i] + trip_sends;
            term = np_max(term, twice[i] + trips[i]);
        }
        terms[i] = term;
        least_steady = i ? np_min(least_steady, top) : top;
        least_terms = i ? np_min(least_terms, term) : term;
    }
    least[0] = least_steady;
    least[1] = least_terms;
}

/* one_f_one_b_bound's operations at a node: bounds[i] from the shared terms and the chain of the
 * stages before (before, own_before, steady_before, trips_before), as its numpy code. */
static void chain_bounds(double before, double own_before, double steady_before, double trips_before,
                         double least_steady, double least_terms, const double *terms, const double *everything,
                         const double *twice, Py_ssize_t n, double *bounds)
{
    const int steadier = steady_before > least_steady, trips = trips_before > -INFINITY;
    const int own = own_before > before + least_terms;
    const double twice_before = 2.0 * before;
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = terms[i];
        if (steadier) v = np_max(v, everything[i] + steady_before);
        v = before + v;
        if (trips) v = np_max(v, (twice_before + twice[i]) + trips_before);
        if (own) v = np_max(v, own_before);
        bounds[i] = v;
    }
}

/* fasop.schedule.reverse_sweep.ReverseSweepBound.__call__'s operations on n choices t of stage j
 * and P points: g[x] = t w[x] + h[x]; suffixes[i][x] = (acc[x] + g[x]) + t with acc the running
 * maximum of after[x'] - g[x']; bounds[i] = (the largest over x of suffixes[i][x] +
 * table[firsts[i]][x]) + sends. Maxima as numpy's, so the same bits. */
static void reverse_sweep(const double *after, const double *t, const double *w, const double *h, const double *table,
                          const int64_t *firsts, double sends, Py_ssize_t n, Py_ssize_t points, double *suffixes,
                          double *bounds)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const double *below = table + (size_t)firsts[i] * (size_t)points;
        double *si = suffixes + i * points, acc = 0.0, most = 0.0;
        for (Py_ssize_t x = 0; x < points; x++) {
            const double g = t[i] * w[x] + h[x], v = after[x] - g;
            acc = x ? np_max(acc, v) : v;
            si[x] = (acc + g) + t[i];
            const double b = si[x] + below[x];
            most = x ? np_max(most, b) : b;
        }
        bounds[i] = most + sends;
    }
}

/* fasop.partition.zigzag.ZigzagBound.__call__'s operations on n choices t of stage k and the J
 * turns j >= k: top = max(largest, t); turns[i][j] = row[j] + t, raised to (steady t + turn[j]
 * top) + no_turn[j] where steady > -inf; fixed[i] = max(fixed, turns[i][0]); out[i] = (t + sends)
 * + max(fixed[i] + sum[i], the largest over j >= 1 of turns[i][j] + free[i][j - 1]). Maxima as
 * numpy's, so the same bits. */
static void zigzag(const double *row, double fixed, double largest, const double *t, double steady, const double *turn,
                   const double *no_turn, const double *sum, const double *free_, double sends, Py_ssize_t n,
                   Py_ssize_t J, double *out, double *turns, double *fixed_out, double *top_out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const double top = np_max(largest, t[i]);
        double *ti = turns + i * J;
        for (Py_ssize_t j = 0; j < J; j++) {
            double v = row[j] + t[i];
            if (steady > -INFINITY) v = np_max(v, (steady * t[i] + turn[j] * top) + no_turn[j]);
            ti[j] = v;
        }
        const double f = np_max(fixed, ti[0]);
        double b = f + sum[i];
        if (J > 1) {
            const double *fi = free_ + i * (J - 1);
            double most = 0.0;
            for (Py_ssize_t j = 1; j < J; j++) {
                const double v = ti[j] + fi[j - 1];
                most = j > 1 ? np_max(most, v) : v;
            }
            b = np_max(b, most);
        }
        out[i] = (t[i] + sends) + b;
        fixed_out[i] = f;
        top_out[i] = top;
    }
}

/* fasop.partition.splits._Search.child_bounds's last operations on a node's n children: out[i]
 * = max(lb[i], the largest over the C cuts of dots[c] + cuts[c][i]) (C = 0: lb[i]) + (extra[i],
 * or extra0 where extra is empty). Maxima as numpy's, so the same bits. */
static void cut_raise(const double *lb, const double *dots, const double *cuts, Py_ssize_t C, const double *extra,
                      double extra0, Py_ssize_t n, double *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = lb[i];
        if (C) {
            double most = 0.0;
            for (Py_ssize_t c = 0; c < C; c++) {
                const double w = dots[c] + cuts[c * n + i];
                most = c ? np_max(most, w) : w;
            }
            v = np_max(v, most);
        }
        out[i] = v + (extra ? extra[i] : extra0);
    }
}

#include "_node_loop.h"

PyDoc_STRVAR(completion_doc,
"completion(times, n, size, weights, largest, runs, table)\n\n"
"fasop.partition.splits.completion's table: times float64 n x size x size (stage k, layers a..b-1),\n"
"weights float64 n, largest 0 or 1, runs: finite_runs' of times or empty; table: writable float64\n"
"(n + 1) x size.");

static PyObject *py_completion(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, weights, runs, table;
    int n, largest;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*iny*py*w*", &times, &n, &size, &weights, &largest, &runs, &table)) return NULL;
    PyObject *result = NULL;
    const int64_t *r;
    if (check_stage_times(&times, n, size, &weights, "completion") < 0 || check_runs(&runs, n, size, &r) < 0 ||
        check_buffer(&table, (Py_ssize_t)(n + 1) * size, sizeof(double), "table") < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    completion_table(times.buf, n, size, weights.buf, largest, r, table.buf);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&times);
    PyBuffer_Release(&weights);
    PyBuffer_Release(&runs);
    PyBuffer_Release(&table);
    return result;
}

PyDoc_STRVAR(sweep_completion_doc,
"sweep_completion(times, pp, size, weights, waits, lo, hi, longest, table)\n\n"
"fasop.schedule.bounds.sweep_completion's stages: times float64 pp x size x size; weights, waits\n"
"float64 pp x points; lo, hi, longest int64 pp (first_layers); table: writable float64\n"
"(pp + 1) x size x points, its last stage set and inf elsewhere, stages pp - 1..0 written.");

static PyObject *py_sweep_completion(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, weights, waits, lo, hi, longest, table;
    int pp;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*iny*y*y*y*y*w*", &times, &pp, &size, &weights, &waits, &lo, &hi, &longest, &table))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t points = pp > 0 ? weights.len / (Py_ssize_t)sizeof(double) / pp : 0;
    if (pp < 1 || size < 1 || points < 1) {
        PyErr_SetString(PyExc_ValueError, "sweep_completion: need pp, size and points >= 1");
        goto done;
    }
    if (check_buffer(&times, (Py_ssize_t)pp * size * size, sizeof(double), "times") < 0 ||
        check_buffer(&weights, (Py_ssize_t)pp * points, sizeof(double), "weights") < 0 ||
        check_buffer(&waits, (Py_ssize_t)pp * points, sizeof(double), "waits") < 0 ||
        check_buffer(&lo, pp, sizeof(int64_t), "lo") < 0 || check_buffer(&hi, pp, sizeof(int64_t), "hi") < 0 ||
        check_buffer(&longest, pp, sizeof(int64_t), "longest") < 0 ||
        check_buffer(&table, (Py_ssize_t)(pp + 1) * size * points, sizeof(double), "table") < 0)
        goto done;
    const int64_t *l = lo.buf, *u = hi.buf;
    for (int k = 0; k < pp; k++)
        if (l[k] < 0 || u[k] > size) {
            PyErr_SetString(PyExc_ValueError, "sweep_completion: first layers out of range");
            goto done;
        }
    Py_BEGIN_ALLOW_THREADS
    sweep_table(times.buf, pp, size, weights.buf, waits.buf, lo.buf, hi.buf, longest.buf, points, table.buf);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&times);
    PyBuffer_Release(&weights);
    PyBuffer_Release(&waits);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    PyBuffer_Release(&longest);
    PyBuffer_Release(&table);
    return result;
}

PyDoc_STRVAR(sweep_at_doc,
"sweep_at(later, g, col, below, sends, floor, prefixes, bounds)\n\n"
"fasop.schedule.bounds.SweepBound.at's operations: later float64 P; g, below float64 n x P; col\n"
"float64 n; floor float64 n (the bounds raised to it) or empty (none); prefixes (n x P) and\n"
"bounds (n): writable float64, written.");

static PyObject *py_sweep_at(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer later, g, col, below, floor, prefixes, bounds;
    double sends;
    if (!PyArg_ParseTuple(args, "y*y*y*y*dy*w*w*", &later, &g, &col, &below, &sends, &floor, &prefixes, &bounds))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t points = later.len / (Py_ssize_t)sizeof(double), n = col.len / (Py_ssize_t)sizeof(double);
    if (points < 1) {
        PyErr_SetString(PyExc_ValueError, "sweep_at: need points >= 1");
        goto done;
    }
    if (check_buffer(&g, n * points, sizeof(double), "g") < 0 ||
        check_buffer(&below, n * points, sizeof(double), "below") < 0 ||
        (floor.len && check_buffer(&floor, n, sizeof(double), "floor") < 0) ||
        check_buffer(&prefixes, n * points, sizeof(double), "prefixes") < 0 ||
        check_buffer(&bounds, n, sizeof(double), "bounds") < 0)
        goto done;
    sweep_at(later.buf, g.buf, col.buf, below.buf, sends, floor.len ? (const double *)floor.buf : NULL, n, points,
             prefixes.buf, bounds.buf);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&later);
    PyBuffer_Release(&g);
    PyBuffer_Release(&col);
    PyBuffer_Release(&below);
    PyBuffer_Release(&floor);
    PyBuffer_Release(&prefixes);
    PyBuffer_Release(&bounds);
    return result;
}

PyDoc_STRVAR(chain_terms_doc,
"chain_terms(t, sum, most, wmax, capped, below, c, send_first, send_last, m, k, pp, a, out, least)\n\n"
"fasop.schedule.bounds._shared's operations: t, sum, most, wmax float64 n; capped float64 J x n\n"
"and below float64 J (J = 0: no caps); out writable float64 6 x n (steady, everything, busy,\n"
"terms, twice, trips), least writable float64 2.");

static PyObject *py_chain_terms(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer t, sum, most, wmax, capped, below, out, least;
    double c, send_first, send_last, m, a;
    int k, pp;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*ddddiidw*w*", &t, &sum, &most, &wmax, &capped, &below, &c, &send_first,
                          &send_last, &m, &k, &pp, &a, &out, &least))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = t.len / (Py_ssize_t)sizeof(double), J = below.len / (Py_ssize_t)sizeof(double);
    if (check_buffer(&sum, n, sizeof(double), "sum") < 0 || check_buffer(&most, n, sizeof(double), "most") < 0 ||
        check_buffer(&wmax, n, sizeof(double), "wmax") < 0 ||
        check_buffer(&capped, J * n, sizeof(double), "capped") < 0 ||
        check_buffer(&out, 6 * n, sizeof(double), "out") < 0 || check_buffer(&least, 2, sizeof(double), "least") < 0)
        goto done;
    chain_terms(t.buf, sum.buf, most.buf, wmax.buf, capped.buf, below.buf, J, n, c, send_first, send_last, m, k, pp, a,
                out.buf, least.buf);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&t);
    PyBuffer_Release(&sum);
    PyBuffer_Release(&most);
    PyBuffer_Release(&wmax);
    PyBuffer_Release(&capped);
    PyBuffer_Release(&below);
    PyBuffer_Release(&out);
    PyBuffer_Release(&least);
    return result;
}

PyDoc_STRVAR(chain_bounds_doc,
"chain_bounds(before, own_before, steady_before, trips_before, least_steady, least_terms, terms,\n"
"             everything, twice, bounds)\n\n"
"fasop.schedule.bounds.one_f_one_b_bound's operations at a node: terms, everything, twice float64 n;\n"
"bounds writable float64 n, written.");

static PyObject *py_chain_bounds(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer terms, everything, twice, bounds;
    double before, own_before, steady_before, trips_before, least_steady, least_terms;
    if (!PyArg_ParseTuple(args, "ddddddy*y*y*w*", &before, &own_before, &steady_before, &trips_before, &least_steady,
                          &least_terms, &terms, &everything, &twice, &bounds))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = terms.len / (Py_ssize_t)sizeof(double);
    if (check_buffer(&everything, n, sizeof(double), "everything") < 0 ||
        check_buffer(&twice, n, sizeof(double), "twice") < 0 || check_buffer(&bounds, n, sizeof(double), "bounds") < 0)
        goto done;
    chain_bounds(before, own_before, steady_before, trips_before, least_steady, least_terms, terms.buf, everything.buf,
                 twice.buf, n, bounds.buf);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&terms);
    PyBuffer_Release(&everything);
    PyBuffer_Release(&twice);
    PyBuffer_Release(&bounds);
    return result;
}

PyDoc_STRVAR(reverse_sweep_doc,
"reverse_sweep(after, t, w, h, table, firsts, sends, suffixes, bounds)\n\n"
"ReverseSweepBound.__call__'s operations: after, w, h float64 P; t float64 n; table float64\n"
"rows x P (the stage's rows); firsts int64 n; suffixes (n x P), bounds (n) writable float64.");

static PyObject *py_reverse_sweep(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer after, t, w, h, table, firsts, suffixes, bounds;
    double sends;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*dw*w*", &after, &t, &w, &h, &table, &firsts, &sends, &suffixes, &bounds))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t points = after.len / (Py_ssize_t)sizeof(double), n = t.len / (Py_ssize_t)sizeof(double);
    const Py_ssize_t rows = points ? table.len / (Py_ssize_t)sizeof(double) / points : 0;
    if (points < 1 || check_buffer(&w, points, sizeof(double), "w") < 0 ||
        check_buffer(&h, points, sizeof(double), "h") < 0 || check_buffer(&table, rows * points, sizeof(double), "table") < 0 ||
        check_buffer(&firsts, n, sizeof(int64_t), "firsts") < 0 ||
        check_buffer(&suffixes, n * points, sizeof(double), "suffixes") < 0 ||
        check_buffer(&bounds, n, sizeof(double), "bounds") < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "reverse_sweep: need points >= 1");
        goto done;
    }
    const int64_t *f = firsts.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (f[i] < 0 || f[i] >= rows) {
            PyErr_SetString(PyExc_ValueError, "reverse_sweep: first layer out of range");
            goto done;
        }
    reverse_sweep(after.buf, t.buf, w.buf, h.buf, table.buf, f, sends, n, points, suffixes.buf, bounds.buf);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&after);
    PyBuffer_Release(&t);
    PyBuffer_Release(&w);
    PyBuffer_Release(&h);
    PyBuffer_Release(&table);
    PyBuffer_Release(&firsts);
    PyBuffer_Release(&suffixes);
    PyBuffer_Release(&bounds);
    return result;
}

PyDoc_STRVAR(zigzag_doc,
"zigzag(row, fixed, largest, t, steady, turn, no_turn, sum, free, sends, out, turns, fixed_out, top)\n\n"
"ZigzagBound.__call__'s operations: row, turn, no_turn float64 J; t, sum float64 n; free float64\n"
"n x (J - 1); out, fixed_out, top (n) and turns (n x J) writable float64.");

static PyObject *py_zigzag(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer row, t, turn, no_turn, sum, free_, out, turns, fixed_out, top;
    double fixed, largest, steady, sends;
    if (!PyArg_ParseTuple(args, "y*ddy*dy*y*y*y*dw*w*w*w*", &row, &fixed, &largest, &t, &steady, &turn, &no_turn, &sum,
                          &free_, &sends, &out, &turns, &fixed_out, &top))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t J = row.len / (Py_ssize_t)sizeof(double), n = t.len / (Py_ssize_t)sizeof(double);
    if (J < 1 || check_buffer(&turn, J, sizeof(double), "turn") < 0 ||
        check_buffer(&no_turn, J, sizeof(double), "no_turn") < 0 || check_buffer(&sum, n, sizeof(double), "sum") < 0 ||
        check_buffer(&free_, n * (J - 1), sizeof(double), "free") < 0 ||
        check_buffer(&out, n, sizeof(double), "out") < 0 || check_buffer(&turns, n * J, sizeof(double), "turns") < 0 ||
        check_buffer(&fixed_out, n, sizeof(double), "fixed_out") < 0 || check_buffer(&top, n, sizeof(double), "top") < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "zigzag: need J >= 1");
        goto done;
    }
    zigzag(row.buf, fixed, largest, t.buf, steady, turn.buf, no_turn.buf, sum.buf, free_.buf, sends, n, J, out.buf,
           turns.buf, fixed_out.buf, top.buf);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&row);
    PyBuffer_Release(&t);
    PyBuffer_Release(&turn);
    PyBuffer_Release(&no_turn);
    PyBuffer_Release(&sum);
    PyBuffer_Release(&free_);
    PyBuffer_Release(&out);
    PyBuffer_Release(&turns);
    PyBuffer_Release(&fixed_out);
    PyBuffer_Release(&top);
    return result;
}

PyDoc_STRVAR(cut_raise_doc,
"cut_raise(lb, dots, cuts, extra, extra0, out)\n\n"
"fasop.partition.splits' child bounds raised to the cuts: lb float64 n; dots float64 C; cuts\n"
"float64 C x n; extra float64 n or empty (then extra0 for every child); out writable float64 n.");

static PyObject *py_cut_raise(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer lb, dots, cuts, extra, out;
    double extra0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*dw*", &lb, &dots, &cuts, &extra, &extra0, &out)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = lb.len / (Py_ssize_t)sizeof(double), C = dots.len / (Py_ssize_t)sizeof(double);
    if (check_buffer(&cuts, C * n, sizeof(double), "cuts") < 0 ||
        (extra.len && check_buffer(&extra, n, sizeof(double), "extra") < 0) ||
        check_buffer(&out, n, sizeof(double), "out") < 0)
        goto done;
    cut_raise(lb.buf, dots.buf, cuts.buf, C, extra.len ? (const double *)extra.buf : NULL, extra0, n, out.buf);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&lb);
    PyBuffer_Release(&dots);
    PyBuffer_Release(&cuts);
    PyBuffer_Release(&extra);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(capped_completion_doc,
"capped_completion(times, n, size, weights, caps, runs, table)\n\n"
"fasop.partition.splits.capped_completion's table: times and weights as for completion, caps float64 J;\n"
"table: writable float64 J x (n + 1) x size.");

static PyObject *py_capped_completion(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, weights, caps, runs, table;
    int n;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*iny*y*y*w*", &times, &n, &size, &weights, &caps, &runs, &table)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t J = caps.len / (Py_ssize_t)sizeof(double);
    const int64_t *r;
    if (check_stage_times(&times, n, size, &weights, "capped_completion") < 0 || check_runs(&runs, n, size, &r) < 0 ||
        check_buffer(&caps, J, sizeof(double), "caps") < 0 ||
        check_buffer(&table, J * (n + 1) * size, sizeof(double), "table") < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    capped_table(times.buf, n, size, weights.buf, caps.buf, J, r, table.buf);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&times);
    PyBuffer_Release(&weights);
    PyBuffer_Release(&caps);
    PyBuffer_Release(&runs);
    PyBuffer_Release(&table);
    return result;
}

PyDoc_STRVAR(bottleneck_split_doc,
"bottleneck_split(times, n, size, runs, counts) -> bool\n\n"
"fasop.partition.splits.bottleneck_split: times and runs as for completion; counts: writable int64 n, the\n"
"split's layers per stage. False (counts unset) when no split fits.");

static PyObject *py_bottleneck_split(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, runs, counts;
    int n;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*iny*w*", &times, &n, &size, &runs, &counts)) return NULL;
    PyObject *result = NULL;
    double *most = NULL, *sum = NULL;
    int64_t *stop = NULL;
    const int64_t *r;
    if (check_stage_times(&times, n, size, NULL, "bottleneck_split") < 0 || check_runs(&runs, n, size, &r) < 0 ||
        check_buffer(&counts, n, sizeof(int64_t), "counts") < 0)
        goto done;
    most = malloc((size_t)(n + 1) * (size_t)size * sizeof(double));
    sum = malloc((size_t)(n + 1) * (size_t)size * sizeof(double));
    stop = malloc((size_t)n * (size_t)size * sizeof(int64_t));
    if (!most || !sum || !stop) {
        PyErr_NoMemory();
        goto done;
    }
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = bottleneck_counts(times.buf, n, size, r, most, sum, stop, counts.buf);
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(found);
done:
    free(most);
    free(sum);
    free(stop);
    PyBuffer_Release(&times);
    PyBuffer_Release(&runs);
    PyBuffer_Release(&counts);
    return result;
}

static PyMethodDef methods[] = {
    {"one_f_one_b", py_one_f_one_b, METH_VARARGS, one_f_one_b_doc},
    {"one_f_one_b_many", py_one_f_one_b_many, METH_VARARGS, one_f_one_b_many_doc},
    {"split_ends", py_split_ends, METH_VARARGS, split_ends_doc},
    {"polish_moves", py_polish_moves, METH_VARARGS, polish_moves_doc},
    {"fit_table", py_fit_table, METH_VARARGS, fit_table_doc},
    {"one_f_one_b_traced", py_one_f_one_b_traced, METH_VARARGS, one_f_one_b_traced_doc},
    {"completion", py_completion, METH_VARARGS, completion_doc},
    {"capped_completion", py_capped_completion, METH_VARARGS, capped_completion_doc},
    {"finite_runs", py_finite_runs, METH_VARARGS, finite_runs_doc},
    {"sweep_completion", py_sweep_completion, METH_VARARGS, sweep_completion_doc},
    {"sweep_at", py_sweep_at, METH_VARARGS, sweep_at_doc},
    {"chain_terms", py_chain_terms, METH_VARARGS, chain_terms_doc},
    {"chain_bounds", py_chain_bounds, METH_VARARGS, chain_bounds_doc},
    {"reverse_sweep", py_reverse_sweep, METH_VARARGS, reverse_sweep_doc},
    {"zigzag", py_zigzag, METH_VARARGS, zigzag_doc},
    {"cut_raise", py_cut_raise, METH_VARARGS, cut_raise_doc},
    {"bottleneck_split", py_bottleneck_split, METH_VARARGS, bottleneck_split_doc},
    {"branch_and_bound", py_branch_and_bound, METH_VARARGS, branch_and_bound_doc},
    {"_set_poison", py_set_poison, METH_VARARGS, set_poison_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fasop_native", "Compiled kernels of fasop's hot loops (optional; fasop/schedule/native.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

/* The interface version fasop/schedule/native.py expects (native.API): bump with every change of a signature
 * or of what a call returns (9: the generic kernels only; FASOP's partitioner, schedule choice,
 * step time and memory moved to fasop/estimators/fasop2024/plans.py; one_f_one_b_many; 11: one_f_one_b_traced
 * again, for the proven-split search's cuts; sweep_completion, sweep_at,
 * chain_terms, chain_bounds, reverse_sweep, zigzag, cut_raise; 12: branch_and_bound, the partitioner's node
 * loop, fasop/schedule/_node_loop.h; 13: split_ends, the stage ends of the proven-split search's splits,
 * fasop/schedule/_splits.h, and polish_moves; finite_runs, read by completion,
 * capped_completion and bottleneck_split). */
#define API 13

PyMODINIT_FUNC PyInit__fasop_native(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "API", API) < 0 ||
              PyModule_AddIntConstant(m, "TRACE_MAX_CELLS", TRACE_MAX_CELLS) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
