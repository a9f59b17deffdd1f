"""What each family's own contract values are, beyond the conformance kit (tests/pipelines/test_family_contract.py, which
runs every registered family through the shared contract): every family's media kind and guidance object (its
kind and the transformer rows a sample costs), a reward of another kind refused in one line, the conditional
scale the forward-process methods regress at, and non-square images."""

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.pipelines.base import Guidance, GuidanceKind, adapter_class, list_pipelines
from flowrl.preflight import preflight
from flowrl.resolve import resolve_config

FAMILIES = {
    "sd3": ("tiny-cpu", "image"),
    "flux": ("tiny-flux", "image"),
    "wan": ("tiny-wan", "video"),
    "stable_audio": ("tiny-audio", "audio"),
    "ltx2": ("tiny-ltx2", "audio_video"),
}


def test_every_family_is_listed_with_its_media_kind_and_tiny_recipe():
    assert set(FAMILIES) <= set(list_pipelines())
    for name, (recipe, kind) in FAMILIES.items():
        assert adapter_class(name).media_kind == kind and adapter_class(name).tiny_recipe == recipe


@pytest.fixture(scope="module")
def adapters():
    return {
        name: adapter_class(name).from_config(resolve_config(recipe).model, seed=0)
        for name, (recipe, _) in FAMILIES.items()
    }


def test_guidance_objects_and_the_rows_they_cost(adapters):
    """Two-branch CFG costs 2 rows a sample (1 at scale 1); FLUX.1-dev's embedded guidance costs 1 at any
    scale. (That a velocity call sends exactly these rows through the transformer is the conformance kit's.)"""
    cfg, embedded = GuidanceKind.CFG, GuidanceKind.EMBEDDED
    expected = {"sd3": (cfg, 2), "flux": (embedded, 1), "wan": (cfg, 2), "stable_audio": (cfg, 2), "ltx2": (cfg, 2)}
    for name, adapter in adapters.items():
        g = adapter.guidance(4.5)
        assert isinstance(g, Guidance) and g.kind is expected[name][0] and g.passes == expected[name][1], name
        assert g.scale == 4.5
        if g.kind is GuidanceKind.CFG:
            assert adapter.guidance(1.0).kind is GuidanceKind.NONE and adapter.guidance(1.0).passes == 1


def test_a_guidance_kind_given_by_name_becomes_the_enum_and_a_wrong_one_is_refused_in_one_line():
    """A family of one's own may name the kind; a misspelt one fails where the adapter makes it."""
    assert Guidance("cfg", 3.0, 2).kind is GuidanceKind.CFG and str(GuidanceKind.CFG) == "cfg"
    assert Guidance.cfg_above_one(1.0) == Guidance(GuidanceKind.NONE, 1.0, 1)
    assert Guidance.cfg_above_one(2.0) == Guidance(GuidanceKind.CFG, 2.0, 2)
    with pytest.raises(ValueError, match=r"^guidance kind 'classifier_free' is none of \['cfg', 'embedded', 'none'\]$"):
        Guidance("classifier_free", 3.0, 2)


def test_a_family_naming_its_media_kind_gets_the_enum_and_a_misspelt_one_is_refused_in_one_line():
    from flowrl.media import MediaKind
    from flowrl.pipelines.base import PIPELINES, media_kind_of, register_family

    class Named:
        media_kind = "video"

    class Misspelt:
        media_kind = "vidoe"

    with PIPELINES.temporary():
        register_family("named_toy", Named)
        register_family("misspelt_toy", Misspelt)
        assert media_kind_of("named_toy") is MediaKind.VIDEO
        with pytest.raises(ValueError, match=r"^unknown media kind 'vidoe'; expected one of image, video, audio, "):
            media_kind_of("misspelt_toy")


def test_a_reward_of_another_media_kind_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        preflight(resolve_config("tiny-wan", ["reward={jpeg_compressibility: 1.0}", "reward_args={}"]))
    message = str(err.value)
    assert "\n" not in message and "reward 'jpeg_compressibility' scores image media" in message
    assert "model.pipeline=wan makes video" in message and "reward.video" in message
    with pytest.raises(
        ConfigError, match="reward 'band_energy' scores audio media, but model.pipeline=sd3 makes image"
    ):
        preflight(
            resolve_config(
                "tiny-cpu", ["reward={band_energy: 1.0}", "reward_args={band_energy: {low_hz: 10, high_hz: 50}}"]
            )
        )
    preflight(resolve_config("tiny-wan"))  # the per-frame video reward fits
    preflight(resolve_config("tiny-audio"))
    # audio-video media: a video or an audio reward reads its own modality of the mapping; an image one does not
    preflight(
        resolve_config(
            "tiny-ltx2",
            [
                "reward={video: 1.0, band_energy: 1.0}",
                "reward_args={video: {reward: jpeg_compressibility}, band_energy: {low_hz: 100, high_hz: 1000}}",
            ],
        )
    )
    with pytest.raises(ConfigError, match="scores image media, but model.pipeline=ltx2 makes audio_video"):
        preflight(resolve_config("tiny-ltx2", ["reward={jpeg_compressibility: 1.0}", "reward_args={}"]))


def test_forward_process_methods_regress_the_conditional_velocity_at_one_pass(adapters):
    """RAM and DiffusionNFT regress the conditional velocity alone: CFG off (scale 1) for two-branch CFG; under
    FLUX's embedded guidance the sampling scale itself (one pass either way)."""
    from types import SimpleNamespace

    from flowrl.methods.base import Context

    cfg = resolve_config("tiny-cpu", ["sample.guidance_scale=3.5"])
    for name, expected in (("sd3", 1.0), ("flux", 3.5), ("wan", 1.0), ("stable_audio", 1.0)):
        policy = SimpleNamespace(device=torch.device("cpu"))
        assert Context(adapters[name], cfg, policy, 0).conditional_scale == expected, name


@pytest.mark.parametrize("name", ["sd3", "flux"])
def test_non_square_images(name, one_thread):
    recipe = FAMILIES[name][0]
    cfg = resolve_config(recipe, ["model.height=32", "model.width=64"])
    adapter = adapter_class(name).from_config(cfg.model, seed=0)
    images = adapter.decode(adapter.initial_noise(1, torch.Generator().manual_seed(0)))
    assert tuple(images.shape) == (1, 3, 32, 64)
