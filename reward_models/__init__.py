"""``flowrl.reward_models`` (this folder, ``reward_models/``: ``setup.py``'s ``SOURCE_FOLDERS``): the reward
contract, the registry and the built-in scorers.

Built-in names are registered as lazy ``"module:attr"`` strings, so importing this package loads neither
transformers nor onnxruntime; a back end is imported when ``build_reward`` chooses it.
"""

from flowrl.reward_models.base import (
    ENTRY_POINT_GROUP,
    PairwiseReward,
    RewardError,
    RewardModel,
    RewardOutput,
    WeightedReward,
    build_reward,
    check_reward_args,
    check_reward_name,
    check_scores,
    images_to_uint8,
    is_known_reward,
    list_rewards,
    register_reward,
    win_rates,
)

_BUILTIN_REWARDS = {
    "jpeg_compressibility": "flowrl.reward_models.jpeg:JpegCompressibility",
    "jpeg_incompressibility": "flowrl.reward_models.jpeg:JpegIncompressibility",
    "ocr": "flowrl.reward_models.ocr:OcrReward",
    "pickscore": "flowrl.reward_models.pickscore:PickScoreReward",
    "geneval": "flowrl.reward_models.geneval:GenEvalReward",
    "hpsv2": "flowrl.reward_models.hps:HPSv2Reward",
    "hpsv3": "flowrl.reward_models.hps:HPSv3Reward",
    "imagereward": "flowrl.reward_models.imagereward:ImageRewardReward",
    "aesthetic": "flowrl.reward_models.aesthetic:AestheticReward",
    "clipscore": "flowrl.reward_models.clipscore:ClipScoreReward",
    "nsfw": "flowrl.reward_models.nsfw:NsfwPenalty",
    "vlm_judge": "flowrl.reward_models.vlm:VlmJudgeReward",
    "unifiedreward": "flowrl.reward_models.vlm:UnifiedRewardReward",
    "edit": "flowrl.reward_models.edit:EditReward",
    "edit_toy": "flowrl.reward_models.edit:EditToyReward",
    "video": "flowrl.reward_models.video:VideoFrameReward",
    "clap": "flowrl.reward_models.audio:ClapReward",
    "speech": "flowrl.reward_models.audio:SpeechReward",
    "band_energy": "flowrl.reward_models.audio:BandEnergyReward",
    "av_sync": "flowrl.reward_models.av:AvSyncReward",
    "desync": "flowrl.reward_models.desync:DeSyncReward",
    "audiobox_aesthetics": "flowrl.reward_models.audiobox:AudioboxAestheticsReward",
    "remote": "flowrl.reward_models.remote:RemoteReward",
    "smoothness": "flowrl.reward_models.differentiable:Smoothness",
    "toy_geneval": "flowrl.benchmarks.toy.reward:ToyGenEvalReward",
    "toy_geneval_accuracy": "flowrl.benchmarks.toy.reward:ToyGenEvalAccuracy",
    "toy_av": "flowrl.benchmarks.toy_av.reward:ToyAVReward",
    "toy_av_video": "flowrl.benchmarks.toy_av.reward:ToyAVVideo",
    "toy_av_audio": "flowrl.benchmarks.toy_av.reward:ToyAVAudio",
    "toy_av_sync": "flowrl.benchmarks.toy_av.reward:ToyAVSync",
    "toy_av_accuracy": "flowrl.benchmarks.toy_av.reward:ToyAVAccuracy",
}

for _name, _target in _BUILTIN_REWARDS.items():
    register_reward(_name, _target)
del _name, _target

__all__ = [
    "ENTRY_POINT_GROUP",
    "PairwiseReward",
    "RewardError",
    "RewardModel",
    "RewardOutput",
    "WeightedReward",
    "build_reward",
    "check_reward_args",
    "check_reward_name",
    "check_scores",
    "images_to_uint8",
    "is_known_reward",
    "list_rewards",
    "register_reward",
    "win_rates",
]
