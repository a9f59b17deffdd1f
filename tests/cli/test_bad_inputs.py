"""Table-driven bad input: every case gives one line on stderr, naming the culprit, and exit code 2.

The table is this file's ``CASES`` plus the model-path, checkpoint and sampling cases of
``bad_inputs_models`` and the reward cases of ``bad_inputs_rewards``; one runner checks them all. A full disk and a
Ctrl-C (exit 130, the convention for SIGINT) are made by their own tests below the runner.
"""

import logging
import sys

import pytest

import bad_inputs_models
import bad_inputs_rewards
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
    (tmp_path / "latin1.txt").write_bytes("a cat\ncaf\u00e9 au lait\n".encode("latin-1"))  # not UTF-8
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")  # a PNG under a .txt name
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "comments.yaml").write_text("# train:\n#   iterations: 3\n")
    (tmp_path / "twice.yaml").write_text("train:\n  iterations: 3\nsample:\n  group_size: 4\ntrain:\n  beta: 0\n")
    (tmp_path / "twice_key.yaml").write_text("train:\n  iterations: 3\n  learning_rate: 1e-4\n  iterations: 5\n")
    (tmp_path / "latin1.yaml").write_bytes("# r\u00e9glages\ntrain:\n  iterations: 3\n".encode("latin-1"))
    (tmp_path / "scored").mkdir()  # an earlier GenEval scoring's output folder
    for name in ("results.jsonl", "summary.json", "summary.md"):
        (tmp_path / "scored" / name).write_text("{}\n")
    (tmp_path / "toyout").mkdir()  # an earlier toy evaluation's output folder
    (tmp_path / "toyout" / "toy_eval.json").write_text("{}\n")
    (tmp_path / "toyout" / "toy_av_eval.json").write_text("{}\n")
    (tmp_path / "cache" / "toy" / "default").mkdir(parents=True)  # a toy model made under FLOWRL_CACHE
    # what a newcomer (often from flow_grpo) writes
    (tmp_path / "blank.jsonl").write_text('{"prompt": "a cat"}\n{"prompt": ""}\n')
    (tmp_path / "headerless.csv").write_text("a cat,1\na dog,2\n")
    (tmp_path / "blank.csv").write_text("prompt,seed\na cat,1\n  ,2\n")
    (tmp_path / "ragged.csv").write_text("prompt,seed\na cat,1,extra\n")
    (tmp_path / "recipes.yaml").mkdir()  # a folder named like a recipe file
    (tmp_path / "flow_grpo.yaml").write_text("pretrained:\n  model: stabilityai/stable-diffusion-3.5-medium\n")
    (tmp_path / "edit" / "photo.png").mkdir(parents=True)  # a folder where a source image should be
    (tmp_path / "edit" / "train.jsonl").write_text('{"prompt": "make it red", "image": "photo.png"}\n')


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
    (V + ["method.options.window_range=3"], "method.options.window_range: expected a list"),
    (V + ["train.adam_betas=[0.9, x]"], "train.adam_betas[1]: expected float"),
    (V + ["reward=5"], "reward: expected a mapping"),
    (V + ["reward.jpeg_compressibility=high"], "reward.jpeg_compressibility: expected float"),
    (V + ["train=3"], "train: expected a mapping of settings"),
    (V + ["train.lora=yes"], "train.lora: expected a mapping of settings"),
    (V + ["train.iterations.x=1"], "train.iterations: is not a group of settings"),
    # keys that moved before the first release: one line naming the new key
    (V + ["train.beta=0.01"], "train.beta is method.options.beta now"),
    (V + ["sample.noise_level=0.9"], "sample.noise_level is method.options.noise_level now"),
    (V + ["train.ratio_norm=true"], "train.ratio_norm is method.loss=ratio_norm now"),
    (V + ["train.batch_renorm=true"], "train.batch_renorm is method.credit_norm=gdpo now"),
    # out-of-range values and choices
    (V + ["train.learning_rate=0"], "train.learning_rate: must be > 0"),
    (V + ["method.options.clip_range=-1"], "method.options.clip_range: must be > 0"),
    (V + ["method.options.beta=-0.1"], "method.options.beta: must be >= 0"),
    (V + ["method.options.adv_clip_max=0"], "method.options.adv_clip_max: must be > 0"),
    (V + ["train.adam_betas=[0.9, 1.5]"], "train.adam_betas: expected two values in [0, 1)"),
    (V + ["train.ema_decay=1.0"], "train.ema_decay: must be in [0, 1)"),
    (V + ["train.mixed_precision=fp64"], "train.mixed_precision: 'fp64' is not one of no, fp16, bf16"),
    (V + ["train.on_reward_error=ignore"], "train.on_reward_error: 'ignore' is not one of stop, skip"),
    (V + ["train.lora.dropout=1.0"], "train.lora.dropout: must be in [0, 1)"),
    (V + ["train.lora.init=xavier"], "train.lora.init: 'xavier' is not one of gaussian, default"),
    (V + ["method.options.sde_type=ddim"], "method.options.sde_type: 'ddim' is not one of flow_sde, cps, dance_sde"),
    (
        V + ["sample.group_size=1"],
        "sample.group_size: method flow_grpo compares the samples of a prompt, so it needs at least 2",
    ),
    (V + ["sample.num_steps=0"], "sample.num_steps: must be > 0"),
    (V + ["method.options.timestep_fraction=1.5"], "method.options.timestep_fraction: must be in (0, 1]"),
    (V + ["method.options.window_size=9"], "method.options.window_size: 9 exceeds sample.num_steps=6"),
    (
        V + ["method.options.window_size=2", "method.options.window_range=[4, 5]"],
        "method.options.window_range: [4, 5] must be [lo, hi]",
    ),
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
    (
        V + ["method.name=g2rpo", "method.options.granularities=[0]"],
        "method.options.granularities: [0] must be distinct integers >= 1",
    ),
    (
        V + ["method.name=g2rpo", "method.options.trained_steps=[0,20]"],
        "method.options.trained_steps: 20 is past the last step of sample.num_steps=6",
    ),
    (V + ["method.name=g2rpo", "method.options.sde_type=ode"], "method.options.sde_type: 'ode' is not one of"),
    (V + ["method.name=g2rpo", "sample.batch_size=6"], "every rollout batch must hold whole groups"),
    (
        V + ["method.name=g2rpo", "method.options.granularity=[1]"],
        "unknown key 'method.options.granularity'; did you mean 'method.options.granularities'",
    ),
    (
        V + ["method.name=e_grpo", "method.options.merge_lengths=[2]"],
        "method.options.merge_lengths: 1 lengths for 3 active steps",
    ),
    (
        V + ["method.name=e_grpo", "method.options.merge_lengths=5"],
        "method.options.merge_lengths: a step merged from 2 over 5 ends past sample.num_steps=6",
    ),
    (V + ["method.name=e_grpo", "method.options.sde_type=cps"], "adaptive merging needs flow_sde"),
    (V + ["method.name=e_grpo", "method.options.entropy=total"], "method.options.entropy: 'total' is not one of"),
    (V + ["method.name=e_grpo", "method.options.trained_steps=[0]"], "e_grpo's branches start at active_steps"),
    (V + ["method.name=e_grpo", "method.options.tau=high"], "method.options.tau: expected float, got 'high'"),
    (
        V + ["method.name=grpo_guard", "method.options.sde_type=cps"],
        "method.options.sde_type: grpo_guard needs a Gaussian step",
    ),
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
    (
        ["train", "resume=latest", "output_dir={tmp}/fresh", "train.iterations=1"],
        "resume=latest: no complete checkpoint",
    ),
    (["train", "model.path={tmp}/no-model", "train.iterations=1"], "model.path: no such file or folder"),
    (["rewards", "test", "no_such_reward"], "unknown reward 'no_such_reward'"),
    # the run folder: never mix two runs, never write where it cannot (all before a model is built)
    (
        ["train", "output_dir={tmp}/oldrun"],
        "already holds a run (0 checkpoint(s), 1 metrics row(s)): continue it with "
        "resume=latest, train into a new folder with run_name=auto",
    ),
    (
        ["train", "output_dir={tmp}/userdir", "overwrite=true"],
        "output_dir '{tmp}/userdir' holds 'config.yaml', which flowrl did not write there (no .flowrl-run marker)",
    ),
    (
        ["train", "output_dir={tmp}/marked", "overwrite=true"],
        "overwrite=true: output_dir '{tmp}/marked' holds 'samples/holiday.png', which flowrl did not write; nothing was "
        "removed",
    ),
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
    (V + ["method.options.beta=inf"], "method.options.beta: expected float, got 'inf'"),
    (V + ["method.options.clip_range=.nan"], "method.options.clip_range: expected a finite number"),
    (["validate", "{tmp}/floats.yaml"], "train.iterations: expected an integer, got '1e3'"),
    # rules naming a metric the run does not log
    (
        V + ["log.stop_if=['reward/meen<0']"],
        "names 'reward/meen', which this run does not log; did you mean 'reward/mean'",
    ),
    (V + ["log.stop_if=['eval/reward/mean<0']"], "names 'eval/reward/mean', which this run does not log"),
    (V + ["log.stop_if=['monitor/diversity/ingroup<0.1']"], "did you mean 'monitor/diversity/in_group'"),
    (V + ["log.monitors=false", "log.stop_if=['monitor/diversity/in_group<0.1']"], "which this run does not log"),
    # files a command would write over: refused, naming the file, unless --force
    (
        ["eval", "geneval", "--write-prompts", "{tmp}/empty.txt"],
        "--write-prompts: '{tmp}/empty.txt' already exists; pass --force to replace it, or name a new file",
    ),
    (
        ["eval", "geneval", "--write-prompts", "{tmp}/new.jsonl", "--prompts-txt", "{tmp}/empty.txt"],
        "--prompts-txt: '{tmp}/empty.txt' already exists; pass --force",
    ),
    (["eval", "geneval", "--write-prompts", "{tmp}/notckpt"], "--write-prompts: '{tmp}/notckpt' is a folder"),
    (
        ["eval", "geneval", "--score", "{tmp}/notckpt", "--out", "{tmp}/scored"],
        "--out: '{tmp}/scored/results.jsonl' already exists; pass --force",
    ),
    (
        ["eval", "geneval", "--summary", "{tmp}/scored", "--out", "{tmp}/scored"],
        "--out: '{tmp}/scored/summary.json' already exists; pass --force",
    ),
    (
        ["eval", "geneval", "--generate", "tiny-cpu", "--out", "{tmp}/g", "--force"],
        "--force applies to --write-prompts",
    ),
    (
        ["eval", "toy", "--run", "{tmp}/oldrun", "--out", "{tmp}/toyout"],
        "--out: '{tmp}/toyout/toy_eval.json' already exists; pass --force",
    ),
    (
        ["eval", "toy-av", "--run", "{tmp}/oldrun", "--out", "{tmp}/toyout"],
        "--out: '{tmp}/toyout/toy_av_eval.json' already exists; pass --force",
    ),
    (["eval", "toy", "--run", "{tmp}/oldrun", "--force"], "--force applies to --pretrain (train the cached model"),
    (
        ["report", "{tmp}/oldrun", "-o", "{tmp}/empty.txt"],
        "report: -o: '{tmp}/empty.txt' already exists; pass --force to replace it",
    ),
    # an image reward on a video recipe: the reward the user chose is named, not the recipe's reward_args.video
    (
        ["validate", "tiny-wan", "reward={jpeg_compressibility: 1.0}"],
        (
            "reward 'jpeg_compressibility' scores image media, but model.pipeline=wan makes video; to score each frame "
            "with it, use the video reward instead: reward.video=<weight> with "
            "reward_args.video.reward=jpeg_compressibility"
        ),
    ),
    (
        ["validate", "tiny-wan", "eval_reward={aesthetic: 1.0}"],
        "reward 'aesthetic' scores image media, but model.pipeline=wan makes video; to score each frame with it",
    ),
    (
        ["validate", "tiny-cpu", "reward={band_energy: 1.0}", "reward_args={band_energy: {low_hz: 10, high_hz: 50}}"],
        "reward 'band_energy' scores audio media, but model.pipeline=sd3 makes image; choose a reward that scores image",
    ),
    (
        ["validate", "sd35m-ocr", "reward={pickscore: 1.0}", "reward_args.ocr.backend=x"],
        "reward_args.ocr: no reward named 'ocr' is configured (reward: pickscore); add reward.ocr=<weight>",
    ),
    # prompt files that are not UTF-8 text
    (
        V + ["data.prompts={tmp}/latin1.txt"],
        "data.prompts: '{tmp}/latin1.txt' is not UTF-8 text (byte 0xe9 at offset 9, line 2); save it as UTF-8",
    ),
    (
        V + ["data.prompts={tmp}/image.txt"],
        "data.prompts: '{tmp}/image.txt' is a binary file, not prompt text (a NUL byte at offset 8)",
    ),
    (V + ["data.eval_prompts={tmp}/latin1.txt"], "data.eval_prompts: '{tmp}/latin1.txt' is not UTF-8 text"),
    # a toy recipe before its base model is made: the command that makes it
    (
        ["ENV:HOME={tmp}/home", "ENV:FLOWRL_CACHE=", "validate", "toy-flow-grpo"],
        (
            "model.path: no such file or folder '~/.cache/flowrl/toy/default'; the toy GenEval base model is not made yet: "
            "create it with `flowrl eval toy --pretrain`"
        ),
    ),
    (
        ["ENV:HOME={tmp}/home", "ENV:FLOWRL_CACHE=", "train", "toy-av-flow-grpo", "output_dir={tmp}/r"],
        "the toy audio-video base model is not made yet: create it with `flowrl eval toy-av --pretrain`",
    ),
    (
        ["ENV:HOME={tmp}/home", "ENV:FLOWRL_CACHE=", "sample", "toy-flow-grpo", "--prompt", "a red circle"],
        "the toy GenEval base model is not made yet: create it with `flowrl eval toy --pretrain`",
    ),
    (
        [
            "ENV:HOME={tmp}/home",
            "ENV:FLOWRL_CACHE=",
            "eval",
            "geneval",
            "--generate",
            "toy-flow-grpo",
            "--out",
            "{tmp}/gen",
        ],
        "the toy GenEval base model is not made yet: create it with `flowrl eval toy --pretrain`",
    ),
    (
        ["ENV:HOME={tmp}/home", "ENV:FLOWRL_CACHE={tmp}/cache", "validate", "toy-flow-grpo"],
        "the toy GenEval base model is in $FLOWRL_CACHE: set model.path={tmp}/cache/toy/default",
    ),
    # recipe files that resolve to something the user did not write
    (
        ["validate", "{tmp}/empty.yaml"],
        "recipe '{tmp}/empty.yaml': the file holds no settings (empty or comments only)",
    ),
    (["validate", "{tmp}/comments.yaml"], "recipe '{tmp}/comments.yaml': the file holds no settings"),
    (
        ["validate", "{tmp}/twice.yaml"],
        "recipe '{tmp}/twice.yaml': 'train' is given twice (lines 1 and 5): YAML keeps only the last",
    ),
    (
        ["validate", "{tmp}/twice_key.yaml"],
        "recipe '{tmp}/twice_key.yaml': 'train.iterations' is given twice (lines 2 and 4)",
    ),
    (["validate", "{tmp}/latin1.yaml"], "recipe '{tmp}/latin1.yaml': not UTF-8 text (byte 0xe9 at offset 3)"),
    # new settings' ranges
    (V + ["train.max_flat_iterations=0"], "train.max_flat_iterations: must be > 0"),
    (V + ["train.reward_report_s=0"], "train.reward_report_s: must be > 0"),
    (V + ["train.reward_timeout_s=-1"], "train.reward_timeout_s: must be >= 0"),
    # a newcomer's first runs: counts out of range, empty prompts, CSV files, folders where files belong
    (V + ["train.iterations=0"], "train.iterations: must be between 1 and 1,000,000,000, got 0"),
    (V + ["train.iterations=100000000000000000000000"], "train.iterations: must be between 1 and 1,000,000,000"),
    (["train", "train.iterations=0", "output_dir={tmp}/fresh"], "train.iterations: must be between 1 and"),
    (V + ["data.prompts={tmp}/blank.jsonl"], "blank.jsonl:2: the prompt ('prompt') is empty"),
    (V + ["data.prompts={tmp}/blank.csv"], "blank.csv:3: the prompt ('prompt') is empty"),
    (
        V + ["data.prompts={tmp}/headerless.csv"],
        "headerless.csv:1: a .csv prompt file needs a header line naming the prompt's column 'prompt' (its first "
        "line's columns: 'a cat', '1'); add one, or set data.prompt_column",
    ),
    (V + ["data.prompts={tmp}/ragged.csv"], "ragged.csv:2: 2 columns in the header line, another number in this row"),
    (["validate", "{tmp}/recipes.yaml"], "recipe '{tmp}/recipes.yaml': is a folder, not a recipe file"),
    (["validate", "notckpt"], "recipe 'notckpt': is a folder, not a recipe file"),  # a folder of the working one
    (
        ["validate", "tiny-edit", "data.prompts={tmp}/edit"],
        "data.prompts: row 1 ('make it red'): source image '{tmp}/edit/photo.png' is a folder, not an image",
    ),
    # flow_grpo's keys and command-line habits: flowrl's name for each (docs/migration.md)
    (V + ["pretrained.model=x"], "unknown key 'pretrained.model': flow_grpo's pretrained.model is model.path here"),
    (
        V + ["sample.num_image_per_prompt=4"],
        "unknown key 'sample.num_image_per_prompt': flow_grpo's sample.num_image_per_prompt is sample.group_size here",
    ),
    (V + ["num_epochs=3"], "flow_grpo's num_epochs is train.iterations here"),
    (V + ["model.model_name_or_path=x"], "Flow-Factory's model.model_name_or_path is model.path here"),
    (
        ["validate", "{tmp}/flow_grpo.yaml"],
        "unknown key 'pretrained.model': flow_grpo's pretrained.model is model.path",
    ),
    (
        ["train", "--recipe", "tiny-cpu"],
        "unrecognized arguments: --recipe; the recipe is the first argument, not --recipe: flowrl train tiny-cpu",
    ),  # fmt: skip
    (
        ["train", "tiny-cpu", "--train.iterations=2"],
        "unrecognized arguments: --train.iterations=2; flowrl takes key=value overrides, not --dashes: write "
        "train.iterations=2",
    ),
    (
        ["validate", "tiny-cpu", "--sample.num_image_per_prompt", "4"],
        "not --dashes, and flow_grpo's sample.num_image_per_prompt is sample.group_size here: write sample.group_size=4",
    ),
    (["train", "--config.pretrained.model=x"], "flow_grpo's pretrained.model is model.path here: write model.path=x"),
    (["train", "--config", "config/grpo.py:pickscore_sd3"], "not --config: flowrl train RECIPE (flowrl ls recipes)"),
    (["validate", "--print=yes"], "argument --print: ignored explicit argument 'yes'"),
    (["nosuchcommand"], "argument COMMAND: invalid choice: 'nosuchcommand'"),
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
    while argv[0].startswith("ENV:"):  # an environment the case needs (HOME: no toy model made in ~/.cache)
        name, _, value = argv.pop(0)[4:].partition("=")
        if value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("flowrl: error: ")
    assert message.replace("{tmp}", str(tmp_path)) in err, err


