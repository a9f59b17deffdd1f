"""``flowrl train`` with the transformer sharded by FSDP2 over gloo, for tests on a CPU.

accelerate only shards with FSDP on GPUs, so this stands in for its ``fsdp2_prepare_model``: one
``fully_shard`` unit per module of a class the model names in ``_no_split_modules`` (its transformer blocks;
both experts' blocks for Wan 2.2) plus the root, and the optimizer pointed at the sharded parameters.
Everything after that (the frozen copies sharded beside it, rollouts through the sharded model, the update, EMA,
checkpoints, resume, export) is the trainer's own code, as under ``accelerate launch --config_file fsdp.yaml``.
Before training, each process writes the bytes it holds of each kind of weight to
``<output_dir>/bytes-<rank>.json`` (``weight_bytes``).

    python -m torch.distributed.run --nproc_per_node 2 tests/helpers/_fsdp_train.py [RECIPE] KEY=VALUE ...
"""

import json
import os
import sys

from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from flowrl.policy import Policy
from flowrl.resolve import resolve_config
from flowrl.sharding import is_sharded, local_bytes
from flowrl.trainer import Trainer, end_process_group


class ShardedPolicy(Policy):
    def wrap(self, transformer, optimizer):
        names = {id(p): n for n, p in transformer.named_parameters()}
        order = [names[id(p)] for p in optimizer.param_groups[0]["params"]]
        mesh = init_device_mesh("cpu", (self.acc.num_processes,))
        blocks = set(getattr(transformer, "_no_split_modules", None) or ())
        for module in list(transformer.modules())[1:][::-1]:  # bottom up, as accelerate
            if type(module).__name__ in blocks:
                fully_shard(module, mesh=mesh)
        fully_shard(transformer, mesh=mesh)
        sharded = dict(transformer.named_parameters())
        optimizer.param_groups[0]["params"] = [sharded[n] for n in order]
        return transformer, self.acc.prepare_optimizer(optimizer)


def weight_bytes(policy: Policy) -> dict[str, dict[str, int]]:
    """Per kind of weight, the bytes this process holds (``local``) and the whole tensors' (``whole``)."""
    transformer = policy.transformer
    seen = {id(p) for p in transformer.parameters()}
    kinds = {
        "trainable": list(policy.trainable.values()),
        "frozen": [p for p in transformer.parameters() if not p.requires_grad],
        "reference": [p for p in policy.ref_model.parameters() if id(p) not in seen] if policy.ref_model else [],
        "ema": list(policy.ema.shadow.values()) if policy.ema else [],
        "averages": [t for a in policy.averages.values() for t in a.shadow.values()],
    }
    for name, expert in getattr(transformer, "experts", lambda: [])():
        kinds[f"expert/{name}"] = list(expert.parameters())
    return {
        kind: {
            "local": local_bytes(tensors),
            "whole": sum(t.numel() * t.element_size() for t in tensors),
            "sharded": sum(is_sharded(t) for t in tensors),
            "tensors": len(tensors),
        }
        for kind, tensors in kinds.items()
    }


if __name__ == "__main__":
    import flowrl.trainer

    flowrl.trainer.Policy = ShardedPolicy  # the one policy the Trainer builds
    args = sys.argv[1:]
    recipe = args.pop(0) if args and "=" not in args[0] else "tiny-cpu"
    trainer = Trainer(resolve_config(recipe, args))
    assert all(type(p).__name__ == "DTensor" for p in trainer.policy.trainable.values())
    (trainer.out / f"bytes-{trainer.acc.process_index}.json").write_text(
        json.dumps(weight_bytes(trainer.policy), indent=1)
    )
    if not os.environ.get("FLOWRL_BYTES_ONLY"):
        trainer.train()
    end_process_group()
    # torch's functional collectives (FSDP2's and DTensor's) keep the gloo group alive after it is destroyed, and
    # its threads, torn down by the interpreter's exit, abort the process now and then ("terminate called without
    # an active exception"; 8 of 30 runs on busy cores). A plain or DDP run leaves no such thread. Every file is
    # written and closed by now: leave without the exit's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
