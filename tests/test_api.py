"""The public API: one package, two backends with the same names and
signatures; devices (the machine's GPUs, or simulated ones, or none);
timing and plotting."""
import inspect
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import get_backend
from d2lpar import api, timing


# --------------------------------------------------------------------------
# One API, two backends
# --------------------------------------------------------------------------
def test_importing_d2lpar_imports_no_framework():
    code = ('import sys, d2lpar, d2lpar.api; '
            'print(sorted(m for m in ("torch", "mxnet", "d2l") '
            'if m in sys.modules))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.strip() == '[]'


def test_one_list_of_names_without_duplicates():
    """Both backends export api.SHARED + api.BACKEND (so the same
    names; test_every_exported_name_exists checks each defines them all),
    and no name is listed twice."""
    names = api.SHARED + api.BACKEND
    for backend in ('torch', 'mxnet'):
        assert get_backend(backend).module.__all__ == names
    assert len(names) == len(set(names))


def test_every_exported_name_exists(backend):
    missing = [n for n in backend.module.__all__
               if not hasattr(backend.module, n)]
    assert missing == []


def _comparable(sig):
    params = []
    for p in sig.parameters.values():
        if p.default is inspect.Parameter.empty:
            default = '<no default>'
        elif inspect.isfunction(p.default):  # e.g. reduce=allreduce
            default = ('function', p.default.__name__)
        else:
            default = repr(p.default)
        params.append((p.name, p.kind, default))
    return params


def _public_callables():
    module = get_backend('torch').module
    return sorted(n for n in module.__all__
                  if inspect.isfunction(getattr(module, n))
                  or inspect.isclass(getattr(module, n)))


@pytest.mark.parametrize('name', _public_callables())
def test_same_signature_in_both_backends(name):
    a = getattr(get_backend('torch').module, name)
    b = getattr(get_backend('mxnet').module, name)
    try:
        sig_a = inspect.signature(a)
    except ValueError:  # e.g. an exception class: must be the same class
        assert a is b
        return
    assert _comparable(sig_a) == _comparable(inspect.signature(b))


def _positional(fn):
    """The parameters of `fn` that a call may pass by position."""
    try:
        sig = inspect.signature(fn)
    except ValueError:
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


@pytest.mark.parametrize('framework', ['torch', 'mxnet'])
def test_no_public_function_takes_more_than_three_arguments_by_position(
        framework):
    # A call like train_concise(net, devices, 256, 0.1, 10, 6000) says
    # nothing to its reader; past the third, arguments go by keyword.
    # Also the lesson 3 training loop `fit`, which every process runs
    module = get_backend(framework).module
    names = _public_callables() + ['fit']
    crowded = {n: _positional(getattr(module, n)) for n in names
               if len(_positional(getattr(module, n))) > 3}
    assert crowded == {}, (
        f'these public functions of d2lpar.{framework} take more than three '
        f'arguments by position (put a * after the third): {crowded}')


def test_results_are_built_by_keyword():
    from d2lpar.distributed.runs import DistributedResult
    from d2lpar.training import TrainResult
    for cls in (TrainResult, DistributedResult):
        with pytest.raises(TypeError):
            cls(0.9, 1.0, ['cpu'], 1, 10, [0.9])


@pytest.mark.parametrize('name', api.SHARED)
def test_shared_names_are_the_same_objects(name):
    assert getattr(get_backend('torch').module, name) is \
        getattr(api, name)
    assert getattr(get_backend('mxnet').module, name) is \
        getattr(api, name)


def test_loss_gives_the_same_per_example_numbers_in_both_backends():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 10)).astype(np.float32)
    labels = np.array([0, 3, 9, 3, 1])
    shifted = logits - logits.max(axis=1, keepdims=True)
    expected = -(shifted[np.arange(5), labels]
                 - np.log(np.exp(shifted).sum(axis=1)))
    for name, label_dtype in (('torch', np.int64), ('mxnet', np.int32)):
        b = get_backend(name)
        got = b.numpy(b.loss(b.array(logits),
                             b.array(labels.astype(label_dtype))))
        assert got.shape == (5,)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------
# Devices, with the machine's own GPUs and with 0, 1 and 2 simulated ones
# (the `gpus` fixture of conftest.py: only the count is simulated, so these
# tests make and compare device objects and allocate nothing on them)
# --------------------------------------------------------------------------
def test_num_gpus_is_what_the_framework_reports(backend, gpus):
    assert backend.num_gpus() == gpus


def test_try_all_gpus_gives_every_gpu_or_the_cpu(backend, gpus):
    devices = backend.try_all_gpus()
    if gpus == 0:
        assert devices == [backend.cpu()]
        assert backend.is_cpu(devices[0])
    else:
        assert devices == [backend.gpu_device(i) for i in range(gpus)]
        assert not any(backend.is_cpu(d) for d in devices)


