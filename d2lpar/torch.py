"""d2lpar for PyTorch: ``from d2lpar import torch as d2l``.

The same public names, with the same signatures, as ``d2lpar.mxnet``.
Everything runs on a CPU-only machine: where a lesson asks for more GPUs
than there are, `try_devices` hands out CPU stand-ins and says so once.
"""
import contextlib
import copy
import io
import math
import os
import pickle
import tempfile
import time

# Keep the profiler's own log lines out of the lessons (set before torch).
os.environ.setdefault('KINETO_LOG_LEVEL', '5')

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from d2l import torch as _d2l  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.multiprocessing.spawn import ProcessException  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.profiler import (  # noqa: E402
    ProfilerActivity, profile, record_function)

from d2lpar import api as _api  # noqa: E402
from d2lpar import checks as _checks  # noqa: E402
from d2lpar import collectives as _collectives  # noqa: E402
from d2lpar import data as _data  # noqa: E402
from d2lpar import devices as _devices  # noqa: E402
from d2lpar import distributed as _distributed  # noqa: E402
from d2lpar import fonts as _fonts  # noqa: E402
from d2lpar import launch as _launch  # noqa: E402
from d2lpar import standins as _standins  # noqa: E402
from d2lpar import timeline as _timeline  # noqa: E402
from d2lpar import timing as _timing  # noqa: E402
from d2lpar import training as _training  # noqa: E402
from d2lpar.api import *  # noqa: E402,F401,F403 (api.SHARED, as they are)
from d2lpar.checks import (  # noqa: E402
    check_allreduce, check_devices, check_replicas, check_split)
from d2lpar.sharding import check_collective  # noqa: E402
from d2lpar.i18n import N_, error_message  # noqa: E402

__all__ = _api.SHARED + _api.BACKEND

# Chinese text in every plot of the lesson, its own plt calls included: d2l
# has imported matplotlib, so register the CJK font now (d2lpar/fonts.py).
_fonts.use_cjk_font_if_loaded()

# What d2l does well, reused as it is.
Timer = _d2l.Timer
sgd = _d2l.sgd


