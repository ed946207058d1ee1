"""Package layout (everything else is in pyproject.toml).

The repository's `app/` and `db/` folders install as `reflectrm_app` and `reflectrm_db`, so they never
collide with another project's top-level `app` or `db` in site-packages.
"""

from setuptools import find_packages, setup

RENAMED = {"reflectrm_app": "app", "reflectrm_db": "db"}


def packages() -> list[str]:
    found = find_packages(include=["reflectrm", "reflectrm.*"])
    for name, folder in RENAMED.items():
        found += [name + sub[len(folder):] for sub in find_packages(include=[folder, f"{folder}.*"])]
    return found


setup(packages=packages(), package_dir=RENAMED)
