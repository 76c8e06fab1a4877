/* The 1F1B recurrences of fasop.schedule.pipeline._run, written once for the two kinds of run in
 * _native.c: included with these defined, it defines
 *
 *     static void ONE_F_ONE_B_NAME(ONE_F_ONE_B_STATE *s)
 *
 * that runs them on s->dur (4 pp rows: F, B, SF, SB of each stage) into s->grid (6 pp m cells
 * of type CELL) and s->ends (each stage's last backward end, ONE_F_ONE_B_END of its cell), using
 * s->flags (3 pp ints). MAXADD(t, a, b, row, add) sets *t to the later of *a and *b (a unless b
 * is later), then + duration row `row` when add; ONE_F_ONE_B_SENDS(row) says whether duration
 * row `row` (a send) is ever non-zero (sends that are 0 are not added, which changes no value);
 * ONE_F_ONE_B_ZERO and ONE_F_ONE_B_BIG are a CELL of 0.0 (all bytes 0) and of 1e300 (poisoned
 * cells).
 *
 * _run's order, with two liberties that change no value: a receive end is read from the
 * matching send end (fre[i][j] = fse[i-1][j] and bre[i][j] = bse[i+1][j] are always set
 * together; the first stage receives no forward and the last no backward: 0.0), and sends that
 * are 0 are not added. Every maximum names its inputs in _run's order, the first of equals
 * winning, as fasop.schedule.recurrences.trace's chains (the latest input of each event, the first of
 * equals) read them. */

