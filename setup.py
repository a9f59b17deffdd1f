"""Package discovery for the wheel and the sdist (the metadata lives in pyproject.toml).

flowrl's import names map onto four source folders (``flowrl.pipelines`` is ``pipelines/``, and so on), which
``[tool.setuptools.packages.find]`` cannot express, so every package under each folder is found here: a new
subpackage ships without editing any list.
"""

from setuptools import find_namespace_packages, setup

# flowrl.SOURCE_FOLDERS (flowrl/__init__.py) repeats the last three for a plain checkout with no install;
# tests/core/test_import_graph.py holds the two equal
SOURCE_FOLDERS = {
    "flowrl": "flowrl",
    "flowrl.pipelines": "pipelines",
    "flowrl.reward_models": "reward_models",
    "flowrl.benchmarks": "benchmarks",
}


def discovered_packages() -> list[str]:
    packages = []
    for name, folder in SOURCE_FOLDERS.items():
        packages.append(name)
        # namespace packages too: a folder of data (flowrl/recipes/accelerate) is a package to setuptools
        found = find_namespace_packages(folder, exclude=["*__pycache__*"])
        packages += [f"{name}.{sub}" for sub in found if f"{name}.{sub}" not in SOURCE_FOLDERS]
    return sorted(set(packages))


setup(packages=discovered_packages(), package_dir=SOURCE_FOLDERS)
