"""PyTorch devices for the lessons: the CPU, the GPUs PyTorch sees, the
worker threads of the CPU stand-ins, `launch` and `synchronize` (see
d2lpar/standins.py for the stand-ins themselves)."""
import contextlib

import torch

from d2lpar import timing as _timing
from d2lpar import standins as _standins
from d2lpar.checks import check_devices


def cpu():
    """The CPU device."""
    return torch.device('cpu')


def num_gpus():
    """How many GPUs PyTorch can see."""
    return torch.cuda.device_count()


# The worker threads of the CPU stand-ins: each computes with half of the
# threads PyTorch was given (torch.set_num_threads in a thread sets that
# thread's own count)
_STAND_INS = _standins.StandIns(
    torch.set_num_threads,
    _standins.threads_per_stand_in(torch.get_num_threads()))


_copy_streams = {}


def launch(device, fn, *args, queue='compute'):
    """Queue ``fn(*args)`` on `device` and return a Future of its result;
    Futures among `args` (also in lists) are waited for first.

    On a GPU, `fn` is called at once: its kernels are queued on the GPU's
    current stream ('compute'), or on a side stream that first waits for
    all the work queued before it ('copy'), and return before they run. A
    CPU stand-in hands `fn` to its worker thread for that queue, which
    computes with its own share of the cores. PyTorch computes CPU
    operators in the thread that calls them, so without a worker of its
    own a stand-in could never compute beside another. On the whole CPU
    (``cpu()``), `fn` runs at once and the Future is already done.
    `synchronize` waits for all of it."""
    device = torch.device(device)
    _standins.check_queue(queue)
    if device.type == 'cpu' and device.index is not None:
        return _STAND_INS.submit(device.index, queue, fn, args, str(device)
                                 + (' copy' if queue == 'copy' else ''))
    if device.type != 'cuda':
        return _standins.done(fn(*_standins.resolve(args)))
    stream = (_copy_stream(device) if queue == 'copy'
              else torch.cuda.current_stream(device))
    # As on a stand-in, work waits for the Futures it is given: for copies
    # queued on the side stream, through the event recorded after them
    for event in _events(args):
        stream.wait_event(event)
    if queue == 'copy':  # ordered after all work queued so far
        stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.device(device), torch.cuda.stream(stream):
        values = _standins.resolve(args)
        if queue == 'copy':  # memory the side stream reads stays reserved
            for t in _cuda_tensors(values):
                t.record_stream(stream)
        future = _standins.done(fn(*values))
        future.cuda_event = stream.record_event()
    return future


def _copy_stream(device):
    if device not in _copy_streams:
        _copy_streams[device] = torch.cuda.Stream(device)
    return _copy_streams[device]


def _events(args):
    """The CUDA events of the Futures among `args` (also in lists)."""
    return [a.cuda_event for a in _standins.flat(args)
            if getattr(a, 'cuda_event', None) is not None]


def _cuda_tensors(values):
    return [v for v in _standins.flat(values)
            if isinstance(v, torch.Tensor) and v.is_cuda]


def synchronize(devices=None):
    """Wait until `devices` (default: all GPUs and CPU stand-ins) finish
    their queued work, and raise here the first error of that work.

    CUDA kernels run asynchronously: ``torch.cuda.synchronize``. A CPU
    stand-in's work runs on its worker threads: wait for them. On the whole
    CPU (``cpu()``) PyTorch returns from an operator when it is done, so
    there is nothing to wait for."""
    devices = None if devices is None else [
        torch.device(d) for d in check_devices(devices)]
    _STAND_INS.wait(None if devices is None else [
        d.index for d in devices if d.type == 'cpu' and d.index is not None])
    gpus = [torch.device('cuda', i) for i in range(num_gpus())]
    for d in gpus if devices is None else devices:
        if d.type == 'cuda':
            torch.cuda.synchronize(d)


@contextlib.contextmanager
def _threads_of(device):
    """Compute in this thread with the share of the cores of `device`
    when it is a CPU stand-in, so that one stand-in here compares like
    with like against a process per stand-in."""
    before = torch.get_num_threads()
    if device.type == 'cpu' and device.index is not None:
        torch.set_num_threads(_STAND_INS.num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Benchmark(_timing.Benchmark):
    __doc__ = _timing.Benchmark.__doc__
    _synchronize = staticmethod(synchronize)
