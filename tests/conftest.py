"""Shared fixtures: every backend-level test runs once with d2lpar.torch and
once with d2lpar.mxnet, through the `backend` fixture.

Nothing here touches the network or the repository: plots go to the Agg
backend, Fashion-MNIST is the offline stand-in, and the data cache lives in
a temporary folder. The environment variables are set around each test of
this folder (the `_test_env` fixture), not for the whole process: `make
test` runs the notebooks under nbval in the same pytest workers, and their
kernels inherit the workers' environment.
"""
import atexit
import importlib
import shutil
import sys
import tempfile

import matplotlib

matplotlib.use('Agg')  # before d2l imports pyplot; this process only

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

# Few examples, no deadline (the first MXNet call is slow), no example
# database, and Hypothesis' other files (its cache of constants) in a
# temporary folder: nothing is written into the repository.
_hypothesis_home = tempfile.mkdtemp(prefix='d2lpar-hypothesis-')
atexit.register(shutil.rmtree, _hypothesis_home, True)
set_hypothesis_home_dir(_hypothesis_home)
settings.register_profile(
    'd2lpar', max_examples=25, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow,
                           HealthCheck.function_scoped_fixture])
settings.load_profile('d2lpar')

BACKENDS = ('torch', 'mxnet')


class Backend:
    """A d2lpar backend module plus the few framework-specific helpers the
    tests need, so that every test is written once.

    Attribute access falls through to the module: ``backend.allreduce``
    is ``d2lpar.<name>.allreduce``.
    """

    def __init__(self, name):
        self.name = name
        self.module = importlib.import_module(f'd2lpar.{name}')
        if name == 'torch':
            import torch
            self._fw = torch
        else:
            import mxnet
            self._fw = mxnet

    def __getattr__(self, attr):
        return getattr(self.module, attr)

    def __repr__(self):
        return f'<backend {self.name}>'

    # -- arrays -----------------------------------------------------------
    def array(self, a, device=None):
        """A framework array with the values and dtype of NumPy `a`."""
        a = np.asarray(a)
        device = self.module.cpu() if device is None else device
        if self.name == 'torch':
            return self._fw.tensor(a, device=device)
        return self._fw.np.array(a, ctx=device, dtype=a.dtype)

    def full(self, n, value, device):
        """A float32 vector of `n` copies of `value` on `device`, made by an
        operation of the framework (in MXNet: queued, not yet run)."""
        if self.name == 'torch':
            return self._fw.full((n,), value, device=device)
        return self._fw.np.full(n, value, ctx=device, dtype='float32')

    def numpy(self, x):
        """A NumPy copy of framework array `x` (waits for it)."""
        if self.name == 'torch':
            return x.detach().cpu().numpy()
        return x.asnumpy()

    def is_on(self, x, device):
        """Whether array `x` lives on `device`. A PyTorch CPU stand-in
        (cpu:i) keeps its tensors in the CPU's memory, device 'cpu'."""
        if self.name == 'torch':
            device = self._fw.device(device)
            return x.device == (self._fw.device('cpu')
                                if device.type == 'cpu' else device)
        return x.ctx == device

    def view(self, x):
        """Another array object that shares the memory of `x`."""
        return x.detach()  # both frameworks: a new object, the same memory

    def is_cpu(self, device):
        if self.name == 'torch':
            return self._fw.device(device).type == 'cpu'
        return device.device_type == 'cpu'

    def stand_ins(self, k):
        """What try_devices(k) must return on a machine without a GPU."""
        if self.name == 'torch':
            return [self._fw.device('cpu', i) for i in range(k)]
        return [self._fw.npx.cpu(i) for i in range(k)]

    def seed(self, n):
        """Seed the framework RNG that lenet_params draws from."""
        if self.name == 'torch':
            self._fw.manual_seed(n)
        else:
            self._fw.random.seed(n)


_backends = {}


def get_backend(name):
    if name not in _backends:
        _backends[name] = Backend(name)
    return _backends[name]


@pytest.fixture(scope='session')
def data_root(tmp_path_factory):
    """The data cache of the tests: D2LPAR_DATA points here."""
    return tmp_path_factory.mktemp('d2lpar-data')


@pytest.fixture(autouse=True)
def _test_env(monkeypatch, data_root):
    monkeypatch.setenv('MPLBACKEND', 'Agg')
    monkeypatch.setenv('D2LPAR_OFFLINE', '1')
    monkeypatch.setenv('D2LPAR_DATA', str(data_root))
    monkeypatch.delenv('D2LPAR_FASHION_MNIST_URL', raising=False)


@pytest.fixture(scope='session', params=BACKENDS)
def backend(request):
    return get_backend(request.param)


@pytest.fixture
def common(monkeypatch):
    """`d2lpar._common` with fresh once-per-process state: the messages
    said so far, the offline flag and the cached data set."""
    from d2lpar import _common
    monkeypatch.setattr(_common, '_said', set())
    monkeypatch.setattr(_common, '_offline', False)
    _common.fashion_mnist_arrays.cache_clear()
    yield _common
    _common.fashion_mnist_arrays.cache_clear()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    if 'matplotlib.pyplot' in sys.modules:
        sys.modules['matplotlib.pyplot'].close('all')
