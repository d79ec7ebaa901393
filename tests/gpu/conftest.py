"""The GPU checks are collected by every pytest run of tests/ and say why
when they cannot run:

- without a GPU they are skipped, with the reason; `make test-gpu` sets
  D2LPAR_REQUIRE_GPU=1, and then a missing GPU fails every check instead;
- D2LPAR_MIN_GPUS=N also makes every check fail when PyTorch sees fewer
  than N GPUs (CI's GPU job sets it: 1 by default, 2 on a two-GPU runner,
  so that the two-GPU checks cannot be skipped there);
- otherwise the checks that need two GPUs are skipped on a one-GPU
  machine, with the reason.
"""
import os

import pytest

# tests/conftest.py points every test at an empty, offline data cache;
# the GPU checks train on the real data (the Makefile's data/ folder,
# downloaded when the network allows), as the lesson does on GPUs.
REAL_DATA_ENV = {'D2LPAR_DATA': os.environ.get('D2LPAR_DATA'),
                 'D2LPAR_OFFLINE': os.environ.get('D2LPAR_OFFLINE')}

NO_GPU = ('no GPU visible: make test-gpu needs a machine with GPUs; use '
          'make test on CPU')
SKIPPED = ('no GPU visible to PyTorch: these checks run on a machine with '
           'GPUs (make test-gpu, where a missing GPU fails them)')


def torch_gpus():
    import torch
    return torch.cuda.device_count()


def mxnet_gpus():
    """How many GPUs MXNet sees. MXNet built without CUDA (the mxnet wheel
    from PyPI, the pinned one) sees none: that known case is 0. Anything
    else is raised, not read as "no GPU": MXNet missing or failing to load
    (a CUDA build without its CUDA libraries), or a CUDA error."""
    import mxnet
    from mxnet.runtime import Features
    if not Features().is_enabled('CUDA'):
        return 0
    return mxnet.npx.num_gpus()


def required_gpus():
    """(how many GPUs this run requires, why): D2LPAR_MIN_GPUS, and at
    least one under D2LPAR_REQUIRE_GPU=1 (make test-gpu)."""
    value = os.environ.get('D2LPAR_MIN_GPUS', '')
    try:
        wanted = int(value or 0)
    except ValueError:
        pytest.fail(f'D2LPAR_MIN_GPUS must be a whole number, got '
                    f'{value!r}', pytrace=False)
    if os.environ.get('D2LPAR_REQUIRE_GPU') == '1' and wanted < 1:
        return 1, 'D2LPAR_REQUIRE_GPU=1 (make test-gpu)'
    return wanted, f'D2LPAR_MIN_GPUS={value}'


@pytest.fixture(autouse=True)
def visible_gpus():
    """The number of GPUs PyTorch sees: the check fails below the number
    required (see above), and is skipped when there is none."""
    n = torch_gpus()
    wanted, why = required_gpus()
    if n < wanted:
        message = f'{why} requires {wanted} GPU(s), PyTorch sees {n}'
        pytest.fail(f'{NO_GPU} ({message})' if n == 0 else message,
                    pytrace=False)
    if n == 0:
        pytest.skip(SKIPPED)
    return n


@pytest.fixture
def two_gpus(visible_gpus):
    """Two GPUs or more; skipped below (visible_gpus fails instead when
    D2LPAR_MIN_GPUS >= 2)."""
    if visible_gpus < 2:
        pytest.skip(f'needs 2 GPUs, PyTorch sees {visible_gpus} (a runner '
                    f'with two sets D2LPAR_MIN_GPUS=2 to require them)')
    return visible_gpus


@pytest.fixture
def real_data(monkeypatch):
    from d2lpar import data
    for name, value in REAL_DATA_ENV.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(data, '_offline', False)
    data.fashion_mnist_arrays.cache_clear()
    yield
    data.fashion_mnist_arrays.cache_clear()
