"""CPU stand-ins are devices of their own: `launch` queues work on them,
they compute at the same time, each with its share of the cores, and
`synchronize` waits for them and raises their errors here.

Concurrency is observed without a clock: a job on one stand-in waits for
an event that only a job on the other stand-in sets, which can finish only
if both run at the same time.
"""
import _thread
import signal
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


@pytest.fixture
def mxnet_backend():
    from conftest import get_backend
    return get_backend('mxnet')


def test_launch_on_a_stand_in_computes_what_the_cpu_computes(backend):
    x = backend.array(np.arange(16, dtype=np.float32).reshape(4, 4))
    expected = backend.numpy(x @ x)
    for device in backend.stand_ins(2):
        xd = backend.array(backend.numpy(x), device)
        job = backend.launch(device, lambda a: a @ a, xd)
        backend.synchronize([device])
        np.testing.assert_array_equal(backend.numpy(job.result()), expected)


def test_two_stand_ins_compute_at_the_same_time(torch_backend):
    d2l = torch_backend
    devices = d2l.stand_ins(2)
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
    device = d2l.stand_ins(1)[0]
    order = []
    for i in range(20):
        d2l.launch(device, order.append, i)
    d2l.synchronize([device])
    assert order == list(range(20))


def test_each_stand_in_computes_with_its_share_of_the_cores():
    import torch
    workers = standins.StandIns(torch.set_num_threads, 3)
    for device in (0, 1):
        job = workers.submit(device, 'compute', torch.get_num_threads, (),
                             'row')
        assert job.result() == 3
    job = workers.submit(0, 'copy', torch.get_num_threads, (), 'row')
    assert job.result() == 1  # a copy needs no more
    assert standins.threads_per_stand_in(8) == 4
    assert standins.threads_per_stand_in(1) == 1


def test_the_whole_cpu_computes_in_the_calling_thread(torch_backend):
    d2l = torch_backend
    job = d2l.launch(d2l.cpu(), threading.get_ident)
    assert job.done() and job.result() == threading.get_ident()


def test_a_copy_waits_for_the_result_it_copies(torch_backend):
    d2l = torch_backend
    device = d2l.stand_ins(1)[0]
    gate = threading.Event()

    def compute():
        gate.wait(WAIT)
        return d2l.full(1000, 2.0, device)

    computed = d2l.launch(device, compute)
    copied = d2l.launch(device, lambda a: a * 1, [computed], queue='copy')
    assert not copied.done()
    gate.set()
    d2l.synchronize([device])
    np.testing.assert_array_equal(d2l.numpy(copied.result()[0]),
                                  np.full(1000, 2.0))


def test_an_error_in_a_worker_is_raised_here_with_its_message(backend):
    device = backend.stand_ins(2)[1]

    def fails():
        raise ValueError('the shard has the wrong shape')

    with pytest.raises(ValueError, match='the shard has the wrong shape'):
        backend.launch(device, fails)
        backend.synchronize([device])
    # Raised once: the device works on, and the next wait is clean
    job = backend.launch(device, lambda: 42)
    backend.synchronize([device])
    assert job.result() == 42


def test_an_error_is_raised_once_even_after_more_work(torch_backend):
    d2l = torch_backend
    device = d2l.stand_ins(1)[0]

    def fails():
        raise KeyError('missing parameter')

    d2l.launch(device, fails)
    d2l.launch(device, lambda: None)  # more work, queued after the error
    with pytest.raises(KeyError, match='missing parameter'):
        d2l.synchronize([device])
    d2l.synchronize([device])  # reported: not raised again
    job = d2l.launch(device, fails)
    with pytest.raises(KeyError):
        job.result()  # seen here...
    d2l.synchronize([device])  # ...so not raised a second time


