"""Shared fixtures: every backend-level test runs once with d2lpar.torch and
once with d2lpar.mxnet, through the `backend` fixture, an adapter of
tests/frameworks.py.

Nothing here touches the network or the repository: plots go to the Agg
backend, Fashion-MNIST is the offline stand-in, and the data cache lives in
a temporary folder. The environment variables are set around each test of
this folder (the `_test_env` fixture), not for the whole process: `make
test` runs the notebooks under nbval in the same pytest workers, and their
kernels inherit the workers' environment.
"""
import atexit
import contextlib
import shutil
import sys
import tempfile
import time

import matplotlib

matplotlib.use('Agg')  # before d2l imports pyplot; this process only

import psutil
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

from frameworks import BACKENDS, get_backend  # noqa: F401 (for the tests)

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
    # Every test starts in English; d2l.use_language in a test is undone.
    # (delenv of an unset variable records nothing to undo: set it first,
    # or a test's use_language would reach the notebooks run after it in
    # this worker, whose kernels inherit its environment)
    monkeypatch.setenv('D2LPAR_LANG', 'en')
    monkeypatch.delenv('D2LPAR_LANG')


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
def _stand_ins_idle_after_each_test():
    """A test ends with no work running on PyTorch's stand-ins, also when
    it fails: work still running would compete for the cores with the
    next test. What is left is waited for (a minute at most), then the
    test fails with the stand-ins still busy."""
    yield
    devices = sys.modules.get('d2lpar._torch.devices')
    if devices is None:
        return
    deadline = time.monotonic() + 60
    while devices._STAND_INS.busy() and time.monotonic() < deadline:
        time.sleep(0.05)
    busy = devices._STAND_INS.busy()
    if busy:
        pytest.fail(f'work still running on the stand-ins {busy} a minute '
                    f'after the test ended')


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    if 'matplotlib.pyplot' in sys.modules:
        sys.modules['matplotlib.pyplot'].close('all')


def kill_survivors(out_dir):
    """The command lines of the processes still running that name
    `out_dir` (the training scripts, torchrun, and the children of
    --leave-a-child), after killing them, so that a failing test leaves
    nothing behind. (Found by their command line, not by the mark of
    d2lpar.distributed.launch: this checks the launcher.)"""
    found = []
    for p in psutil.process_iter(['cmdline', 'status']):
        cmd = ' '.join(p.info['cmdline'] or [])
        if str(out_dir) in cmd and p.info['status'] != psutil.STATUS_ZOMBIE:
            found.append(cmd)
            with contextlib.suppress(psutil.Error):
                p.kill()
    return found
