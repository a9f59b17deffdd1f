"""Every logged value of the golden runs (tests/helpers/_golden.py) equals the value recorded before the trainer was
split into phases and the method seam recomposed: a refactor changes no number.

The values are float32 CPU results, equal bit for bit only under the float kernels they were recorded with: the
instruction set of MKL's and oneDNN's matrix kernels, ATen's kernel set (`torch.backends.cpu.get_cpu_capability()`),
the torch build and the thread count (`machine()`). They are recorded under five kernel sets (AVX-512; an AVX2-only and
an SSE-only CPU's, capped on an AVX-512 one; ATen's AVX2 and default kernels alone), and a machine whose key one of them
has is held to it bit for bit (a real AVX2-only or SSE-only CPU, whose key the capped recordings share, within
tolerance: its MKL may block otherwise than the capped one). Any other machine is held to the nearest recording within `Tolerance`: how far the
recorded kernel sets differ from each other, ~1e-7 relative where rounding is all, more where the JPEG-size reward on
tiny-cpu turns 1e-5 kernel differences into whole bytes and everything after moves. The tolerance admits each recorded
kernel set when fitted to the others, and still rejects runs with a deliberate small change of math (`altered`).
`python tests/helpers/_golden.py` records this machine's kernel sets."""

import json
import os

import pytest

from _golden import GOLDEN, RUNS, Tolerance, drift, label, machine, nearest, run

GOLD = json.loads(GOLDEN.read_text())
RECORDINGS = GOLD["recordings"]


TOLERANCE = Tolerance(RECORDINGS)


def imitated_elsewhere(rec: dict) -> bool:
    """A recording of another CPU's matrix kernels, imitated on this one by capping MKL and oneDNN
    (``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``), that this process does not imitate the same way: a real CPU
    of that kind shares its key but may block its products otherwise, so it is held within tolerance, not bit for bit."""
    caps = {k: v for k, v in rec.get("environment", {}).items() if k != "ATEN_CPU_CAPABILITY"}
    return any(os.environ.get(k) != v for k, v in caps.items())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_logged_value_equals_the_recorded_one(tmp_path, one_thread, name):
    here = machine()
    rec, exact = nearest(RECORDINGS, here)
    exact = exact and not imitated_elsewhere(rec)
    want, got = rec["runs"][name], run(name, tmp_path)
    assert len(got) == len(want)
    for i, (w, g) in enumerate(zip(want, got)):
        assert sorted(g) == sorted(w), f"{name} row {i}: logged names differ"
    if exact:
        for i, (w, g) in enumerate(zip(want, got)):
            differ = {k: (w[k], g[k]) for k in w if drift(w[k], g[k])}
            assert not differ, f"{name} row {i}, bit for bit under {label(here)!r}: {differ}"
    else:
        far = TOLERANCE.far(name, want, got)
        assert not far, (
            f"{name}: no recording was made on this machine's key {label(here)!r}, so it is held within tolerance "
            f"of the nearest, {label(rec['key'])!r}; further: {far}"
        )


def test_the_recordings_are_of_the_same_runs():
    for rec in RECORDINGS:
        assert sorted(rec["runs"]) == sorted(RUNS), label(rec["key"])
        for name, rows in rec["runs"].items():
            first = RECORDINGS[0]["runs"][name]
            assert [sorted(r) for r in rows] == [sorted(r) for r in first], f"{label(rec['key'])}: {name}"


@pytest.mark.parametrize("left_out", range(len(RECORDINGS)))
def test_the_tolerance_admits_a_kernel_set_it_was_not_fitted_to(left_out):
    """Each recording is within the tolerance fitted to the others of the nearest of them: what a machine that has no
    recording of its own meets."""
    out, rest = RECORDINGS[left_out], RECORDINGS[:left_out] + RECORDINGS[left_out + 1 :]
    rec, exact = nearest(rest, out["key"])
    tolerance = Tolerance(rest)
    assert not exact
    far = {name: f for name in RUNS if (f := tolerance.far(name, rec["runs"][name], out["runs"][name]))}
    assert not far, f"{label(out['key'])} against {label(rec['key'])}: {far}"


@pytest.mark.parametrize("change", sorted(GOLD["altered"]))
def test_the_tolerance_catches_a_change_of_math(change):
    """A run with a small deliberate change (another PPO clip range, KL weight, learning rate), made under a recorded
    key, is further from that recording than the tolerance: what a machine without a recording of its own still
    catches."""
    altered = GOLD["altered"][change]
    rec, exact = nearest(RECORDINGS, altered["key"])
    assert exact
    assert TOLERANCE.far(altered["run"], rec["runs"][altered["run"]], altered["rows"]), change
