"""Packaging glue: setup.cfg holds the metadata; this only lists the packages.

setup.cfg cannot combine `find:` with an extra mapped package, so the package list lives here:
every kosmos.* package under kosmos/, plus kosmos._hipsrc, which is the checkout's hipsrc/
shipped as package data (the kernels are compiled at run time).
"""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["kosmos", "kosmos.*"]) + ["kosmos._hipsrc"])
