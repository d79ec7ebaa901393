"""PyTorch devices for the lessons: GPUs, CPU stand-ins with their worker
threads, `launch` and `synchronize`, and the measurements built on them
(see d2lpar/standins.py for the stand-ins themselves)."""
import contextlib

import torch

from d2lpar import _common
from d2lpar import standins as _standins
from d2lpar._common import check_devices, say_once
from d2lpar.i18n import error_message


def cpu():
    """The CPU device."""
    return torch.device('cpu')


def num_gpus():
    """How many GPUs PyTorch can see."""
    return torch.cuda.device_count()


def gpu(i=0):
    """The `i`-th GPU; a ValueError if this machine has no such GPU."""
    if not isinstance(i, int) or i < 0:
        raise TypeError(error_message(
            'A GPU index is an int >= 0, got {i!r}.', i=i))
    if i >= num_gpus():
        raise ValueError(error_message(
            'There is no GPU {i}: this machine has {n} GPU(s). Use '
            'try_gpu({i}) to fall back to the CPU.', i=i, n=num_gpus()))
    return torch.device(f'cuda:{i}')


def try_gpu(i=0):
    """The `i`-th GPU if it exists, else the CPU."""
    return gpu(i) if i < num_gpus() else cpu()


def try_all_gpus():
    """All GPUs, or ``[cpu()]`` when there is none (never an empty list)."""
    return [gpu(i) for i in range(num_gpus())] or [cpu()]


def try_devices(num_devices):
    """`num_devices` devices for a lesson: the first GPUs when there are
    enough, else `num_devices` CPU stand-ins ``cpu:0``, ``cpu:1``, ...,
    saying once what it fell back to. Each stand-in computes on its own
    worker thread with half of the CPU's threads (`launch`)."""
    if not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(error_message(
            'num_devices must be an int >= 1, got {num_devices!r}.',
            num_devices=num_devices))
    if num_gpus() >= num_devices:
        return [gpu(i) for i in range(num_devices)]
    say_once(_common.fallback_notice(
        num_devices, num_gpus(), _STAND_INS.num_threads,
        ', '.join(f'cpu:{i}' for i in range(num_devices))))
    return [torch.device('cpu', i) for i in range(num_devices)]


def products_that_fit(num_products, shape, devices):
    """How many of `num_products` float32 results of `shape` fit, with
    their input matrix, into the free memory of every GPU among `devices`
    (keeping a tenth of it, at least 256 MiB, for the framework): all
    `num_products` on the CPU and on CPU stand-ins, fewer on a GPU with
    too little free memory (the book's 50 products of 4000x4000 keep
    3.2 GB of results on each GPU). A ValueError when not even one fits.
    The free memory is what the driver reports
    (``torch.cuda.mem_get_info``) plus what PyTorch's caching allocator
    holds unused."""
    def free_bytes(device):
        device = torch.device(device)
        if device.type != 'cuda':
            return None
        cached = (torch.cuda.memory_reserved(device)
                  - torch.cuda.memory_allocated(device))
        return torch.cuda.mem_get_info(device)[0] + cached

    return _common.products_that_fit_with(free_bytes, num_products, shape,
                                          devices)


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
    for d in try_all_gpus() if devices is None else devices:
        if d.type == 'cuda':
            torch.cuda.synchronize(d)


class Benchmark(_common.Benchmark):
    __doc__ = _common.Benchmark.__doc__
    _synchronize = staticmethod(synchronize)


def _make_data(k, n):
    return [torch.zeros(n, device=d) for d in try_devices(k)]  # no overflow


def measure_allreduce(fns, sizes, device_counts, repeat=3):
    """Time each allreduce function of `fns` on `try_devices(k)` for each
    k in `device_counts` and each size in `sizes` (float32 numbers per
    device); see `plot_allreduce`."""
    rows = _common.measure_allreduce_with(
        _make_data, synchronize, fns, sizes, device_counts, repeat)
    for r in rows:  # what try_devices(k) gave: GPUs, or CPU stand-ins
        r['on'] = 'gpu' if num_gpus() >= r['devices'] else 'cpu'
    return rows


def copy_bandwidth(device=None, num_bytes=1 << 26):
    """Memory-copy bandwidth of `device` (default: the first GPU, else
    the CPU) in bytes read plus written per second."""
    device = try_gpu() if device is None else device
    x = torch.ones(num_bytes // 4, device=device)
    y = torch.empty_like(x)

    def copy():
        y.copy_(x)
        return num_bytes

    return _common.measure_copy_bandwidth_with(copy, synchronize)


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


def _to_tensors(X, y):
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    if torch.cuda.is_available():  # pinned memory allows non_blocking copies
        X, y = X.pin_memory(), y.pin_memory()
    return X, y


def load_data_fashion_mnist(batch_size, num_train=None, num_test=None):
    """Iterators over Fashion-MNIST (train, test), from the cache folder
    `data_dir()`, downloading it when the network allows; offline, over a
    synthetic stand-in with the same shapes, saying so once. `num_train`
    and `num_test` keep only the first examples, for quick CPU runs."""
    return _common.load_data_fashion_mnist_with(
        _to_tensors, batch_size, num_train, num_test)
