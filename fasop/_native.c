/* _fasop_native: compiled kernels of fasop's hot loops (optional; see fasop/native.py).
 *
 * Each kernel computes what a Python function of fasop computes, with the same float64
 * operations in the same order, so the results are the same bits:
 *
 * - one_f_one_b: FASOP's 1F1B event recurrences (docs/estimators.md section 5), fasop.recurrences.run.
 *   Every event end is (the largest of the events it waits for) + its duration: comparisons,
 *   exact, and one IEEE double addition.
 * - minmax: FASOP's greedy min-max layer balancing (docs/estimators.md section 6), the moves of
 *   fasop.estimators.fasop2024_minmax.minmax, on stage times read from tables of prefix sums made in Python.
 * - fasop_plans: FASOP's partitioner and schedule for a batch of plans: the min-max split(s)
 *   of each plan (for an encoder-decoder model, one per number of encoder stages,
 *   fasop.estimators.fasop2024_minmax.fasop_minmax_splits), each split's stage times (fasop.compute.stage_times),
 *   and the 1F1B stage ends of the split with the lowest pipeline time (the first of equals),
 *   as fasop.estimate schedules and picks them.
 *
 * The only arithmetic beyond max and + is F = t / k and B = (k - 1) * t / k (k: the model's
 * fwd_bwd_factor), written as numpy writes it, and the lower bounds that let fasop_plans skip splits that cannot win (they only
 * decide what is skipped, never a value).
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

/* Encoder-decoder plans balance each half separately; the halves remembered per plan. */
#define MAX_STAGES 256

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
    double k;       /* fwd_bwd_factor of the stage times loaded (load_lane) */
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

/* run_1f1b: the recurrences of fasop.recurrences.run (_one_f_one_b.h) on the LANES pipelines of
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
 * their inputs depend only on pp, m and which sends are 0). Summed with another candidate
 * split's durations, a critical path is thus an exact lower bound on that split's stage-0 end,
 * equal to it when the split's own critical path is the same chain: what lets a plan's
 * candidate splits that tie with the best but for rounding be ruled out without scheduling
 * them. */

typedef struct {
    double v;
    int32_t id; /* the event that set v (0: none, v is 0.0) */
} ev_t;

typedef struct {
    int pp, m;
    ev_t *grid;              /* 6 * pp * m */
    int *flags;              /* 3 * pp */
    double *dur;             /* 4 * pp: F, B, SF, SB of each stage */
    double *other;           /* 4 * pp: another pipeline's, for path_sum */
    double *ends;            /* pp: each stage's last backward end */
    int32_t *pred, *code;    /* event k: the event its value came from, its duration (index into dur) */
    int32_t events;          /* events so far (event 0: none) */
    int32_t *path, length;   /* the critical path: duration indices, first event first */
    double k;                /* fwd_bwd_factor of the stage times loaded (schedule_traced) */
} trace_t;

static int trace_init(trace_t *s, int max_pp, int64_t max_cells)
{
    const size_t events = 4 * (size_t)max_cells + 2;
    s->grid = malloc(6 * (size_t)max_cells * sizeof(ev_t));
    s->flags = malloc(3 * (size_t)max_pp * sizeof(int));
    s->dur = malloc(4 * (size_t)max_pp * sizeof(double));
    s->other = malloc(4 * (size_t)max_pp * sizeof(double));
    s->ends = malloc((size_t)max_pp * sizeof(double));
    s->pred = malloc(events * sizeof(int32_t));
    s->code = malloc(events * sizeof(int32_t));
    s->path = malloc(events * sizeof(int32_t));
    return (s->grid && s->flags && s->dur && s->other && s->ends && s->pred && s->code && s->path) ? 0 : -1;
}

