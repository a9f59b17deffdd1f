"""UniGenBench's evaluation dimensions: 10 primary dimensions holding 27 sub-dimensions ("testpoints").

Names are the benchmark's English strings, as its CSVs and judge use them. A testpoint's primary
dimension is the text before its first ``-`` (whitespace stripped: the official script keeps the trailing
space of ``"Attribute "``); a name without ``-`` is its own primary dimension. The Chinese CSVs name the
same testpoints in Chinese (``属性-数量``); ``canonical_name`` maps both spellings to the English one, so
results of the two languages are reported under the same keys.

The one-line definitions shown to the judge are flowrl's own wording (``DEFINITIONS_EN`` / ``_ZH``).
"""

from __future__ import annotations

import difflib
import re

# primary dimension -> its sub-dimensions (full testpoint names), in the order results are reported
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "Style": ("Style",),
    "World Knowledge": ("World Knowledge",),
    "Attribute": tuple(f"Attribute - {s}" for s in ("Quantity", "Expression", "Material", "Color", "Shape", "Size")),
    "Action": tuple(
        f"Action - {s}"
        for s in (
            "Full-body (Character/Anthropomorphic)",
            "Hand (Character/Anthropomorphic)",
            "Animal",
            "Contact Interaction",
            "Non-contact Interaction",
            "State",
        )
    ),
    "Relationship": tuple(f"Relationship - {s}" for s in ("Composition", "Similarity", "Inclusion", "Comparison")),
    "Compound": ("Compound - Imagination", "Compound - Feature Matching"),
    "Grammar": tuple(f"Grammar - {s}" for s in ("Negation", "Pronoun Reference", "Consistency")),
    "Logical Reasoning": ("Logical Reasoning",),
    "Entity Layout": ("Entity Layout - Two-Dimensional Space", "Entity Layout - Three-Dimensional Space"),
    "Text Generation": ("Text Generation",),
}
PRIMARY: tuple[str, ...] = tuple(DIMENSIONS)
SUB_DIMENSIONS: tuple[str, ...] = tuple(name for subs in DIMENSIONS.values() for name in subs)

# Chinese spellings used by test_prompts_zh*.csv
ZH_PRIMARY = {
    "风格": "Style",
    "世界知识": "World Knowledge",
    "属性": "Attribute",
    "动作": "Action",
    "关系": "Relationship",
    "复合考点": "Compound",
    "语法": "Grammar",
    "逻辑推理": "Logical Reasoning",
    "实体布局": "Entity Layout",
    "文本生成": "Text Generation",
}
ZH_SUB = {
    "数量": "Quantity",
    "表情": "Expression",
    "材质": "Material",
    "颜色": "Color",
    "形状": "Shape",
    "大小": "Size",
    "人物/拟人全身动作": "Full-body (Character/Anthropomorphic)",
    "人物/拟人手部动作": "Hand (Character/Anthropomorphic)",
    "动物动作": "Animal",
    "实体间有接触互动": "Contact Interaction",
    "实体间无接触互动": "Non-contact Interaction",
    "状态": "State",
    "构成关系": "Composition",
    "相似关系": "Similarity",
    "包含关系": "Inclusion",
    "比较关系": "Comparison",
    "想象力": "Imagination",
    "不同实体特征匹配": "Feature Matching",
    "否定": "Negation",
    "代词指代": "Pronoun Reference",
    "统一性": "Consistency",
    "二维空间": "Two-Dimensional Space",
    "三维空间": "Three-Dimensional Space",
}

DEFINITIONS_EN: dict[str, str] = {
    "Style": "the requested art, painting, photography or design style, or the named artist's manner",
    "World Knowledge": "real-world knowledge: famous people, landmarks, domain facts, well-known phrases",
    "Attribute - Quantity": "the number of objects, especially three or more",
    "Attribute - Expression": "a facial expression that conveys the stated emotion",
    "Attribute - Material": "what an object is made of and its texture",
    "Attribute - Color": "the stated colours of objects",
    "Attribute - Shape": "the stated shapes of objects",
    "Attribute - Size": "size, height, length, thickness or width, alone or relative to other objects",
    "Action - Full-body (Character/Anthropomorphic)": "a whole-body action of a person or anthropomorphic being",
    "Action - Hand (Character/Anthropomorphic)": "a hand action, with well-formed hands and fingers",
    "Action - Animal": "an action performed by an animal",
    "Action - Contact Interaction": "entities physically touching or acting on each other",
    "Action - Non-contact Interaction": "entities interacting without touching, e.g. looking at each other",
    "Action - State": "an ongoing state of an entity, usually given by a verb",
    "Relationship - Composition": "an entity made up of, or formed from, other entities",
    "Relationship - Similarity": "a resemblance between different entities",
    "Relationship - Inclusion": "one entity contained in another (a container, or a surface such as a picture)",
    "Relationship - Comparison": "a comparison of an attribute between entities",
    "Compound - Imagination": "an imaginative combination that could not happen in reality",
    "Compound - Feature Matching": "each entity carrying its own, different, stated features",
    "Grammar - Negation": "something the prompt says is absent or not done",
    "Grammar - Pronoun Reference": "a pronoun resolved to the right entity",
    "Grammar - Consistency": "an attribute shared by several entities",
    "Logical Reasoning": "what follows from the prompt's intent after some reasoning",
    "Entity Layout - Two-Dimensional Space": "where entities sit in the picture plane",
    "Entity Layout - Three-Dimensional Space": "where entities sit in depth (front, behind, distance)",
    "Text Generation": "the exact text to be written, with nothing missing or added",
}

