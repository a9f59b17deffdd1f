"""Which weights Policy.weights swaps in: the named members, and any other name a parameter average's."""

from flowrl.policy import Weights


def test_names_read_as_members_and_others_as_averages():
    assert Weights.of("reference") is Weights.REFERENCE and Weights.of(Weights.EMA) is Weights.EMA
    assert Weights.of("current") is Weights.CURRENT
    assert Weights.of("old") is None  # RAM's lagged policy, a parameter average
