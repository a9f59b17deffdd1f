"""``flowrl report``: the page of real tiny runs, checked as HTML and, where a chromium binary exists,
rendered for real by headless chromium (its DOM after the scripts ran, and its console)."""

import functools
import json
import math
import re
import shutil
import subprocess

import pytest
import torch

from flowrl.cli import main
from flowrl.config import ConfigError
from flowrl.report import load_run, sections, series_of, write_report
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer

TRAIN = [
    "sample.num_steps=2",
    "sample.group_size=4",
    "sample.prompts_per_iteration=1",
    "sample.batch_size=4",
    "log.save_every=1000",
    "log.num_sample_images=4",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real tiny runs: A evaluates and saves a grid every iteration, B (another seed and learning rate)
    neither evaluates nor logs monitors, so its charts lack those metrics."""
    root = tmp_path_factory.mktemp("report")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = root / "run_a", root / "run_b"
        Trainer(
            resolve_config(
                "tiny-cpu",
                [
                    f"output_dir={a}",
                    *TRAIN,
                    "train.iterations=3",
                    "log.sample_every=1",
                    "log.eval_every=2",
                    "log.eval_num_prompts=2",
                    "sample.eval_num_steps=2",
                ],
            )
        ).train()
        Trainer(
            resolve_config(
                "tiny-cpu",
                [
                    f"output_dir={b}",
                    *TRAIN,
                    "train.iterations=2",
                    "seed=3",
                    "train.learning_rate=3e-2",
                    "log.monitors=false",
                    "log.sample_every=2",
                ],
            )
        ).train()
    finally:
        torch.set_num_threads(threads)
    return a, b


def _payload(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="flowrl-data">(.*?)</script>', page, re.DOTALL)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def _self_contained(page: str) -> None:
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert not refs, f"external references: {refs}"
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//|@import", page, re.IGNORECASE)
    assert "<link" not in page.lower()
    assert not re.search(r"<script[^>]+src=", page, re.IGNORECASE)


@functools.cache
def _chromium() -> tuple[str | None, str]:
    """A chromium binary that starts (Ubuntu's chromium-browser can be a shim asking for the snap), or why not."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return None, "no chromium binary on PATH (`apt-get install chromium`; .ci/run installs it)"
    try:
        probe = subprocess.run([exe, "--version"], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{exe} does not start ({exc})"
    if probe.returncode != 0 or "chrom" not in probe.stdout.lower():
        return None, f"{exe} --version failed: {(probe.stdout + probe.stderr).strip()[:200]!r}"
    return exe, ""


def _render(page, tmp_path):
    """Headless chromium: (the <body> tag after the scripts ran, the page's console lines)."""
    exe, why = _chromium()
    if exe is None:
        pytest.skip(f"{why}: the page is not rendered in a browser")
    proc = subprocess.run(
        [
            exe,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--no-first-run",
            "--dump-dom",
            page.as_uri(),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body, f"chromium dumped no page: {proc.stdout[:500]!r} {proc.stderr[-1000:]}"
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return body.group(0), console


def _health(body: str) -> dict:
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body))


def _check_rendered(page, tmp_path, min_charts):
    body, console = _render(page, tmp_path)
    health = _health(body)
    assert health.get("rendered") == "1", body
    assert health.get("errors") == "0", health.get("error-log")
    assert int(health["charts"]) >= min_charts, health
    # the page's own line is the only console message: no warnings, errors or uncaught exceptions
    assert len(console) == 1 and f'"flowrl-report: rendered {health["charts"]} charts, 0 errors"' in console[0], console
    return int(health["charts"])


# ------------------------------------------------------------------------------------------ the page
def test_one_run_page_is_self_contained_and_holds_the_metrics(runs):
    a, _ = runs
    out = write_report([a])
    assert out == a / "report.html"
    page = out.read_text()
    _self_contained(page)
    data = _payload(page)
    series = data["runs"][0]["series"]
    rows = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    assert [p[0] for p in series["reward/mean"]] == [0, 1, 2]
    assert all(math.isclose(p[1], r["reward/mean"]) for p, r in zip(series["reward/mean"], rows))
    for key in (
        "reward/std",
        "eval/reward/mean",
        "policy/clip_frac",
        "policy/approx_kl",
        "policy/ratio_mean",
        "policy/loss",
        "policy/kl",
        "monitor/diversity/in_group",
        "timing_s/rollout",
        "cost/nfe_total",
    ):
        assert key in series, key
    assert [p[0] for p in series["eval/reward/mean"]] == [0, 2, 3]  # before 0 and 2, and the final evaluation
    charts = {c["key"]: c for s in data["sections"] for c in s["charts"]}
    assert charts["reward/mean"]["band"] == "reward/std" and charts["eval/reward/mean"]["band"] == "eval/reward/std"
    # the single reward component equals the total: not drawn twice
    assert "reward/jpeg_compressibility/mean" not in charts
    ids = [s["id"] for s in data["sections"]]
    assert ids[:3] == ["reward", "eval", "policy"] and "time" in ids and "mon-monitor-diversity" in ids
    # sample grids as data URIs: rollouts after 1, 2, 3 iterations, evaluations after 0, 2, 3
    assert page.count('src="data:image/png;base64,') == len(list((a / "samples").glob("*.png"))) == 6
    assert "Time and cost" in page and "s / iteration" in page
    assert "config.yaml</summary>" in page and "jpeg_compressibility" in page


def test_two_runs_overlay_and_absent_metrics_are_skipped(runs, tmp_path):
    a, b = runs
    out = write_report([a, b], tmp_path / "both.html")
    page = out.read_text()
    _self_contained(page)
    data = _payload(page)
    assert [r["name"] for r in data["runs"]] == ["run_a", "run_b"]
    assert data["runs"][0]["color"] != data["runs"][1]["color"]
    sa, sb = (r["series"] for r in data["runs"])
    assert "reward/mean" in sa and "reward/mean" in sb
    assert "eval/reward/mean" in sa and "eval/reward/mean" not in sb
    assert not any(k.startswith("monitor/diversity") for k in sb)
    assert "Keys that differ" in page and "train.learning_rate" in page
    assert sum(1 for r in data["runs"] if r["name"] in page) == 2


def test_the_page_renders_in_headless_chromium(runs, tmp_path):
    a, b = runs
    one = write_report([a], tmp_path / "one.html")
    n_one = _check_rendered(one, tmp_path, min_charts=20)
    both = write_report([a, b], tmp_path / "both.html")
    n_both = _check_rendered(both, tmp_path, min_charts=20)
    data = _payload(both.read_text())
    expected = sum(len(s["charts"]) for s in data["sections"]) + 1  # every chart has data, plus the phase bars
    assert n_both == expected and n_one <= n_both


def test_a_damaged_or_running_run_still_renders(tmp_path):
    """A run folder written by hand: NaN and inf values, a half-written last line, an unknown prefix,
    no config and no samples; the page says what it left out and draws the rest."""
    run = tmp_path / "partial"
    run.mkdir()
    rows = [
        {
            "iteration": i,
            "reward/mean": 0.1 * i,
            "reward/std": 0.05,
            "policy/loss": float("nan") if i == 1 else 1.0,
            "custom/thing": float("inf") if i == 2 else i,
            "note": "text",
        }
        for i in range(4)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"iteration": 4, "rew')
    loaded = load_run(run)
    assert len(loaded.rows) == 4 and loaded.bad_lines == 1 and loaded.config is None
    series = series_of(loaded.rows)
    assert series["policy/loss"][1] == [1, None] and "note" not in series
    assert any(c["key"] == "custom/thing" for s in sections([series]) for c in s["charts"])
    out = write_report([run])
    page = out.read_text()
    assert "1 unreadable metrics line(s) left out" in page and "no config.yaml" in page
    _self_contained(page)
    _check_rendered(out, tmp_path, min_charts=3)


def test_grids_are_spread_and_large_ones_shrunk(tmp_path):
    from PIL import Image

    run = tmp_path / "grids"
    (run / "samples").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "reward/mean": 1.0}) + "\n")
    for n in (1, 2, 3, 4, 5):
        Image.new("RGB", (34, 34), (10 * n, 0, 0)).save(run / "samples" / f"iter-{n:06d}.png")
    noise = torch.randint(0, 256, (900, 900, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    Image.fromarray(noise.numpy()).save(run / "samples" / "eval-000005.png")
    assert (run / "samples" / "eval-000005.png").stat().st_size > 1_000_000
    page = write_report([run], max_grids=3).read_text()
    assert "(3 of 5 shown)" in page
    captions = re.findall(r"<figcaption>(\d+)</figcaption>", page)
    assert captions == ["1", "3", "5", "5"]  # the rollouts after 1, 3, 5; the evaluation after 5
    assert page.count("data:image/png;base64,") == 3 and page.count("data:image/jpeg;base64,") == 1
    assert len(page) < (run / "samples" / "eval-000005.png").stat().st_size / 2


# ------------------------------------------------------------------------------------------ CLI
def test_cli_writes_the_page(runs, tmp_path, capsys):
    a, b = runs
    assert main(["report", str(a), str(b), "-o", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").is_file()
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'report.html'}")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "report: no run folder at '{p}'"),
        (lambda p: p.write_text("x"), "report: '{p}' is a file, not a run folder"),
        (lambda p: p.mkdir(), "report: '{p}' holds no run (no metrics.jsonl or config.yaml)"),
    ],
)
def test_a_bad_run_folder_is_one_line_naming_it(tmp_path, capsys, make, message):
    bad = tmp_path / "not-a-run"
    make(bad)
    with pytest.raises(ConfigError, match=re.escape(message.format(p=bad))):
        write_report([bad])
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"flowrl: error: {message.format(p=bad)}\n"


def test_a_bad_run_among_good_ones_is_named(runs, tmp_path, capsys):
    a, _ = runs
    assert main(["report", str(a), str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")]) == 2
    assert str(tmp_path / "missing") in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
