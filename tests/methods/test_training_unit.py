"""The training unit (flowrl.methods.seam.TrainingUnit): the three units the methods make are one, as the trainer and
the update read them; and a unit's selected rows keep the protocol."""

import torch

from flowrl.methods.forward_process import Endpoints
from flowrl.methods.reward_backprop import ChainStart
from flowrl.methods.seam import TrainingUnit
from flowrl.plan import make_plan
from flowrl.rollout import Trajectory


def _units() -> list:
    b, t = 3, 2
    plan = make_plan(torch.linspace(1, 0, t + 1))
    return [
        Trajectory(torch.zeros(b, t + 1, 4, 2, 2), torch.zeros(b, t), torch.arange(b), plan),
        Endpoints(torch.zeros(b, 4, 2, 2), torch.rand(b, t), torch.zeros(b, t, 4, 2, 2), torch.arange(b)),
        ChainStart(torch.zeros(b, 4, 2, 2), 1, torch.arange(b), ["a", "b", "c"], [{}, {}, {}]),
    ]


def test_every_unit_is_a_training_unit_and_so_are_its_selected_rows():
    for unit in _units():
        assert isinstance(unit, TrainingUnit), type(unit).__name__
        picked = unit.select(torch.tensor([True, False, True]))
        assert isinstance(picked, TrainingUnit) and len(picked) == 2
        assert picked.prompt_ids.tolist() == [0, 2]
        assert isinstance(unit.trained_only(), TrainingUnit)
        assert isinstance(unit.states_to(torch.device("cpu")), TrainingUnit)
        assert all(isinstance(j, int) for j in unit.trained_indices)


def test_an_object_without_the_unit_members_is_not_one():
    class NotAUnit:
        prompt_ids = torch.arange(2)

        def __len__(self) -> int:
            return 2

    assert not isinstance(NotAUnit(), TrainingUnit)