# --------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------
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
    say_once(_devices.fallback_notice(
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

    return _devices.products_that_fit_with(free_bytes, num_products, shape,
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


class Benchmark(_timing.Benchmark):
    __doc__ = _timing.Benchmark.__doc__
    _synchronize = staticmethod(synchronize)


def _kind(name):
    return 'copy' if ('copy' in name.lower() or name == 'aten::to'
                      or 'Memcpy' in name or name in ('split', 'allreduce')
                      ) else 'compute'


class Timeline(_timeline.Timeline):
    """Record what runs where inside a ``with`` block, then `plot` it.

    Built on ``torch.profiler`` (CPU activities, plus CUDA ones when there
    is a GPU): every operator of the block is recorded, top-level CPU
    operators in one row per thread, GPU kernels and copies in one row per
    GPU. `watch` only returns its argument: the profiler needs no help.
    `save(path)` writes the profiler's Chrome trace for Perfetto.
    """
    source = 'torch.profiler'

    def __enter__(self):
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(activities=activities)
        synchronize()  # leave earlier work out of the picture
        with _timeline.quiet_stderr():
            self._prof.__enter__()
        # The profiler sees only this thread: the stand-ins' workers note
        # their work themselves, on the clock of the marker below
        _standins.recorder.start()
        with record_function('d2lpar: clock'):
            self._clock = time.perf_counter()
        return self

    def __exit__(self, *exc_info):
        try:
            synchronize()
        except Exception:
            if exc_info[0] is None:  # else the block's own error says more
                raise
        finally:
            workers = _standins.recorder.stop()
            with _timeline.quiet_stderr():
                self._prof.__exit__(*exc_info)
                raw = list(self._prof.events())
        threads, spans, offset = {}, [], 0
        for e in raw:
            if e.name == 'd2lpar: clock':
                offset = e.time_range.start - 1e6 * self._clock
                continue
            if e.device_type == DeviceType.CPU:
                if e.cpu_parent is not None:
                    continue  # only top-level operators
                row = threads.setdefault(e.thread,
                                         f'CPU thread {len(threads)}')
            else:
                row = f'cuda:{e.device_index}'
            spans.append((e.name, row, e.time_range.start, e.time_range.end))
        if len(threads) == 1:  # name the one thread by what it is
            one = N_('main thread') if workers else 'CPU'
            spans = [(n, one if r.startswith('CPU') else r, a, b)
                     for n, r, a, b in spans]
        spans += [(n, r, 1e6 * a + offset, 1e6 * b + offset)
                  for n, r, a, b, _ in workers]
        kinds = {(n, r): k for n, r, _, _, k in workers}
        t0 = min((s[2] for s in spans), default=0)
        self.events = [_timeline.Event(n, r, (a - t0) / 1e6, (b - t0) / 1e6,
                                     kinds.get((n, r), _kind(n)))
                       for n, r, a, b in sorted(spans, key=lambda s: s[2])]
        return False

    def save(self, path):
        self._prof.export_chrome_trace(str(path))
        return path


def _make_data(k, n):
    return [torch.zeros(n, device=d) for d in try_devices(k)]  # no overflow


def measure_allreduce(fns, sizes, device_counts, repeat=3):
    """Time each allreduce function of `fns` on `try_devices(k)` for each
    k in `device_counts` and each size in `sizes` (float32 numbers per
    device); see `plot_allreduce`."""
    rows = _timing.measure_allreduce_with(
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

    return _timing.measure_copy_bandwidth_with(copy, synchronize)


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------
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
    return _data.load_data_fashion_mnist_with(
        _to_tensors, batch_size, num_train, num_test)


# --------------------------------------------------------------------------
# The toy network of the multi-GPU chapter
# --------------------------------------------------------------------------
def lenet_params():
    """Fresh parameters of the LeNet-style network, on the CPU: weights
    with standard deviation sqrt(2 / inputs of one output) (He et al.,
    2015), biases 0."""
    def init(shape, num_inputs):
        return torch.randn(size=shape) * (2 / num_inputs) ** 0.5

    return [init((20, 1, 3, 3), 9), torch.zeros(20),
            init((50, 20, 5, 5), 500), torch.zeros(50),
            init((800, 128), 800), torch.zeros(128),
            init((128, 10), 128), torch.zeros(10)]


def lenet(X, params):
    """The LeNet-style network of the lesson, written with functions so
    that its parameters can live on any device."""
    h1_conv = F.conv2d(input=X, weight=params[0], bias=params[1])
    h1_activation = F.relu(h1_conv)
    h1 = F.avg_pool2d(input=h1_activation, kernel_size=(2, 2), stride=(2, 2))
    h2_conv = F.conv2d(input=h1, weight=params[2], bias=params[3])
    h2_activation = F.relu(h2_conv)
    h2 = F.avg_pool2d(input=h2_activation, kernel_size=(2, 2), stride=(2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3_linear = torch.mm(h2, params[4]) + params[5]
    h3 = F.relu(h3_linear)
    y_hat = torch.mm(h3, params[6]) + params[7]
    return y_hat


loss = nn.CrossEntropyLoss(reduction='none')


# --------------------------------------------------------------------------
# Data parallelism from scratch
# --------------------------------------------------------------------------
def get_params(params, device):
    """A copy of `params` on `device`, with gradients attached. Always a
    copy, even on the same device, so every device owns its parameters."""
    new_params = [p.detach().to(device, copy=True) for p in params]
    for p in new_params:
        p.requires_grad_()
    return new_params


def _memory(x):
    return (str(x.device), x.data_ptr()) if x.numel() else id(x)


def _device_of(x):
    return x.device


def allreduce(data):
    """Sum the arrays of `data` (one per device) in place: afterwards every
    one holds the elementwise sum. The first device gathers and adds up
    everything, then sends the sum back (the book's simple version)."""
    check_allreduce(data, memory_of=_memory, device_of=_device_of)
    with torch.no_grad():
        for i in range(1, len(data)):
            data[0].add_(data[i].to(data[0].device))
        for i in range(1, len(data)):
            data[i].copy_(data[0])


def _flat(x):
    if not x.is_contiguous():
        raise ValueError(error_message(
            'ring_allreduce works on contiguous tensors: call .contiguous() '
            'on them first.'))
    return x.view(-1)


def _copy_like(src, dst):
    return src.to(dst.device, non_blocking=dst.device.type == 'cuda')


def ring_allreduce(data):
    """Like `allreduce`, but with the bandwidth-optimal ring algorithm:
    reduce-scatter, then all-gather, over chunks of the flattened data."""
    check_allreduce(data, memory_of=_memory, device_of=_device_of)
    if len(data) == 1:
        return
    with torch.no_grad():
        flats = [_flat(x) for x in data]  # views: written in place
        for phase, i, j, start, end in _collectives.ring_steps(
                flats[0].shape[0], len(flats)):
            chunk = _copy_like(flats[i][start:end], flats[j])
            if phase == 'reduce-scatter':
                view = flats[j][start:end]
                view += chunk
            else:
                flats[j][start:end] = chunk


def direct_allreduce(data):
    """Like `allreduce`, but every device adds up a chunk of its own: it
    reads chunk i of every array straight from its device (a
    reduce-scatter), then sends its sum straight to every device (an
    all-gather). Each device sends 2(k-1)/k of the data, as in the ring."""
    check_allreduce(data, memory_of=_memory, device_of=_device_of)
    k = len(data)
    with torch.no_grad():
        flats = [_flat(x) for x in data]
        b = _collectives.chunk_bounds(flats[0].shape[0], k)
        for c in range(k):
            own = flats[c][b[c]:b[c + 1]]  # a view: added in place
            for i in range(1, k):
                own += _copy_like(flats[(c + i) % k][b[c]:b[c + 1]], own)
        for c in range(k):
            for i in range(1, k):
                flats[(c + i) % k][b[c]:b[c + 1]].copy_(
                    flats[c][b[c]:b[c + 1]])


def split_batch(X, y, devices):
    """Split the minibatch `X`, `y` into len(devices) nearly equal shards,
    shard i on devices[i]. A ValueError if X and y differ in length or
    there are fewer examples than devices."""
    devices = check_split(len(X), len(y), devices)
    k = len(devices)
    return ([x.to(d, non_blocking=True)
             for x, d in zip(X.tensor_split(k), devices)],
            [t.to(d, non_blocking=True)
             for t, d in zip(y.tensor_split(k), devices)])


def forward_backward(X, y, params):
    """The loss of the shard `X`, `y` on the device of `params`, and its
    gradient, left in each parameter's ``.grad``."""
    loss(lenet(X, params), y).sum().backward()


def train_batch(X, y, device_params, devices, lr, reduce=allreduce):
    """One step of data-parallel minibatch SGD: split the batch, compute
    loss and gradient on every device, sum the gradients with `reduce`,
    and update every copy of the parameters."""
    check_replicas(device_params, devices)
    X_shards, y_shards = split_batch(X, y, devices)
    # Every device computes the loss and gradient of its own shard. launch
    # queues the work on the device (on a CPU stand-in: on its own worker
    # thread), so the devices compute at the same time
    jobs = [launch(device, forward_backward, X_shard, y_shard, params)
            for X_shard, y_shard, params, device in zip(
                X_shards, y_shards, device_params, devices)]
    for job in jobs:  # a stand-in's gradients exist once its job is done
        job.result()
    # Sum each gradient over all devices and give every device the sum
    with torch.no_grad():
        for i in range(len(device_params[0])):
            reduce([params[i].grad for params in device_params])
    # Every device applies the same update to its own copy of the model
    for params in device_params:
        sgd(params, lr, X.shape[0])  # divide by the whole batch size


def evaluate_accuracy(net, data_iter, device=None):
    """The fraction of examples of `data_iter` that `net` classifies
    correctly, computed on `device` (default: the first GPU, else the
    CPU)."""
    device = try_gpu() if device is None else device
    correct, total = 0, 0
    with torch.no_grad():
        for X, y in data_iter:
            X, y = X.to(device), y.to(device)
            correct += (net(X).argmax(axis=1) == y).sum()  # stays on device
            total += y.numel()
    return float(correct) / total


# `train` reads the same in d2lpar.mxnet: the lesson shows it as one
# framework-free cell, and tests/test_notebooks.py keeps both copies equal
# to that cell.
def check_finite(params, epoch, lr):
    """Raise an error that names the epoch when `params` hold NaN or
    infinite values (training diverged), or when `lr` is not a finite
    number above 0; a lesson calls it after each epoch."""
    if not all(bool(torch.isfinite(p).all()) for p in params):
        raise _checks.diverged(epoch, lr)
    _checks.check_lr(lr)


def train(num_gpus, batch_size, lr, num_epochs=10, num_train=None,
          num_test=None, params=None, reduce=allreduce, plot=True):
    """Train the LeNet of the lesson from scratch with data parallelism on
    `num_gpus` devices (CPU stand-ins when there are fewer GPUs), plot the
    test accuracy per epoch, and return a `TrainResult` (test accuracy,
    seconds per epoch, devices). `num_train` and `num_test` keep only
    that many examples, for quick runs on a CPU."""
    train_iter, test_iter = load_data_fashion_mnist(
        batch_size, num_train, num_test)
    devices = try_devices(num_gpus)
    params = lenet_params() if params is None else params
    # Copy the model parameters to every device
    device_params = [get_params(params, d) for d in devices]
    animator = Animator('epoch', 'test acc', xlim=[1, num_epochs],
                        ylim=[0, 1]) if plot else None
    timer, accs, num_examples = Timer(), [], 0
    for epoch in range(num_epochs):
        timer.start()
        for X, y in train_iter:
            train_batch(X, y, device_params, devices, lr, reduce)
            num_examples += len(y)
        synchronize(devices)  # wait once per epoch, not once per batch
        timer.stop()
        # Stop with a clear error if training has diverged (NaN or inf)
        check_finite(device_params[0], epoch, lr)
        # Evaluate on the first device only: simple, though the others idle
        accs.append(evaluate_accuracy(
            lambda x: lenet(x, device_params[0]), test_iter, devices[0]))
        if animator:
            animator.add(epoch + 1, (accs[-1],))
    result = TrainResult(accs[-1], timer.avg(), [str(d) for d in devices],
                         num_epochs, num_examples // num_epochs, accs)
    print(result)
    return result


def _max_abs_diff(a, b):
    return float((a.detach() - b.detach().to(a.device)).abs().max())


def parameter_drift(params, batch_size, lr, num_steps=20, num_train=None,
                    num_test=None):
    """Train two copies of `params` side by side with `train_batch`, one
    on `try_devices(1)`, the other on `try_devices(2)`, on the minibatches
    that `train` sees with the same arguments, and return the largest
    absolute difference between the two sets of parameters after each of
    the first `num_steps` steps (see `plot_drift`)."""
    return _training.parameter_drift_with(
        load_data_fashion_mnist, try_devices, get_params, train_batch,
        _max_abs_diff, params, batch_size, lr, num_steps, num_train,
        num_test)


def train_step_timeline(X, y, device_params, devices, lr, reduce=allreduce):
    """Run one step of `train_batch`, the same computation in the same
    order, and return its `Timeline`: the split, the allreduce and the
    update are marked with ``torch.profiler.record_function``; on CPU
    stand-ins each device's forward and backward pass is a bar of its
    own row."""
    check_replicas(device_params, devices)
    with Timeline() as timeline:
        with record_function('split'):
            X_shards, y_shards = split_batch(X, y, devices)
        jobs = [launch(device, forward_backward, X_shard, y_shard, params)
                for X_shard, y_shard, params, device in zip(
                    X_shards, y_shards, device_params, devices)]
        for job in jobs:
            job.result()
        with record_function('allreduce'), torch.no_grad():
            for i in range(len(device_params[0])):
                reduce([params[i].grad for params in device_params])
        with record_function('update'):
            for params in device_params:
                sgd(params, lr, X.shape[0])
    return timeline


# --------------------------------------------------------------------------
# Concise implementation: ResNet-18 with DistributedDataParallel
# --------------------------------------------------------------------------
class Residual(nn.Module):
    """The residual block of ResNet: two 3x3 convolutions with batch
    normalization, plus a shortcut (a 1x1 convolution when the block
    changes the number of channels or the resolution)."""

    def __init__(self, in_channels, out_channels, use_1x1conv=False,
                 strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3,
                               padding=1, stride=strides)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3,
                               padding=1)
        self.conv3 = nn.Conv2d(in_channels, out_channels, kernel_size=1,
                               stride=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


def resnet18(num_classes=10, in_channels=1, width=64):
    """The book's ResNet-18 for small images: a 3x3 first convolution and
    no max-pooling, four stages of two residual blocks with `width`,
    2 `width`, 4 `width` and 8 `width` channels, global average pooling
    and a dense layer. The book uses ``width=64``; a CPU trains a thinner
    network (e.g. 8) in seconds rather than minutes."""
    def resnet_block(in_channels, out_channels, num_residuals,
                     first_block=False):
        blk = []
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.append(Residual(in_channels, out_channels,
                                    use_1x1conv=True, strides=2))
            else:
                blk.append(Residual(out_channels, out_channels))
        return nn.Sequential(*blk)

    return nn.Sequential(
        nn.Conv2d(in_channels, width, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(width), nn.ReLU(),
        resnet_block(width, width, 2, first_block=True),
        resnet_block(width, 2 * width, 2),
        resnet_block(2 * width, 4 * width, 2),
        resnet_block(4 * width, 8 * width, 2),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
        nn.Linear(8 * width, num_classes))


def fit(model, net, device, rank, world_size, batch_size, lr, num_epochs,
        num_train, num_test, warmup_epochs, report):
    """The training loop of `train_concise`, as every process runs it.

    `model` takes the steps: `net` itself on one device, or `net` wrapped
    in DistributedDataParallel. Process `rank` of `world_size` trains on
    its shard of each global batch of `batch_size` examples. Rank 0
    evaluates `net` after each epoch and calls ``report(epoch, test
    accuracy, seconds the epoch's training took)``."""
    X_train, y_train, _, _, _ = fashion_mnist_arrays(num_train, num_test)
    _, test_iter = load_data_fashion_mnist(256, num_train, num_test)
    steps_per_epoch = len(y_train) // batch_size
    total_steps = steps_per_epoch * num_epochs
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss = nn.CrossEntropyLoss()  # the mean over this device's shard
    step = 0
    for epoch in range(num_epochs):
        model.train()
        timer = Timer()
        for idx in epoch_shards(len(y_train), batch_size, rank, world_size,
                                seed=epoch):
            X = torch.from_numpy(X_train[idx]).to(device)
            y = torch.from_numpy(y_train[idx]).to(device)
            for group in optimizer.param_groups:
                group['lr'] = learning_rate(step, lr, warmup_steps,
                                            total_steps)
            optimizer.zero_grad()
            # With DDP, backward also averages the gradients of all
            # processes, bucket by bucket, while it is still computing
            loss(model(X), y).backward()
            optimizer.step()
            step += 1
        synchronize([device])
        seconds = timer.stop()
        # Stop with a clear error if training has diverged (NaN or inf)
        check_finite(list(net.parameters()), epoch, lr)
        if rank == 0:  # net, not model: DDP's forward waits for the others
            net.eval()  # batch norm: use the running statistics
            report(epoch, evaluate_accuracy(net, test_iter, device), seconds)


def ddp_worker(rank, world_size, port, net, devices, settings, queue):
    """Process `rank` of a `train_concise` run on several devices: take a
    copy of `net` of its own, join the process group (NCCL when every
    device is a GPU, else Gloo), wrap the copy in DistributedDataParallel,
    train with `fit`, and send the reports (and, from rank 0, the trained
    parameters) to the parent through `queue`."""
    device = devices[rank]
    cuda = device.type == 'cuda'
    if cuda:
        torch.cuda.set_device(device)
    else:  # the processes share the CPU cores
        torch.set_num_threads(max(1, torch.get_num_threads() // world_size))
    # `net` arrives in memory shared with the other processes: without a
    # copy of its own, each would update the same parameters on a CPU
    net = copy.deepcopy(net).to(device)
    backend = 'nccl' if all(d.type == 'cuda' for d in devices) else 'gloo'
    dist.init_process_group(backend, init_method=f'tcp://127.0.0.1:{port}',
                            rank=rank, world_size=world_size)
    try:
        # DDP copies rank 0's parameters and buffers to every process, and
        # by default copies the buffers (the running statistics of batch
        # norm) again before every forward pass
        model = DistributedDataParallel(
            net, device_ids=[device] if cuda else None)
        fit(model, net, device, rank, world_size, *settings,
            report=lambda *r: queue.put(('epoch', *r)))
        if rank == 0:
            queue.put(('state', {k: v.detach().cpu().numpy()
                                 for k, v in net.state_dict().items()}))
    finally:
        dist.destroy_process_group()


def _quiet_worker(rank, *args):
    """`ddp_worker`, with the data notices that the parent already
    printed kept out of the notebook."""
    with contextlib.redirect_stdout(io.StringIO()):
        ddp_worker(rank, *args)


def _check_importable(net):
    for m in net.modules():
        if type(m).__module__ == '__main__':
            raise ValueError(error_message(
                'The layer class {name} is defined in this notebook or '
                'script; the processes train_concise starts cannot import '
                'it. Move it into a .py file and import it, or build the '
                'network from torch.nn layers.', name=type(m).__name__))


class _Mailbox:
    """What `ddp_worker` calls `queue`: ``put(message)`` sends a message
    from a training process to the parent, which ``take()``s them in the
    order they were put (only rank 0 sends).

    Each message is pickled into a file of its own, written under a
    temporary name and renamed into place. A pipe would do in a happy
    run, but a process killed half-way through writing the trained
    parameters into one would leave the parent waiting for the rest of a
    message that never comes; a half-written file is simply never
    renamed, and the parent sees the process end and says so."""

    def __init__(self, folder):
        self.folder, self.sent, self.received = folder, 0, 0

    def put(self, message):
        path = os.path.join(self.folder, f'{self.sent:08d}.msg')
        with open(path + '.part', 'wb') as f:
            pickle.dump(message, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(path + '.part', path)
        self.sent += 1

    def take(self):
        """The messages that arrived since the last call, oldest first."""
        messages = []
        while True:
            path = os.path.join(self.folder, f'{self.received:08d}.msg')
            if not os.path.exists(path):
                return messages
            with open(path, 'rb') as f:
                messages.append(pickle.load(f))
            os.remove(path)
            self.received += 1


def _run_processes(net, devices, settings, report, timeout=3600):
    """Run `ddp_worker` in one spawned process per device, pass their
    reports on as they come, and load the parameters rank 0 trained into
    `net`. A failed process stops all of them, with its error; so does a
    run in which no epoch ends for `timeout` seconds."""
    _check_importable(net)
    net = net.cpu()
    with tempfile.TemporaryDirectory(prefix='d2lpar-') as folder:
        mailbox = _Mailbox(folder)
        procs = torch.multiprocessing.start_processes(
            _quiet_worker, nprocs=len(devices), join=False,
            start_method='spawn',
            args=(len(devices), _launch.free_port(), net, devices,
                  settings, mailbox))
        state = _watch_processes(procs, mailbox, report, timeout)
    if state is None:
        raise RuntimeError(error_message(
            'The training processes ended without sending back the trained '
            'parameters.'))
    net.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})


def _watch_processes(procs, mailbox, report, timeout):
    """Pass the reports of `procs` on until all have ended, and return the
    trained state; stop every process on a failure or a stall, and in any
    case leave none running."""
    deadline, state = time.monotonic() + timeout, None
    try:
        done = False
        while not done:
            try:
                done = procs.join(timeout=0.1)
            except ProcessException as e:
                raise RuntimeError(error_message(
                    'A training process failed, so train_concise stopped '
                    'all of them:') + f'\n{e}') from None
            for kind, *payload in mailbox.take():
                if kind == 'epoch':
                    report(*payload)
                    deadline = time.monotonic() + timeout
                else:
                    state = payload[0]
            if not done and time.monotonic() > deadline:
                raise RuntimeError(error_message(
                    'No epoch of train_concise ended within {timeout} s, so '
                    'it stopped the processes: are they stuck? Try fewer '
                    'examples or a thinner network.', timeout=timeout))
    finally:
        _launch.stop_spawned(procs.processes)
    return state


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


def train_concise(net, devices, batch_size, lr, num_epochs=10,
                  num_train=None, num_test=None, warmup_epochs=0,
                  plot=True):
    """Train the classifier `net` on Fashion-MNIST with data parallelism
    over `devices`, with the framework's own tools: one process per device
    and DistributedDataParallel (gloo on CPUs, nccl on GPUs); on one
    device, in this process. `batch_size` is the global batch, cut into
    one shard per device; the learning rate warms up linearly from
    ``lr / warmup_steps`` over `warmup_epochs` epochs, then decays to 0
    (cosine). Plots the test accuracy per epoch, leaves the trained
    parameters in `net` (on ``devices[0]``, in evaluation mode), and
    returns a `TrainResult`. A process that fails stops the run with a
    RuntimeError that shows its error. The processes are spawned, so a
    script that calls this on several devices must do so under
    ``if __name__ == '__main__':``."""
    devices = [torch.device(d) for d in _checks.check_concise(
        batch_size, devices, num_train, num_epochs, warmup_epochs, lr)]
    settings = (batch_size, lr, num_epochs, num_train, num_test,
                warmup_epochs)

    def train(report):
        if len(devices) == 1:
            with _threads_of(devices[0]):
                fit(net.to(devices[0]), net, devices[0], 0, 1, *settings,
                    report=report)
        else:
            _run_processes(net, devices, settings, report)
            net.to(devices[0]).eval()  # as `fit` leaves it on one device

    return _training.run_concise(devices, batch_size, num_epochs, num_train,
                               num_test, plot, train)


# --------------------------------------------------------------------------
# Several processes, on this machine or on several (d2lpar.distributed)
# --------------------------------------------------------------------------
def train_distributed(num_workers, batch_size=256, lr=0.2, num_epochs=2,
                      num_train=None, num_test=None, port=None, timeout=300,
                      crash_at_step=None, use_gpus=None,
                      sharded=False, optimizer='sgd', pipelined=False,
                      checkpoint=False, fail_at_step=None,
                      max_restarts=0, amp=False, accumulate=1):
    """Train the lesson's LeNet in `num_workers` processes on 127.0.0.1
    (DDP with gloo (nccl on GPUs) under torchrun), each on its share of every
    global batch; print and return a `DistributedResult` with the times of
    every process. A crashed worker, a port in use or the `timeout` end the
    run with a RuntimeError, and no process is left behind;
    `crash_at_step` makes the last process fail on purpose.
    The processes train on GPUs when each can have one of its own, else
    on the CPU; `use_gpus` False puts them on the CPU in any case, True
    requires the GPUs. `sharded` True shards the model with FSDP
    (in MXNet: the optimizer state over as many servers as workers).
    `optimizer` is 'sgd' or 'adam'. `pipelined` True trains lesson 5's
    pipeline MLP instead, in two GPipe stages, one per process, with
    torch.distributed.pipelining (MXNet has no such tool). Runs to be
    compared use the same kind of device. `checkpoint`,
    `fail_at_step`, `max_restarts`: checkpoints and restarts; `amp`:
    mixed precision; `accumulate`: micro-batches per step (see
    `d2lpar.distributed.train`)."""
    return _distributed.train('torch', num_workers, batch_size, lr,
                              num_epochs, num_train, num_test, port, timeout,
                              crash_at_step, use_gpus=use_gpus,
                              sharded=sharded, optimizer=optimizer,
                              pipelined=pipelined, checkpoint=checkpoint,
                              fail_at_step=fail_at_step,
                              max_restarts=max_restarts, amp=amp,
                              accumulate=accumulate)


def distributed_commands(hosts, workers_per_host=1, port=29500,
                         out_dir='OUT'):
    """The command lines that run the same training on the machines
    `hosts` (the first one coordinates), one line per command."""
    return _distributed.command_for_machines('torch', hosts,
                                             workers_per_host, port, out_dir)


# --------------------------------------------------------------------------
# Lesson 5: beyond data parallelism
# --------------------------------------------------------------------------
def reduce_scatter(data):
    """Sum the arrays of `data` (one per device, same shape) and leave
    shard i of the sum on device i: the rows that ``np.array_split`` gives
    shard i, added up in the order of the devices (as `allreduce` adds).
    The inputs are not changed."""
    check_collective(data, 'reduce_scatter', torch.Tensor, _shape)
    b = shard_bounds(len(data[0]), len(data))
    shards = []
    with torch.no_grad():
        for i, x in enumerate(data):  # device i adds up its rows
            shard = data[0][b[i]:b[i + 1]].to(x.device, copy=True)
            for j in range(1, len(data)):
                shard += data[j][b[i]:b[i + 1]].to(x.device)
            shards.append(shard)
    return shards


def all_gather(shards):
    """Give every device the whole array: the shards (shard i on device i)
    put back together in order. The shards are not changed."""
    check_collective(shards, 'all_gather', torch.Tensor, _shape,
                     same_rows=False)
    with torch.no_grad():
        return [torch.cat([s.to(x.device) for s in shards]) for x in shards]


def _shape(x):
    return x.shape


MLP_SHAPES = ((784, 256), (256,), (256, 10), (10,))


def mlp_params():
    """The parameters of an MLP with one hidden layer, in one flat vector:
    weights drawn with standard deviation sqrt(2 / inputs), zero biases."""
    W1 = torch.randn(784, 256) * (2 / 784) ** 0.5
    W2 = torch.randn(256, 10) * (2 / 256) ** 0.5
    return torch.cat([W1.reshape(-1), torch.zeros(256), W2.reshape(-1),
                      torch.zeros(10)])


def mlp(X, flat):
    """The MLP of `mlp_params`, its parameters read from the flat vector."""
    sizes = [math.prod(shape) for shape in MLP_SHAPES]
    W1, b1, W2, b2 = [p.reshape(shape) for p, shape in zip(
        flat.split(sizes), MLP_SHAPES)]
    H = F.relu(X.reshape(X.shape[0], -1) @ W1 + b1)
    return H @ W2 + b2


def adam(param, grad, moments, *, lr, step):
    """One Adam step (Kingma and Ba, 2015) on `param` in place, with its
    `moments` (m, v), also in place. Only elementwise operations: a shard
    of the vectors gets exactly the values of the whole."""
    m, v = moments
    with torch.no_grad():
        m.mul_(0.9).add_(grad * 0.1)
        v.mul_(0.999).add_(grad * grad * 0.001)
        m_hat, v_hat = m / (1 - 0.9 ** step), v / (1 - 0.999 ** step)
        param.sub_(lr * m_hat / (v_hat.sqrt() + 1e-8))


def zero_replicas(flat, devices, stage):
    """What each device keeps between steps, for data parallelism
    (`stage` 0) or ZeRO stage 1, 2 or 3: the parameters, the gradients and
    Adam's m and v, whole or only the device's shard."""
    b = shard_bounds(len(flat), len(devices))
    replicas = []
    for i, device in enumerate(devices):
        n = b[i + 1] - b[i]  # the length of this device's shard
        replicas.append({
            'params': (flat[b[i]:b[i + 1]] if stage >= 3 else flat).to(
                device, copy=True),
            'grads': torch.zeros(n if stage >= 2 else len(flat),
                                 device=device),
            'm': torch.zeros(n if stage >= 1 else len(flat), device=device),
            'v': torch.zeros(n if stage >= 1 else len(flat), device=device)})
    return replicas


def held_bytes(replica):
    """Bytes of the arrays that one device keeps between steps."""
    return sum(x.numel() * x.element_size() for x in replica.values())


def zero_step(X, y, replicas, *, devices, lr, step, stage):
    """One step of Adam with data parallelism (`stage` 0) or ZeRO stage
    1, 2 or 3 on `devices`; `replicas` come from `zero_replicas`."""
    X_shards, y_shards = split_batch(X, y, devices)
    # 1. Each device needs all the parameters for its forward and backward
    # pass; with ZeRO-3 they are gathered for this step only
    if stage == 3:
        full = all_gather([r['params'] for r in replicas])
    else:
        full = [r['params'] for r in replicas]
    # 2. Each device computes the gradient on its part of the batch
    grads = []
    for X_i, y_i, p in zip(X_shards, y_shards, full):
        p = p.detach().requires_grad_()
        l = loss(mlp(X_i, p), y_i).sum() / X.shape[0]
        grads.append(torch.autograd.grad(l, p)[0])
    if stage == 0:  # 3. Everyone sums everything and updates everything
        allreduce(grads)
        for r, g in zip(replicas, grads):
            r['grads'].copy_(g)
            adam(r['params'], r['grads'], (r['m'], r['v']), lr=lr, step=step)
        return
    # 3. ZeRO: device i sums only shard i of the gradient and updates only
    # shard i of the parameters, with its shard of m and v
    b = shard_bounds(len(full[0]), len(devices))
    for i, (r, g) in enumerate(zip(replicas, reduce_scatter(grads))):
        r['grads'].copy_(grads[i] if stage == 1 else g)  # ZeRO-1: whole
        mine = r['params'] if stage == 3 else r['params'][b[i]:b[i + 1]]
        adam(mine, g, (r['m'], r['v']), lr=lr, step=step)
    # 4. ZeRO-1 and 2: every device gets all the new parameters back
    if stage < 3:
        new = all_gather([r['params'][b[i]:b[i + 1]]
                          for i, r in enumerate(replicas)])
        for r, p in zip(replicas, new):
            r['params'].copy_(p)


def pipeline_params(width=512):
    """Two pipeline stages of an MLP, as lists of (weight, bias): stage 0
    784 -> width -> width, stage 1 width -> width -> 10."""
    def layer(n_in, n_out):
        return [torch.randn(n_in, n_out) * (2 / n_in) ** 0.5,
                torch.zeros(n_out)]
    return [layer(784, width) + layer(width, width),
            layer(width, width) + layer(width, 10)]


def stage_forward(X, params, last=False):
    """One pipeline stage: its layers, each followed by a ReLU except the
    very last layer of the model."""
    X = X.reshape(X.shape[0], -1)
    for i in range(0, len(params), 2):
        X = X @ params[i] + params[i + 1]
        if not (last and i == len(params) - 2):
            X = F.relu(X)
    return X


def gpipe_step(X, y, stage_params, *, devices, num_microbatches,
               timeline=None):
    """Forward and backward passes of one batch through the stages (stage
    s on devices[s]) in `num_microbatches` micro-batches, in the order of
    `gpipe_schedule`; gradients add up in each parameter's ``.grad``.
    Returns the summed loss. (`timeline` is for MXNet, which needs it.)"""
    k, m = len(devices), num_microbatches
    X_parts, y_parts = X.tensor_split(m), y.tensor_split(m)
    fwd = [[None] * m for _ in range(k)]  # (input, output) of each stage
    bwd = [[None] * m for _ in range(k)]  # gradient of each stage's input
    losses = []

    def forward(s, j):
        def F_(previous):  # the name shows on the timeline
            x = previous if s == 0 else previous[1]
            x = x.detach().to(devices[s]).requires_grad_(s > 0)
            return x, stage_forward(x, stage_params[s], last=s == k - 1)
        F_.__name__ = f'F{j}'
        previous = X_parts[j] if s == 0 else fwd[s - 1][j]
        fwd[s][j] = launch(devices[s], F_, previous)

    def backward(s, j):
        def B_(pair, grad):
            x, out = pair
            if s == k - 1:  # the last stage starts from the loss
                l = loss(out, y_parts[j].to(out.device)).sum() / len(X)
                l.backward()
                losses.append(l.detach())
            else:
                out.backward(grad.to(out.device))
            return x.grad if s > 0 else None
        B_.__name__ = f'B{j}'
        grad = None if s == k - 1 else bwd[s + 1][j]
        bwd[s][j] = launch(devices[s], B_, fwd[s][j], grad)

    for tick in gpipe_schedule(k, m):
        for s, kind, j in tick:
            (forward if kind == 'F' else backward)(s, j)
    synchronize(devices)
    return float(sum(float(l) for l in losses))


def split_columns(W, b, devices):
    """A linear layer split by columns (Megatron-LM): device i gets its
    columns of the weight `W` (inputs x outputs) and of the bias `b`."""
    c = shard_bounds(W.shape[1], len(devices))
    return [(W[:, c[i]:c[i + 1]].to(d, copy=True),
             b[c[i]:c[i + 1]].to(d, copy=True)) for i, d in enumerate(devices)]


def split_rows(W, devices):
    """A linear layer split by rows: device i gets its rows of `W`."""
    r = shard_bounds(W.shape[0], len(devices))
    return [W[r[i]:r[i + 1]].to(d, copy=True) for i, d in enumerate(devices)]


def tensor_parallel_mlp(X, columns, rows, *, b2):
    """relu(X W1 + b1) W2 + b2 with W1, b1 split by columns (`columns`)
    and W2 by rows (`rows`): each device computes its columns of the
    hidden layer and a partial sum of the output; one allreduce adds the
    partial sums. Returns the output on every device."""
    X, partial = X.reshape(X.shape[0], -1), []
    for (W1_i, b1_i), W2_i in zip(columns, rows):
        H_i = F.relu(X.to(W1_i.device) @ W1_i + b1_i)  # its hidden columns
        partial.append(H_i @ W2_i)  # its share of the output
    allreduce(partial)
    return [Y + b2.to(Y.device) for Y in partial]