@pytest.fixture
def default_sigint():
    """SIGINT raising KeyboardInterrupt, Python's default and a Jupyter
    kernel's: _thread.interrupt_main does nothing while SIGINT is ignored,
    as something run earlier in the same test process may leave it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupt_cancels_the_queue_and_leaves_no_thread(torch_backend,
                                                            default_sigint):
    d2l = torch_backend
    device = d2l.stand_ins(1)[0]
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
    running = len(ran)
    d2l.synchronize([device])  # waits for the job that was running
    after = len(ran)
    time.sleep(0.2)
    assert len(ran) == after, 'synchronize returned before the work ended'
    assert after <= running + 1 < 20, \
        'the queued work went on after the interrupt'
    assert threading.active_count() == threads
    assert d2l.launch(device, lambda: 'still works').result() == 'still works'


def test_launch_rejects_an_unknown_queue(backend):
    with pytest.raises(ValueError, match="'compute' or 'copy'"):
        backend.launch(backend.stand_ins(1)[0], print, queue='network')


def test_timeline_shows_two_stand_ins_overlapping(torch_backend):
    d2l = torch_backend
    devices = d2l.stand_ins(2)
    both = threading.Barrier(2, timeout=WAIT)  # each waits for the other

    def first():
        both.wait()

    def second():
        both.wait()

    with d2l.Timeline() as tl:
        d2l.launch(devices[0], first)
        d2l.launch(devices[1], second)
    spans = {e.row: e for e in tl.events if e.name in ('first', 'second')}
    assert set(spans) == {'cpu:0', 'cpu:1'}
    a, b = spans['cpu:0'], spans['cpu:1']
    assert a.start < b.end and b.start < a.end, 'the rows do not overlap'


# --------------------------------------------------------------------------
# MXNet: the copy queue of a CPU stand-in
# --------------------------------------------------------------------------
def _block_engine_thread(mx_module, device, gate):
    """Queue on `device` an operation that holds its engine thread until
    `gate` is set (or WAIT seconds pass); returns what must stay alive."""
    import ctypes
    from d2lpar._mxnet import engine  # MXNet's C API, as d2lpar calls it
    hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
        lambda run_context, param: gate.wait(2 * WAIT))
    context = engine._Context(1, device.device_id)
    engine.check_call(engine._LIB.MXEnginePushSync(
        hold, None, None, ctypes.byref(context), None, 0, None, 0, None, 0,
        b'test_hold'))
    return hold


def test_mxnet_copy_queue_copies_while_the_stand_in_computes(
        mxnet_backend, monkeypatch):
    """On a CPU stand-in MXNet's engine copies on the thread of the source
    context, behind its products; the copy queue must not: here the
    stand-in's thread is held until the copy is seen done. (The copy is
    seen done by its own callback: ``wait_to_read`` would queue its
    notice on the held thread of cpu(0).)"""
    d2l = mxnet_backend.module
    device = d2l.try_devices(1)[0]
    x = d2l.np.full((1000,), 2.0, ctx=device)
    buffer = d2l.np.zeros((1000,), ctx=d2l.npx.cpu())
    d2l.synchronize()
    gate, copied = threading.Event(), threading.Event()
    from d2lpar._mxnet import engine  # where the copy engine lives
    copy = engine._copy

    def seen(*args):
        copy(*args)
        copied.set()

    monkeypatch.setattr(engine, '_copy', seen)
    hold = _block_engine_thread(d2l, device, gate)
    d2l.launch(device, lambda a, b: a.copyto(b), x, buffer, queue='copy')
    try:
        assert copied.wait(WAIT), 'the copy waited for the stand-in'
    finally:
        gate.set()
        d2l.synchronize()
    del hold
    np.testing.assert_array_equal(mxnet_backend.numpy(buffer),
                                  np.full(1000, 2.0))


def test_mxnet_copies_on_the_copy_queue_equal_what_was_computed(
        mxnet_backend):
    """The lesson's pattern: each product queued on the stand-in, then its
    copy on the copy queue; each copy waits for its product, and what
    reads a copy afterwards waits for the copy."""
    d2l = mxnet_backend.module
    mx_np = d2l.np
    device = d2l.try_devices(1)[0]
    a = mx_np.random.uniform(size=(300, 16), ctx=device)
    b = mx_np.random.uniform(size=(16, 300), ctx=device)
    y = [mx_np.empty((300, 300), ctx=device) for _ in range(20)]
    y_cpu = [mx_np.empty((300, 300), ctx=d2l.npx.cpu()) for _ in range(20)]

    def products(a, b, y):
        for t in y:
            mx_np.dot(a, b, out=t)
        return y

    def copy_to_cpu(y, y_cpu):
        for t, buffer in zip(y, y_cpu):
            t.copyto(buffer)

    read_back = []
    for t, buffer in zip(y, y_cpu):
        product = d2l.launch(device, products, a, b, [t])
        d2l.launch(device, copy_to_cpu, product, [buffer], queue='copy')
        read_back.append(buffer * 1)  # queued at once, after the copy
    d2l.synchronize()
    expected = mxnet_backend.numpy(mx_np.dot(a, b))
    for t, buffer, again in zip(y, y_cpu, read_back):
        np.testing.assert_array_equal(mxnet_backend.numpy(t), expected)
        np.testing.assert_array_equal(mxnet_backend.numpy(buffer), expected)
        np.testing.assert_array_equal(mxnet_backend.numpy(again), expected)


def test_mxnet_timeline_sees_a_result_while_cpu0_is_busy(mxnet_backend):
    """The timeline notes when each result is ready without going through
    the thread of cpu(0): a result of cpu(1) is seen while cpu(0) is held
    (``wait_to_read`` queues its notice there)."""
    d2l = mxnet_backend.module
    devices = d2l.try_devices(2)
    x = d2l.np.ones((50, 50), ctx=devices[1])
    d2l.synchronize()
    gate = threading.Event()
    with d2l.Timeline() as tl:
        hold = _block_engine_thread(d2l, devices[0], gate)
        try:
            tl.watch(d2l.np.dot(x, x), 'on cpu(1)')
            deadline = time.monotonic() + WAIT
            while not tl._ready and time.monotonic() < deadline:
                time.sleep(0.01)
            assert tl._ready, 'the note waited for cpu(0)'
        finally:
            gate.set()
    del hold
    assert [(e.name, e.row) for e in tl.events] == [('on cpu(1)', 'cpu(1)')]


def test_busy_names_the_stand_ins_with_work_not_done():
    stand_ins = standins.StandIns(lambda n: None, 1)
    release = threading.Event()
    job = stand_ins.submit('cpu:0', 'copy', release.wait, (), 0)
    assert stand_ins.busy() == [('cpu:0', 'copy')]
    release.set()
    job.result(timeout=10)
    assert stand_ins.busy() == []
