"""``flowrl train`` with the transformer sharded by FSDP2 over gloo, for tests on a CPU.

accelerate only shards with FSDP on GPUs, so this stands in for its ``fsdp2_prepare_model``: one
``fully_shard`` unit per transformer block plus the root, and the optimizer pointed at the sharded
parameters. Everything after that (rollouts through the sharded model, the update, EMA, checkpoints,
resume, export) is the trainer's own code, as under ``accelerate launch --config_file fsdp.yaml``.

    python -m torch.distributed.run --nproc_per_node 2 tests/helpers/_fsdp_train.py KEY=VALUE ...
"""

import os
import sys

from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from flowrl.config import resolve_config
from flowrl.policy import Policy
from flowrl.trainer import Trainer, end_process_group


class ShardedPolicy(Policy):
    def wrap(self, transformer, optimizer):
        names = {id(p): n for n, p in transformer.named_parameters()}
        order = [names[id(p)] for p in optimizer.param_groups[0]["params"]]
        mesh = init_device_mesh("cpu", (self.acc.num_processes,))
        for block in transformer.transformer_blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(transformer, mesh=mesh)
        sharded = dict(transformer.named_parameters())
        optimizer.param_groups[0]["params"] = [sharded[n] for n in order]
        return transformer, self.acc.prepare_optimizer(optimizer)


if __name__ == "__main__":
    import flowrl.trainer

    flowrl.trainer.Policy = ShardedPolicy  # the one policy the Trainer builds
    trainer = Trainer(resolve_config("tiny-cpu", sys.argv[1:]))
    assert all(type(p).__name__ == "DTensor" for p in trainer.trainable.values())
    trainer.train()
    end_process_group()
    # torch's functional collectives (FSDP2's and DTensor's) keep the gloo group alive after it is destroyed, and
    # its threads, torn down by the interpreter's exit, abort the process now and then ("terminate called without
    # an active exception"; 8 of 30 runs on busy cores). A plain or DDP run leaves no such thread. Every file is
    # written and closed by now: leave without the exit's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
