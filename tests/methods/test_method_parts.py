"""Methods composed of parts (``flowrl.methods.parts``): each method's default parts, a part swapped from the
command line where it fits, a mismatch refused in one line naming both parts, recipes, deprecated aliases."""

import warnings

import pytest

from flowrl.config import ConfigError, resolve_config
from flowrl.methods import build_method, list_methods, method_class, recipes
from flowrl.methods.parts import CREDIT_NORMS, CREDIT_RULES, LOSSES, Part, Parts
from flowrl.trainer import Trainer
from tiny_runs import NO_SAVES, small

SMALL = small(4, "train.iterations=1", *NO_SAVES)
SKIP = ("timing_s/", "throughput/", "memory/", "time/")


def _recipe(name):
    return "tiny-ltx2-av-grpo" if name == "av_grpo" else "tiny-cpu"


@pytest.mark.parametrize("name", list_methods())
def test_every_method_names_registered_default_parts(name):
    cls = method_class(name)
    CREDIT_RULES.get(cls.default_credit), CREDIT_NORMS.get(cls.default_credit_norm), LOSSES.get(cls.default_loss)
    own = (
        ["reward.smoothness=1", "reward.jpeg_compressibility=0"] if name == "reward_backprop" else []
    )  # differentiable
    method = build_method(resolve_config(_recipe(name), [f"method.name={name}", *own]))
    assert (method.parts.credit.name, method.parts.loss.name) == (cls.default_credit, cls.default_loss)


def test_pref_grpo_with_ratio_norm_and_gdpo_is_a_composition():
    cfg = resolve_config("tiny-cpu", ["method.name=pref_grpo", "method.loss=ratio_norm", "method.credit_norm=gdpo"])
    parts = build_method(cfg).parts
    assert (parts.credit.name, parts.credit_norm.name, parts.loss.name) == ("win_rates", "gdpo", "ratio_norm")


def test_the_deprecated_aliases_warn_naming_the_new_key_and_choose_the_same_parts():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = resolve_config("tiny-cpu", ["method.name=pref_grpo", "train.ratio_norm=true", "train.batch_renorm=true"])
    messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert "train.ratio_norm is deprecated; use method.loss=ratio_norm" in messages
    assert "train.batch_renorm is deprecated; use method.credit_norm=gdpo" in messages
    assert (old.method.loss, old.method.credit_norm) == ("ratio_norm", "gdpo")
    with pytest.raises(ConfigError, match=r"^train.ratio_norm: chooses method.loss=ratio_norm, but method.loss=ppo"):
        resolve_config("tiny-cpu", ["train.ratio_norm=true", "method.loss=ppo_clip"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["method.name=ram", "method.loss=ppo_clip"],
            "method.loss=ppo_clip: needs per-step log-probs, which method ram",
        ),
        (["method.name=ram", "method.loss=ratio_norm"], "method.loss=ratio_norm: needs per-step log-probs"),
        (["method.name=flow_grpo", "method.credit=dense_gains"], "method.credit=dense_gains: needs ODE completions"),
        (["method.name=flow_grpo", "method.credit=win_rates"], "reads method.options.win_rate_from, which method"),
        (["method.name=diffusion_nft", "method.loss=ram_regression"], "method.loss=ram_regression: reads"),
        (["method.name=flow_grpo", "method.loss=nft"], "method.loss=nft: needs clean ODE endpoints"),
        (["method.name=flow_grpo", "method.loss=ratio_nrm"], "method.loss: unknown part 'ratio_nrm'; did you mean"),
    ],
)
def test_a_mismatched_composition_is_one_line_naming_both_parts(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_method(resolve_config("tiny-cpu", overrides))
    text = str(err.value)
    assert message in text and "\n" not in text
    if "unknown" not in text:  # the method's own part is named beside the chosen one
        assert "its own" in text


def test_a_part_registry_refuses_a_duplicate_name():
    parts = Parts("method.loss")
    parts.register(Part("x", "flowrl.losses:ppo_clip_loss", "one"))
    with pytest.raises(ValueError, match="already registered"):
        parts.register(Part("x", "flowrl.losses:ppo_clip_loss", "another"))


def test_grpo_guard_is_a_recipe_of_flow_grpo_with_ratio_norm(tmp_path, one_thread):
    assert recipes()["grpo_guard"] == ("flow_grpo", {"loss": "ratio_norm"})
    runs = [
        Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path / d}", *SMALL, *o])).train()
        for d, o in (("a", ["method.name=grpo_guard"]), ("b", ["method.name=flow_grpo", "method.loss=ratio_norm"]))
    ]
    a, b = ([{k: v for k, v in row.items() if not k.startswith(SKIP)} for row in rows] for rows in runs)
    assert a == b
