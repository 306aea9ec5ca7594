"""What goes into the wheel; everything else about the package is in ``pyproject.toml``.

Only this needs code: the checkout's top-level ``resources/`` folder is installed as ``core/resources``
(a folder of data inside ``core``, not a top-level package of that generic name), every file under
it, whatever is added later. ``core.util.process.resources`` finds it there, in the checkout or in a bundle.
"""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages(
            include=["core", "core.*", "app", "app.*"], exclude=["*__pycache__"]
        ),
        "core.resources",
    ],
    package_dir={"core.resources": "resources"},
    package_data={"*": ["py.typed"], "core.resources": ["**/*"]},
    exclude_package_data={"core.resources": ["*.pyc"]},
)
