"""The chaos suite's fixtures: the Python suite's (tests/python/conftest.py), through .util."""
from .util import _base

fresh_cluster = _base.fresh_cluster
pytest_sessionfinish = _base.pytest_sessionfinish
