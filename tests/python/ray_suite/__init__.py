"""A package, so that its conftest is `ray_suite.conftest`, not the `conftest` the other tests import."""
