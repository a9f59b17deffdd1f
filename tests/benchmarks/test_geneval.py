"""GenEval: prompt file, rules decided by hand, tiny random detector and CLIP end to end, summary, reward.

Boxes are ``[x1, y1, x2, y2]`` pixels. Model tests build real transformers / open_clip classes from tiny
configs with random weights; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from PIL import Image

from flowrl.benchmarks.geneval.constants import CLASSES, COLORS, TASKS, geneval_class
from flowrl.benchmarks.geneval.prompts import (
    OFFICIAL_NUM_ROWS,
    OFFICIAL_SHA256,
    MetadataError,
    load_metadata,
    plural,
    with_article,
    write_prompts,
)
from flowrl.benchmarks.geneval.rules import (
    ClassDetections,
    RuleConfig,
    box_iou,
    evaluate_official,
    evaluate_partial,
    evaluate_strict,
    filter_detections,
    judge,
    relative_position,
)
from flowrl.benchmarks.geneval.scoring import load_results, score_folder, summarize, summary_markdown
from helpers_geneval import DOG, build_tiny_clip, build_tiny_detector, noise_image, write_folder

# ----------------------------------------------------------------------------------------- prompt file


def test_generated_metadata_is_byte_identical_to_official(tmp_path):
    path = write_prompts(tmp_path / "evaluation_metadata.jsonl", prompts_txt=tmp_path / "prompts.txt")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == OFFICIAL_SHA256
    rows = load_metadata(path)
    assert len(rows) == OFFICIAL_NUM_ROWS
    counts = {tag: sum(r["tag"] == tag for r in rows) for tag in TASKS}
    assert counts == {
        "single_object": 80, "two_object": 99, "counting": 80, "colors": 94, "position": 100, "color_attr": 100
    }  # fmt: skip
    assert (tmp_path / "prompts.txt").read_text().splitlines()[0] == rows[0]["prompt"]


def test_text_rules():
    assert with_article("orange") == "an orange" and with_article("bench") == "a bench"
    assert plural("scissors") == "scissorses" and plural("clock") == "clocks"
    assert geneval_class("mouse") == "computer mouse" and geneval_class("Potted_Plant") == "potted plant"
    assert geneval_class("wall") is None


GOOD = {"tag": "single_object", "include": [{"class": "dog", "count": 1}], "prompt": "a photo of a dog"}


def clause(name: str = "dog", count: int = 1, **extra) -> dict:
    return {"class": name, "count": count, **extra}


@pytest.mark.parametrize(
    "bad, words",
    [
        ({**GOOD, "tag": "single"}, "tag 'single'"),
        ({**GOOD, "include": [clause("dragon")]}, "'dragon'"),
        ({**GOOD, "include": [clause(count=0)]}, "count 0"),
        ({**GOOD, "include": [clause(color="teal")]}, "'teal'"),
        ({**GOOD, "include": [clause(position=["above", 0])]}, "earlier include clause"),
        ({**GOOD, "include": [clause(position=["near", 0])]}, "relation in"),
        ({**GOOD, "exclude": [clause(count=2, color="red")]}, "unknown key"),
        ({**GOOD, "prompt": ""}, "prompt"),
    ],
)
def test_load_metadata_names_the_bad_line(tmp_path, bad, words):
    path = tmp_path / "meta.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(MetadataError) as info:
        load_metadata(path)
    message = str(info.value)
    assert f"{path}:2" in message and words in message and "\n" not in message


def test_load_metadata_invalid_json(tmp_path):
    path = tmp_path / "meta.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n{not json\n")
    with pytest.raises(MetadataError, match=f"{path}:3: invalid JSON"):
        load_metadata(path)


# ------------------------------------------------------------------------------------- rules, by hand


def dets(*items, colors=None) -> ClassDetections:
    """``dets((box, score), ...)``."""
    return ClassDetections([b for b, _ in items], [s for _, s in items], colors)


def box(x: float, y: float, size: float = 100) -> list[float]:
    """A square of side ``size`` with top-left corner (x, y)."""
    return [x, y, x + size, y + size]


def row(tag: str, include: list[dict], exclude: list[dict] | None = None) -> dict:
    out = {"tag": tag, "include": include, "prompt": "p"}
    if exclude:
        out["exclude"] = exclude
    return out


def run(raw: dict, meta: dict, cfg: RuleConfig | None = None):
    cfg = cfg or RuleConfig()
    kept = filter_detections(raw, meta["tag"], cfg)
    return evaluate_official(kept, meta, cfg), evaluate_strict(kept, meta, cfg), evaluate_partial(kept, meta, cfg)


SINGLE_DOG = row("single_object", [{"class": "dog", "count": 1}])


def test_single_object_threshold_is_strict_greater():
    official, strict, partial = run({"dog": dets((box(0, 0), 0.3))}, SINGLE_DOG)
    assert not official.correct and official.reasons == ["expected dog>=1, found 0"]
    assert partial.score == 0.0  # count term 1 - |1 - 0| / 1
    official, strict, partial = run({"dog": dets((box(0, 0), 0.31))}, SINGLE_DOG)
    assert official.correct and strict.correct and partial.score == 1.0


def test_single_object_extra_instance_passes_official_only():
    official, strict, partial = run({"dog": dets((box(0, 0), 0.9), (box(200, 0), 0.8))}, SINGLE_DOG)
    assert official.correct  # ">= 1" and no exclude clause
    assert not strict.correct and strict.reasons == ["expected dog==1, found 2"]
    assert partial.score == 0.0  # 1 - |1 - 2| / 1 = 0


def test_two_object_needs_both():
    meta = row("two_object", [{"class": "dog", "count": 1}, {"class": "cake", "count": 1}])
    official, _, partial = run({"dog": dets((box(0, 0), 0.9))}, meta)
    assert not official.correct and official.reasons == ["expected cake>=1, found 0"]
    assert partial.score == pytest.approx(0.5)  # terms [1, 0]


COUNT_3 = row("counting", [{"class": "clock", "count": 3}], [{"class": "clock", "count": 4}])


def clocks(*scores: float) -> dict:
    return {"clock": dets(*[(box(150 * i, 0), s) for i, s in enumerate(scores)])}


def test_counting_uses_the_09_threshold():
    official, strict, partial = run(clocks(0.95, 0.95, 0.95, 0.85), COUNT_3)  # the 0.85 one is not counted
    assert official.correct and strict.correct and partial.score == 1.0
    official, _, partial = run(clocks(0.95, 0.95, 0.9), COUNT_3)  # 0.9 is not > 0.9
    assert official.reasons == ["expected clock>=3, found 2"]
    assert partial.score == pytest.approx(2 / 3)  # 1 - |3 - 2| / 3


def test_counting_exclude_n_plus_one_fails():
    official, strict, partial = run(clocks(0.95, 0.95, 0.95, 0.95), COUNT_3)
    assert not official.correct and official.reasons == ["expected clock<4, found 4"]
    assert not strict.correct
    assert partial.score == pytest.approx(2 / 3)  # 1 - |3 - 4| / 3


def test_counting_partial_is_clamped_at_zero():
    _, _, partial = run(clocks(*[0.95] * 8), COUNT_3)
    assert partial.score == 0.0  # authors' unclamped term: 1 - 5 / 3 = -2/3


def test_max_objects_caps_each_class():
    raw = {"cup": dets(*[(box(10 * i, 0, 5), 0.5 + 0.01 * i) for i in range(20)])}
    kept = filter_detections(raw, "two_object", RuleConfig())["cup"]
    assert len(kept) == 16 and kept.scores[0] == pytest.approx(0.69)  # highest first
    assert list(kept.scores) == sorted(kept.scores, reverse=True)


def test_nms_only_when_max_overlap_below_one():
    raw = {"cup": dets(([0, 0, 9, 9], 0.9), ([1, 1, 10, 10], 0.8), ([50, 50, 60, 60], 0.7))}
    assert box_iou(np.array([0, 0, 9, 9]), np.array([5, 5, 14, 14])) == pytest.approx(25 / 175)
    assert len(filter_detections(raw, "colors", RuleConfig())["cup"]) == 3
    assert len(filter_detections(raw, "colors", RuleConfig(max_overlap=0.5))["cup"]) == 2


RED_CAR = row("colors", [{"class": "car", "count": 1, "color": "red"}])


def test_colour_is_read_on_the_top_detection_only():
    raw = {"car": dets((box(0, 0), 0.9), (box(200, 0), 0.5), colors=["red", "blue"])}
    official, strict, partial = run(raw, RED_CAR)
    assert official.correct
    assert not strict.correct and partial.score == 0.0  # terms: count 0, colour 0 (count off)


def test_wrong_colour_fails_with_a_tally():
    official, _, partial = run({"car": dets((box(0, 0), 0.9), colors=["blue"])}, RED_CAR)
    assert official.reasons == ["expected red car>=1, found 0 red; and 1 blue"]
    assert partial.score == pytest.approx(0.5)  # terms [count 1, colour 0]


def test_unclassified_colour_is_an_error():
    with pytest.raises(ValueError, match="not classified"):
        run({"car": dets((box(0, 0), 0.9))}, RED_CAR)


def test_color_attr_partial_credit():
    meta = row(
        "color_attr", [{"class": "cup", "count": 1, "color": "red"}, {"class": "vase", "count": 1, "color": "blue"}]
    )
    raw = {"cup": dets((box(0, 0), 0.9), colors=["red"]), "vase": dets((box(200, 0), 0.9), colors=["green"])}
    official, strict, partial = run(raw, meta)
    assert not official.correct and not strict.correct
    assert partial.score == pytest.approx(0.75)  # terms [1, 1, 1, 0]


def test_relative_position_margin():
    ref = box(100, 0)  # centre (150, 50), 100 x 100; margin 0.1 * (100 + 100) = 20 px per axis
    assert relative_position(box(0, 0), ref) == {"left of"}  # offset -100 -> revised -80, -80 / 100 = -0.8
    assert relative_position(box(80, 0), ref) == set()  # offset -20 lies inside the margin
    assert relative_position(box(70, 0), ref) == set()  # revised -10 / 30 = -0.33: too small
    assert relative_position(box(200, 0), ref) == {"right of"}
    assert relative_position(box(0, -100), ref) == {"left of", "above"}  # (-80, -80) / 141.4 = -0.57 each
    assert relative_position(box(100, 150), ref) == {"below"}


DOG_LEFT_OF_BEAR = row("position", [clause("teddy bear"), clause("dog", position=["left of", 0])])


def test_position_task():
    bear = dets((box(300, 0), 0.9))
    official, strict, partial = run({"teddy bear": bear, "dog": dets((box(0, 0), 0.9))}, DOG_LEFT_OF_BEAR)
    assert official.correct and strict.correct and partial.score == 1.0
    official, strict, partial = run({"teddy bear": bear, "dog": dets((box(600, 0), 0.9))}, DOG_LEFT_OF_BEAR)
    assert official.reasons == ["expected dog left of target, found right of"]
    assert partial.score == pytest.approx(2 / 3)  # terms [1, 1, 0]; the authors' code gives [1, 1, 0, 1] = 0.75


def test_position_without_target():
    official, _, partial = run({"dog": dets((box(0, 0), 0.9))}, DOG_LEFT_OF_BEAR)
    assert official.reasons == ["expected teddy bear>=1, found 0", "no target for dog to be left of"]
    assert partial.score == pytest.approx(1 / 3)  # terms [0, 1, 0]


def test_include_and_exclude_or():
    meta = row(
        "two_object",
        [{"class": "cat", "count": 1}],
        [{"class": "dog", "count": 1}, {"class": "bird", "count": 2}],
    )
    official, strict, _ = run({"cat": dets((box(0, 0), 0.9)), "bird": dets((box(200, 0), 0.9))}, meta)
    assert official.correct  # one bird < 2, no dog
    official, strict, _ = run({"cat": dets((box(0, 0), 0.9)), "dog": dets((box(200, 0), 0.9))}, meta)
    assert official.reasons == ["expected dog<1, found 1"]
    assert strict.correct  # strict reads include clauses only


def test_judge_bundles_three_rules():
    j = judge(filter_detections({"dog": dets((box(0, 0), 0.9), (box(200, 0), 0.9))}, "single_object"), SINGLE_DOG)
    assert (j.correct, j.strict, j.partial) == (True, False, 0.0)
    assert j.reasons == [] and j.strict_reasons == ["expected dog==1, found 2"]


# ------------------------------------------------------------- bit-exact with GenEval's numerics
# GenEval orders each class by ``np.argsort(scores)[::-1]`` (numpy 1.23, its pinned version) and computes
# on mmdet's float32 output. Each test below decides a verdict the float64 / stable-descending rules got
# wrong.


def test_equal_scores_put_the_later_detection_first():
    # argsort is ascending and stable on short arrays; reversing it puts the later of two equal scores first.
    raw = {"car": dets((box(0, 0), 0.8), (box(200, 0), 0.8), colors=["red", "blue"])}
    kept = filter_detections(raw, "colors")["car"]
    assert kept.colors == ["blue", "red"] and kept.boxes[0].tolist() == box(200, 0)
    official, _, _ = run(raw, RED_CAR)
    assert official.reasons == ["expected red car>=1, found 0 red; and 1 blue"]
    raw = {"car": dets((box(0, 0), 0.8), (box(200, 0), 0.8), colors=["blue", "red"])}
    assert run(raw, RED_CAR)[0].correct


def test_equal_scores_decide_which_instance_is_placed():
    bear = dets((box(300, 0), 0.9))
    left, right = (box(0, 0), 0.7), (box(600, 0), 0.7)
    official, _, _ = run({"teddy bear": bear, "dog": dets(left, right)}, DOG_LEFT_OF_BEAR)
    assert official.reasons == ["expected dog left of target, found right of"]  # the later dog, on the right
    official, _, _ = run({"teddy bear": bear, "dog": dets(right, left)}, DOG_LEFT_OF_BEAR)
    assert official.correct


def test_scores_are_compared_in_float32():
    at = np.float32(0.3)  # 0.300000011920929 > 0.3 in float64, but not > float32(0.3)
    official, _, partial = run({"dog": dets((box(0, 0), at))}, SINGLE_DOG)
    assert official.reasons == ["expected dog>=1, found 0"] and partial.score == 0.0
    above = np.nextafter(at, np.float32(1))
    assert run({"dog": dets((box(0, 0), above))}, SINGLE_DOG)[0].correct
    # A float64 score between 0.3 and float32(0.3) is what a float32 detector would report as float32(0.3).
    assert not run({"dog": dets((box(0, 0), 0.30000001))}, SINGLE_DOG)[0].correct
    clocks_at = {"clock": dets(*[(box(150 * i, 0), np.float32(s)) for i, s in enumerate([0.95, 0.95, 0.9])])}
    assert run(clocks_at, COUNT_3)[0].reasons == ["expected clock>=3, found 2"]  # float32(0.9) is not > 0.9
    d = ClassDetections([[0.1, 0, 1, 1]], [0.5])
    assert d.boxes.dtype == np.float32 and d.scores.dtype == np.float32


def test_scores_equal_in_float32_are_a_tie():
    # 0.80000001 and 0.8 round to the same float32: a tie, so the later (0.8) comes first.
    raw = {"car": dets((box(0, 0), 0.80000001), (box(200, 0), 0.8), colors=["red", "blue"])}
    assert not run(raw, RED_CAR)[0].correct


# numpy 1.23.5's np.argsort of these (recorded once; numpy 2 on AVX2 / AVX-512 machines sorts ties otherwise)
MIX20 = [0.5, 0.9, 0.7, 0.9, 0.5, 0.7, 0.9, 0.5, 0.7, 0.9, 0.5, 0.7, 0.9, 0.5, 0.7, 0.9, 0.5, 0.7, 0.9, 0.5]
MIX20_ARGSORT = [0, 16, 13, 10, 7, 19, 4, 8, 11, 2, 14, 17, 5, 6, 18, 3, 12, 15, 1, 9]
EQUAL17_ARGSORT = [0, 14, 13, 12, 11, 10, 9, 15, 8, 6, 5, 4, 3, 2, 1, 7, 16]
# a median-of-three killer (McIlroy's adversary), deep enough to send numpy's introsort to its heapsort
KILLER37 = [0, 30, 2, 20, 4, 22, 6, 37, 8, 34, 10, 35, 12, 33, 14, 32, 16, 31, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21,
            29, 28, 27, 26, 25, 24, 18, 23]  # fmt: skip
KILLER37_ARGSORT = [0, 18, 2, 19, 4, 20, 6, 21, 8, 22, 10, 23, 12, 24, 14, 25, 16, 26, 35, 27, 3, 28, 5, 36, 34, 33,
                    32, 31, 30, 29, 1, 17, 15, 13, 9, 11, 7]  # fmt: skip


def test_argsort_is_numpy_123s(monkeypatch):
    from flowrl.benchmarks.geneval import rules

    rng = np.random.default_rng(0)
    for n in range(17):  # insertion sort: stable
        values = rng.integers(0, 3, n).astype(np.float32)
        assert rules.numpy123_argsort(values) == np.argsort(values, kind="stable").tolist()
    assert rules.numpy123_argsort(np.float32(MIX20)) == MIX20_ARGSORT
    assert rules.numpy123_argsort(np.full(17, 0.8, np.float32)) == EQUAL17_ARGSORT
    heapsorts = []
    heapsort = rules._heapsort
    monkeypatch.setattr(rules, "_heapsort", lambda *a: (heapsorts.append(a[3]), heapsort(*a)))
    assert rules.numpy123_argsort(np.float32(KILLER37)) == KILLER37_ARGSORT and heapsorts
    assert rules.numpy123_argsort([1.0, np.nan, 0.0]) == [2, 0, 1]  # NaN sorts last


def test_more_than_sixteen_detections_follow_numpys_quicksort():
    # The highest score 0.9 is shared by cars 1, 3, ..., 18; numpy 1.23 puts car 9 first, not 18 or 1.
    colors = ["red" if i == 9 else "blue" for i in range(20)]
    raw = {"car": dets(*[(box(150 * i, 0), s) for i, s in enumerate(MIX20)], colors=colors)}
    kept = filter_detections(raw, "colors")["car"]
    assert len(kept) == 16 and kept.colors[0] == "red"
    assert run(raw, RED_CAR)[0].correct


def test_position_exactly_at_the_margin_in_float32():
    # Sizes 2 and 1: margin float32(0.1) * 3 = float32(0.3); centre offset float32(0.6) = 2 * float32(0.3),
    # so the shrunk offset over the offset is exactly 0.5, not > 0.5 (float64 gave 0.50000002: "right of").
    dog, bear = [-0.8999999761581421, 0, 1.100000023841858, 10], [-1, 0, 0, 10]
    assert relative_position(dog, bear) == set() and relative_position(bear, dog) == set()
    step = float(np.nextafter(np.float32(1.100000023841858), np.float32(2)))
    assert relative_position([dog[0], 0, step, 10], bear) == {"right of"}
    meta = row("position", [clause("teddy bear"), clause("dog", position=["right of", 0])])
    official, strict, _ = run({"teddy bear": dets((bear, 0.9)), "dog": dets((dog, 0.9))}, meta)
    assert not official.correct and not strict.correct


def test_nms_iou_in_genevals_precision():
    # The detector's float32 boxes: float32(1.4) - float32(0.4) rounds to 1.0 in float32 (then + 1), so the IoU
    # is exactly 4 / 8 = 0.5 and the second box is suppressed at max_overlap=0.5 (kept only when IoU < 0.5);
    # the same difference taken in float64 is 0.99999997 and the IoU 0.49999999.
    a, b = np.float32([0, 0, 2, 1]), np.float32([0.4, 0, 1.4, 2])
    assert box_iou(a, b) == 0.5
    raw = {"cup": dets((a, 0.9), (b, 0.8))}
    assert len(filter_detections(raw, "colors", RuleConfig(max_overlap=0.5))["cup"]) == 1
    assert len(filter_detections(raw, "colors", RuleConfig(max_overlap=0.51))["cup"]) == 2


# --------------------------------------------------------------------------------------------- summary


def test_summary_of_a_hand_made_table(tmp_path):
    def r(tag, prompt, correct):
        return {"tag": tag, "metadata": prompt, "correct": correct, "strict": False}

    rows = [r("single_object", "A", c) for c in (True, False, False, False)]
    rows += [r("single_object", "B", False) for _ in range(4)]
    rows += [r("counting", "C", True), r("counting", "C", True)]
    s = summarize(rows)
    assert s["tasks"]["single_object"]["accuracy"] == pytest.approx(1 / 8)
    assert s["tasks"]["counting"]["accuracy"] == 1.0
    assert s["overall"] == pytest.approx((1 / 8 + 1) / 2)  # tasks weigh equally, not images (3 / 10)
    assert s["correct_images"] == pytest.approx(0.3)
    assert s["prompts"] == 3 and s["correct_prompts"] == pytest.approx(2 / 3)
    assert s["missing_tasks"] == ["two_object", "colors", "position", "color_attr"]
    text = summary_markdown(s)
    assert "| single_object | 12.50 | 0.00 | 1 / 8 |" in text and "**56.25**" in text


# ------------------------------------------------------------------------------- tiny models end to end


@pytest.fixture(scope="module")
def tiny_detector():
    return build_tiny_detector()


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("clip"))


def test_detector_end_to_end_on_a_padded_batch(tiny_detector):
    images = [noise_image(64, 32), noise_image(40, 56, seed=1)]  # different sizes: the processor pads
    out = tiny_detector(images)
    assert len(out) == 2
    for image, found in zip(images, out):
        assert set(found) == {"dog"}
        d = found["dog"]
        assert d.masks.shape[1:] == (image.height, image.width)
        assert np.all(d.scores > 0.3) and np.all(d.scores <= 1) and np.all(np.diff(d.scores) <= 0)
        for b, m in zip(d.boxes, d.masks):  # box = extent of the mask, exclusive right/bottom edge
            ys, xs = np.nonzero(m)
            assert list(b) == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


def test_postprocess_by_hand(tiny_detector):
    class_logits = torch.zeros(2, len(CLASSES) + 1)
    class_logits[0, DOG] = 10.0  # p = e^10 / (e^10 + 80)
    mask_logits = torch.full((2, 8, 8), -10.0)
    mask_logits[0, 2:5, 1:4] = 10.0
    out = tiny_detector.postprocess(class_logits, mask_logits, (8, 8), (8, 8), (8, 8))
    assert set(out) == {"dog"} and len(out["dog"]) == 1  # query 1 (p = 1/81) is dropped
    p = np.exp(10) / (np.exp(10) + 80)
    assert out["dog"].scores[0] == pytest.approx(p * torch.sigmoid(torch.tensor(10.0)).item(), rel=1e-5)
    assert list(out["dog"].boxes[0]) == [1, 2, 4, 5]


def test_detector_load_errors_are_one_line(tmp_path):
    from flowrl.benchmarks.geneval.detect import GenEvalLoadError, QueryInstanceDetector, label_map

    with pytest.raises(GenEvalLoadError, match="does not exist") as info:
        QueryInstanceDetector.from_pretrained(str(tmp_path / "missing"))
    assert "\n" not in str(info.value)
    with pytest.raises(GenEvalLoadError, match="none of GenEval"):
        label_map({0: "wall", 1: "sky"})
    assert label_map({0: "mouse", 1: "wall"}) == {0: "computer mouse"}


def test_hub_id_offline_fails_with_one_line():
    import huggingface_hub.constants

    from flowrl.benchmarks.geneval.detect import GenEvalLoadError, QueryInstanceDetector

    if not huggingface_hub.constants.HF_HUB_OFFLINE:
        pytest.skip("needs HF_HUB_OFFLINE=1 (would wait on network retries)")
    with pytest.raises(GenEvalLoadError) as info:
        QueryInstanceDetector.from_pretrained("facebook/mask2former-swin-small-coco-instance")
    assert "\n" not in str(info.value)


def test_masked_crop_paints_grey_and_crops():
    from flowrl.benchmarks.geneval.detect import masked_crop

    image = Image.new("RGB", (10, 8), (255, 0, 0))
    mask = np.zeros((8, 10), dtype=bool)
    mask[2:6, 3:7] = True
    mask[2, 3] = False
    crop = masked_crop(image, [3, 2, 7, 6], mask)
    assert crop.size == (4, 4)
    assert crop.getpixel((0, 0)) == (153, 153, 153) and crop.getpixel((1, 1)) == (255, 0, 0)


def test_colour_classifier_end_to_end(tiny_clip):
    from flowrl.benchmarks.geneval.detect import GenEvalLoadError

    image = noise_image(48, 40)
    masks = np.zeros((2, 48, 40), dtype=bool)
    masks[0, 5:20, 3:30] = True
    masks[1] = ~masks[0]
    d = ClassDetections([[3, 5, 30, 20], [0, 0, 40, 48]], [0.9, 0.8], masks=masks)
    labels = tiny_clip(image, d, "dog")
    assert len(labels) == 2 and set(labels) <= set(COLORS)
    assert labels == tiny_clip(image, d, "dog")  # deterministic
    weights = tiny_clip.text_weights("dog")
    assert weights.shape == (16, 10) and torch.allclose(weights.norm(dim=0), torch.ones(10), atol=1e-5)
    with pytest.raises(GenEvalLoadError) as info:
        type(tiny_clip).from_pretrained("flowrl-tiny-clip", pretrained="/nonexistent/weights.bin")
    assert "\n" not in str(info.value)


def test_score_folder_end_to_end(tmp_path, tiny_detector, tiny_clip):
    single = GOOD
    colour = {"tag": "colors", "include": [clause(color="red")], "prompt": "a photo of a red dog"}
    write_folder(tmp_path / "images", [single, colour])
    rows, _ = score_folder(tmp_path / "images", tiny_detector, tiny_clip, out_dir=tmp_path / "out")
    assert len(rows) == 4 and rows[0]["filename"] == os.path.join("00000", "samples", "0000.png")
    # The tiny detector sees several "dogs": >= 1 passes the official rule, exact counting fails.
    assert all(r["correct"] and not r["strict"] and r["partial"] == 0.0 for r in rows if r["tag"] == "single_object")
    colour_rows = [r for r in rows if r["tag"] == "colors"]
    assert all(len(json.loads(r["colors"])["dog"]) == 1 for r in colour_rows)
    assert all(r["correct"] == (json.loads(r["colors"])["dog"] == ["red"]) for r in colour_rows)
    assert load_results(tmp_path / "out" / "results.jsonl") == rows
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["images"] == 4 and saved["tasks"]["single_object"]["accuracy"] == 1.0
    assert "| single_object | 100.00 |" in (tmp_path / "out" / "summary.md").read_text()


# ----------------------------------------------------------------------------------------------- reward


def test_reward_contract(tiny_detector, tiny_clip):
    from flowrl.reward_models import build_reward
    from flowrl.reward_models.base import RewardError

    media = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    prompts = ["a photo of a dog", "a photo of two dogs"]
    metadata = [
        {"tag": "single_object", "include": [{"class": "dog", "count": 1}]},
        {"tag": "counting", "include": [{"class": "dog", "count": 2}], "exclude": [{"class": "dog", "count": 3}]},
    ]
    outputs = {
        mode: build_reward("geneval", detector=tiny_detector, colors=tiny_clip, mode=mode)(media, prompts, metadata)
        for mode in ("partial", "strict", "official")
    }
    details = outputs["partial"].details
    assert outputs["partial"].scores.shape == (2,) and outputs["partial"].scores.dtype == torch.float32
    assert torch.equal(outputs["official"].scores, details["correct"].float())
    assert torch.equal(outputs["strict"].scores, details["strict"].float())
    assert details["tag"] == ["single_object", "counting"] and len(details["reasons"]) == 2
    # Random scores (~0.5) never clear the 0.9 counting threshold: nothing found, every score 0.
    assert outputs["partial"].scores[1] == 0.0 and "expected dog>=2, found 0" in details["reasons"][1]
    with pytest.raises(RewardError, match="mode='best'"):
        build_reward("geneval", detector=tiny_detector, colors=tiny_clip, mode="best")
    reward = build_reward("geneval", detector=tiny_detector, colors=tiny_clip)
    with pytest.raises(RewardError, match="sample 1"):
        reward(media, prompts, [metadata[0], {}])


# -------------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("command", [[], ["prompts"], ["score"], ["summary"]])
def test_cli_help(command, capsys):
    from flowrl.benchmarks.geneval.__main__ import main

    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0 and "usage" in capsys.readouterr().out


def test_cli_prompts_and_summary(tmp_path, capsys):
    from flowrl.benchmarks.geneval.__main__ import main
    from flowrl.benchmarks.geneval.scoring import write_results

    main(["prompts", str(tmp_path / "meta.jsonl")])
    assert hashlib.sha256((tmp_path / "meta.jsonl").read_bytes()).hexdigest() == OFFICIAL_SHA256
    rows = [{"tag": "colors", "metadata": "A", "correct": True}, {"tag": "colors", "metadata": "A", "correct": False}]
    write_results(rows, tmp_path / "results.jsonl")  # GenEval's own rows carry no "strict"
    main(["summary", str(tmp_path / "results.jsonl"), "--out", str(tmp_path / "out")])
    assert "| colors | 50.00 | - | 1 / 2 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["overall"] == 0.5
    with pytest.raises(SystemExit, match="threshold"):
        main(["score", str(tmp_path), "--out", str(tmp_path / "o"), "--option", "thresh=0.5"])
