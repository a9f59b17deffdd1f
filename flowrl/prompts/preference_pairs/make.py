"""Writes this folder's tiny preference pairs (run from the repository root: python flowrl/prompts/preference_pairs/make.py).

Eight prompts of the builtin tiny set, each with a chosen image (a smooth two-colour gradient: what the
``jpeg_compressibility`` reward of ``tiny-cpu`` prefers) and a rejected one (the same colours under strong pixel
noise), 32 x 32 PNGs drawn from a fixed seed, and ``train.jsonl`` rows {"prompt", "chosen", "rejected"}
(paths relative to the folder). The images are committed; this script says how they were made.
"""

import json
import random
from pathlib import Path

from PIL import Image

HERE = Path(__file__).parent
PROMPTS = [
    "a red apple on a table",
    "a blue car in the city",
    "a photo of a cat",
    "a green tree in a field",
    "a white house by the sea",
    "a yellow flower in the grass",
    "a black dog in the snow",
    "a brown horse in a forest",
]
SIZE = 32


def gradient(rng: random.Random) -> list[tuple[int, int, int]]:
    a = [rng.randrange(256) for _ in range(3)]
    b = [rng.randrange(256) for _ in range(3)]
    return [
        tuple(int(a[c] + (b[c] - a[c]) * (x + y) / (2 * SIZE - 2)) for c in range(3))
        for y in range(SIZE)
        for x in range(SIZE)
    ]


def main() -> None:
    rng = random.Random(0)
    (HERE / "images").mkdir(exist_ok=True)
    rows = []
    for i, prompt in enumerate(PROMPTS):
        smooth = gradient(rng)
        noisy = [tuple(max(0, min(255, v + rng.randrange(-96, 97))) for v in px) for px in smooth]
        for name, pixels in (("chosen", smooth), ("rejected", noisy)):
            im = Image.new("RGB", (SIZE, SIZE))
            im.putdata(pixels)
            im.save(HERE / "images" / f"{i}_{name}.png")
        rows.append({"prompt": prompt, "chosen": f"images/{i}_chosen.png", "rejected": f"images/{i}_rejected.png"})
    (HERE / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
