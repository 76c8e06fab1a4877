"""Pipeline schedules: when does every stage finish its last backward pass?

`one_f_one_b` is FASOP's event-level 1F1B simulation (MODEL.md §5), written as recurrences
over (stage, micro-batch) on arrays whose last axis is a batch of independent pipelines with
the same stage count and micro-batch count — so one Python loop schedules many plans at once.
Every event end is (max of the events it waits for) + its duration, evaluated in FASOP's order,
so results are bit-identical to the per-plan simulation.
"""

from __future__ import annotations

import numpy as np


def one_f_one_b(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                num_microbatches: int) -> np.ndarray:
    """Stage end times, shape (pp, batch).

    fwd, bwd: compute seconds of one micro-batch per stage, shape (pp, batch).
    send_fwd[i]: seconds stage i spends sending activations forward; send_bwd[i]: sending
    gradients backward (FASOP charges only stage 0's forward and the last stage's backward).
    Stage i runs w_i = min(pp-i-1, m) warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards.
    """
    pp, batch = fwd.shape
    m = num_microbatches
    zero = np.zeros(batch)
    mx = np.maximum

    def grid():
        return [[zero] * m for _ in range(pp)]

    fce, fse, fre, frs = grid(), grid(), grid(), grid()
    bce, bse, bre, brs = grid(), grid(), grid(), grid()
    warm = [min(pp - i - 1, m) for i in range(pp)]
    F, B, SF, SB = list(fwd), list(bwd), list(send_fwd), list(send_bwd)

    def forward_send(i: int, j: int, end_compute, first: bool) -> None:
        # sends start when the compute ends and the next stage is ready to receive
        end = end_compute + SF[i] if first else mx(end_compute, frs[i + 1][j]) + SF[i]
        fse[i][j] = fre[i + 1][j] = end

    def backward_send(i: int, j: int) -> None:
        end = mx(bce[i][j], brs[i - 1][j]) + SB[i]
        bse[i][j] = bre[i - 1][j] = end

    # warm-up forwards
    for j in range(m):
        for i in range(pp):
            if j >= warm[i]:
                continue
            if i == 0:
                start = zero if j == 0 else fse[0][j - 1]
            else:
                start = fre[i][j] if j == 0 else mx(fse[i][j - 1], fre[i][j])
            fce[i][j] = start + F[i]
            if i > 0 and j < warm[i] - 1:
                frs[i][j + 1] = fce[i][j]
            if i < pp - 1:
                forward_send(i, j, fce[i][j], j == 0)

    # steady state: one forward, then one backward
    for j in range(m):
        for i in range(pp):
            f = j + warm[i]
            if f > m - 1:
                continue
            if j == 0:
                start = mx(zero if f == 0 else fse[i][f - 1], fre[i][f])
            else:
                start = bce[0][j - 1] if i == 0 else mx(bse[i][j - 1], fre[i][f])
            fce[i][f] = start + F[i]
            if i < pp - 1:
                brs[i][j] = fce[i][f]
                ready = zero if (j == 0 and f == 0) else frs[i + 1][f]
                fse[i][f] = fre[i + 1][f] = mx(fce[i][f], ready) + SF[i]
        for i in range(pp - 1, -1, -1):
            if j > m - warm[i] - 1:
                continue
            g = j + warm[i]
            start = mx(mx(zero if i == 0 else fse[i][g], bre[i][j]), fce[i][g])
            bce[i][j] = start + B[i]
            if i > 0:
                if g + 1 < m:
                    frs[i][g + 1] = bce[i][j]
                elif j + 1 < m:
                    brs[i][j + 1] = bce[i][j]
                backward_send(i, j)
            elif j == m - 1 - warm[0] and j + 1 < m:
                brs[0][j + 1] = bce[0][j]

    # cool-down backwards (index j-1 wraps to m-1 at j = 0, as in FASOP)
    for j in range(m):
        for i in range(pp - 1, -1, -1):
            if j < m - warm[i]:
                continue
            start = mx(mx(bce[i][j - 1], bre[i][j]), bse[i][j - 1])
            bce[i][j] = start + B[i]
            if j < m - 1:
                brs[i][j + 1] = bce[i][j]
            if i > 0:
                backward_send(i, j)

    return np.array([bce[i][m - 1] for i in range(pp)])


def one_f_one_b_lower_bound(prefix: list[float], rest_sum: float, rest_max: float, num_stages: int,
                            num_microbatches: int, send_first: float, send_last: float) -> float:
    """A lower bound on stage 0's end time (from `one_f_one_b`) over every pipeline whose first
    len(prefix) stage compute times are `prefix` and whose other stages sum to >= rest_sum with
    a largest stage >= rest_max. Each term is the length of one chain of dependent events:

    - micro-batch 0 forward through every stage and backward again: sum of all stage times plus
      the two charged sends;
    - stage i (known): micro-batch 0 reaches it (forwards of stages < i); it runs its warm-up
      forwards or waits for micro-batch 0 to come back from the later stages, whichever is
      longer; it then runs the rest of its m forwards and its m backwards one after the other; the
      last gradient drains through the backwards of stages < i;
    - the slowest unknown stage: the known stages' time (its first forward waits for their
      forwards, its last backward is followed by their backwards) plus m x its own time.
    """
    m, pp = num_microbatches, num_stages
    known = len(prefix)
    total = sum(prefix)
    bound = total + rest_sum + send_first + send_last
    if known < pp:
        bound = max(bound, total + (send_first if known > 0 else 0.0) + m * rest_max)
    before = 0.0
    suffix = total
    for i, comp in enumerate(prefix):
        suffix -= comp
        fwd, bwd = comp / 3, 2 * comp / 3
        ahead = min(pp - i, m)  # forwards stage i runs before its first backward (warm-up + 1)
        round_trip = suffix + rest_sum + (send_last if i < pp - 1 else 0.0) + (send_first if i == 0 else 0.0)
        chain = (before / 3 + (send_first if i > 0 else 0.0) + fwd + max((ahead - 1) * fwd, round_trip)
                 + (m - ahead) * fwd + m * bwd + 2 * before / 3 + (send_last if i == pp - 1 else 0.0))
        bound = max(bound, chain)
        before += comp
    return bound
