"""`synchronize` and `Benchmark` wait for the work queued on a device.

Observed from outside: work is queued on a CPU stand-in (MXNet's engine
and the PyTorch stand-in's worker both return at once), and after the
wait its result must be ready at once, while the wait itself took about
as long as the work. A wait that waits for nothing fails both checks: the
lesson would then print 'Device 1 alone: 0.0008 sec'.
"""
import time

import numpy as np
import pytest

ROUNDS = 40  # products of 400 x 400 matrices: about 0.1-0.5 s of work


def _products(backend):
    def work(x):
        y = x
        for _ in range(ROUNDS):
            # every element stays 1/400: the mean of a column of y
            y = backend.matmul(x, y)
        return y
    return work


def _queue_work(backend, device):
    """Queue the products on `device`; return the Future of the result."""
    x = backend.array(np.full((400, 400), 1 / 400, np.float32), device)
    backend.numpy(backend.matmul(x, x))  # warm up
    return backend.launch(device, _products(backend), x)


def _seconds_until_ready(backend, future):
    """How long the result of `future` still takes to be computed."""
    start = time.perf_counter()
    result = future.result()  # a PyTorch stand-in's job: waits for it
    backend.wait(result)  # MXNet: the engine's queue; waits for it
    seconds = time.perf_counter() - start
    np.testing.assert_allclose(backend.numpy(result), 1 / 400, rtol=1e-4)
    return seconds


@pytest.mark.parametrize('which', ['these devices', 'all devices'])
def test_synchronize_waits_for_the_queued_work(backend, which):
    device = backend.try_devices(1)[0]
    future = _queue_work(backend, device)
    start = time.perf_counter()
    backend.synchronize([device] if which == 'these devices' else None)
    waited = time.perf_counter() - start
    left = _seconds_until_ready(backend, future)
    assert left < 0.2 * waited, (
        f'synchronize returned after {waited:.4f} s, and the result still '
        f'took {left:.4f} s: it did not wait for the work')


def test_benchmark_times_the_work_not_its_queueing(backend, monkeypatch):
    from d2lpar import timing
    monkeypatch.setattr(timing.Benchmark, 'records', [])
    device = backend.try_devices(1)[0]
    with backend.Benchmark('products', [device]) as b:
        future = _queue_work(backend, device)
    left = _seconds_until_ready(backend, future)
    assert left < 0.2 * b.seconds, (
        f'the benchmark stopped its clock after {b.seconds:.4f} s, and the '
        f'result still took {left:.4f} s: it timed the queueing')
