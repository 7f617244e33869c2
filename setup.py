"""Packaging glue: setup.cfg holds the metadata; this only lists the packages.

setup.cfg cannot combine `find:` with an extra mapped package, so the package list lives here:
every directory under kosmos/ (with or without an __init__.py: a module added without one must
still ship), plus kosmos._hipsrc, which is the checkout's hipsrc/ shipped as package data (the
kernels are compiled at run time).
"""
from setuptools import find_namespace_packages, setup

packages = find_namespace_packages(include=["kosmos", "kosmos.*"], exclude=["*.__pycache__", "*.__pycache__.*"])
setup(packages=packages + ["kosmos._hipsrc"])
