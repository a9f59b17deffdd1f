"""Table-driven bad input: every case gives one line on stderr, naming the culprit, and exit code 2.

The table is this file's ``CASES`` plus the model-path, checkpoint and sampling cases of
``bad_inputs_models`` and the reward cases of ``bad_inputs_rewards``; one runner checks them all.
"""

import sys

import bad_inputs_models
import bad_inputs_rewards
import pytest

import flowrl.reward_models.server
from flowrl.cli import main


def _files(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{"text": "b"}\n')
    (tmp_path / "notjson.jsonl").write_text('{"prompt": "a"}\n{oops\n')
    (tmp_path / "badyaml.yaml").write_text("train: [1, 2\n")
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "unknown.yaml").write_text("trainn:\n  iterations: 3\n")
    (tmp_path / "typed.yaml").write_text("train:\n  iterations: many\n")
    (tmp_path / "notckpt").mkdir()
    (tmp_path / "oldrun").mkdir()  # a folder that holds an earlier run
    (tmp_path / "oldrun" / "config.yaml").write_text("seed: 1\n")
    (tmp_path / "oldrun" / "metrics.jsonl").write_text('{"iteration": 0}\n')
    (tmp_path / "oldrun" / ".flowrl-run").write_text("{}\n")  # flowrl's marker: flowrl wrote this run
    (tmp_path / "userdir").mkdir()  # a folder of the user's own, holding a config.yaml flowrl did not write
    (tmp_path / "userdir" / "config.yaml").write_text("mine: 1\n")
    (tmp_path / "marked" / "samples").mkdir(parents=True)  # a flowrl run with a file of the user's beside it
    (tmp_path / "marked" / "metrics.jsonl").write_text('{"iteration": 0}\n')
    (tmp_path / "marked" / ".flowrl-run").write_text("{}\n")
    (tmp_path / "marked" / "samples" / "holiday.png").write_bytes(b"not flowrl's")
    (tmp_path / "floats.yaml").write_text("train:\n  learning_rate: 1e-3\n  iterations: 1e3\n")


