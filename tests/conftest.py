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

# Few examples, drawn the same way on every run, no deadline (the first
# MXNet call is slow), no example database, and Hypothesis' other files
# (its cache of constants) in a temporary folder: nothing is written into
# the repository.
_hypothesis_home = tempfile.mkdtemp(prefix='d2lpar-hypothesis-')
atexit.register(shutil.rmtree, _hypothesis_home, True)
set_hypothesis_home_dir(_hypothesis_home)
settings.register_profile(
    'd2lpar', max_examples=25, deadline=None, database=None,
    derandomize=True, print_blob=True,  # a failure replays the same way
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

    def gpu_device(self, i):
        """The device object of GPU `i`, made by the framework itself (not
        by d2lpar): creating it allocates nothing and needs no GPU."""
        if self.name == 'torch':
            return self._fw.device('cuda', i)
        return self._fw.npx.gpu(i)

    def framework_gpus(self):
        """How many GPUs the framework itself reports."""
        if self.name == 'torch':
            return self._fw.cuda.device_count()
        return self._fw.context.num_gpus()

    def simulate_gpus(self, monkeypatch, n):
        """Make the framework report `n` GPUs for the rest of the test.
        Only the count is faked; see the `gpus` fixture."""
        if self.name == 'torch':
            monkeypatch.setattr(self._fw.cuda, 'device_count', lambda: n)
            monkeypatch.setattr(self._fw.cuda, 'is_available', lambda: n > 0)
        else:  # npx.num_gpus is context.num_gpus, bound in two modules
            monkeypatch.setattr(self._fw.npx, 'num_gpus', lambda: n)
            monkeypatch.setattr(self._fw.context, 'num_gpus', lambda: n)

    def stand_ins(self, k):
        """What try_devices(k) must return when there are fewer than k
        GPUs."""
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
    # Every test starts in English; d2l.use_language in a test is undone
    monkeypatch.delenv('D2LPAR_LANG', raising=False)


@pytest.fixture(scope='session', params=BACKENDS)
def backend(request):
    return get_backend(request.param)


# The GPU counts that the device tests (test_api.py, "Devices") run with:
# the machine's own, and 0, 1 and 2 simulated GPUs.
GPU_COUNTS = ('real', 'sim0', 'sim1', 'sim2')


@pytest.fixture(params=GPU_COUNTS)
def gpus(request, backend, monkeypatch):
    """The number of GPUs `backend` reports during this test: the
    machine's own ('real'), or 0, 1 or 2 simulated ones ('simN').

    A simulated GPU is only a count: torch.cuda.device_count and
    torch.cuda.is_available, or MXNet's num_gpus, are patched to say N.
    What such a run checks is d2lpar's device logic with N GPUs (num_gpus,
    gpu, try_gpu, try_all_gpus, try_devices and what they print), so on a
    CPU-only machine the GPU branches of that logic run too. It checks
    nothing about GPUs themselves. A test that takes this fixture may make
    and compare device objects (torch.device('cuda', 1), mxnet.gpu(1)),
    but must not allocate, copy or compute on them (no tensors, no
    synchronize): a simulated GPU would fail there, or, worse, a real one
    would be used behind the simulated count. Computing on real GPUs is
    for tests/gpu (make test-gpu)."""
    if request.param == 'real':
        return backend.framework_gpus()
    n = int(request.param[len('sim'):])
    backend.simulate_gpus(monkeypatch, n)
    return n


@pytest.fixture
def fresh_data(monkeypatch):
    """`d2lpar.data` with fresh once-per-process state: the messages said
    so far (`say_once`), the offline flag and the cached data set."""
    from d2lpar import data, i18n
    monkeypatch.setattr(i18n, '_said', set())
    monkeypatch.setattr(data, '_offline', False)
    data.fashion_mnist_arrays.cache_clear()
    yield data
    data.fashion_mnist_arrays.cache_clear()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    if 'matplotlib.pyplot' in sys.modules:
        sys.modules['matplotlib.pyplot'].close('all')