@pytest.mark.parametrize('i', [0, 1, 3])
def test_try_gpu_is_that_gpu_or_the_cpu(backend, gpus, i):
    device = backend.try_gpu(i)
    if i < gpus:
        assert device == backend.gpu_device(i)
        assert not backend.is_cpu(device)
    else:
        assert device == backend.cpu()
    assert backend.try_gpu() == backend.try_gpu(0)


def test_gpu_gives_each_gpu_there_is(backend, gpus):
    assert [backend.gpu(i) for i in range(gpus)] == \
        [backend.gpu_device(i) for i in range(gpus)]


@pytest.mark.parametrize('beyond', [0, 1])
def test_gpu_that_does_not_exist_raises_value_error(backend, gpus, beyond):
    i = gpus + beyond
    with pytest.raises(ValueError, match=f'There is no GPU {i}: this '
                                         f'machine has {gpus} GPU'):
        backend.gpu(i)


@pytest.mark.parametrize('i', [-1, 'a', 1.0, None])
def test_gpu_with_a_bad_index_raises_type_error(backend, i):
    with pytest.raises(TypeError, match=r'int >= 0'):
        backend.gpu(i)


@pytest.mark.parametrize('k', [1, 2, 3])
def test_try_devices_gives_k_gpus_or_k_cpu_stand_ins(backend, gpus, k):
    """As documented: the first k GPUs when there are k, else k CPU
    stand-ins, never a mix (one GPU and k = 2 give two stand-ins)."""
    devices = backend.try_devices(k)
    if gpus >= k:
        assert devices == [backend.gpu_device(i) for i in range(k)]
    else:
        assert devices == backend.stand_ins(k)
        assert all(backend.is_cpu(d) for d in devices)


def test_try_devices_says_once_what_it_fell_back_to(backend, gpus, fresh_data,
                                                   capsys):
    k = max(3, gpus + 1)  # more devices than GPUs
    assert len(backend.try_devices(k)) == k
    assert len(backend.try_devices(k)) == k
    out = capsys.readouterr().out
    found = 'No GPU' if gpus == 0 else f'Only {gpus} GPU(s)'
    assert out.count(f'{found} found, {k} devices requested') == 1
    assert out.count('CPU stand-ins') == 1
    assert 'each computing with' in out and 'share cores' in out


def test_try_devices_says_nothing_when_there_are_enough_gpus(
        backend, gpus, fresh_data, capsys):
    for k in range(1, gpus + 1):
        assert len(backend.try_devices(k)) == k
    assert capsys.readouterr().out == ''


@pytest.mark.parametrize('k', [0, -2, 2.0, '2', None])
def test_try_devices_rejects_a_bad_count(backend, k):
    with pytest.raises(ValueError, match='num_devices must be an int >= 1'):
        backend.try_devices(k)


# products_that_fit: the lesson's GPU workload, sized from a fake free
# memory (the count of GPUs simulated, the framework's report of free
# memory patched; nothing is allocated)
MB = 10 ** 6
RESULT = 4 * 4000 * 4000  # bytes of one 4000x4000 float32 product


def fake_free_memory(backend, monkeypatch, free):
    """Simulate len(`free`) GPUs, GPU i reporting free[i] bytes free."""
    backend.simulate_gpus(monkeypatch, len(free))
    total = 80 * 10 ** 9
    backend.simulate_gpu_memory(monkeypatch, lambda i: (free[i], total))


@pytest.mark.parametrize('free', [[80_000 * MB], [2000 * MB],
                                  [80_000 * MB, 2000 * MB], [700 * MB]])
def test_products_that_fit_the_free_memory_of_every_gpu(backend,
                                                        monkeypatch, free):
    fake_free_memory(backend, monkeypatch, free)
    devices = [backend.gpu_device(i) for i in range(len(free))]
    n = backend.products_that_fit(50, (4000, 4000), devices)
    assert isinstance(n, int) and 1 <= n <= 50
    least = min(free)
    # n results and the input fit in 9/10 of the least free memory ...
    assert (n + 1) * RESULT <= 0.9 * least
    # ... and one more would not fit beside the margin (at most 256 MiB)
    assert n == 50 or (n + 2) * RESULT > least - (256 << 20)
    if least > 60 * RESULT:
        assert n == 50  # a large GPU takes the book's 50


def test_products_that_fit_leaves_the_cpu_workload_alone(backend,
                                                         monkeypatch):
    fake_free_memory(backend, monkeypatch, [1])  # a GPU with no room

    def no_query(i):
        raise AssertionError('free GPU memory asked for a CPU device')
    backend.simulate_gpu_memory(monkeypatch, no_query)
    for devices in (backend.stand_ins(2), [backend.cpu()]):
        assert backend.products_that_fit(50, (4000, 4000), devices) == 50
        assert backend.products_that_fit(7, (1000, 1000), devices) == 7


