"""``flowrl train`` on one process, unsharded, with FSDP2's gradient summation order: the one-process run an FSDP2
run (``_fsdp_train.py``) is compared with where a sum's rounding decides the result.

FSDP2 passes the grad-requiring inputs of each unit (``fully_shard`` module: one per module of a class the model
names in ``_no_split_modules``, and the root) through one autograd node (``RegisterPostBackwardFunction``, which
reshards and reduces the unit's gradients in backward). A tensor every block reads (Wan's text embedding feeds
every block's cross-attention keys and values) then gets its gradient summed per block (k + v of a block first,
then block after block) instead of term by term: the same gradient, rounded differently (about 1e-7 relative).
This script puts the same identity node on the same modules' inputs, so its sums run in FSDP2's order.

    python tests/helpers/_unit_order_train.py [RECIPE] KEY=VALUE ...
"""

import sys

import torch

import flowrl.trainer
from flowrl.policy import Policy
from flowrl.resolve import resolve_config


class _UnitInputs(torch.autograd.Function):
    """The identity, as one autograd node over all the tensors it gets (FSDP2's post-backward node, less its
    reshard and reduce)."""

    @staticmethod
    def forward(ctx, *inputs):
        return inputs

    @staticmethod
    def backward(ctx, *grads):
        return grads


def _through_unit_node(module, args, kwargs):
    if not torch.is_grad_enabled():
        return None
    positions = [i for i, a in enumerate(args) if torch.is_tensor(a) and a.requires_grad]
    keys = [k for k, v in kwargs.items() if torch.is_tensor(v) and v.requires_grad]
    if not positions and not keys:
        return None
    out = _UnitInputs.apply(*[args[i] for i in positions], *[kwargs[k] for k in keys])
    args = list(args)
    for i, tensor in zip(positions, out[: len(positions)]):
        args[i] = tensor
    kwargs.update(zip(keys, out[len(positions) :]))
    return tuple(args), kwargs


class UnitOrderPolicy(Policy):
    def wrap(self, transformer, optimizer):
        blocks = set(getattr(transformer, "_no_split_modules", None) or ())
        for module in transformer.modules():
            if module is transformer or type(module).__name__ in blocks:
                module.register_forward_pre_hook(_through_unit_node, with_kwargs=True)
        return super().wrap(transformer, optimizer)


if __name__ == "__main__":
    flowrl.trainer.Policy = UnitOrderPolicy  # the one policy the Trainer builds
    args = sys.argv[1:]
    recipe = args.pop(0) if args and "=" not in args[0] else "tiny-cpu"
    flowrl.trainer.Trainer(resolve_config(recipe, args)).train()
