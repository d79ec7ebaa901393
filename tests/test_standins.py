"""CPU stand-ins are devices of their own: `launch` queues work on them,
they compute at the same time, each with its share of the cores, and
`synchronize` waits for them and raises their errors here.

Concurrency is observed without a clock: a job on one stand-in waits for
an event that only a job on the other stand-in sets, which can finish only
if both run at the same time.
"""
import _thread
import threading
import time

import numpy as np
import pytest

from d2lpar import standins

WAIT = 30  # seconds; a stand-in that never runs fails the test, not CI


@pytest.fixture
def torch_backend():
    from conftest import get_backend
    return get_backend('torch')


def test_launch_on_a_stand_in_computes_what_the_cpu_computes(backend):
    x = backend.array(np.arange(16, dtype=np.float32).reshape(4, 4))
    expected = backend.numpy(x @ x)
    for device in backend.try_devices(2):
        xd = backend.array(backend.numpy(x), device)
        job = backend.launch(device, lambda a: a @ a, xd)
        backend.synchronize([device])
        np.testing.assert_array_equal(backend.numpy(job.result()), expected)


def test_two_stand_ins_compute_at_the_same_time(torch_backend):
    d2l = torch_backend
    devices = d2l.try_devices(2)
    started = threading.Event()

    def first():
        return started.wait(WAIT)  # True only if the second one ran

    def second():
        started.set()
        return True

    job1 = d2l.launch(devices[0], first)
    job2 = d2l.launch(devices[1], second)
    d2l.synchronize(devices)
    assert job1.result() and job2.result()


def test_one_stand_in_runs_its_queue_in_order(torch_backend):
    d2l = torch_backend
    device = d2l.try_devices(1)[0]
    order = []
    for i in range(20):
        d2l.launch(device, order.append, i)
    d2l.synchronize([device])
    assert order == list(range(20))


def test_each_stand_in_computes_with_its_share_of_the_cores(torch_backend):
    import torch
    d2l = torch_backend
    share = standins.threads_per_stand_in(torch.get_num_threads())
    for device in d2l.try_devices(2):
        assert d2l.launch(device, torch.get_num_threads).result() == share
    assert d2l.launch(d2l.try_devices(1)[0], torch.get_num_threads,
                      queue='copy').result() == 1


def test_the_whole_cpu_computes_in_the_calling_thread(torch_backend):
    d2l = torch_backend
    job = d2l.launch(d2l.cpu(), threading.get_ident)
    assert job.done() and job.result() == threading.get_ident()


def test_a_copy_waits_for_the_result_it_copies(backend):
    device = backend.try_devices(1)[0]
    gate = threading.Event()

    def compute():
        gate.wait(WAIT)
        return backend.full(1000, 2.0, device)

    if backend.name == 'torch':  # MXNet's launch calls at once
        computed = backend.launch(device, compute)
        copied = backend.launch(device, lambda a: a * 1, computed,
                                queue='copy')
        assert not copied.done()
        gate.set()
    else:
        gate.set()
        copied = backend.launch(device, lambda a: a * 1,
                                backend.launch(device, compute), queue='copy')
    backend.synchronize([device])
    np.testing.assert_array_equal(backend.numpy(copied.result()),
                                  np.full(1000, 2.0))


def test_an_error_in_a_worker_is_raised_here_with_its_message(backend):
    device = backend.try_devices(2)[1]

    def fails():
        raise ValueError('the shard has the wrong shape')

    with pytest.raises(ValueError, match='the shard has the wrong shape'):
        backend.launch(device, fails)
        backend.synchronize([device])
    # Raised once: the device works on, and the next wait is clean
    job = backend.launch(device, lambda: 42)
    backend.synchronize([device])
    assert job.result() == 42


def test_an_interrupt_cancels_the_queue_and_leaves_no_thread(torch_backend):
    d2l = torch_backend
    device = d2l.try_devices(1)[0]
    d2l.launch(device, lambda: None).result()  # the worker exists
    threads = threading.active_count()
    ran = []

    def slow(i):
        time.sleep(0.05)
        ran.append(i)

    for i in range(100):  # five seconds of work
        d2l.launch(device, slow, i)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        d2l.synchronize([device])
    timer.join()
    d2l.synchronize([device])  # the job that was running, if any
    assert len(ran) < 20, 'the queued work went on after the interrupt'
    assert threading.active_count() == threads
    assert d2l.launch(device, lambda: 'still works').result() == 'still works'


def test_launch_rejects_an_unknown_queue(backend):
    with pytest.raises(ValueError, match="'compute' or 'copy'"):
        backend.launch(backend.try_devices(1)[0], print, queue='network')


def test_timeline_shows_two_stand_ins_overlapping(torch_backend):
    d2l = torch_backend
    devices = d2l.try_devices(2)
    started = threading.Event()

    def first():
        started.wait(WAIT)
        time.sleep(0.02)

    def second():
        started.set()
        time.sleep(0.02)

    with d2l.Timeline() as tl:
        d2l.launch(devices[0], first)
        d2l.launch(devices[1], second)
    spans = {e.row: e for e in tl.events if e.name in ('first', 'second')}
    assert set(spans) == {'cpu:0', 'cpu:1'}
    a, b = spans['cpu:0'], spans['cpu:1']
    assert a.start < b.end and b.start < a.end, 'the rows do not overlap'