def test_products_that_fit_says_when_not_even_one_fits(backend,
                                                       monkeypatch):
    fake_free_memory(backend, monkeypatch, [80_000 * MB, 300 * MB])
    devices = [backend.gpu_device(0), backend.gpu_device(1)]
    with pytest.raises(ValueError, match=r'has 0\.30 GB free: not enough '
                                         r'for even one product'):
        backend.products_that_fit(50, (4000, 4000), devices)
    with pytest.raises(ValueError, match='num_products must be an int'):
        backend.products_that_fit(0, (10, 10), devices)


def test_synchronize_refuses_a_bad_device_list(backend):
    # That it waits: tests/test_sync.py
    with pytest.raises(ValueError, match='empty'):
        backend.synchronize([])
    with pytest.raises(TypeError, match='list of devices'):
        backend.synchronize('cpu')


# --------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------
@pytest.fixture
def records(monkeypatch):
    fresh = []
    monkeypatch.setattr(timing.Benchmark, 'records', fresh)
    return fresh


def test_benchmark_records_and_prints(backend, records, capsys):
    with backend.Benchmark('tiny step') as b:
        time.sleep(0.01)
    assert records == [('tiny step', b.seconds)]
    assert b.seconds >= 0.01
    out = capsys.readouterr().out
    assert re.fullmatch(r'tiny step: \d+\.\d{4} sec\n', out), out
    assert float(out.split()[-2]) == pytest.approx(b.seconds, abs=1e-4)
    with backend.Benchmark() as b2:
        pass
    assert records[-1] == ('Done', b2.seconds)
    assert backend.Benchmark.last('tiny step') == b.seconds


def test_benchmark_last_gives_the_latest_measurement(backend, records):
    records.extend([('a', 1.0), ('b', 2.0), ('a', 0.5)])
    assert backend.Benchmark.last('a') == 0.5
    assert backend.Benchmark.last('b') == 2.0


def test_benchmark_last_of_an_unknown_name(backend, records):
    with pytest.raises(KeyError, match="Nothing was measured as 'nope' yet"):
        backend.Benchmark.last('nope')


def test_benchmark_does_not_record_a_failed_block(backend, records, capsys):
    with pytest.raises(RuntimeError):
        with backend.Benchmark('fails'):
            raise RuntimeError('boom')
    assert records == []
    assert capsys.readouterr().out == ''


def test_benchmark_waits_for_the_devices_on_enter_and_exit(
        backend, records, monkeypatch):
    calls = []

    def fake_synchronize(devices):
        calls.append(list(devices))
        # The wait on entry must happen before the clock starts, the wait
        # on exit before it stops.
        time.sleep(0.5 if len(calls) == 1 else 0.05)

    monkeypatch.setattr(backend.Benchmark, '_synchronize',
                        staticmethod(fake_synchronize))
    devices = backend.try_devices(2)
    with backend.Benchmark('synced', devices=devices) as b:
        assert len(calls) == 1
    assert calls == [devices, devices]
    assert 0.05 <= b.seconds < 0.5


def test_benchmark_without_devices_does_not_synchronize(backend, records,
                                                        monkeypatch):
    calls = []
    monkeypatch.setattr(backend.Benchmark, '_synchronize',
                        staticmethod(calls.append))
    with backend.Benchmark('unsynced'):
        pass
    assert calls == []


def test_benchmark_rejects_an_empty_device_list(backend):
    with pytest.raises(ValueError, match='device list is empty'):
        backend.Benchmark('x', devices=[])
    with pytest.raises(TypeError, match='list of devices'):
        backend.Benchmark('x', devices='cpu')


# --------------------------------------------------------------------------
# plot_timings
# --------------------------------------------------------------------------
def test_plot_timings_returns_what_it_drew(backend, records):
    import matplotlib.pyplot as plt
    records.extend([('cpu', 0.5), ('gpu', 0.25), ('cpu', 0.75)])
    _, ax = plt.subplots()
    times = backend.plot_timings(['cpu', 'gpu'], sum_of=('cpu', 'gpu'),
                                 title='both', ax=ax)
    assert times == {'cpu': 0.75, 'gpu': 0.25, 'cpu + gpu': 1.0}
    assert list(times) == ['cpu', 'gpu', 'cpu + gpu']
    assert len(ax.patches) == 3
    widths = sorted(p.get_width() for p in ax.patches)
    assert widths == pytest.approx([0.25, 0.75, 1.0])
    assert ax.get_title() == 'both'
    assert ax.get_xlim()[1] == pytest.approx(1.2)


def test_plot_timings_without_a_sum(backend, records):
    records.extend([('a', 0.1), ('b', 0.3)])
    assert backend.plot_timings(['a', 'b']) == {'a': 0.1, 'b': 0.3}


def test_plot_timings_of_an_unmeasured_name(backend, records):
    records.append(('a', 0.1))
    with pytest.raises(KeyError, match="Nothing was measured as 'b'"):
        backend.plot_timings(['a', 'b'])