static void trace_free(trace_t *s)
{
    free(s->grid);
    free(s->flags);
    free(s->dur);
    free(s->other);
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

/* The 4 pp durations (F, B, SF, SB of each stage) of the pipeline of stage times t split by
 * the factor k: F = t/k, B = (k - 1) t/k (numpy's comp / k and (k - 1) * comp / k,
 * schedule.split_stage_times), stage 0's forward send sf, the last stage's backward send sb;
 * every `stride`-th entry of dur (one lane of a run, or a plain row). */
static void load_durations(double *dur, Py_ssize_t stride, int pp, const double *t, double sf, double sb, double k)
{
    for (int i = 0; i < pp; i++) {
        dur[i * stride] = t[i] / k;
        dur[(pp + i) * stride] = (k - 1.0) * t[i] / k;
        dur[(2 * pp + i) * stride] = (i == 0) ? sf : 0.0;
        dur[(3 * pp + i) * stride] = (i == pp - 1) ? sb : 0.0;
    }
}

/* The sum of the durations `dur` along the critical path of the latest traced run, in its order
 * (a lower bound on the stage-0 end of the pipeline of those durations, see above). */
static double path_sum(const trace_t *s, const double *dur)
{
    double x = 0.0;
    for (int32_t k = 0; k < s->length; k++) x += dur[s->path[k]];
    return x;
}

/* ---------------------------------------------------------------------------- min-max */

/* Stage time tables: plane p, entry [a, b] = seconds of layers a..b-1 (b > a), as
 * fasop.compute.LayerCosts.matrix. */
typedef struct {
    const double *data;
    Py_ssize_t width, planes;
} tables_t;

/* Seconds of `count` layers from `first` on plane p (0.0 for none), as compute.stage_times. */
static inline double stage_time(const tables_t *t, int64_t p, int64_t first, int64_t count)
{
    return count > 0 ? t->data[(p * t->width + first) * t->width + first + count] : 0.0;
}

/* Work space of run_minmax for up to n stages. */
typedef struct {
    int64_t *counts, *edges, *history;
    double *current;
    Py_ssize_t capacity;  /* history rows */
} minmax_t;

static int minmax_init(minmax_t *w, int n)
{
    w->capacity = 64;
    w->counts = malloc((size_t)n * sizeof(int64_t));
    w->edges = malloc((size_t)(n + 1) * sizeof(int64_t));
    w->history = malloc((size_t)w->capacity * (size_t)n * sizeof(int64_t));
    w->current = malloc((size_t)n * sizeof(double));
    return (w->counts && w->edges && w->history && w->current) ? 0 : -1;
}

static void minmax_free(minmax_t *w)
{
    free(w->counts);
    free(w->edges);
    free(w->history);
    free(w->current);
}

/* fasop.estimators.fasop2024_minmax.minmax: n stages on planes which[0..n-1], L layers, balancing time of stage
 * i = its compute + extra[i] (comm of the middle stages, 0.0 at the ends). Writes the reported
 * and scheduled counts; -1 when out of memory. */
static int run_minmax(minmax_t *w, const tables_t *t, int n, int L, const int64_t *which, const double *extra,
                      int64_t *reported, int64_t *scheduled)
{
    int64_t *counts = w->counts, *edges = w->edges;
    double *current = w->current;
    const size_t row = (size_t)n * sizeof(int64_t);
#define STAGE(i) (stage_time(t, which[i], edges[i], edges[(i) + 1] - edges[i]) + extra[i])
    for (int i = 0; i < n; i++) counts[i] = L / n;
    for (int i = 0; i < L % n; i++) counts[(i - 1 + n) % n] += 1;  /* Python's counts[i - 1] */
    edges[0] = 0;
    for (int i = 0; i < n; i++) edges[i + 1] = edges[i] + counts[i];
    for (int i = 0; i < n; i++) current[i] = STAGE(i);
    double last = 1e6;
    int moved = 0, prev_max = 0, prev_min = 0;
    Py_ssize_t seen = 0;  /* history rows: the counts before each move */
    for (;;) {
        double top = current[0], low = current[0];
        int imax = 0, imin = 0;  /* first of the largest, first of the smallest */
        for (int i = 1; i < n; i++) {
            if (current[i] > top) { top = current[i]; imax = i; }
            if (current[i] < low) { low = current[i]; imin = i; }
        }
        if (moved) {
            int stop = top > last;
            for (Py_ssize_t h = 0; h < seen && !stop && top == last; h++)  /* steps 2/3 */
                stop = memcmp(w->history + h * n, counts, row) == 0;
            if (stop) {  /* undo the last move and stop */
                counts[prev_max] += 1;
                counts[prev_min] -= 1;
                memcpy(reported, counts, row);
                memcpy(scheduled, counts, row);
                return 0;
            }
        }
        last = top;
        if ((imax == 0 || imax == n - 1) && counts[imax] == 2) {
            memcpy(scheduled, counts, row);
            if (moved) {  /* step 5 quirk: report a changed split, schedule the unchanged one */
                counts[imax] += 1;
                counts[imin] -= 1;
            }
            memcpy(reported, counts, row);
            return 0;
        }
        if (counts[imax] <= 1) {
            memcpy(reported, counts, row);
            memcpy(scheduled, counts, row);
            return 0;
        }
        if (seen == w->capacity) {  /* a handful of moves in practice */
            int64_t *grown = realloc(w->history, (size_t)(2 * w->capacity) * row);
            if (!grown) return -1;
            w->history = grown;
            w->capacity *= 2;
        }
        memcpy(w->history + seen * n, counts, row);
        seen++;
        counts[imax] -= 1;
        counts[imin] += 1;
        moved = 1;
        prev_max = imax;
        prev_min = imin;
        const int lo = imax < imin ? imax : imin, hi = imax < imin ? imin : imax;
        for (int e = lo + 1; e <= hi; e++) edges[e] += (imax < imin) ? -1 : 1;
        for (int i = lo; i <= hi; i++) current[i] = STAGE(i);  /* only stages between moved edges change */
    }
#undef STAGE
}

/* ------------------------------------------------------------------- FASOP's plans */

/* A lower bound on stage 0's end time for stage times t (pp > 1), sends sf (stage 0 forward)
 * and sb (last stage backward): chains of events that run one after another (see
 * fasop.schedule.one_f_one_b_bound): every stage's time, both sends and the steady chain
 * c_i t_i of schedule.steady_weights; stage i's own m forwards and backwards after the stages
 * before it. Reduced by a relative 1e-9, more than the rounding of any chain of fewer than
 * 10^6 events: below the computed end time, not only below the exact one. */
static double lower_bound(const double *t, int pp, int m, double sf, double sb, double k)
{
    double total = 0.0, steady = 0.0, own = 0.0;
    for (int i = 0; i < pp; i++) {
        const int w = (pp - i - 1 < m) ? pp - i - 1 : m;
        double c = (k - 1.0) * (m - 1) / k;
        if (m > w && m - 1 - w / k > c) c = m - 1 - w / k;
        if (c * t[i] > steady) steady = c * t[i];
        const double busy = total + m * t[i] + (i > 0 ? sf : 0.0) + (i == pp - 1 ? sb : 0.0);
        if (busy > own) own = busy;
        total += t[i];
    }
    const double chain = total + sf + sb + steady;
    return (chain > own ? chain : own) * (1.0 - 1e-9);
}

/* One candidate split of a plan: its counts, stage times, a lower bound on its stage-0 end and
 * its index among the plan's candidates (the first of equal ends wins). */
typedef struct {
    int64_t *counts;  /* pp */
    double *times;    /* pp */
    double bound;
    int index, scheduled;
} split_t;

/* Loads lane l of s->dur with the pipeline of stage times t (load_durations). */
static void load_lane(sched_t *s, int l, const double *t, double sf, double sb)
{
    load_durations((double *)s->dur + l, LANES, s->pp, t, sf, sb, s->k);  /* lanes_t: LANES doubles, no padding */
}

/* Stage times of counts over planes which (layers from 0), as compute.stage_times. */
static void times_of(const tables_t *t, int pp, const int64_t *which, const int64_t *counts, double *times)
{
    int64_t first = 0;
    for (int i = 0; i < pp; i++) {
        times[i] = stage_time(t, which[i], first, counts[i]);
        first += counts[i];
    }
}

/* ----------------------------------------------------------- the optimal partitioner's tables */

/* fasop.partition's dynamic programmes over (stage k, first layer a) on stage times
 * times[k][a][b] (layers a..b-1 on stage k; inf where b <= a or they do not fit), n stages of
 * size = layers + 1 entries: the same float operations per entry as its numpy code (one
 * product, one sum or maximum), minima taken exactly, so the same bits. */

#define T3(k, a, b) times[((size_t)(k) * (size_t)size + (size_t)(a)) * (size_t)size + (size_t)(b)]

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
                             double *table)
{
    for (Py_ssize_t q = 0; q < (Py_ssize_t)(n + 1) * size; q++) table[q] = INFINITY;
    table[(size_t)n * (size_t)size + (size_t)(size - 1)] = 0.0;
    for (int k = n - 1; k >= 0; k--) {
        const double w = weights[k], *next = table + (size_t)(k + 1) * (size_t)size;
        double *row = table + (size_t)k * (size_t)size;
        for (Py_ssize_t a = 0; a < size; a++) {
            double least = INFINITY;
            for (Py_ssize_t b = 0; b < size; b++) {
                const double x = weighted_time(T3(k, a, b), w);
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
                         Py_ssize_t J, double *table)
{
    const size_t plane = (size_t)(n + 1) * (size_t)size;
    for (size_t q = 0; q < (size_t)J * plane; q++) table[q] = INFINITY;
    for (Py_ssize_t j = 0; j < J; j++) table[(size_t)j * plane + (size_t)n * (size_t)size + (size_t)(size - 1)] = 0.0;
    for (int k = n - 1; k >= 0; k--) {
        const double w = weights[k];
        for (Py_ssize_t a = 0; a < size; a++) {
            double *least = table + (size_t)k * (size_t)size + (size_t)a;  /* + j * plane: cap j's, from inf */
            for (Py_ssize_t b = 0; b < size; b++) {
                const double t = T3(k, a, b), x = weighted_time(t, w);
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
static int bottleneck_counts(const double *times, int n, Py_ssize_t size, double *most, double *sum, int64_t *stop,
                             int64_t *counts)
{
    for (Py_ssize_t q = 0; q < (Py_ssize_t)(n + 1) * size; q++) most[q] = sum[q] = INFINITY;
    for (Py_ssize_t q = 0; q < (Py_ssize_t)n * size; q++) stop[q] = 0;
    most[(size_t)n * (size_t)size + (size_t)(size - 1)] = sum[(size_t)n * (size_t)size + (size_t)(size - 1)] = 0.0;
    for (int k = n - 1; k >= 0; k--) {
        const double *next_most = most + (size_t)(k + 1) * (size_t)size, *next_sum = sum + (size_t)(k + 1) * (size_t)size;
        for (Py_ssize_t a = 0; a < size; a++) {
            double lowest = INFINITY;
            for (Py_ssize_t b = 0; b < size; b++) {
                const double x = mx(T3(k, a, b), next_most[b]);
                if (x < lowest) lowest = x;
            }
            if (!isfinite(lowest)) continue;
            /* numpy's argmin of (total where the largest is lowest, else inf): the first least */
            Py_ssize_t best = 0;
            double least = INFINITY;
            for (Py_ssize_t b = 0; b < size; b++) {
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

static int check_planes(const tables_t *t, const int64_t *which, Py_ssize_t count)
{
    for (Py_ssize_t k = 0; k < count; k++) {
        if (which[k] < 0 || which[k] >= t->planes) {
            PyErr_SetString(PyExc_ValueError, "plane index out of range");
            return -1;
        }
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
"FASOP's 1F1B recurrences for n pipelines of pp stages and m micro-batches. durations: float64,\n"
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

PyDoc_STRVAR(minmax_doc,
"minmax(table, width, which, extra, n, num_layers, reported, scheduled)\n\n"
"FASOP's greedy min-max balancing of num_layers layers over n stages, for P problems.\n"
"table: float64, planes of width x width (seconds of layers a..b-1 at [a, b], b > a);\n"
"which: int64, P rows of n plane indices; extra: float64, P rows of n comm terms (0.0 at the\n"
"ends); reported, scheduled: writable int64 buffers of P*n, the counts per stage.");

static PyObject *py_minmax(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer table, which, extra, reported, scheduled;
    Py_ssize_t width;
    int n, L;
    if (!PyArg_ParseTuple(args, "y*ny*y*iiw*w*", &table, &width, &which, &extra, &n, &L, &reported, &scheduled))
        return NULL;
    PyObject *result = NULL;
    minmax_t w = {0};
    if (n < 1 || L < 0 || width < L + 1) {
        PyErr_SetString(PyExc_ValueError, "minmax: need n >= 1 and width > num_layers");
        goto done;
    }
    const tables_t t = {table.buf, width, table.len / (width * width * (Py_ssize_t)sizeof(double))};
    const Py_ssize_t P = which.len / ((Py_ssize_t)n * (Py_ssize_t)sizeof(int64_t));
    if (check_buffer(&which, P * n, sizeof(int64_t), "which") < 0 ||
        check_buffer(&table, t.planes * width * width, sizeof(double), "table") < 0 ||
        check_buffer(&extra, P * n, sizeof(double), "extra") < 0 ||
        check_buffer(&reported, P * n, sizeof(int64_t), "reported") < 0 ||
        check_buffer(&scheduled, P * n, sizeof(int64_t), "scheduled") < 0 ||
        check_planes(&t, which.buf, P * n) < 0)
        goto done;
    if (minmax_init(&w, n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *wh = which.buf;
    const double *x = extra.buf;
    int64_t *rep = reported.buf, *sch = scheduled.buf;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < P && !failed; k++)
        failed = run_minmax(&w, &t, n, L, wh + k * n, x + k * n, rep + k * n, sch + k * n);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    minmax_free(&w);
    PyBuffer_Release(&table);
    PyBuffer_Release(&which);
    PyBuffer_Release(&extra);
    PyBuffer_Release(&reported);
    PyBuffer_Release(&scheduled);
    return result;
}

/* extra[] of run_minmax for n stages: the comm term comm[i-1] of each middle stage i. */
static void middle_comm(int n, const double *comm, double *extra)
{
    extra[0] = 0.0;
    for (int i = 1; i < n - 1; i++) extra[i] = comm[i - 1];
    extra[n - 1] = 0.0;
}

/* The candidate splits of an encoder-decoder plan (fasop.estimators.fasop2024_minmax.fasop_minmax_splits): per
 * number of encoder stages pe, the encoder's min-max split over stages 0..pe-1 and the
 * decoder's over pe..pp-1, both balanced on the first n_enc layers' times with local stage
 * indices for the comm term (docs/estimators.md section 6). Into splits[]; returns how many, or -1 when
 * out of memory. */
static int encoder_decoder_splits(minmax_t *w, const tables_t *t, int pp, int n_enc, int n_dec, const int64_t *which,
                                  const double *comm, double *extra, int64_t *spare, split_t *splits)
{
    int count = 0, solved = 0;
    /* the halves balanced so far: a half with the same stage count and stage planes as one of
     * them is the same problem (the comm terms are local, from comm[0], in every half) */
    int solved_n[2 * MAX_STAGES], solved_offset[2 * MAX_STAGES];
    const int64_t *solved_counts[2 * MAX_STAGES];
    for (int pe = 1; pe < (pp < n_enc ? pp : n_enc); pe++) {
        const int pd = pp - pe;
        if (pd > n_dec - 1) continue;
        for (int half = 0; half < 2; half++) {
            const int n = half ? pd : pe, offset = half ? pe : 0;
            int64_t *counts = splits[count].counts + offset;
            const int64_t *same = NULL;
            for (int q = 0; q < solved && !same; q++) {
                if (solved_n[q] == n && memcmp(which + solved_offset[q], which + offset, (size_t)n * sizeof(int64_t)) == 0)
                    same = solved_counts[q];
            }
            if (same) {
                memcpy(counts, same, (size_t)n * sizeof(int64_t));
            } else {
                middle_comm(n, comm, extra);
                if (run_minmax(w, t, n, n_enc, which + offset, extra, counts, spare) < 0) return -1;
            }
            if (solved < 2 * MAX_STAGES) {
                solved_n[solved] = n;
                solved_offset[solved] = offset;
                solved_counts[solved++] = counts;
            }
        }
        splits[count].index = count;
        count++;
    }
    return count;
}

/* Plan order of fasop_plans: by stage count, then micro-batch count, then index. */
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

/* The output rows of one plan of fasop_plans. */
typedef struct {
    int64_t *reported, *scheduled;
    double *times, *ends;
} rows_t;

/* An encoder-decoder plan's candidate splits and the best found so far. */
typedef struct {
    split_t *splits;
    int count, next;  /* schedule_candidates: splits (sorted by bound) from next on are left */
    double best;      /* the lowest stage-0 end so far (of splits[best_index]) */
    int best_index;   /* -1 before the first */
    rows_t out;
} candidates_t;

static int by_bound(const void *a, const void *b)
{
    const split_t *x = a, *y = b;
    if (x->bound != y->bound) return x->bound < y->bound ? -1 : 1;
    return x->index - y->index;
}

/* Is a split of c left that may still win (schedule_candidates)? Once the best end found is
 * below a split's bound, that split and every later one (sorted by bound) end later. */
static inline int has_next(const candidates_t *c)
{
    return c->next < c->count && (c->best_index < 0 || c->splits[c->next].bound <= c->best);
}

/* The candidate splits of an encoder-decoder plan into c (rows from count_rows, time_rows), with
 * their lower bounds; 0, -1 when out of memory, -2 when it has none. */
static int encoder_decoder_candidates(candidates_t *c, minmax_t *w, const tables_t *t, int pp, int m, int n_enc,
                                      int n_dec, const int64_t *planes, const double *comm, double *extra,
                                      int64_t *spare, int64_t *count_rows, double *time_rows, double k)
{
    const double sf = comm[0], sb = comm[pp - 2];
    for (int q = 0; q < pp; q++) {
        c->splits[q].counts = count_rows + (size_t)q * (size_t)pp;
        c->splits[q].times = time_rows + (size_t)q * (size_t)pp;
    }
    const int count = encoder_decoder_splits(w, t, pp, n_enc, n_dec, planes, comm, extra, spare, c->splits);
    if (count <= 0) return count < 0 ? -1 : -2;
    for (int q = 0; q < count; q++) {
        times_of(t, pp, planes, c->splits[q].counts, c->splits[q].times);
        c->splits[q].bound = lower_bound(c->splits[q].times, pp, m, sf, sb, k);
        c->splits[q].scheduled = 0;
    }
    c->count = count;
    c->best_index = -1;
    return 0;
}

/* Which scheduler a plan's candidates get. schedule_candidates runs LANES splits (of one plan
 * or several) at a time, ~3.5 times cheaper per split than a traced run, but only path bounds
 * rule out the splits that tie with the best but for rounding (T5 plans of many stages have up
 * to 13 of them, benchmarks/split_ties.py). A plan goes to schedule_traced when at least
 * TRACE_CONTENDERS of its splits have bounds within TRACE_WINDOW (relative) of the least:
 * measured with benchmarks/bench_kernel.py, fasop_plans takes 0.61x the time of scheduling every
 * plan by lanes on t5 a10=8 and 0.83x on t5 a100=1,a10=7 (0.61-0.65x, 0.83-0.86x for 5 to 9
 * contenders and windows of 0.5 % to 5 %; 0.70x and 0.98x when every plan is traced). Either
 * way the choice is the same. */
#define TRACE_WINDOW 0.02
#define TRACE_CONTENDERS 6
#define TRACE_MAX_CELLS ((INT32_MAX - 2) / 4) /* event ids are int32: larger runs go by lanes */
static int trace_contenders = TRACE_CONTENDERS; /* _set_trace_contenders (tests) */

/* How many of c's splits have a bound within TRACE_WINDOW of the least. */
static int contenders(const candidates_t *c)
{
    double least = c->splits[0].bound;
    for (int q = 1; q < c->count; q++) if (c->splits[q].bound < least) least = c->splits[q].bound;
    int n = 0;
    for (int q = 0; q < c->count; q++) n += c->splits[q].bound <= least * (1.0 + TRACE_WINDOW);
    return n;
}

/* Schedules an encoder-decoder plan's candidate splits one at a time with traced runs, each
 * time the split of least bound (the first of equals) among those that may still win: a bound
 * below the best end found, or equal to it with a lower index (the first of equal ends wins).
 * After each run, every split left takes the larger of its bound and its sum along that run's
 * critical path (path_sum: exact, so splits that tie with the best but for rounding are ruled
 * out once a run's chain is theirs). When no split may win, the best found is the split with
 * the lowest stage-0 end, the first of equals, of all of them: the same choice as scheduling
 * every split. Writes the plan's rows; returns the number of runs. */
static long schedule_traced(trace_t *tr, candidates_t *c, double sf, double sb)
{
    const int pp = tr->pp;
    long runs = 0;
    for (;;) {
        int pick = -1;
        for (int q = 0; q < c->count; q++) {
            const split_t *x = &c->splits[q];
            if (x->scheduled) continue;
            if (c->best_index >= 0 && (x->bound > c->best ||
                                       (x->bound == c->best && x->index > c->splits[c->best_index].index)))
                continue;
            if (pick < 0 || x->bound < c->splits[pick].bound ||
                (x->bound == c->splits[pick].bound && x->index < c->splits[pick].index))
                pick = q;
        }
        if (pick < 0) return runs;
        split_t *split = &c->splits[pick];
        split->scheduled = 1;
        load_durations(tr->dur, 1, pp, split->times, sf, sb, tr->k);
        run_traced(tr);
        runs++;
        const double e0 = tr->ends[0];
        if (c->best_index < 0 || e0 < c->best || (e0 == c->best && split->index < c->splits[c->best_index].index)) {
            c->best = e0;
            c->best_index = pick;
            memcpy(c->out.reported, split->counts, (size_t)pp * sizeof(int64_t));
            memcpy(c->out.scheduled, split->counts, (size_t)pp * sizeof(int64_t));
            memcpy(c->out.times, split->times, (size_t)pp * sizeof(double));
            memcpy(c->out.ends, tr->ends, (size_t)pp * sizeof(double));
        }
        for (int q = 0; q < c->count; q++) {
            split_t *x = &c->splits[q];
            if (x->scheduled || x->bound > c->best) continue;  /* out already: the best only falls */
            load_durations(tr->other, 1, pp, x->times, sf, sb, tr->k);
            const double bound = path_sum(tr, tr->other);
            if (bound > x->bound) x->bound = bound;
        }
    }
}

/* Schedules the candidates of R encoder-decoder plans (of one pp and m), each plan's in order
 * of their bounds until none may win. LANES at a time: first the next candidate of each plan
 * in progress, then the first of new plans, then (lanes left over) further candidates of the
 * plans in progress. A plan's choice is the split with the lowest stage-0 end, the first of
 * equals, among those scheduled, which include every split not proved to end later: the same
 * as scheduling all of them. Writes each plan's rows; returns the number of splits scheduled. */
static long schedule_candidates(sched_t *s, candidates_t *plans, Py_ssize_t R, const double *comm, Py_ssize_t S,
                                const Py_ssize_t *index)
{
    const int pp = s->pp;
    Py_ssize_t open[LANES], feed = 0;  /* plans in progress */
    int num_open = 0;
    long scheduled = 0;
    for (;;) {
        Py_ssize_t lane_plan[LANES];
        int lane_split[LANES], used = 0, kept = 0;
        for (int o = 0; o < num_open; o++) {  /* plans in progress: their next candidate, or done */
            candidates_t *c = &plans[open[o]];
            if (!has_next(c)) continue;
            open[kept++] = open[o];
            lane_plan[used] = open[o];
            lane_split[used++] = c->next++;
        }
        num_open = kept;
        while (used < LANES && feed < R) {  /* new plans */
            candidates_t *c = &plans[feed];
            if (has_next(c)) {
                open[num_open++] = feed;
                lane_plan[used] = feed;
                lane_split[used++] = c->next++;
            }
            feed++;
        }
        for (int more = 1; used < LANES && more;) {  /* lanes left: further candidates of open plans */
            more = 0;
            for (int o = 0; o < num_open && used < LANES; o++) {
                candidates_t *c = &plans[open[o]];
                if (!has_next(c)) continue;
                lane_plan[used] = open[o];
                lane_split[used++] = c->next++;
                more = 1;
            }
        }
        if (!used) return scheduled;
        for (int l = 0; l < LANES; l++) {  /* idle lanes repeat the first, unread */
            const int from = l < used ? l : 0;
            const double *sends = comm + index[lane_plan[from]] * S;
            load_lane(s, l, plans[lane_plan[from]].splits[lane_split[from]].times, sends[0], sends[pp - 2]);
        }
        run_1f1b(s);
        scheduled += used;
        for (int l = 0; l < used; l++) {
            candidates_t *c = &plans[lane_plan[l]];
            const split_t *split = &c->splits[lane_split[l]];
            const double e0 = s->ends[0].v[l];
            if (c->best_index < 0 || e0 < c->best || (e0 == c->best && split->index < c->splits[c->best_index].index)) {
                c->best = e0;
                c->best_index = lane_split[l];
                memcpy(c->out.reported, split->counts, (size_t)pp * sizeof(int64_t));
                memcpy(c->out.scheduled, split->counts, (size_t)pp * sizeof(int64_t));
                memcpy(c->out.times, split->times, (size_t)pp * sizeof(double));
                for (int i = 0; i < pp; i++) c->out.ends[i] = s->ends[i].v[l];
            }
        }
    }
}

PyDoc_STRVAR(fasop_plans_doc,
"fasop_plans(table, width, which, comm, pps, ms, n_enc, n_dec, k, reported, scheduled, times, ends) -> int\n\n"
"FASOP's partitioner and 1F1B schedule for P plans. Rows of S >= every pp entries, the first pp\n"
"of a plan's row used: which (int64): the stage time plane of each stage (table, width as for\n"
"minmax); comm (float64): p2p seconds per stage boundary (pp-1); pps, ms (int64, P): stages and\n"
"micro-batches. The layer list has n_enc entries (n_dec = 0), or an encoder of n_enc and a\n"
"decoder of n_dec. A stage time t is scheduled as forward t / k and backward (k - 1) t / k.\n"
"Writes each plan's chosen split (reported and scheduled counts, int64), its\n"
"stage compute seconds and stage ends (float64): of the candidate splits, the one with the\n"
"lowest stage-0 end, the first of equals; one stage: m x its time, in float32. Returns the\n"
"number of splits scheduled (others were proved to end later, or no earlier with a later index,\n"
"by a lower bound: a chain of the 1F1B events, or a critical path of another split's run).");

static PyObject *py_fasop_plans(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer table, which, comm, pps, ms, reported, scheduled, times, ends;
    Py_ssize_t width;
    int n_enc, n_dec;
    double k_factor;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*iidw*w*w*w*", &table, &width, &which, &comm, &pps, &ms, &n_enc, &n_dec,
                          &k_factor, &reported, &scheduled, &times, &ends))
        return NULL;
    PyObject *result = NULL;
    sched_t s = {0};
    minmax_t w = {0};
    shape_t *order = NULL;
    trace_t tr = {0};
    split_t *splits = NULL;
    candidates_t *candidates = NULL;
    Py_ssize_t *runs = NULL;
    int64_t *count_rows = NULL;
    double *time_rows = NULL, *extra = NULL;
    const int layers = n_enc + n_dec;
    const Py_ssize_t P = pps.len / (Py_ssize_t)sizeof(int64_t);
    const Py_ssize_t S = P ? which.len / (P * (Py_ssize_t)sizeof(int64_t)) : 0;
    const tables_t t = {table.buf, width, width > 0 ? table.len / (width * width * (Py_ssize_t)sizeof(double)) : 0};
    if (n_enc < 1 || n_dec < 0 || (n_dec > 0 && n_dec != n_enc) || width < layers + 1) {
        PyErr_SetString(PyExc_ValueError, "fasop_plans: need equal halves and width > layers");
        goto done;
    }
    if (check_buffer(&pps, P, sizeof(int64_t), "pps") < 0 || check_buffer(&ms, P, sizeof(int64_t), "ms") < 0 ||
        check_buffer(&table, t.planes * width * width, sizeof(double), "table") < 0 ||
        check_buffer(&which, P * S, sizeof(int64_t), "which") < 0 ||
        check_buffer(&comm, P * S, sizeof(double), "comm") < 0 ||
        check_buffer(&reported, P * S, sizeof(int64_t), "reported") < 0 ||
        check_buffer(&scheduled, P * S, sizeof(int64_t), "scheduled") < 0 ||
        check_buffer(&times, P * S, sizeof(double), "times") < 0 ||
        check_buffer(&ends, P * S, sizeof(double), "ends") < 0)
        goto done;
    const int64_t *pp_of = pps.buf, *m_of = ms.buf, *wh = which.buf;
    int64_t most_pp = 1, most_cells = 1;
    order = malloc((size_t)(P ? P : 1) * sizeof(shape_t));
    if (!order) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < P; k++) {
        const int64_t pp = pp_of[k], m = m_of[k];
        if (pp < 1 || pp > S || m < 1 || pp > layers || m > (int64_t)1 << 30) {
            PyErr_SetString(PyExc_ValueError, "fasop_plans: need 1 <= pp <= row width and layers, m >= 1");
            goto done;
        }
        if (check_planes(&t, wh + k * S, pp) < 0) goto done;
        if (pp > most_pp) most_pp = pp;
        if (pp * m > most_cells) most_cells = pp * m;
        order[k] = (shape_t){pp, m, k};
    }
    qsort(order, (size_t)P, sizeof(shape_t), by_shape);
    const int most = (int)most_pp;
    /* encoder-decoder plans: up to `most` candidate splits of `most` stages per plan of a run
     * (the plans of one pp and m) */
    size_t slots = 1;
    for (Py_ssize_t r0 = 0, r1; n_dec > 0 && r0 < P; r0 = r1) {
        for (r1 = r0; r1 < P && order[r1].pp == order[r0].pp && order[r1].m == order[r0].m; r1++) {}
        if ((size_t)(r1 - r0) > slots) slots = (size_t)(r1 - r0);
    }
    splits = calloc(slots * (size_t)most, sizeof(split_t));
    candidates = calloc(slots, sizeof(candidates_t));
    runs = malloc(slots * sizeof(Py_ssize_t));
    count_rows = malloc((slots * (size_t)most * (size_t)most + (size_t)most) * sizeof(int64_t));
    time_rows = malloc(slots * (size_t)most * (size_t)most * sizeof(double));
    extra = malloc((size_t)most * sizeof(double));
    if (!splits || !candidates || !runs || !count_rows || !time_rows || !extra || sched_init(&s, most, most_cells) < 0 ||
        minmax_init(&w, most) < 0 ||
        (n_dec > 0 && most_cells <= TRACE_MAX_CELLS && trace_init(&tr, most, most_cells) < 0)) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(k_factor >= 1.0) || !isfinite(k_factor)) {
        PyErr_SetString(PyExc_ValueError, "fasop_plans: need a finite fwd_bwd_factor k >= 1");
        goto done;
    }
    s.k = tr.k = k_factor;
    int64_t *spare = count_rows + slots * (size_t)most * (size_t)most;
    const double *cm = comm.buf;
    int64_t *rep = reported.buf, *sch = scheduled.buf;
    double *out_times = times.buf, *out_ends = ends.buf;
    memset(rep, 0, (size_t)(P * S) * sizeof(int64_t));
    memset(sch, 0, (size_t)(P * S) * sizeof(int64_t));
    memset(out_times, 0, (size_t)(P * S) * sizeof(double));
    memset(out_ends, 0, (size_t)(P * S) * sizeof(double));
    long scheduled_count = 0;
    int failed = 0;
#define ROWS(k) ((rows_t){rep + (k) * S, sch + (k) * S, out_times + (k) * S, out_ends + (k) * S})
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r0 = 0, r1; r0 < P && !failed; r0 = r1) {
        const int pp = (int)order[r0].pp, m = (int)order[r0].m;
        for (r1 = r0; r1 < P && order[r1].pp == pp && order[r1].m == m; r1++) {}
        s.pp = pp;
        s.m = m;
        if (pp == 1) {  /* one stage: all layers, m micro-batches back to back, float32 (docs/estimators.md section 5) */
            for (Py_ssize_t r = r0; r < r1; r++) {
                const Py_ssize_t k = order[r].index;
                const rows_t out = ROWS(k);
                out.reported[0] = out.scheduled[0] = layers;
                out.times[0] = stage_time(&t, wh[k * S], 0, layers);
                out.ends[0] = (double)(float)((double)m * out.times[0]);
            }
            continue;
        }
        if (n_dec > 0) {  /* each plan's candidate splits, scheduled until none may win */
            tr.pp = pp;
            tr.m = m;
            Py_ssize_t laned = 0;  /* plans left to schedule_candidates */
            for (Py_ssize_t r = r0; r < r1 && !failed; r++) {
                const Py_ssize_t k = order[r].index;
                candidates_t *c = &candidates[laned];
                c->splits = splits + laned * most;
                c->out = ROWS(k);
                const int done = encoder_decoder_candidates(c, &w, &t, pp, m, n_enc, n_dec, wh + k * S, cm + k * S,
                                                            extra, spare, count_rows + (size_t)laned * most * most,
                                                            time_rows + (size_t)laned * most * most, k_factor);
                if (done < 0) {
                    failed = done == -1 ? 1 : 2;
                } else if (tr.grid && contenders(c) >= trace_contenders) {
                    scheduled_count += schedule_traced(&tr, c, cm[k * S], cm[k * S + pp - 2]);
                } else {
                    qsort(c->splits, (size_t)c->count, sizeof(split_t), by_bound);
                    c->next = 0;
                    runs[laned++] = k;
                }
            }
            if (!failed) scheduled_count += schedule_candidates(&s, candidates, laned, cm, S, runs);
            continue;
        }
        /* one segment: the min-max split of the whole list, then LANES plans scheduled at a time */
        for (Py_ssize_t r = r0; r < r1 && !failed; r++) {
            const Py_ssize_t k = order[r].index;
            const rows_t out = ROWS(k);
            middle_comm(pp, cm + k * S, extra);
            failed = run_minmax(&w, &t, pp, n_enc, wh + k * S, extra, out.reported, out.scheduled) < 0;
            times_of(&t, pp, wh + k * S, out.scheduled, out.times);
        }
        for (Py_ssize_t q0 = r0; q0 < r1 && !failed; q0 += LANES) {
            for (int l = 0; l < LANES; l++) {  /* lanes past the run's last plan repeat it, unread */
                const Py_ssize_t k = order[q0 + l < r1 ? q0 + l : r1 - 1].index;
                load_lane(&s, l, out_times + k * S, cm[k * S], cm[k * S + pp - 2]);
            }
            run_1f1b(&s);
            for (int l = 0; l < LANES && q0 + l < r1; l++) {
                double *row = out_ends + order[q0 + l].index * S;
                for (int i = 0; i < pp; i++) row[i] = s.ends[i].v[l];
                scheduled_count++;
            }
        }
    }
    Py_END_ALLOW_THREADS
#undef ROWS
    if (failed) {
        if (failed == 2) PyErr_SetString(PyExc_ValueError, "fasop_plans: a plan has no encoder-decoder split");
        else PyErr_NoMemory();
        goto done;
    }
    result = PyLong_FromLong(scheduled_count);
done:
    free(order);
    free(splits);
    free(candidates);
    free(runs);
    free(count_rows);
    free(time_rows);
    free(extra);
    sched_free(&s);
    trace_free(&tr);
    minmax_free(&w);
    PyBuffer_Release(&table);
    PyBuffer_Release(&which);
    PyBuffer_Release(&comm);
    PyBuffer_Release(&pps);
    PyBuffer_Release(&ms);
    PyBuffer_Release(&reported);
    PyBuffer_Release(&scheduled);
    PyBuffer_Release(&times);
    PyBuffer_Release(&ends);
    return result;
}

/* ------------------------------------------------------------------- finishing */

/* a * b + c with the product rounded first: a compiler allowed to contract it into one fused
 * multiply-add (one rounding) would change the value; the volatile store prevents that. */
static inline double mul_add(double a, double b, double c)
{
    volatile double product = a * b;
    return product + c;
}

PyDoc_STRVAR(fasop_finish_doc,
"fasop_finish(pps, reported, ends, shared, layout_of, dp_table, embedding, limits, plane_of, params, act,\n"
"             sharded, param_bytes, factor, gib, step, dp, stage_bytes, zero_bytes, flags, gibs)\n\n"
"Step time and memory of P plans with chosen splits (docs/estimators.md sections 7 and 8), rows of S\n"
"stage entries: reported (int64) counts, ends (float64) stage ends, shared (uint8) stage on a\n"
"shared bus; layout_of (int64, P): the plan's row of dp_table (float32, D x (L+1) x 2: a stage's\n"
"DP all-reduce by stage 0's layer count, unshared and shared bus), embedding (float32, D) and\n"
"limits (float64, D x S); plane_of (int64, P): the plan's plane of params and act (float64,\n"
"planes of (L+1) x (L+1): elements of layers a..b-1); sharded (int64, P): bytes per parameter\n"
"with ZeRO; param_bytes: bytes per parameter without.\n"
"Writes step (float64 P: max over stages of float32(end) + DP, + embedding, in float32),\n"
"dp (float64 P: the DP all-reduce of the stage that ends last, the first of equals),\n"
"stage_bytes, zero_bytes (float64 P x S), flags (uint8 P x 2: OOM, ZeRO OOM) and gibs (float64\n"
"P x 2: peak GiB, float32-rounded: factor x the last OOM stage's bytes when OOM, else the\n"
"largest stage's; the same for ZeRO).");

static PyObject *py_fasop_finish(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer pps, reported, ends, shared, layout_of, dp_table, embedding, limits, plane_of, params, act, sharded;
    Py_buffer step, dp, stage_bytes, zero_bytes, flags, gibs;
    double param_bytes, factor, gib;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*dddw*w*w*w*w*w*", &pps, &reported, &ends, &shared, &layout_of,
                          &dp_table, &embedding, &limits, &plane_of, &params, &act, &sharded, &param_bytes, &factor,
                          &gib, &step,
                          &dp, &stage_bytes, &zero_bytes, &flags, &gibs))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t P = pps.len / (Py_ssize_t)sizeof(int64_t);
    const Py_ssize_t S = P ? reported.len / (P * (Py_ssize_t)sizeof(int64_t)) : 0;
    const Py_ssize_t D = embedding.len / (Py_ssize_t)sizeof(float);
    const Py_ssize_t width = D ? dp_table.len / (D * 2 * (Py_ssize_t)sizeof(float)) : 0;  /* L + 1 */
    const Py_ssize_t planes = width ? params.len / (width * width * (Py_ssize_t)sizeof(double)) : 0;
    if (check_buffer(&reported, P * S, sizeof(int64_t), "reported") < 0 ||
        check_buffer(&ends, P * S, sizeof(double), "ends") < 0 ||
        check_buffer(&shared, P * S, 1, "shared") < 0 ||
        check_buffer(&layout_of, P, sizeof(int64_t), "layout_of") < 0 ||
        check_buffer(&dp_table, D * width * 2, sizeof(float), "dp_table") < 0 ||
        check_buffer(&limits, D * S, sizeof(double), "limits") < 0 ||
        check_buffer(&plane_of, P, sizeof(int64_t), "plane_of") < 0 ||
        check_buffer(&params, planes * width * width, sizeof(double), "params") < 0 ||
        check_buffer(&act, planes * width * width, sizeof(double), "act") < 0 ||
        check_buffer(&sharded, P, sizeof(int64_t), "sharded") < 0 ||
        check_buffer(&step, P, sizeof(double), "step") < 0 || check_buffer(&dp, P, sizeof(double), "dp") < 0 ||
        check_buffer(&stage_bytes, P * S, sizeof(double), "stage_bytes") < 0 ||
        check_buffer(&zero_bytes, P * S, sizeof(double), "zero_bytes") < 0 ||
        check_buffer(&flags, P * 2, 1, "flags") < 0 || check_buffer(&gibs, P * 2, sizeof(double), "gibs") < 0)
        goto done;
    const int64_t *pp_of = pps.buf, *rep = reported.buf, *lay = layout_of.buf, *pl = plane_of.buf, *zs = sharded.buf;
    for (Py_ssize_t k = 0; k < P; k++) {
        if (pp_of[k] < 1 || pp_of[k] > S || lay[k] < 0 || lay[k] >= D || pl[k] < 0 || pl[k] >= planes) {
            PyErr_SetString(PyExc_ValueError, "fasop_finish: index out of range");
            goto done;
        }
        int64_t total = 0;
        for (int64_t i = 0; i < pp_of[k]; i++) {
            if (rep[k * S + i] < 0 || (total += rep[k * S + i]) >= width) {
                PyErr_SetString(PyExc_ValueError, "fasop_finish: split past the layer list");
                goto done;
            }
        }
    }
    const double *e = ends.buf, *lim = limits.buf, *pt = params.buf, *at = act.buf;
    const unsigned char *sh = shared.buf;
    const float *table = dp_table.buf, *emb = embedding.buf;
    double *out_step = step.buf, *out_dp = dp.buf, *out_bytes = stage_bytes.buf, *out_zero = zero_bytes.buf;
    double *out_gibs = gibs.buf;
    unsigned char *out_flags = flags.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < P; k++) {
        const int pp = (int)pp_of[k];
        const int64_t *counts = rep + k * S;
        const float *pair = table + (lay[k] * width + counts[0]) * 2;  /* stage 0's layers */
        /* step = max_i (float32(E_i) + DP_i) + embedding, float32 (docs/estimators.md section 7) */
        float latest = 0.0f, at_latest = 0.0f;
        for (int i = 0; i < pp; i++) {
            const float cost = pair[sh[k * S + i] ? 1 : 0];
            const float total = (float)e[k * S + i] + cost;
            if (i == 0 || total > latest) {
                latest = total;
                at_latest = cost;
            }
        }
        out_step[k] = (double)(float)(latest + emb[lay[k]]);
        out_dp[k] = (double)at_latest;
        /* memory (docs/estimators.md section 8): later OOM stages overwrite earlier ones */
        const double *p_table = pt + pl[k] * width * width, *a_table = at + pl[k] * width * width;
        int oom = 0, zero_oom = 0;
        double oom_gib = 0.0, zero_gib = 0.0, most = 0.0, most_zero = 0.0;
        int64_t first = 0;
        for (int i = 0; i < pp; i++) {
            const int64_t stop = first + counts[i];
            const double pr = p_table[first * width + stop], ac = a_table[first * width + stop];
            const double bytes = mul_add(param_bytes, pr, ac), zero = mul_add((double)zs[k], pr, ac);
            const double limit = lim[lay[k] * S + i];
            out_bytes[k * S + i] = bytes;
            out_zero[k * S + i] = zero;
            if (i == 0 || bytes > most) most = bytes;
            if (i == 0 || zero > most_zero) most_zero = zero;
            if (factor * bytes > limit) {
                oom = 1;
                oom_gib = factor * bytes / gib;
            }
            if (zero > limit) {
                zero_oom = 1;
                zero_gib = factor * zero / gib;
            }
            first = stop;
        }
        out_flags[2 * k] = (unsigned char)oom;
        out_flags[2 * k + 1] = (unsigned char)zero_oom;
        out_gibs[2 * k] = (double)(float)(oom ? oom_gib : most / gib);
        out_gibs[2 * k + 1] = (double)(float)(zero_oom ? zero_gib : most_zero / gib);
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&pps);
    PyBuffer_Release(&reported);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&shared);
    PyBuffer_Release(&layout_of);
    PyBuffer_Release(&dp_table);
    PyBuffer_Release(&embedding);
    PyBuffer_Release(&limits);
    PyBuffer_Release(&plane_of);
    PyBuffer_Release(&params);
    PyBuffer_Release(&act);
    PyBuffer_Release(&sharded);
    PyBuffer_Release(&step);
    PyBuffer_Release(&dp);
    PyBuffer_Release(&stage_bytes);
    PyBuffer_Release(&zero_bytes);
    PyBuffer_Release(&flags);
    PyBuffer_Release(&gibs);
    return result;
}

/* ------------------------------------------------------------------------ rows out */

PyDoc_STRVAR(row_tuples_doc,
"row_tuples(rows, counts, integers) -> list[tuple]\n\n"
"The first counts[k] entries of row k of rows (C-contiguous, P rows; int64 when integers, else\n"
"float64), as a tuple of Python ints or floats per row: what tuple(rows[k, :counts[k]].tolist())\n"
"gives, without the intermediate lists.");

static PyObject *py_row_tuples(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer rows, counts;
    int integers;
    if (!PyArg_ParseTuple(args, "y*y*p", &rows, &counts, &integers)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t P = counts.len / (Py_ssize_t)sizeof(int64_t);
    const Py_ssize_t W = P ? rows.len / (P * 8) : 0;
    if (check_buffer(&counts, P, sizeof(int64_t), "counts") < 0 || check_buffer(&rows, P * W, 8, "rows") < 0)
        goto done;
    const int64_t *n = counts.buf;
    for (Py_ssize_t k = 0; k < P; k++) {
        if (n[k] < 0 || n[k] > W) {
            PyErr_SetString(PyExc_ValueError, "row_tuples: count out of range");
            goto done;
        }
    }
    PyObject *list = PyList_New(P);
    if (!list) goto done;
    for (Py_ssize_t k = 0; k < P; k++) {
        PyObject *row = PyTuple_New(n[k]);
        if (!row) {
            Py_DECREF(list);
            goto done;
        }
        for (Py_ssize_t i = 0; i < n[k]; i++) {
            PyObject *item = integers ? PyLong_FromLongLong(((const int64_t *)rows.buf)[k * W + i])
                                      : PyFloat_FromDouble(((const double *)rows.buf)[k * W + i]);
            if (!item) {
                Py_DECREF(row);
                Py_DECREF(list);
                goto done;
            }
            PyTuple_SET_ITEM(row, i, item);
        }
        PyObject_GC_UnTrack(row);  /* numbers only: no cycle through it (what the collector
                                    * itself does to such a tuple, _PyTuple_MaybeUntrack) */
        PyList_SET_ITEM(list, k, row);
    }
    result = list;
done:
    PyBuffer_Release(&rows);
    PyBuffer_Release(&counts);
    return result;
}

/* ------------------------------------------------------------------------ objects out */

PyDoc_STRVAR(objects_doc,
"objects(cls, names, columns, n) -> list\n\n"
"n instances of the class cls made without its __init__ (object.__new__(cls)), instance k's\n"
"__dict__ holding names[i] = columns[i][k] where columns[i] is a list (of n items), else\n"
"columns[i] itself: what plan.trusted makes, n at a time.");

static PyObject *py_objects(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cls, *names, *columns;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!O!O!n", &PyType_Type, &cls, &PyTuple_Type, &names, &PyTuple_Type, &columns, &n))
        return NULL;
    const Py_ssize_t F = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(columns) != F || n < 0) {
        PyErr_SetString(PyExc_ValueError, "objects: one column per name, n >= 0");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < F; i++) {
        PyObject *column = PyTuple_GET_ITEM(columns, i);
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "objects: names must be str");
            return NULL;
        }
        if (PyList_Check(column) && PyList_GET_SIZE(column) != n) {
            PyErr_SetString(PyExc_ValueError, "objects: a column list's length is not n");
            return NULL;
        }
    }
    PyObject *empty = PyTuple_New(0), *list = empty ? PyList_New(n) : NULL;
    if (!list) {
        Py_XDECREF(empty);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)cls, empty, NULL);
        PyObject *dict = obj ? PyObject_GenericGetDict(obj, NULL) : NULL;
        if (!dict) {
            Py_XDECREF(obj);
            goto fail;
        }
        PyList_SET_ITEM(list, k, obj);
        for (Py_ssize_t i = 0; i < F; i++) {
            PyObject *column = PyTuple_GET_ITEM(columns, i);
            PyObject *value = PyList_Check(column) ? PyList_GET_ITEM(column, k) : column;
            if (PyDict_SetItem(dict, PyTuple_GET_ITEM(names, i), value) < 0) {
                Py_DECREF(dict);
                goto fail;
            }
        }
        Py_DECREF(dict);
    }
    Py_DECREF(empty);
    return list;
fail:
    Py_DECREF(empty);
    Py_DECREF(list);
    return NULL;
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

PyDoc_STRVAR(set_trace_contenders_doc,
"_set_trace_contenders(n) -> int\n\n"
"Tests only: fasop_plans schedules an encoder-decoder plan's splits by traced runs when n of\n"
"them have bounds near the least (1: every plan; more than pp: none). Returns the previous n.");

static PyObject *py_set_trace_contenders(PyObject *self, PyObject *args)
{
    (void)self;
    int n;
    if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
    const int previous = trace_contenders;
    trace_contenders = n;
    return PyLong_FromLong(previous);
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

PyDoc_STRVAR(completion_doc,
"completion(times, n, size, weights, largest, table)\n\n"
"fasop.partition.completion's table: times float64 n x size x size (stage k, layers a..b-1),\n"
"weights float64 n, largest 0 or 1; table: writable float64 (n + 1) x size.");

static PyObject *py_completion(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, weights, table;
    int n, largest;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*iny*pw*", &times, &n, &size, &weights, &largest, &table)) return NULL;
    PyObject *result = NULL;
    if (check_stage_times(&times, n, size, &weights, "completion") < 0 ||
        check_buffer(&table, (Py_ssize_t)(n + 1) * size, sizeof(double), "table") < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    completion_table(times.buf, n, size, weights.buf, largest, table.buf);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&times);
    PyBuffer_Release(&weights);
    PyBuffer_Release(&table);
    return result;
}

PyDoc_STRVAR(capped_completion_doc,
"capped_completion(times, n, size, weights, caps, table)\n\n"
"fasop.partition.capped_completion's table: times and weights as for completion, caps float64 J;\n"
"table: writable float64 J x (n + 1) x size.");

static PyObject *py_capped_completion(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, weights, caps, table;
    int n;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*iny*y*w*", &times, &n, &size, &weights, &caps, &table)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t J = caps.len / (Py_ssize_t)sizeof(double);
    if (check_stage_times(&times, n, size, &weights, "capped_completion") < 0 ||
        check_buffer(&caps, J, sizeof(double), "caps") < 0 ||
        check_buffer(&table, J * (n + 1) * size, sizeof(double), "table") < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    capped_table(times.buf, n, size, weights.buf, caps.buf, J, table.buf);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&times);
    PyBuffer_Release(&weights);
    PyBuffer_Release(&caps);
    PyBuffer_Release(&table);
    return result;
}

PyDoc_STRVAR(bottleneck_split_doc,
"bottleneck_split(times, n, size, counts) -> bool\n\n"
"fasop.partition.bottleneck_split: times as for completion; counts: writable int64 n, the\n"
"split's layers per stage. False (counts unset) when no split fits.");

static PyObject *py_bottleneck_split(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, counts;
    int n;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*inw*", &times, &n, &size, &counts)) return NULL;
    PyObject *result = NULL;
    double *most = NULL, *sum = NULL;
    int64_t *stop = NULL;
    if (check_stage_times(&times, n, size, NULL, "bottleneck_split") < 0 ||
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
    found = bottleneck_counts(times.buf, n, size, most, sum, stop, counts.buf);
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(found);
done:
    free(most);
    free(sum);
    free(stop);
    PyBuffer_Release(&times);
    PyBuffer_Release(&counts);
    return result;
}

static PyMethodDef methods[] = {
    {"one_f_one_b", py_one_f_one_b, METH_VARARGS, one_f_one_b_doc},
    {"minmax", py_minmax, METH_VARARGS, minmax_doc},
    {"fasop_plans", py_fasop_plans, METH_VARARGS, fasop_plans_doc},
    {"fasop_finish", py_fasop_finish, METH_VARARGS, fasop_finish_doc},
    {"row_tuples", py_row_tuples, METH_VARARGS, row_tuples_doc},
    {"objects", py_objects, METH_VARARGS, objects_doc},
    {"one_f_one_b_traced", py_one_f_one_b_traced, METH_VARARGS, one_f_one_b_traced_doc},
    {"completion", py_completion, METH_VARARGS, completion_doc},
    {"capped_completion", py_capped_completion, METH_VARARGS, capped_completion_doc},
    {"bottleneck_split", py_bottleneck_split, METH_VARARGS, bottleneck_split_doc},
    {"_set_poison", py_set_poison, METH_VARARGS, set_poison_doc},
    {"_set_trace_contenders", py_set_trace_contenders, METH_VARARGS, set_trace_contenders_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fasop_native", "Compiled kernels of fasop's hot loops (optional; fasop/native.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

/* The interface version fasop/native.py expects (native.API): bump with every change of a signature
 * or of what a call returns (4: a traced run's chain takes the first of equal inputs in _run's order;
 * 5: the partitioner's tables; 6: TRACE_MAX_CELLS, one_f_one_b_traced's limit, exported). */
#define API 8

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
