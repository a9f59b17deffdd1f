"""Experiment trackers (``log.trackers``): a real TensorBoard run read back from its event files, resume
appending to the same folder at the right steps, an interrupted run's events on disk, and the one-line errors."""

from pathlib import Path

import pytest

from flowrl import trackers
from flowrl.config import ConfigError
from flowrl.logs import read_metrics
from flowrl.preflight import preflight
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer

TINY = [
    "sample.num_steps=2",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "log.sample_every=2",
    "log.num_sample_images=4",
    "log.trackers=[tensorboard]",
]


def _cfg(run, *extra):
    return resolve_config("tiny-cpu", [f"output_dir={run}", *TINY, *extra])


def _events(folder: Path):
    """Scalars {tag: {step: value}}, image steps {tag: [steps]} and hparams {name: value} under ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    scalars, images, hparams = {}, {}, {}
    for sub in sorted({p.parent for p in folder.rglob("events.out.tfevents.*")}):
        ea = EventAccumulator(str(sub), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
        ea.Reload()
        tags = ea.Tags()
        for tag in tags["scalars"]:
            steps = [e.step for e in ea.Scalars(tag)]
            assert len(steps) == len(set(steps)), f"{tag}: a step logged twice {steps}"
            scalars.setdefault(tag, {}).update({e.step: e.value for e in ea.Scalars(tag)})
        for tag in tags["images"]:
            images.setdefault(tag, []).extend(e.step for e in ea.Images(tag))
        try:
            contents = ea.PluginTagToContent("hparams").values()
        except KeyError:  # no hyperparameters in this folder
            contents = ()
        for content in contents:
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            for k, v in data.session_start_info.hparams.items():
                hparams[k] = v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
    return scalars, images, hparams


def _same(logged: dict[int, float], rows: list[dict], key: str) -> None:
    expected = {r["iteration"]: r[key] for r in rows if key in r}
    assert sorted(logged) == sorted(expected), key
    for step, value in expected.items():
        assert logged[step] == pytest.approx(value, rel=1e-6, abs=1e-7, nan_ok=True), (
            key,
            step,
        )  # TensorBoard keeps float32


def test_tensorboard_run_logs_metrics_images_and_hparams_and_resume_appends(tmp_path, one_thread):
    from accelerate import Accelerator

    run = tmp_path / "tb-run"
    trainer = Trainer(_cfg(run, "train.iterations=3", "log.save_every=2"))
    trainer.train()
    assert trainer.acc.trackers == []  # finished and let go at the end of train()
    folder = run / "trackers" / "tb-run"  # the project defaults to the run folder's name
    assert folder.is_dir()
    rows = read_metrics(run / "metrics.jsonl")
    scalars, images, hparams = _events(folder)
    numeric = {k for r in rows for k, v in r.items() if k != "iteration" and isinstance(v, (int, float))}
    assert {"reward/mean", "policy/loss", "adv/kept_frac", "timing_s/rollout"} <= numeric
    assert numeric <= set(scalars), sorted(numeric - set(scalars))  # every metric of the rows
    for key in numeric:
        _same(scalars[key], rows, key)  # at every iteration, equal to metrics.jsonl's value
    assert sorted(images["samples"]) == [0, 1, 2]  # samples/iter-000001, -000002 (every 2) and the last, -000003
    assert hparams["run_name"] == "tb-run"
    assert hparams["train.learning_rate"] == pytest.approx(trainer.cfg.train.learning_rate)
    assert hparams["sample.group_size"] == 4
    assert hparams["log.trackers"] == "['tensorboard']"  # a list, as text

    # resume from iteration 2 (the stopped run had logged step 2 too) on a caller's Accelerator, to 4 iterations
    acc = Accelerator()
    cfg = _cfg(run, "train.iterations=4", "log.save_every=2", f"resume={run}/checkpoints/iter-000002")
    resumed = Trainer(cfg, accelerator=acc)
    assert resumed.start_iteration == 2
    resumed.train()
    assert acc.trackers == []
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    scalars, images, _ = _events(folder)
    _same(scalars["reward/mean"], rows, "reward/mean")  # each step once: the old step 2 is purged
    _same(scalars["policy/kl"], rows, "policy/kl")
    assert 3 in images["samples"] and 0 in images["samples"]


def test_interrupted_run_has_its_events_on_disk_and_trackers_closed(tmp_path, one_thread, monkeypatch):
    from flowrl.interrupts import Interrupted

    run = tmp_path / "stopped"
    trainer = Trainer(_cfg(run, "train.iterations=3", "log.save_every=1000", "log.tracker_project=proj"))
    step = trainer.step
    writers = []

    def step_then_stop(iteration):
        writers.extend(t.writer for t in trainer.tracking.trackers)
        if iteration == 1:
            raise KeyboardInterrupt("SIGINT")
        return step(iteration)

    monkeypatch.setattr(trainer, "step", step_then_stop)
    with pytest.raises(Interrupted, match="1 completed iterations are saved"):
        trainer.train()
    assert trainer.acc.trackers == [] and not trainer.tracking
    assert writers and all(w.all_writers is None for w in writers)  # closed
    scalars, images, _ = _events(run / "trackers" / "proj")
    _same(scalars["reward/mean"], read_metrics(run / "metrics.jsonl"), "reward/mean")
    assert images["samples"] == [0]


def test_tracker_names_are_checked_in_one_line(tmp_path):
    with pytest.raises(
        ConfigError, match=r"^log.trackers: unknown tracker 'tensorbord'; did you mean 'tensorboard'\?$"
    ):
        _cfg(tmp_path, "log.trackers=[tensorbord]")
    with pytest.raises(ConfigError, match=r"^log.trackers: unknown tracker 'Wandb'; did you mean 'wandb'\?$"):
        _cfg(tmp_path, "log.trackers=[Wandb]")
    with pytest.raises(ConfigError, match=r"^log.trackers: unknown tracker 'neptune'; known: tensorboard, wandb"):
        _cfg(tmp_path, "log.trackers=[neptune]")
    with pytest.raises(ConfigError, match="listed twice"):
        _cfg(tmp_path, "log.trackers=[wandb, wandb]")
    with pytest.raises(ConfigError, match="log.tracker_project: 'a/b' must be a plain name"):
        _cfg(tmp_path, "log.tracker_project=a/b")
    assert resolve_config("tiny-cpu", [f"output_dir={tmp_path}"]).log.trackers == []  # off by default


def test_known_names_are_accelerate_trackers():
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    from flowrl.config import TRACKER_NAMES

    assert set(TRACKER_NAMES) <= set(LOGGER_TYPE_TO_CLASS) | {"trackio"}
    assert set(TRACKER_NAMES) == set(trackers.PACKAGES)


def test_missing_tracker_package_is_one_line_before_weights_load(tmp_path, monkeypatch):
    import flowrl.trainer as trainer_module

    monkeypatch.setattr(trackers, "_installed", lambda module: module != "wandb")

    def no_model(*args, **kwargs):
        raise AssertionError("the model was built before the tracker check")

    monkeypatch.setattr(trainer_module, "adapter_class", no_model)
    cfg = _cfg(tmp_path / "run", "log.trackers=[tensorboard, wandb]")
    message = r"^log.trackers: 'wandb' needs the wandb package: pip install wandb$"
    with pytest.raises(ConfigError, match=message):
        preflight(cfg)
    with pytest.raises(ConfigError, match=message):
        Trainer(cfg)
    monkeypatch.setattr(trackers, "_installed", lambda module: module != "comet_ml")
    with pytest.raises(ConfigError, match=r"'comet_ml' needs the comet-ml package: pip install comet-ml$"):
        preflight(_cfg(tmp_path / "run", "log.trackers=[comet_ml]"))


def test_hyperparameters_are_flat_redacted_and_plain(tmp_path):
    cfg = _cfg(tmp_path, "log.trackers=[tensorboard]")
    cfg.reward_args = {"jpeg_compressibility": {"api_key": "sk-secret", "quality": 80}}
    hp = trackers.hyperparameters(cfg, "name")
    assert hp["reward_args.jpeg_compressibility.api_key"] == "<redacted>"
    assert "sk-secret" not in str(hp)
    assert hp["reward_args.jpeg_compressibility.quality"] == 80
    assert hp["run_name"] == "name"
    assert all(isinstance(v, (int, float, str, bool)) for v in hp.values())
    assert trackers.numbers({"iteration": 3, "a": 1.0, "b": "x", "c": True, "d": 2}) == {"a": 1.0, "d": 2}
