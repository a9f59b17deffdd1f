"""Methods composed of parts (``flowrl.methods.parts``): each method's default parts, a part swapped from the
command line where it fits, a mismatch refused in one line naming both parts, recipes, deprecated aliases."""

import pytest

from flowrl.config import ConfigError
from flowrl.methods import Recipe, build_method, default_parts, list_methods, method_class, recipes
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.methods.parts import CREDIT_NORMS, CREDIT_RULES, LOSSES, Part, PartKind
from flowrl.registry import Registry
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from tiny_runs import NO_SAVES, small

SMALL = small(4, "train.iterations=1", *NO_SAVES)
SKIP = ("timing_s/", "throughput/", "memory/", "time/")


def _recipe(name):
    return "tiny-ltx2-av-grpo" if name == "av_grpo" else "tiny-cpu"


@pytest.mark.parametrize("name", list_methods())
def test_every_method_names_registered_default_parts(name):
    parts = default_parts(name)  # a recipe's in place of its base's
    CREDIT_RULES.get(parts["credit"]), CREDIT_NORMS.get(parts["credit_norm"])
    assert parts["loss"] is None or LOSSES.get(parts["loss"]).kind is PartKind.POLICY
    own = (
        ["reward.smoothness=1", "reward.jpeg_compressibility=0"] if name == "reward_backprop" else []
    )  # differentiable
    method = build_method(resolve_config(_recipe(name), [f"method.name={name}", *own]))
    loss = method.parts.loss.name if method.parts.loss is not None else None  # None: its own transition_loss
    assert (method.parts.credit.name, loss) == (parts["credit"], parts["loss"])


def test_pref_grpo_with_ratio_norm_and_gdpo_is_a_composition():
    cfg = resolve_config("tiny-cpu", ["method.name=pref_grpo", "method.loss=ratio_norm", "method.credit_norm=gdpo"])
    parts = build_method(cfg).parts
    assert (parts.credit.name, parts.credit_norm.name, parts.loss.name) == ("win_rates", "gdpo", "ratio_norm")


def test_the_moved_part_keys_are_one_line_errors_naming_the_new_key(tmp_path):
    for key, new in (("train.ratio_norm", "method.loss=ratio_norm"), ("train.batch_renorm", "method.credit_norm=gdpo")):
        with pytest.raises(ConfigError, match=rf"^{key} is {new} now$"):
            resolve_config("tiny-cpu", [f"{key}=true"])
        recipe = tmp_path / "old.yaml"
        recipe.write_text(f"base: tiny-cpu\ntrain:\n  {key.split('.')[1]}: true\n")
        with pytest.raises(ConfigError, match=rf"^{key} is {new} now$"):
            resolve_config(str(recipe))


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
        (["method.name=diffusion_nft", "method.loss=ppo_clip"], "method.loss=ppo_clip: needs per-step log-probs"),
        (["method.name=flow_grpo", "method.loss=nft"], "method.loss: unknown part 'nft'"),  # DiffusionNFT's own
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
    parts = Registry("part", where="method.loss")
    parts.register("x", Part("x", "flowrl.losses:ppo_clip_loss", "one"))
    with pytest.raises(ValueError, match="^method.loss: part name 'x' is already registered$"):
        parts.register("x", Part("x", "flowrl.losses:ppo_clip_loss", "another"))


def test_the_loss_registry_holds_only_what_can_be_recombined():
    """Every registered loss is a policy loss that every method hosting one may take; a method's own loss is its
    ``transition_loss``, named by no registry."""
    from flowrl.methods import list_methods, method_class

    assert LOSSES.names() == ["dppo_mask", "ppo_clip", "ratio_norm"]
    own = [n for n in list_methods() if method_class(n).default_loss is None]
    assert own == ["av_grpo", "awm", "dgpo", "diffusion_nft", "dpo", "ram", "reward_backprop", "sft"]
    assert all("transition_loss" in vars(method_class(n)) for n in own)


def test_grpo_guard_is_a_recipe_of_flow_grpo_with_ratio_norm(tmp_path, one_thread):
    assert recipes()["grpo_guard"] == Recipe("grpo_guard", "flow_grpo", {"loss": "ratio_norm"})
    assert method_class("grpo_guard") is FlowGRPO and default_parts("grpo_guard")["loss"] == "ratio_norm"
    runs = [
        Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path / d}", *SMALL, *o])).train()
        for d, o in (("a", ["method.name=grpo_guard"]), ("b", ["method.name=flow_grpo", "method.loss=ratio_norm"]))
    ]
    a, b = ([{k: v for k, v in row.items() if not k.startswith(SKIP)} for row in rows] for rows in runs)
    assert a == b