DEFINITIONS_ZH: dict[str, str] = {
    "Style": "所要求的艺术、绘画、摄影或设计风格，或指定艺术家的风格",
    "World Knowledge": "现实世界的知识：名人、地标建筑、领域常识、常见说法",
    "Attribute - Quantity": "物体的数量，尤其是三个及以上",
    "Attribute - Expression": "面部表情，并能看出所要求的情绪",
    "Attribute - Material": "物体的材质与质感",
    "Attribute - Color": "物体所要求的颜色",
    "Attribute - Shape": "物体所要求的形状",
    "Attribute - Size": "大小、高矮、长短、粗细、宽窄，或与其他物体相比的大小",
    "Action - Full-body (Character/Anthropomorphic)": "人物或拟人形象的全身动作",
    "Action - Hand (Character/Anthropomorphic)": "手部动作，且手和手指结构完整正确",
    "Action - Animal": "动物做出的动作",
    "Action - Contact Interaction": "实体之间有身体接触的互动",
    "Action - Non-contact Interaction": "实体之间没有接触的互动，例如相互对视",
    "Action - State": "实体持续的状态，通常由一个动词表达",
    "Relationship - Composition": "一个实体由其他实体组成或构成",
    "Relationship - Similarity": "不同实体之间的相似之处",
    "Relationship - Inclusion": "一个实体被另一个包含（容器，或画面等平面）",
    "Relationship - Comparison": "实体之间某种属性的比较",
    "Compound - Imagination": "现实中不可能出现的想象组合",
    "Compound - Feature Matching": "不同实体各自带有所要求的不同特征",
    "Grammar - Negation": "提示词中说明不存在或没有发生的内容",
    "Grammar - Pronoun Reference": "代词指向正确的实体",
    "Grammar - Consistency": "多个实体共有的属性",
    "Logical Reasoning": "需要理解提示词意图并推理后才能得到的内容",
    "Entity Layout - Two-Dimensional Space": "实体在画面平面内的位置与排布",
    "Entity Layout - Three-Dimensional Space": "实体在纵深方向上的位置（前后、远近）",
    "Text Generation": "需要写出的文字，准确无遗漏、无多余",
}

_SPACES = re.compile(r"\s+")


def _key(name: str) -> str:
    """Comparison key: case-folded, spaces around ``-`` and runs of spaces normalised."""
    parts = [_SPACES.sub(" ", p).strip() for p in name.split("-", 1)]
    return " - ".join(parts).casefold()


_LOOKUP: dict[str, str] = {_key(name): name for name in SUB_DIMENSIONS}
for _zh_primary, _en_primary in ZH_PRIMARY.items():
    if _en_primary in DIMENSIONS and DIMENSIONS[_en_primary] == (_en_primary,):
        _LOOKUP[_key(_zh_primary)] = _en_primary
for _zh_sub, _en_sub in ZH_SUB.items():
    for _name in SUB_DIMENSIONS:
        if _name.endswith(" - " + _en_sub):
            _zh_prefix = next(zh for zh, en in ZH_PRIMARY.items() if _name.startswith(en + " - "))
            _LOOKUP[_key(f"{_zh_prefix}-{_zh_sub}")] = _name


def canonical_name(name: str) -> str | None:
    """The English sub-dimension for a testpoint name (either language, loose spacing), or None."""
    return _LOOKUP.get(_key(name)) if isinstance(name, str) else None


def closest_name(name: str) -> str | None:
    close = difflib.get_close_matches(str(name), list(SUB_DIMENSIONS), n=1, cutoff=0.5)
    return close[0] if close else None


def primary_of(name: str) -> str:
    """The primary dimension of a testpoint name: the text before the first ``-``, stripped."""
    return name.split("-", 1)[0].strip()
