"""The update phase's plan (flowrl.update_plan), worked by hand: where units lie, which rows each optimizer step
trains, the padding passes that keep processes in step, the sync point, and the clip / rate / step / EMA order."""

import torch

from flowrl.methods.seam import TrainEntry
from flowrl.update_plan import (
    Backward,
    CheckOnPolicy,
    Clip,
    DropFrozen,
    Place,
    SetLearningRate,
    StepOptimizer,
    UpdateEma,
    layout,
    plan_update,
)

STEP = [Clip(), SetLearningRate(0), StepOptimizer()]


def plan(places, schedule, trained, adv, keep_rows=None, **kw):
    one_process = {"data_rank": 0, "world": 1, "num_processes": 1, "first_step": 0, "ema_every": None}
    args = {**one_process, "check_onpolicy": False, "drop_frozen": False, **kw}
    return plan_update(places, schedule, trained, adv, keep_rows, **args)


def test_layout_cuts_each_process_share_into_batches():
    # 10 samples over 2 processes: 5 each, in batches of 2, 2, 1; rank 0's first
    assert layout(10, 2, 2) == [
        Place(0, 0, 2),
        Place(0, 2, 2),
        Place(0, 4, 1),
        Place(1, 5, 2),
        Place(1, 7, 2),
        Place(1, 9, 1),
    ]


def test_one_process_one_step_two_units():
    # 2 units of 2 rows, every advantage non-zero: 4 kept rows, each unit weighs 2/4; the second pass syncs;
    # the first update's first pass is measured and checked
    steps = plan(
        layout(4, 1, 2),
        [[TrainEntry(0), TrainEntry(1)]],
        [[0, 1], [0, 1]],
        torch.tensor([1.0, -1.0, 2.0, -2.0]),
        check_onpolicy=True,
    )
    assert steps == [
        Backward(0, (0, 1), (0, 1), 0.5, sync=False, measure=True),
        CheckOnPolicy(),
        Backward(1, (0, 1), (0, 1), 0.5, sync=True),
        *STEP,
    ]


def test_two_processes_pad_to_the_busiest():
    # 6 samples over 2 processes in batches of 2: units 0 (rows 0-1) and 1 (row 2) on rank 0, 2 (rows 3-4) and
    # 3 (row 5) on rank 1. Sample 2 has no signal, so unit 1 is idle: rank 0 has 1 busy unit, rank 1 has 2, and
    # rank 0 pads once (its first unit's first row, weight 0, as many transitions as the step's first busy unit).
    # 5 kept samples over 2 processes: scale = rows / 5 * 2.
    places, schedule, trained = layout(6, 2, 2), [[TrainEntry(q) for q in range(4)]], [[0, 2], [0, 2], [1], [1]]
    adv = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0, 1.0])
    rank0 = plan(places, schedule, trained, adv, world=2, num_processes=2)
    rank1 = plan(places, schedule, trained, adv, data_rank=1, world=2, num_processes=2)
    assert rank0 == [
        Backward(0, (0, 2), (0, 1), 0.8, sync=False, measure=True),
        Backward(0, (0, 2), (0,), 0.0, sync=True, padding=True),
        *STEP,
    ]
    assert rank1 == [
        Backward(2, (1,), (0, 1), 0.8, sync=False, measure=True),
        Backward(3, (1,), (0,), 0.4, sync=True),
        *STEP,
    ]
    assert sum(s.scale for s in rank0 + rank1 if isinstance(s, Backward)) == 2.0  # DDP's mean over 2: weight 1


def test_a_first_pass_that_pads_is_not_measured_but_still_checked():
    # rank 1's samples carry no signal: it pads once, and that pass is not measured (no rollout rows to compare)
    places, schedule, trained = layout(4, 2, 2), [[TrainEntry(0), TrainEntry(1)]], [[0], [0]]
    adv = torch.tensor([1.0, -1.0, 0.0, 0.0])
    assert plan(places, schedule, trained, adv, data_rank=1, world=2, num_processes=2, check_onpolicy=True) == [
        Backward(1, (0,), (0,), 0.0, sync=True, padding=True),
        CheckOnPolicy(),
        *STEP,
    ]


def test_rows_and_transitions_named_per_entry():
    # one unit of 3 rows, trained transitions [4, 6]; step 1 names transition k=1 (plan index 6) of rows 0 and 1,
    # which join into one pass; row 1's advantage at transition 6 is 0, so only row 0 trains it (weight 1/1).
    # Step 2 names row 3, past the unit's end: no work, so no optimizer step either.
    adv = torch.zeros(3, 8)
    adv[:, 6] = torch.tensor([1.0, 0.0, 2.0])
    schedule = [[TrainEntry(0, 1, 0), TrainEntry(0, 1, 1)], [TrainEntry(0, 0, 3)]]
    assert plan(layout(3, 1, 3), schedule, [[4, 6]], adv) == [
        Backward(0, (6,), (0,), 1.0, sync=True, measure=True),
        *STEP,
    ]


def test_keep_rows_override_and_empty_steps():
    # every advantage is 0, but keep_rows names samples 0 and 3: step 1 trains unit 0's row 0 (1 kept row: weight
    # 1/1), step 2 unit 1's row 1 (sample 3)
    adv, keep = torch.zeros(4), torch.tensor([True, False, False, True])
    steps = plan(layout(4, 1, 2), [[TrainEntry(0)], [TrainEntry(1)]], [[0], [0]], adv, keep)
    assert steps == [
        Backward(0, (0,), (0,), 1.0, sync=True, measure=True),
        *STEP,
        Backward(1, (0,), (1,), 1.0, sync=True),
        Clip(),
        SetLearningRate(1),
        StepOptimizer(),
    ]
    # without keep_rows nothing carries signal: every step is skipped
    assert plan(layout(4, 1, 2), [[TrainEntry(0)], [TrainEntry(1)]], [[0], [0]], adv) == []


def test_an_empty_window_trains_nothing():
    # unit 1 trains no transition (an empty MixGRPO window): only unit 0 works
    steps = plan(layout(4, 1, 2), [[TrainEntry(0), TrainEntry(1)]], [[2], []], torch.ones(4))
    assert steps == [Backward(0, (2,), (0, 1), 1.0, sync=True, measure=True), *STEP]


def test_frozen_drop_rate_index_and_ema_cadence():
    # the run has made 3 optimizer steps; EMA every 2: after the 4th (index 3) and not after the 5th (index 4)
    schedule = [[TrainEntry(0)], [TrainEntry(1)]]
    steps = plan(layout(4, 1, 2), schedule, [[0], [0]], torch.ones(4), first_step=3, ema_every=2, drop_frozen=True)
    assert steps == [
        Backward(0, (0,), (0, 1), 1.0, sync=True, measure=True),
        DropFrozen(),
        Clip(),
        SetLearningRate(3),
        StepOptimizer(),
        UpdateEma(),
        Backward(1, (0,), (0, 1), 1.0, sync=True),
        DropFrozen(),
        Clip(),
        SetLearningRate(4),
        StepOptimizer(),
    ]
