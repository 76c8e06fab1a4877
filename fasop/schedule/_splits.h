/* split_ends: the 1F1B stage ends of many layer splits of one pipeline, as
 * fasop.schedule.pipeline.one_f_one_b computes them from the splits' stage times (included by
 * _native.c after run_1f1b; the same operations in the same order, so the same bits):
 *
 *   comp[i]  = times[i, e_i, e_{i+1}]            (e: the split's layer boundaries)
 *   F[i]     = comp[i] / k,  B[i] = ((k - 1) comp[i]) / k   (split_stage_times)
 *   ends     = the 1F1B recurrences (run_1f1b, as one_f_one_b) with sends SF, SB per stage. */

/* Whether the n layer counts c are each >= 1 and sum to size - 1: every edge of the split inside a
 * size x size table (the check both kernels make before reading it). */
static int split_fits_table(const int64_t *c, Py_ssize_t n, int size)
{
    int64_t edge = 0;
    for (Py_ssize_t i = 0; i < n && edge >= 0; i++)
        edge = c[i] >= 1 && edge + c[i] <= size - 1 ? edge + c[i] : -1;
    return n >= 1 && size >= 2 && edge == size - 1;
}

PyDoc_STRVAR(split_ends_doc,
"split_ends(times, size, splits, pp, m, factor, send_fwd, send_bwd, ends)\n\n"
"one_f_one_b of n splits of one pipeline: times float64 pp x size x size (C-contiguous, stage k's\n"
"seconds of layers a..b-1); splits int64 n x pp layer counts (each >= 1, summing to size - 1);\n"
"factor: the stage time is factor x its forward (split_stage_times); send_fwd, send_bwd float64 pp;\n"
"ends: writable float64 n x pp, each split's stage ends.");

static PyObject *py_split_ends(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer times, splits, send_fwd, send_bwd, ends;
    int size, pp, m;
    double factor;
    if (!PyArg_ParseTuple(args, "y*iy*iidy*y*w*", &times, &size, &splits, &pp, &m, &factor, &send_fwd, &send_bwd,
                          &ends))
        return NULL;
    PyObject *result = NULL;
    sched_t s = {0};
    if (check_pipeline(pp, m, "split_ends") < 0) goto done;
    const Py_ssize_t n = splits.len / ((Py_ssize_t)pp * (Py_ssize_t)sizeof(int64_t));
    if (size < 2 || check_buffer(&times, (Py_ssize_t)pp * size * size, sizeof(double), "times") < 0 ||
        check_buffer(&splits, n * pp, sizeof(int64_t), "splits") < 0 ||
        check_buffer(&send_fwd, pp, sizeof(double), "send_fwd") < 0 ||
        check_buffer(&send_bwd, pp, sizeof(double), "send_bwd") < 0 ||
        check_buffer(&ends, n * pp, sizeof(double), "ends") < 0)
        goto done;
    const int64_t *counts = splits.buf;
    for (Py_ssize_t r = 0; r < n; r++) {  /* every read below stays inside the buffers */
        if (!split_fits_table(counts + r * pp, pp, size)) {
            PyErr_SetString(PyExc_ValueError, "split_ends: a split's counts must be >= 1 and sum to size - 1");
            goto done;
        }
    }
    if (sched_init(&s, pp, (int64_t)pp * m) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    s.m = m;
    const double *t = times.buf, *sf = send_fwd.buf, *sb = send_bwd.buf;
    double *out = ends.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k0 = 0; k0 < n; k0 += LANES) {
        for (int l = 0; l < LANES; l++) {  /* lanes past the last split repeat it, unread */
            const int64_t *c = counts + (k0 + l < n ? k0 + l : n - 1) * pp;
            int64_t a = 0;
            for (int i = 0; i < pp; i++) {
                const int64_t b = a + c[i];
                const double comp = t[((size_t)i * (size_t)size + (size_t)a) * (size_t)size + (size_t)b];
                s.dur[i].v[l] = comp / factor;
                s.dur[pp + i].v[l] = ((factor - 1.0) * comp) / factor;
                s.dur[2 * pp + i].v[l] = sf[i];
                s.dur[3 * pp + i].v[l] = sb[i];
                a = b;
            }
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
    PyBuffer_Release(&times);
    PyBuffer_Release(&splits);
    PyBuffer_Release(&send_fwd);
    PyBuffer_Release(&send_bwd);
    PyBuffer_Release(&ends);
    return result;
}

/* polish_moves: partition.polish.move_rows -- the splits one layer away from a split (a layer
 * moved from stage i to stage j, every i != j, i first, then j, as np.nonzero(~np.eye(n)) lists
 * them) that keep every stage non-empty and whose every stage time times[k][e_k][e_{k+1}] is
 * finite, each with its stage times (copied). Returns how many rows were written. */

PyDoc_STRVAR(polish_moves_doc,
"polish_moves(split, times, size, counts, stage_times) -> int\n\n"
"partition.polish.move_rows: split int64 n (each >= 1, summing to size - 1); times float64 n x size x\n"
"size; counts (int64) and stage_times (float64): writable n (n - 1) x n, their first rows written.");

static PyObject *py_polish_moves(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer split, times, counts, stage_times;
    int size;
    if (!PyArg_ParseTuple(args, "y*y*iw*w*", &split, &times, &size, &counts, &stage_times)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = split.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *s = split.buf;
    if (!split_fits_table(s, n, size)) {  /* every edge inside the table */
        PyErr_SetString(PyExc_ValueError, "polish_moves: the split's counts must be >= 1 and sum to size - 1");
        goto done;
    }
    if (check_buffer(&times, n * size * size, sizeof(double), "times") < 0 ||
        check_buffer(&counts, n * (n - 1) * n, sizeof(int64_t), "counts") < 0 ||
        check_buffer(&stage_times, n * (n - 1) * n, sizeof(double), "stage_times") < 0)
        goto done;
    const double *t = times.buf;
    int64_t *c = counts.buf;
    double *st = stage_times.buf;
    Py_ssize_t rows = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 2) continue;  /* stage i would be left empty */
        for (Py_ssize_t j = 0; j < n; j++) {
            if (j == i) continue;
            int64_t *row = c + rows * n;
            double *times_row = st + rows * n;
            int64_t a = 0;
            int fits = 1;
            for (Py_ssize_t k = 0; k < n && fits; k++) {
                row[k] = s[k] - (k == i) + (k == j);
                const int64_t b = a + row[k];
                times_row[k] = t[((size_t)k * (size_t)size + (size_t)a) * (size_t)size + (size_t)b];
                fits = isfinite(times_row[k]);
                a = b;
            }
            rows += fits;
        }
    }
    result = PyLong_FromSsize_t(rows);
done:
    PyBuffer_Release(&split);
    PyBuffer_Release(&times);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&stage_times);
    return result;
}