static void ONE_F_ONE_B_NAME(ONE_F_ONE_B_STATE *s)
{
    const int pp = s->pp, m = s->m;
    const size_t size = (size_t)pp * (size_t)m;
    CELL *grid = s->grid;
    CELL *fce = grid, *fse = grid + size, *frs = grid + 2 * size;
    CELL *bce = grid + 3 * size, *bse = grid + 4 * size, *brs = grid + 5 * size;
    const CELL zero = ONE_F_ONE_B_ZERO;
    int *warm = s->flags, *sf = s->flags + pp, *sb = s->flags + 2 * pp;
#define AT(a, i, j) a[(size_t)(j) * (size_t)pp + (size_t)(i)]
    /* fasop.schedule.pipeline._run's arrays start as zeros, and some cells are read before they are
     * written: all of frs, fse's last stage, bse's first, the last micro-batch of bce, bse and
     * brs (read at j - 1 = -1) and brs's first. Those are zeroed; every other cell is written
     * before it is read (with poison set, _set_poison, they start as 1e300 and the tests still
     * pass: the whole suite did, run so). */
    if (poison) {
        const CELL big = ONE_F_ONE_B_BIG;
        for (size_t c = 0; c < 6 * size; c++) grid[c] = big;
    }
    memset(frs, 0, size * sizeof(CELL));  /* ONE_F_ONE_B_ZERO: all bytes 0 */
    for (int j = 0; j < m; j++) {
        AT(fse, pp - 1, j) = zero;
        AT(bse, 0, j) = zero;
    }
    for (int i = 0; i < pp; i++) AT(bce, i, m - 1) = AT(bse, i, m - 1) = AT(brs, i, 0) = AT(brs, i, m - 1) = zero;
#define FRE(i, j) ((i) == 0 ? &zero : &AT(fse, (i) - 1, j))
#define BRE(i, j) ((i) == pp - 1 ? &zero : &AT(bse, (i) + 1, j))
    for (int i = 0; i < pp; i++) {
        warm[i] = (pp - i - 1 < m) ? pp - i - 1 : m;
        sf[i] = ONE_F_ONE_B_SENDS(2 * pp + i);
        sb[i] = ONE_F_ONE_B_SENDS(3 * pp + i);
    }
    /* warm[i] does not grow with i: the stages with j < warm[i] (warm-up, cool-down) come
     * first, those with j + warm[i] <= m - 1 (steady state) last; the loops visit just them. */

    /* warm-up forwards */
    for (int j = 0; j < m; j++) {
        CELL received = zero;  /* fre[i][j]: the previous stage's send end, just computed */
        for (int i = 0; i < pp && j < warm[i]; i++) {
            CELL fc;
            if (j == 0) MAXADD(&fc, &received, &zero, i, 1);  /* 0.0 + F at stage 0 */
            else MAXADD(&fc, &AT(fse, i, j - 1), &received, i, 1);
            AT(fce, i, j) = fc;
            if (i > 0 && j < warm[i] - 1) AT(frs, i, j + 1) = fc;
            if (i < pp - 1) {
                MAXADD(&received, &fc, j == 0 ? &zero : &AT(frs, i + 1, j), 2 * pp + i, sf[i]);
                AT(fse, i, j) = received;
            }
        }
    }
    /* steady state: one forward, then one backward */
    int steady = 0;  /* the first stage with j + warm[i] <= m - 1 */
    for (int j = 0; j < m; j++) {
        while (steady < pp && j + warm[steady] > m - 1) steady++;
        for (int i = steady; i < pp; i++) {
            const int f = j + warm[i];
            CELL fc;
            if (j == 0) MAXADD(&fc, f == 0 ? &zero : &AT(fse, i, f - 1), FRE(i, f), i, 1);
            else if (i == 0) MAXADD(&fc, &AT(bce, 0, j - 1), &zero, 0, 1);
            else MAXADD(&fc, &AT(bse, i, j - 1), FRE(i, f), i, 1);
            AT(fce, i, f) = fc;
            if (i < pp - 1) {
                AT(brs, i, j) = fc;
                MAXADD(&AT(fse, i, f), &fc, (j == 0 && f == 0) ? &zero : &AT(frs, i + 1, f), 2 * pp + i, sf[i]);
            }
        }
        CELL received = zero;  /* bre[i][j]: the next stage's send end, just computed */
        for (int i = pp - 1; i >= steady; i--) {
            const int g = j + warm[i];
            CELL early, bc;
            MAXADD(&early, i == 0 ? &zero : &AT(fse, i, g), &received, 0, 0);
            MAXADD(&bc, &early, &AT(fce, i, g), pp + i, 1);
            AT(bce, i, j) = bc;
            if (i > 0) {
                if (g + 1 < m) AT(frs, i, g + 1) = bc;
                else if (j + 1 < m) AT(brs, i, j + 1) = bc;
                MAXADD(&received, &bc, &AT(brs, i - 1, j), 3 * pp + i, sb[i]);
                AT(bse, i, j) = received;
            } else if (j == m - 1 - warm[0] && j + 1 < m) {
                AT(brs, 0, j + 1) = bc;
            }
        }
    }
    /* cool-down backwards (index j-1 wraps to m-1 at j = 0, as Python's -1 does) */
    int draining = 0;  /* stages 0..draining-1 have j >= m - warm[i] */
    for (int j = 0; j < m; j++) {
        const int prev = (j == 0) ? m - 1 : j - 1;
        while (draining < pp && j >= m - warm[draining]) draining++;
        for (int i = draining - 1; i >= 0; i--) {
            CELL early, bc;
            MAXADD(&early, &AT(bce, i, prev), BRE(i, j), 0, 0);
            MAXADD(&bc, &early, &AT(bse, i, prev), pp + i, 1);
            AT(bce, i, j) = bc;
            if (j < m - 1) AT(brs, i, j + 1) = bc;
            if (i > 0) MAXADD(&AT(bse, i, j), &bc, &AT(brs, i - 1, j), 3 * pp + i, sb[i]);
        }
    }
    for (int i = 0; i < pp; i++) s->ends[i] = ONE_F_ONE_B_END(AT(bce, i, m - 1));
#undef AT
#undef FRE
#undef BRE
}

#undef ONE_F_ONE_B_NAME
#undef ONE_F_ONE_B_STATE
#undef CELL
#undef MAXADD
#undef ONE_F_ONE_B_SENDS
#undef ONE_F_ONE_B_END
#undef ONE_F_ONE_B_ZERO
#undef ONE_F_ONE_B_BIG
