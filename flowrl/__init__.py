"""flowrl: online reinforcement learning of flow-matching generators on Hugging Face diffusers.

The tree: the import names ``flowrl.pipelines``, ``flowrl.reward_models`` and ``flowrl.benchmarks`` are the
folders ``pipelines/``, ``reward_models/`` and ``benchmarks/`` beside this one (``SOURCE_FOLDERS``, as
``setup.py`` maps them; the wheel puts them under ``flowrl/``). An install maps them; in a plain checkout
(``PYTHONPATH=.``, no install) the finder below does.
"""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

# flowrl's subpackages whose source folder sits beside flowrl/ (setup.py's SOURCE_FOLDERS, less flowrl itself)
SOURCE_FOLDERS = {
    "flowrl.pipelines": "pipelines",
    "flowrl.reward_models": "reward_models",
    "flowrl.benchmarks": "benchmarks",
}


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``SOURCE_FOLDERS`` in a plain checkout. Asked last: an install's own finder answers first."""

    def find_spec(self, name, path=None, target=None):
        folder = SOURCE_FOLDERS.get(name)
        init = Path(__file__).resolve().parents[1] / folder / "__init__.py" if folder else None
        if init is None or not init.is_file():
            return None
        return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])


if not any(isinstance(finder, CheckoutFinder) for finder in sys.meta_path):
    sys.meta_path.append(CheckoutFinder())