def test_the_table_is_large_enough():
    assert len(ALL) >= 100


# inputs the table's runner cannot make: a full disk, a Ctrl-C, a folder shadowing a recipe's name
SMALL = ["sample.prompts_per_iteration=1", "sample.group_size=2", "sample.batch_size=2", "log.eval_every=0"]


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("flowrl: iteration ")]  # progress lines


def test_a_full_disk_during_a_checkpoint_is_one_line_and_leaves_no_partial_folder(tmp_path, capsys, monkeypatch):
    import errno

    from flowrl import checkpoint as ckpt

    real = ckpt.save_file

    def fill_up(tensors, path, *args, **kwargs):
        if "iter-000002" in str(path) and str(path).endswith("trainable.safetensors"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(ckpt, "save_file", fill_up)
    run = tmp_path / "run"
    argv = ["train", "tiny-cpu", f"output_dir={run}", "train.iterations=2", "log.save_every=1", *SMALL]
    assert main(argv) == 2
    lines = _error_lines(capsys.readouterr().err.strip())
    assert len(lines) == 1 and lines[0].startswith("flowrl: error: "), lines
    assert (
        f"checkpoint {run}/checkpoints/iter-000002: could not be written (No space left on device); the partial "
        "folder was removed and the earlier ones are intact (newest: iter-000001); free space under"
    ) in lines[0]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter-000001"]
    ckpt.verify_checkpoint(run / "checkpoints" / "iter-000001")


def test_ctrl_c_during_start_up_is_one_line(tmp_path, capsys, monkeypatch):
    import flowrl.cli
    import flowrl.trainer

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(flowrl.cli, "_quiet_libraries", interrupted)  # importing diffusers: the slow part
    assert main(["train", "tiny-cpu", f"output_dir={tmp_path / 'run'}"]) == 130
    assert capsys.readouterr().err == "flowrl: interrupted (SIGINT) during start-up: nothing was written\n"
    monkeypatch.undo()
    monkeypatch.setattr(flowrl.trainer.Trainer, "__init__", interrupted)  # building the model
    assert main(["train", "tiny-cpu", f"output_dir={tmp_path / 'run'}"]) == 130
    assert capsys.readouterr().err == (
        "flowrl: interrupted (SIGINT) during start-up, before the first iteration: no checkpoint was written\n"
    )


def test_a_folder_named_like_a_shipped_recipe_does_not_shadow_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-cpu").mkdir()  # e.g. a run folder
    assert main(["validate", "tiny-cpu"]) == 0
    assert "ok: tiny-cpu is valid" in capsys.readouterr().out
    (tmp_path / "mine").write_text("base: tiny-cpu\ntrain:\n  iterations: 3\n")  # a file is the user's recipe
    assert main(["validate", "mine"]) == 0


# settings changed from their default that this config never reads: a warning line each (the run goes on, since
# a recipe's value for a feature that an override turns off is not a mistake), naming the setting and the fix
INERT = [
    (["train.ema_decay=0.99"], "train.ema_decay=0.99: no effect, train.ema is false (set train.ema=true"),
    (["train.ema_every=2", "train.ema_decay=0.5"], "train.ema_decay=0.5 and train.ema_every=2: no effect"),
    (
        ["train.lr_min_ratio=0.1"],
        "train.lr_min_ratio=0.1: no effect, train.lr_schedule is constant (set train.lr_schedule=cosine or linear",
    ),
    (
        ["data.negative_prompt=blurry", "sample.guidance_scale=1"],
        "data.negative_prompt: no effect, sample.guidance_scale and sample.eval_guidance_scale are 1",
    ),
]


@pytest.mark.parametrize("overrides, message", INERT, ids=[f"inert{i}" for i in range(len(INERT))])
def test_a_setting_without_effect_warns_in_one_line(overrides, message, caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="flowrl"):
        assert main(["validate", "tiny-cpu", *overrides]) == 0
    lines = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
    assert len(lines) == 1 and message in lines[0] and "\n" not in lines[0], lines
    # the same setting where it counts: no warning
    caplog.clear()
    on = {
        "train.ema_": "train.ema=true",
        "train.lr_": "train.lr_schedule=cosine",
        "data.neg": "sample.guidance_scale=2",
    }
    fix = next(v for k, v in on.items() if overrides[0].startswith(k) or overrides[-1].startswith(k))
    with caplog.at_level(logging.WARNING, logger="flowrl"):
        assert main(["validate", "tiny-cpu", *overrides, fix]) == 0
    assert not [r for r in caplog.records if "no effect" in r.getMessage()]


def test_no_shipped_recipe_holds_a_setting_without_effect():
    from flowrl.config import inert_settings, recipe_names
    from flowrl.resolve import resolve_config

    found = {name: inert_settings(resolve_config(name)) for name in recipe_names()}
    assert found == {name: [] for name in recipe_names()}
