"""A package, so that its conftest is imported as gpu.conftest and never
replaces tests/conftest.py as the module `conftest` (tests import
`get_backend` from it)."""
