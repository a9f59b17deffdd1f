"""Launching under accelerate's DeepSpeed and FSDP: what the trainer fills in, checks and refuses.

Neither DeepSpeed nor a GPU is on the CI machine, so these drive the trainer's logic with stand-ins for
accelerate's plugin objects; a 2-GPU ZeRO-2 run against DDP is still to be made (docs/scaling.md).
"""

from __future__ import annotations

import pytest

from flowrl.resolve import resolve_config


class _FakePlugin:
    """The two things ``flowrl.policy.configure_deepspeed`` reads from accelerate's DeepSpeedPlugin."""

    def __init__(self, config):
        self.deepspeed_config = config

    def is_auto(self, key):
        return self.deepspeed_config.get(key) == "auto"


def _configure(config, max_grad_norm=1.0, batch_size=8):
    from flowrl.policy import configure_deepspeed

    cfg = resolve_config("tiny-cpu", [f"train.max_grad_norm={max_grad_norm}", f"sample.batch_size={batch_size}"])
    plugin = _FakePlugin(dict(config))
    configure_deepspeed(plugin, cfg)
    return plugin.deepspeed_config


def test_deepspeed_config_is_filled_from_the_recipe():
    ds = _configure(
        {"train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto", "gradient_accumulation_steps": "auto"},
        max_grad_norm=0.5,
        batch_size=8,
    )
    assert ds["train_micro_batch_size_per_gpu"] == 8
    assert ds["gradient_clipping"] == 0.5
    assert ds["gradient_accumulation_steps"] == 1
    assert _configure({"gradient_clipping": 0.5}, max_grad_norm=0.5)["gradient_clipping"] == 0.5


@pytest.mark.parametrize(
    "config, match",
    [
        ({"gradient_clipping": 1.0}, "gradient_clipping=1.0 differs from train.max_grad_norm=0.5"),
        ({"gradient_accumulation_steps": 4}, "gradient_accumulation_steps must be 1"),
    ],
)
def test_deepspeed_config_refuses_what_changes_the_result(config, match):
    with pytest.raises(ValueError, match=match):
        _configure(config, max_grad_norm=0.5)


def test_fsdp1_is_refused_before_loading_anything():
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from flowrl.trainer import Trainer

    fake = SimpleNamespace(distributed_type=DistributedType.FSDP, is_fsdp2=False)
    with pytest.raises(ValueError, match="accelerate FSDP1 is not supported .* set fsdp_version: 2"):
        Trainer(resolve_config("tiny-cpu", []), accelerator=fake)