/* fit_table: one plan's stage times where its layers fit, inf elsewhere, and partition's
 * finite_runs of them, in one pass: fitting[k][a][b] = need[a][b] > limits[k] ? inf :
 * table[planes[k]][a][b] (numpy's where(~(need > limits), times, inf) with times the stack of
 * the planes: the same values), runs as finite_runs. */

PyDoc_STRVAR(fit_table_doc,
"fit_table(table, size, planes, need, limits, fitting, runs)\n\n"
"table float64 P x size x size (stage times by first and last layer, one plane per kind of stage);\n"
"planes int64 pp (each < P); need float64 size x size; limits float64 pp; fitting (float64 pp x size\n"
"x size) and runs (int64 pp x size x 2, finite_runs') writable.");

static PyObject *py_fit_table(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer table, planes, need, limits, fitting, runs;
    int size;
    if (!PyArg_ParseTuple(args, "y*iy*y*y*w*w*", &table, &size, &planes, &need, &limits, &fitting, &runs)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t pp = planes.len / (Py_ssize_t)sizeof(int64_t);
    const Py_ssize_t plane = (Py_ssize_t)size * size, count = size > 0 ? table.len / (Py_ssize_t)sizeof(double) / plane : 0;
    if (size < 1 || pp < 1 || check_buffer(&table, count * plane, sizeof(double), "table") < 0 ||
        check_buffer(&planes, pp, sizeof(int64_t), "planes") < 0 ||
        check_buffer(&need, plane, sizeof(double), "need") < 0 || check_buffer(&limits, pp, sizeof(double), "limits") < 0 ||
        check_buffer(&fitting, pp * plane, sizeof(double), "fitting") < 0 ||
        check_buffer(&runs, 2 * pp * size, sizeof(int64_t), "runs") < 0)
        goto done;
    const int64_t *p = planes.buf;
    for (Py_ssize_t k = 0; k < pp; k++)
        if (p[k] < 0 || p[k] >= count) {
            PyErr_SetString(PyExc_ValueError, "fit_table: a plane outside the table");
            goto done;
        }
    const double *t = table.buf, *nd = need.buf, *lim = limits.buf;
    double *out = fitting.buf;
    int64_t *r = runs.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < pp; k++) {
        const double *src = t + (size_t)p[k] * (size_t)plane, limit = lim[k];
        for (Py_ssize_t a = 0; a < size; a++) {
            double *row = out + ((size_t)k * (size_t)size + (size_t)a) * (size_t)size;
            const double *from = src + (size_t)a * (size_t)size, *over = nd + (size_t)a * (size_t)size;
            Py_ssize_t lo = 0, hi = 0;
            for (Py_ssize_t b = 0; b < size; b++) {
                row[b] = over[b] > limit ? INFINITY : from[b];
                if (isfinite(row[b])) {
                    if (hi == 0) lo = b;
                    hi = b + 1;
                }
            }
            r[2 * ((size_t)k * (size_t)size + (size_t)a)] = lo;
            r[2 * ((size_t)k * (size_t)size + (size_t)a) + 1] = hi;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&planes);
    PyBuffer_Release(&need);
    PyBuffer_Release(&limits);
    PyBuffer_Release(&fitting);
    PyBuffer_Release(&runs);
    return result;
}
