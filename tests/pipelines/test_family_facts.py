"""A family's facts are written once, in its folder (``flowrl.pipelines.<family>``): the estimate's profile
(``flowrl.estimate.<family>``) reads the adapter's LoRA targets, tiny paths and transformer class, so the two
cannot drift apart."""

import pytest

from flowrl.estimate.families import PROFILES, family_parts
from flowrl.pipelines.base import adapter_class, tiny_paths_of


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_profile_names_the_adapters_lora_targets_and_tiny_paths(name):
    adapter = adapter_class(name)
    assert PROFILES[name].lora_targets == list(adapter.lora_target_modules)
    assert tuple(PROFILES[name].tiny_paths) == tiny_paths_of(adapter)


@pytest.mark.parametrize("name", ["flux", "wan", "z_image"])
def test_the_profiles_transformer_class_is_the_tiny_builders(name, one_thread):
    """The class the estimate builds on the meta device is the one the family's tiny builder makes."""
    parts = family_parts(name, "tiny", None)
    assert type(parts.experts[0]).__name__ == PROFILES[name].transformer_class
