"""Progress where stderr is not a terminal (nohup, Slurm, a CI log): a plain line every few seconds, not silence
until the run ends."""

import io

from flowrl.logs import LineProgress, progress


class Clock:
    """A clock the test moves: each iteration takes ``step`` seconds."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        return self.now


def _run(iterations, step, every_s, start=0):
    out, clock = io.StringIO(), Clock(step)
    bar = LineProgress(range(start, iterations), stream=out, every_s=every_s, clock=clock)
    for i in bar:
        clock.now += step  # the iteration's work
        bar.set_postfix(reward=f"{i / 10:.1f}")
    return out.getvalue().splitlines()


def test_a_line_after_the_first_and_the_last_iteration_and_every_few_seconds_between():
    # 3 s an iteration, a line at most every 10 s: after iterations 1 (first), 5 (15 s, 12 s since 3 s),
    # 9 (27 s), and 10 (the last)
    lines = _run(10, step=3.0, every_s=10.0)
    assert lines == [
        "flowrl: iteration 1/10 (10%), 3 s/it, about 27s left; reward=0.0",
        "flowrl: iteration 5/10 (50%), 3 s/it, about 15s left; reward=0.4",
        "flowrl: iteration 9/10 (90%), 3 s/it, about 3s left; reward=0.8",
        "flowrl: iteration 10/10 (100%), 3 s/it; reward=0.9",
    ]


def test_slow_iterations_get_a_line_each():
    lines = _run(3, step=75.0, every_s=10.0)
    assert [line.split(",")[0] for line in lines] == [
        "flowrl: iteration 1/3 (33%)",
        "flowrl: iteration 2/3 (66%)",
        "flowrl: iteration 3/3 (100%)",
    ]
    assert "about 2m30s left" in lines[0]


def test_a_resumed_run_counts_from_its_checkpoint():
    # resumed at iteration 40 of 100, 60 s an iteration: the rate is of this run's iterations only
    lines = _run(100, step=60.0, every_s=3600.0, start=40)
    assert lines[0] == "flowrl: iteration 41/100 (41%), 60 s/it, about 59m00s left; reward=4.0"
    assert lines[-1].startswith("flowrl: iteration 100/100 (100%), 60 s/it;")


def test_a_log_gets_lines_and_the_other_processes_nothing():
    log = io.StringIO()  # not a terminal
    assert isinstance(progress(range(3), disable=False, stream=log), LineProgress)
    assert list(progress(range(3), disable=False, stream=log)) == [0, 1, 2]
    assert log.getvalue().count("flowrl: iteration") == 2  # the first and the last
    quiet = progress(range(3), disable=True, stream=log)
    assert list(quiet) == [0, 1, 2] and log.getvalue().count("flowrl: iteration") == 2


def test_a_terminal_gets_tqdms_bar():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    from tqdm import tqdm

    assert isinstance(progress(range(3), disable=False, stream=Terminal()), tqdm)


def test_a_named_bar_counts_its_own_unit():
    # the benchmarks' drawing: "generate: batch 1/2 (50%) ..." in a log
    out, clock = io.StringIO(), Clock(2.0)
    bar = LineProgress([["a"], ["b"]], stream=out, every_s=10.0, clock=clock, desc="generate", unit="batch")
    for _ in bar:
        clock.now += 2.0
    assert out.getvalue().splitlines() == [
        "generate: batch 1/2 (50%), 2 s/it, about 2s left",
        "generate: batch 2/2 (100%), 2 s/it",
    ]