V = ["validate", "tiny-cpu"]  # config-level checks: no model is built
CASES = [
    # unknown keys, with suggestions
    (V + ["train.learnig_rate=1e-4"], "did you mean 'train.learning_rate'"),
    (V + ["trian.iterations=3"], "unknown key 'trian'; did you mean 'train'"),
    (V + ["sample.group_sise=4"], "did you mean 'sample.group_size'"),
    (V + ["model.resolutoin=64"], "did you mean 'model.resolution'"),
    (V + ["train.lora.rnak=4"], "did you mean 'train.lora.rank'"),
    (V + ["log.save_evry=3"], "did you mean 'log.save_every'"),
    (V + ["outputdir=x"], "did you mean 'output_dir'"),
    (V + ["method.nme=flow_grpo"], "did you mean 'method.name'"),
    (V + ["data.prompt=x.txt"], "did you mean 'data.prompts'"),
    (V + ["zzz=1"], "unknown key 'zzz'"),
    # wrong types
    (V + ["train.iterations=three"], "train.iterations: expected an integer, got 'three'"),
    (V + ["train.iterations=1.5"], "train.iterations: expected an integer"),
    (V + ["seed=abc"], "seed: expected an integer"),
    (V + ["train.ema=maybe"], "train.ema: expected true or false"),
    (V + ["train.learning_rate=fast"], "train.learning_rate: expected float"),
    (V + ["sample.window_range=3"], "sample.window_range: expected a list"),
    (V + ["train.adam_betas=[0.9, x]"], "train.adam_betas[1]: expected float"),
    (V + ["reward=5"], "reward: expected a mapping"),
    (V + ["reward.jpeg_compressibility=high"], "reward.jpeg_compressibility: expected float"),
    (V + ["train=3"], "train: expected a mapping of settings"),
    (V + ["train.lora=yes"], "train.lora: expected a mapping of settings"),
    (V + ["train.iterations.x=1"], "train.iterations: is not a group of settings"),
    # out-of-range values and choices
    (V + ["train.learning_rate=0"], "train.learning_rate: must be > 0"),
    (V + ["train.clip_range=-1"], "train.clip_range: must be > 0"),
    (V + ["train.beta=-0.1"], "train.beta: must be >= 0"),
    (V + ["train.adv_clip_max=0"], "train.adv_clip_max: must be > 0"),
    (V + ["train.adam_betas=[0.9, 1.5]"], "train.adam_betas: expected two values in [0, 1)"),
    (V + ["train.ema_decay=1.0"], "train.ema_decay: must be in [0, 1)"),
    (V + ["train.mixed_precision=fp64"], "train.mixed_precision: 'fp64' is not one of no, fp16, bf16"),
    (V + ["train.on_reward_error=ignore"], "train.on_reward_error: 'ignore' is not one of stop, skip"),
    (V + ["train.lora.dropout=1.0"], "train.lora.dropout: must be in [0, 1)"),
    (V + ["train.lora.init=xavier"], "train.lora.init: 'xavier' is not one of gaussian, default"),
    (V + ["sample.sde_type=ddim"], "sample.sde_type: 'ddim' is not one of flow_sde, cps, dance_sde"),
    (V + ["sample.group_size=1"], "sample.group_size: GRPO needs at least 2 samples per prompt"),
    (V + ["sample.num_steps=0"], "sample.num_steps: must be > 0"),
    (V + ["sample.timestep_fraction=1.5"], "sample.timestep_fraction: must be in (0, 1]"),
    (V + ["sample.window_size=9"], "sample.window_size: 9 exceeds sample.num_steps=6"),
    (V + ["sample.window_size=2", "sample.window_range=[4, 5]"], "sample.window_range: [4, 5] must be [lo, hi]"),
    (V + ["sample.batch_size=0"], "sample.batch_size: must be > 0"),
    (V + ["model.resolution=33"], "model.resolution: must be a multiple of 16"),
    (V + ["model.prompt_cache=-1"], "model.prompt_cache: must be >= 0, got -1"),
    (V + ["model.dtype=fp8"], "model.dtype: 'fp8' is not one of fp32, fp16, bf16"),
    (V + ["model.tiny_size=huge"], "model.tiny_size: 'huge' is not one of tiny, small, 70m"),
    (V + ["log.keep_last=0"], "log.keep_last: must be > 0"),
    (V + ["log.eval_every=-1"], "log.eval_every: must be >= 0"),
    (V + ["log.stop_if=['reward/mean=1']"], "log.stop_if: 'reward/mean=1' is not 'metric<value' or 'metric>value'"),
    # names: rewards, methods, reward arguments
    (V + ["reward.jpeg_compresibility=1"], "did you mean 'jpeg_compressibility'"),
    (V + ["reward={}"], "reward: no reward configured"),
    (V + ["reward_args.ocr.backend=x"], "reward_args.ocr: no reward named 'ocr' is configured"),
    (V + ["reward_args.jpeg_compressibility.qualty=80"], "reward_args.jpeg_compressibility.qualty"),
    (V + ["eval_reward.nope=1"], "eval_reward.nope: unknown reward 'nope'"),
    (V + ["method.name=flow_grp"], "method.name: unknown method 'flow_grp'; did you mean 'flow_grpo'"),
    # method options (tiny-cpu: 6 steps, groups of 8)
    (V + ["method.name=g2rpo", "method.options.granularities=[0]"],
     "method.options.granularities: [0] must be distinct integers >= 1"),
    (V + ["method.name=g2rpo", "method.options.trained_steps=[0,20]"],
     "method.options.trained_steps: 20 is past the last step of sample.num_steps=6"),
    (V + ["method.name=g2rpo", "method.options.sde_type=ode"], "method.options.sde_type: 'ode' is not one of"),
    (V + ["method.name=g2rpo", "sample.batch_size=6"], "every rollout batch must hold whole groups"),
    (V + ["method.name=g2rpo", "method.options.granularity=[1]"],
     "unknown key 'method.options.granularity'; did you mean 'method.options.granularities'"),
    (V + ["method.name=e_grpo", "method.options.merge_lengths=[2]"],
     "method.options.merge_lengths: 1 lengths for 3 active steps"),
    (V + ["method.name=e_grpo", "method.options.merge_lengths=5"],
     "method.options.merge_lengths: a step merged from 2 over 5 ends past sample.num_steps=6"),
    (V + ["method.name=e_grpo", "method.options.sde_type=cps"], "adaptive merging needs flow_sde"),
    (V + ["method.name=e_grpo", "method.options.entropy=total"], "method.options.entropy: 'total' is not one of"),
    (V + ["method.name=e_grpo", "method.options.trained_steps=[0]"], "e_grpo's branches start at active_steps"),
    (V + ["method.name=e_grpo", "method.options.tau=high"], "method.options.tau: expected float, got 'high'"),
    (V + ["method.name=grpo_guard", "sample.sde_type=cps"], "sample.sde_type: grpo_guard needs a Gaussian step"),
    (V + ["reward.no_such_module:fn=1"], "cannot import module 'no_such_module'"),
    # overrides without '='
    (V + ["iterations"], "override 'iterations': expected key=value"),
    # recipes
    (["validate", "tiny-cpuu"], "unknown recipe 'tiny-cpuu'; did you mean 'tiny-cpu'"),
    (["validate", "{tmp}/badyaml.yaml"], "invalid YAML at line"),
    (["validate", "{tmp}/list.yaml"], "must be a mapping of settings"),
    (["validate", "{tmp}/missing.yaml"], "no such file"),
    (["validate", "{tmp}/unknown.yaml"], "unknown key 'trainn'; did you mean 'train'"),
    (["validate", "{tmp}/typed.yaml"], "train.iterations: expected an integer, got 'many'"),
    # prompt files
    (V + ["data.prompts={tmp}/empty.txt"], "holds no prompts"),
    (V + ["data.prompts={tmp}/missing.txt"], "data.prompts: no such file"),
    (V + ["data.prompts={tmp}/bad.jsonl"], "bad.jsonl:2: each line needs a string field 'prompt'"),
    (V + ["data.prompts={tmp}/notjson.jsonl"], "notjson.jsonl:2: not valid JSON"),
    (V + ["data.prompts=builtin:nope"], "unknown builtin prompt set 'nope'"),
    # CLI arguments and run-time inputs
    (["sample", "tiny-cpu", "--prompt", "a cat", "--num", "0"], "--num: must be at least 1"),
    (["train", "resume={tmp}/notckpt", "train.iterations=1"], "not a complete flowrl checkpoint"),
    (["train", "resume=latest", "output_dir={tmp}/fresh", "train.iterations=1"], "resume=latest: no complete checkpoint"),
    (["train", "model.path={tmp}/no-model", "train.iterations=1"], "model.path: no such file or folder"),
    (["rewards", "test", "no_such_reward"], "unknown reward 'no_such_reward'"),
    # the run folder: never mix two runs, never write where it cannot (all before a model is built)
    (["train", "output_dir={tmp}/oldrun"], "already holds a run (0 checkpoint(s), 1 metrics row(s)): continue it with "
                                           "resume=latest, train into a new folder with run_name=auto"),
    (["train", "output_dir={tmp}/userdir", "overwrite=true"],
     "output_dir '{tmp}/userdir' holds 'config.yaml', which flowrl did not write there (no .flowrl-run marker)"),
    (["train", "output_dir={tmp}/marked", "overwrite=true"],
     "overwrite=true: output_dir '{tmp}/marked' holds 'samples/holiday.png', which flowrl did not write; nothing was "
     "removed"),
    (["train", "output_dir={tmp}/empty.txt"], "output_dir: '{tmp}/empty.txt' is a file, not a folder"),
    (["train", "output_dir={tmp}/empty.txt/run"], "output_dir: '{tmp}/empty.txt' is a file, not a folder"),
    (["train", "output_dir=/proc/flowrl-run"], "output_dir: cannot write to '/proc/flowrl-run'"),
    (["train", "output_dir={tmp}/oldrun", "run_name=a/b"], "run_name: 'a/b' must be a plain folder name"),
    (["train", "output_dir={tmp}/oldrun", "run_name=.."], "run_name: '..' must be a plain folder name"),
    (["train", "output_dir={tmp}/oldrun", "overwrite=true", "resume=latest"], "overwrite=true removes the run"),
    (["train", "output_dir={tmp}/oldrun", "overwrite=maybe"], "overwrite: expected true or false"),
    (["train", "output_dir={tmp}/oldrun", "resume=latest"], "resume=latest: the run in"),
    (V + ["resume_allow_changes=1"], "resume_allow_changes: expected true or false"),
    # a section given a value, then a key inside it; non-finite numbers
    (V + ["train=5", "train.iterations=3"], "train: was set to 5, not a group of settings; cannot also set"),
    (V + ["train.lora=null", "train.lora.rank=4"], "train.lora: was set to None, not a group of settings"),
    (V + ["train.learning_rate=nan"], "train.learning_rate: expected float, got 'nan'"),
    (V + ["train.beta=inf"], "train.beta: expected float, got 'inf'"),
    (V + ["train.clip_range=.nan"], "train.clip_range: expected a finite number"),
    (["validate", "{tmp}/floats.yaml"], "train.iterations: expected an integer, got '1e3'"),
    # rules naming a metric the run does not log
    (V + ["log.stop_if=['reward/meen<0']"], "names 'reward/meen', which this run does not log; did you mean 'reward/mean'"),
    (V + ["log.stop_if=['eval/reward/mean<0']"], "names 'eval/reward/mean', which this run does not log"),
    (V + ["log.stop_if=['monitor/diversity/ingroup<0.1']"], "did you mean 'monitor/diversity/in_group'"),
    (V + ["log.monitors=false", "log.stop_if=['monitor/diversity/in_group<0.1']"], "which this run does not log"),
    # new settings' ranges
    (V + ["train.max_flat_iterations=0"], "train.max_flat_iterations: must be > 0"),
    (V + ["train.reward_report_s=0"], "train.reward_report_s: must be > 0"),
    (V + ["train.reward_timeout_s=-1"], "train.reward_timeout_s: must be >= 0"),
]


ALL = CASES + bad_inputs_models.CASES + bad_inputs_rewards.CASES + bad_inputs_rewards.TRAIN_CASES


def _never_bind(*args, **kwargs):
    raise AssertionError("serve-reward got as far as binding a port: the bad input was not refused before")


@pytest.mark.parametrize("argv, message", ALL, ids=[f"{i:03d}" for i in range(len(ALL))])
def test_bad_input_is_one_line(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(flowrl.reward_models.server, "make_server", _never_bind)  # a missed case must not serve
    monkeypatch.setattr(sys, "path", list(sys.path))  # a reward import may append the working directory
    _files(tmp_path)
    bad_inputs_models.prepare(tmp_path)
    for name, text in bad_inputs_rewards.FILES.items():
        (tmp_path / name).write_text(text)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("flowrl: error: ")
    assert message.replace("{tmp}", str(tmp_path)) in err, err


def test_the_table_is_large_enough():
    assert len(ALL) >= 100
