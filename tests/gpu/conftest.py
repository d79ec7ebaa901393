"""The GPU checks run only under `make test-gpu`, which sets
D2LPAR_GPU_TESTS=1; `make test` (pytest tests) does not collect them.

Under `make test-gpu` they fail, never skip, when no GPU is visible. The
checks that need two GPUs are skipped on a one-GPU machine, with a reason,
unless D2LPAR_MIN_GPUS=2 asks for two (then they fail).
"""
import os

import pytest

ENABLED = os.environ.get('D2LPAR_GPU_TESTS') == '1'
if not ENABLED:
    collect_ignore_glob = ['test_*.py']

# tests/conftest.py points every test at an empty, offline data cache;
# the GPU checks train on the real data (the Makefile's data/ folder,
# downloaded when the network allows), as the lesson does on GPUs.
REAL_DATA_ENV = {'D2LPAR_DATA': os.environ.get('D2LPAR_DATA'),
                 'D2LPAR_OFFLINE': os.environ.get('D2LPAR_OFFLINE')}

NO_GPU = ('no GPU visible: make test-gpu needs a machine with GPUs; use '
          'make test on CPU')


def torch_gpus():
    import torch
    return torch.cuda.device_count()


def mxnet_gpus():
    try:
        import mxnet
        return mxnet.npx.num_gpus()
    except Exception:
        return 0


@pytest.fixture(autouse=True)
def require_gpu():
    if torch_gpus() == 0:
        pytest.fail(NO_GPU, pytrace=False)


@pytest.fixture
def two_gpus():
    """Skip (or fail, with D2LPAR_MIN_GPUS >= 2) below two GPUs."""
    n = torch_gpus()
    if n < 2:
        message = f'needs 2 GPUs, PyTorch sees {n}'
        if int(os.environ.get('D2LPAR_MIN_GPUS', '1')) >= 2:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return n


@pytest.fixture
def real_data(monkeypatch):
    from d2lpar import _common
    for name, value in REAL_DATA_ENV.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(_common, '_offline', False)
    _common.fashion_mnist_arrays.cache_clear()
    yield
    _common.fashion_mnist_arrays.cache_clear()
