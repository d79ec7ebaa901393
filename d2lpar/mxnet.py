"""d2lpar for MXNet: ``from d2lpar import mxnet as d2l``.

The same public names, with the same signatures, as ``d2lpar.torch``.
Everything runs on a CPU-only machine: where a lesson asks for more GPUs
than there are, `try_devices` hands out the CPU contexts ``cpu(0)``,
``cpu(1)``, ... as stand-ins (MXNet runs each on its own engine thread)
and says so once.
"""
import ctypes
import json
import math
import os
import queue
import tempfile
import threading
import time

import numpy as _numpy

from d2lpar import standins as _standins

# Both settings must be in place before MXNet loads.
# Every CPU stand-in cpu(i) computes with half of the CPU's threads (see
# d2lpar.standins): MXNet runs each context on an engine thread of its own,
# and each operator with OMP_NUM_THREADS threads, unless you set it.
if not os.environ.get('OMP_NUM_THREADS'):
    os.environ['OMP_NUM_THREADS'] = str(_standins.threads_per_stand_in(
        os.cpu_count() or 1))
STAND_IN_THREADS = int(os.environ['OMP_NUM_THREADS'])
# All CPU contexts share one pool of temporary workspaces (4 by default),
# handed out in turn; an operator holds its workspace while it runs. With
# too few, the 50 products queued on cpu(1) wait for those of cpu(0) that
# hold the same workspaces, and two stand-ins compute one after the other
# (measured: 0.88 of the sum of the parts with 16, 0.50 with 64, on 2
# cores); a LeNet step queues more operators than 64.
os.environ.setdefault('MXNET_CPU_TEMP_COPY', '256')

from d2l import mxnet as _d2l  # noqa: E402
import mxnet as mx  # noqa: E402
from mxnet.base import _LIB, check_call  # noqa: E402
from mxnet import autograd, gluon, np, npx  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

from d2lpar import api as _api  # noqa: E402
from d2lpar import checks as _checks  # noqa: E402
from d2lpar import collectives as _collectives  # noqa: E402
from d2lpar import data as _data  # noqa: E402
from d2lpar import devices as _devices  # noqa: E402
from d2lpar import distributed as _distributed  # noqa: E402
from d2lpar import fonts as _fonts  # noqa: E402
from d2lpar import timeline as _timeline  # noqa: E402
from d2lpar import timing as _timing  # noqa: E402
from d2lpar import training as _training  # noqa: E402
from d2lpar.api import *  # noqa: E402,F401,F403 (api.SHARED, as they are)
from d2lpar.checks import (  # noqa: E402
    check_allreduce, check_devices, check_replicas, check_split)
from d2lpar.sharding import check_collective  # noqa: E402
from d2lpar.i18n import N_, error_message  # noqa: E402

npx.set_np()

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
    """The CPU context ``cpu(0)``."""
    return npx.cpu()


def num_gpus():
    """How many GPUs MXNet can see (0 with the CPU-only pip wheel)."""
    return npx.num_gpus()


def gpu(i=0):
    """The `i`-th GPU; a ValueError if this machine has no such GPU."""
    if not isinstance(i, int) or i < 0:
        raise TypeError(error_message(
            'A GPU index is an int >= 0, got {i!r}.', i=i))
    if i >= num_gpus():
        raise ValueError(error_message(
            'There is no GPU {i}: this machine has {n} GPU(s). Use '
            'try_gpu({i}) to fall back to the CPU.', i=i, n=num_gpus()))
    return npx.gpu(i)


def try_gpu(i=0):
    """The `i`-th GPU if it exists, else the CPU."""
    return gpu(i) if i < num_gpus() else cpu()


def try_all_gpus():
    """All GPUs, or ``[cpu()]`` when there is none (never an empty list)."""
    return [gpu(i) for i in range(num_gpus())] or [cpu()]


def try_devices(num_devices):
    """`num_devices` devices for a lesson: the first GPUs when there are
    enough, else the CPU contexts cpu(0), cpu(1), ... as stand-ins (each
    has its own engine thread), saying once what it fell back to."""
    if not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(error_message(
            'num_devices must be an int >= 1, got {num_devices!r}.',
            num_devices=num_devices))
    if num_gpus() >= num_devices:
        return [gpu(i) for i in range(num_devices)]
    say_once(_devices.fallback_notice(
        num_devices, num_gpus(), STAND_IN_THREADS,
        ', '.join(f'cpu({i})' for i in range(num_devices))))
    return [npx.cpu(i) for i in range(num_devices)]


def products_that_fit(num_products, shape, devices):
    """How many of `num_products` float32 results of `shape` fit, with
    their input matrix, into the free memory of every GPU among `devices`
    (keeping a tenth of it, at least 256 MiB, for the framework): all
    `num_products` on the CPU and on CPU stand-ins, fewer on a GPU with
    too little free memory (the book's 50 products of 4000x4000 keep
    3.2 GB of results on each GPU). A ValueError when not even one fits.
    The free memory is what ``mx.context.gpu_memory_info`` reports."""
    def free_bytes(device):
        if device.device_type != 'gpu':
            return None
        return mx.context.gpu_memory_info(device.device_id)[0]

    return _devices.products_that_fit_with(free_bytes, num_products, shape,
                                          devices)


def launch(device, fn, *args, queue='compute'):
    """Queue ``fn(*args)`` on `device` and return a Future of its result;
    Futures among `args` (also in lists) are waited for first.

    MXNet's engine already queues every operator and returns at once, on
    the CPU too, and runs each context's operators on threads of its own:
    so `fn` is simply called now, inside `device`'s context, and the
    Future is done at once (its arrays may still be computing). On a GPU
    the engine copies on streams of its own. Between CPU contexts it would
    copy on the thread of the source context, behind that context's work;
    so on the 'copy' queue of a CPU stand-in, every ``x.copyto(y)`` that
    `fn` calls between two CPU arrays of one shape and dtype goes to the
    engine's threads for prioritised CPU work instead (the copy engine of
    the stand-in), still after the operators that write `x` and before
    those that use `y`. `synchronize` waits for all of it."""
    _standins.check_queue(queue)
    with device:
        if queue == 'copy' and device.device_type == 'cpu':
            with _CopyEngine():
                return _standins.done(fn(*_standins.resolve(args)))
        return _standins.done(fn(*_standins.resolve(args)))


class _Context(ctypes.Structure):  # mxnet::Context, as the C API takes it
    _fields_ = [('dev_type', ctypes.c_int), ('dev_id', ctypes.c_int)]


class _CopyEngine:
    """Inside ``with _CopyEngine():``, ``x.copyto(y)`` between CPU arrays
    of one shape and dtype is pushed to MXNet's engine as an operation
    that reads `x` and writes `y` (see `_Engine`), run once every
    operator queued before it that writes `x` or uses `y` is done. The
    copy itself is one memmove (ctypes lets go of the GIL)."""
    _local = threading.local()
    _copyto = None  # the ndarray's own copyto, once wrapped

    def __enter__(self):
        cls = type(self)
        if cls._copyto is None:
            cls._copyto = np.ndarray.copyto
            np.ndarray.copyto = _copyto_on_the_copy_engine
        cls._local.depth = getattr(cls._local, 'depth', 0) + 1
        return self

    def __exit__(self, *exc_info):
        type(self)._local.depth -= 1
        return False

    @classmethod
    def active(cls):
        return getattr(cls._local, 'depth', 0) > 0


class _Engine:
    """Python work pushed to MXNet's engine: an operation that reads one
    array and writes another (or none), with the property
    kCPUPrioritized. The engine runs it on its threads for prioritised
    CPU work (``MXNET_CPU_PRIORITY_NTHREADS``), not on the thread of a
    context, once the operators queued before it that write what it
    reads, or use what it writes, are done."""
    _pending, _lock, _count = {}, threading.Lock(), [0]
    _PRIORITIZED = ctypes.c_int(3)  # mxnet::FnProperty::kCPUPrioritized
    _CPU = _Context(1, 0)

    @classmethod
    def push(cls, read, write, fn, *args):
        with cls._lock:  # the arrays stay alive until the call
            cls._count[0] += 1
            key = cls._count[0]
            cls._pending[key] = (fn, args, read, write)
        writes = [] if write is None else [write.handle]
        check_call(_LIB.MXEnginePushSyncND(
            _run_on_engine, ctypes.c_void_p(key), None,
            ctypes.byref(cls._CPU), (ctypes.c_void_p * 1)(read.handle), 1,
            (ctypes.c_void_p * max(1, len(writes)))(*writes), len(writes),
            ctypes.byref(cls._PRIORITIZED), 0, b'd2lpar'))


def _copyto_on_the_copy_engine(self, other):
    if (_CopyEngine.active() and isinstance(other, np.ndarray)
            and self.ctx.device_type == other.ctx.device_type == 'cpu'
            and self.shape == other.shape and self.dtype == other.dtype
            and self.size and self.handle.value != other.handle.value):
        _Engine.push(self, other, _copy, self, other,
                     self.size * _numpy.dtype(self.dtype).itemsize)
        return other
    return _CopyEngine._copyto(self, other)


def _copy(src, dst, nbytes):
    """Run by the engine once `src` is ready and `dst` is free: both are
    allocated then, so their data pointers are safe to read."""
    pointers = [ctypes.c_void_p(), ctypes.c_void_p()]
    for x, pointer in zip((src, dst), pointers):
        check_call(_LIB.MXNDArrayGetData(x.handle, ctypes.byref(pointer)))
    ctypes.memmove(pointers[1], pointers[0], nbytes)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
def _run_on_engine(run_context, key):
    with _Engine._lock:
        fn, args, _, _ = _Engine._pending.pop(key)
    fn(*args)


def synchronize(devices=None):
    """Wait until all queued work is done. MXNet's engine runs every
    operator asynchronously, on the CPU too; ``npx.waitall()`` waits for
    all devices at once."""
    if devices is not None:
        check_devices(devices)
    npx.waitall()


class Benchmark(_timing.Benchmark):
    __doc__ = _timing.Benchmark.__doc__
    _synchronize = staticmethod(synchronize)


def _kind(name):
    return 'copy' if 'copy' in name.lower() else 'compute'


class Timeline(_timeline.Timeline):
    """Record what runs where inside a ``with`` block, then `plot` it.

    With an MXNet build that has its profiler, ``mx.profiler`` records
    every operator. The pip wheel has it compiled out
    (``mx.runtime.Features()``); then ``watch(arrays, label, kind)`` asks
    the engine to note the time at which each result becomes ready (an
    operation that only reads it, run on the engine's threads for
    prioritised CPU work). A bar ends at that moment and starts when the
    previous result of the same kind on the same device became ready (or
    when it was queued, if later). Nothing waits while the work is
    queued, so MXNet's asynchrony is left intact. (``wait_to_read`` would
    not do: MXNet queues its notice on the thread of ``cpu(0)``, behind
    the work of that stand-in.)
    """

    def __enter__(self):
        npx.waitall()  # leave earlier work out of the picture
        self._t0 = time.perf_counter()
        self._profiler = mx.runtime.Features().is_enabled('PROFILER')
        if self._profiler:
            self.source = 'mx.profiler'
            fd, self._file = tempfile.mkstemp(suffix='.json')
            os.close(fd)
            mx.profiler.set_config(profile_all=True, aggregate_stats=False,
                                   filename=self._file)
            mx.profiler.set_state('run')
        else:
            self.source = N_("notes from MXNet's engine")
            self._watched, self._ready = [], {}
        return self

    def watch(self, arrays, label, kind='compute'):
        if self._profiler:
            return arrays
        pushed = time.perf_counter() - self._t0
        for a in _standins.flat(_standins.resolve([arrays])):
            key = len(self._watched)
            self._watched.append((label, kind, str(a.ctx), pushed))
            _Engine.push(a, None, self._note, key)
        return arrays

    def _note(self, key):
        self._ready[key] = time.perf_counter() - self._t0

    def __exit__(self, *exc_info):
        npx.waitall()
        if self._profiler:
            mx.profiler.set_state('stop')
            mx.profiler.dump()
            with open(self._file) as f:
                self.events = _timeline.events_from_chrome_trace(json.load(f),
                                                               _kind)
            os.remove(self._file)
        else:
            last = {}  # (row, kind) -> when its previous result was ready
            for key, (label, kind, row, pushed) in enumerate(self._watched):
                start = max(pushed, last.get((row, kind), 0.0))
                end = max(self._ready[key], start)
                self.events.append(_timeline.Event(label, row, start, end,
                                                 kind))
                last[row, kind] = end
            self.events.sort(key=lambda e: e.start)
        return False


def _make_data(k, n):
    return [np.zeros(n, ctx=d) for d in try_devices(k)]  # no overflow


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
    x = np.ones(num_bytes // 4, ctx=device)
    y = np.empty_like(x)

    def copy():
        x.copyto(y)
        return num_bytes

    return _timing.measure_copy_bandwidth_with(copy, synchronize)


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------
def _to_arrays(X, y):
    return np.array(X), np.array(y.astype('int32'))


def load_data_fashion_mnist(batch_size, num_train=None, num_test=None):
    """Iterators over Fashion-MNIST (train, test), from the cache folder
    `data_dir()`, downloading it when the network allows; offline, over a
    synthetic stand-in with the same shapes, saying so once. `num_train`
    and `num_test` keep only the first examples, for quick CPU runs."""
    return _data.load_data_fashion_mnist_with(
        _to_arrays, batch_size, num_train, num_test)


# --------------------------------------------------------------------------
# The toy network of the multi-GPU chapter
# --------------------------------------------------------------------------
def lenet_params():
    """Fresh parameters of the LeNet-style network, on the CPU: weights
    with standard deviation sqrt(2 / inputs of one output) (He et al.,
    2015), biases 0."""
    def init(shape, num_inputs):
        return np.random.normal(scale=(2 / num_inputs) ** 0.5, size=shape)

    return [init((20, 1, 3, 3), 9), np.zeros(20),
            init((50, 20, 5, 5), 500), np.zeros(50),
            init((800, 128), 800), np.zeros(128),
            init((128, 10), 128), np.zeros(10)]


def lenet(X, params):
    """The LeNet-style network of the lesson, written with functions so
    that its parameters can live on any device."""
    h1_conv = npx.convolution(data=X, weight=params[0], bias=params[1],
                              kernel=(3, 3), num_filter=20)
    h1_activation = npx.relu(h1_conv)
    h1 = npx.pooling(data=h1_activation, pool_type='avg', kernel=(2, 2),
                     stride=(2, 2))
    h2_conv = npx.convolution(data=h1, weight=params[2], bias=params[3],
                              kernel=(5, 5), num_filter=50)
    h2_activation = npx.relu(h2_conv)
    h2 = npx.pooling(data=h2_activation, pool_type='avg', kernel=(2, 2),
                     stride=(2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3_linear = np.dot(h2, params[4]) + params[5]
    h3 = npx.relu(h3_linear)
    y_hat = np.dot(h3, params[6]) + params[7]
    return y_hat


loss = gluon.loss.SoftmaxCrossEntropyLoss()


# --------------------------------------------------------------------------
# Data parallelism from scratch
# --------------------------------------------------------------------------
def get_params(params, device):
    """A copy of `params` on `device`, with gradients attached. Always a
    copy, even on the same device, so every device owns its parameters."""
    new_params = [p.copyto(device) for p in params]
    for p in new_params:
        p.attach_grad()
    return new_params


def _memory(x):
    """Where the data of `x` lives: views of one array share it.

    MXNet allocates the output of a queued operation only when the engine
    runs it. Asking for the data pointer of an array not yet allocated
    allocates it on this thread, which races with the engine thread doing
    the same: the array can end up reading memory nobody wrote (about 0.2%
    of freshly computed arrays did). So wait for the array first. The
    check of `allreduce` asks this only of arrays that share a device, so
    one gradient per device is summed without waiting."""
    x.wait_to_read()
    pointer = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayGetData(x.handle, ctypes.byref(pointer)))
    return (str(x.ctx), pointer.value) if x.size else id(x)


def _device_of(x):
    return x.ctx


def allreduce(data):
    """Sum the arrays of `data` (one per device) in place: afterwards every
    one holds the elementwise sum. The first device gathers and adds up
    everything, then sends the sum back (the book's simple version)."""
    check_allreduce(data, memory_of=_memory, device_of=_device_of)
    for i in range(1, len(data)):
        np.add(data[0], data[i].as_in_ctx(data[0].ctx), out=data[0])
    for i in range(1, len(data)):
        data[0].copyto(data[i])


def _flat(x):
    """A 1-D view of `x` that shares its memory (NumPy-style reshape would
    copy in MXNet; the legacy NDArray reshape does not)."""
    return x.as_nd_ndarray().reshape((-1,)).as_np_ndarray()


def _copy_like(src, dst):
    """`src` for an operator on the device of `dst`. Between GPUs that is
    a copy. CPU contexts share one memory, and an MXNet operator on cpu(j)
    may read an array of cpu(i) where it lies (the engine still orders
    the two): so on CPU stand-ins nothing is copied, as in PyTorch, where
    every stand-in is the same 'cpu'. A copy would be a freshly allocated
    chunk at every step: MXNet's CPU memory has no pool, so each chunk
    comes from the kernel and is faulted in page by page, which made the
    ring about twice as slow on 4 stand-ins."""
    if src.ctx.device_type == 'cpu' and dst.ctx.device_type == 'cpu':
        return src
    return src.as_in_ctx(dst.ctx)


def _copy_into(src, dst):
    """Copy `src` straight into place (no temporary copy)."""
    src.copyto(dst)


def ring_allreduce(data):
    """Like `allreduce`, but with the bandwidth-optimal ring algorithm:
    reduce-scatter, then all-gather, over chunks of the flattened data."""
    check_allreduce(data, memory_of=_memory, device_of=_device_of)
    if len(data) == 1:
        return
    flats = [_flat(x) for x in data]  # views: written in place
    for phase, i, j, start, end in _collectives.ring_steps(
            flats[0].shape[0], len(flats)):
        if phase == 'reduce-scatter':
            view = flats[j][start:end]
            view += _copy_like(flats[i][start:end], flats[j])
        else:
            _copy_into(flats[i][start:end], flats[j][start:end])


# The sum of each chunk, one buffer per (device, dtype, chunk), kept from
# call to call: a fresh 16 MB buffer comes from the kernel and is faulted
# in page by page (MXNet's CPU memory has no pool).
_chunk_sums = {}


def _chunk_sum(device, dtype, c, n):
    key = (str(device), str(dtype), c)
    if key not in _chunk_sums or _chunk_sums[key].shape[0] < n:
        _chunk_sums[key] = mx.nd.empty((n,), ctx=device, dtype=dtype)
    return _chunk_sums[key][:n]


def direct_allreduce(data):
    """Like `allreduce`, but every device adds up a chunk of its own: it
    reads chunk i of every array straight from its device (a
    reduce-scatter), then sends its sum straight to every device (an
    all-gather). Each device sends 2(k-1)/k of the data, as in the ring.

    MXNet's engine orders operators by the arrays they read and write, not
    by the slices: two chunks of one array count as the same array. In the
    ring, stand-in i+1 reads the array that stand-in i is writing, so its
    steps ran one after the other (one core busy of two). Here the chunk
    sums go into buffers of their own, so the k sums only read the arrays
    and run at once, and so do the k all-gathers, which each write the
    array of one device."""
    check_allreduce(data, memory_of=_memory, device_of=_device_of)
    k = len(data)
    if k == 1:
        return
    flats = [_flat(x).as_nd_ndarray() for x in data]
    b = _collectives.chunk_bounds(flats[0].shape[0], k)
    chunks = [c for c in range(k) if b[c] < b[c + 1]]  # n < k: some empty
    sums = {}
    for c in chunks:  # device c's own piece first: an MXNet operator runs
        # on the engine thread of its first input's device
        parts = [_copy_like(flats[(c + i) % k][b[c]:b[c + 1]], flats[c])
                 for i in range(k)]
        sums[c] = _chunk_sum(data[c].ctx, data[c].dtype, c, b[c + 1] - b[c])
        mx.nd.add_n(*parts, out=sums[c])
    for c in chunks:
        for i in range(k):
            _copy_into(sums[c], flats[(c + i) % k][b[c]:b[c + 1]])


def split_batch(X, y, devices):
    """Split the minibatch `X`, `y` into len(devices) nearly equal shards,
    shard i on devices[i]. A ValueError if X and y differ in length or
    there are fewer examples than devices."""
    devices = check_split(len(X), len(y), devices)
    return (gluon.utils.split_and_load(X, devices, even_split=False),
            gluon.utils.split_and_load(y, devices, even_split=False))


def forward_backward(X, y, params):
    """The loss of the shard `X`, `y` on the device of `params`, and its
    gradient, left in each parameter's ``.grad``."""
    with autograd.record():
        l = loss(lenet(X, params), y)
    l.backward()


def train_batch(X, y, device_params, devices, lr, reduce=allreduce):
    """One step of data-parallel minibatch SGD: split the batch, compute
    loss and gradient on every device, sum the gradients with `reduce`,
    and update every copy of the parameters."""
    check_replicas(device_params, devices)
    X_shards, y_shards = split_batch(X, y, devices)
    # Every device computes the loss and gradient of its own shard. The
    # engine queues the work of each device and returns at once, so the
    # devices compute at the same time
    for X_shard, y_shard, params, device in zip(
            X_shards, y_shards, device_params, devices):
        launch(device, forward_backward, X_shard, y_shard, params)
    # Sum each gradient over all devices and give every device the sum
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
    for X, y in data_iter:
        X, y = X.as_in_ctx(device), y.as_in_ctx(device)
        y_hat = net(X).argmax(axis=1).astype(y.dtype)
        correct += (y_hat == y).sum()  # stays on the device: no waiting
        total += y.size
    return float(correct) / total


# `train` reads the same in d2lpar.torch: the lesson shows it as one
# framework-free cell, and tests/test_notebooks.py keeps both copies equal
# to that cell.
def check_finite(params, epoch, lr):
    """Raise an error that names the epoch when `params` hold NaN or
    infinite values (training diverged), or when `lr` is not a finite
    number above 0; a lesson calls it after each epoch."""
    if not all(bool(np.isfinite(p).all()) for p in params):
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
    return float(np.abs(a - b.as_in_ctx(a.ctx)).max())


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
    order, and return its `Timeline`, with the results of each stage
    (split, forward and backward, allreduce, update) watched on the device
    that computes them."""
    check_replicas(device_params, devices)
    with Timeline() as timeline:
        X_shards, y_shards = split_batch(X, y, devices)
        timeline.watch(X_shards, 'split', 'copy')
        for X_shard, y_shard, params, device in zip(
                X_shards, y_shards, device_params, devices):
            launch(device, forward_backward, X_shard, y_shard, params)
            timeline.watch([p.grad for p in params], 'forward_backward')
        for i in range(len(device_params[0])):
            reduce([params[i].grad for params in device_params])
        for params in device_params:
            timeline.watch([p.grad for p in params], 'allreduce', 'copy')
            sgd(params, lr, X.shape[0])
            timeline.watch(params, 'update')
    return timeline


# --------------------------------------------------------------------------
# Concise implementation: ResNet-18 with a Gluon Trainer over contexts
# --------------------------------------------------------------------------
class Residual(nn.HybridBlock):
    """The residual block of ResNet: two 3x3 convolutions with batch
    normalization, plus a shortcut (a 1x1 convolution when the block
    changes the number of channels or the resolution)."""

    def __init__(self, in_channels, out_channels, use_1x1conv=False,
                 strides=1, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = nn.Conv2D(out_channels, kernel_size=3, padding=1,
                               strides=strides, in_channels=in_channels)
        self.conv2 = nn.Conv2D(out_channels, kernel_size=3, padding=1,
                               in_channels=out_channels)
        self.conv3 = nn.Conv2D(out_channels, kernel_size=1, strides=strides,
                               in_channels=in_channels) if use_1x1conv else None
        self.bn1 = nn.BatchNorm(in_channels=out_channels)
        self.bn2 = nn.BatchNorm(in_channels=out_channels)

    def hybrid_forward(self, F, X):
        Y = F.npx.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.npx.relu(Y + X)


def resnet18(num_classes=10, in_channels=1, width=64):
    """The book's ResNet-18 for small images: a 3x3 first convolution and
    no max-pooling, four stages of two residual blocks with `width`,
    2 `width`, 4 `width` and 8 `width` channels, global average pooling
    and a dense layer, initialized (Xavier) on the CPU. The book uses
    ``width=64``; a CPU trains a thinner network (e.g. 8) in seconds
    rather than minutes."""
    def resnet_block(in_channels, out_channels, num_residuals,
                     first_block=False):
        blk = nn.HybridSequential()
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.add(Residual(in_channels, out_channels,
                                 use_1x1conv=True, strides=2))
            else:
                blk.add(Residual(out_channels, out_channels))
        return blk

    net = nn.HybridSequential()
    net.add(nn.Conv2D(width, kernel_size=3, strides=1, padding=1,
                      in_channels=in_channels),
            nn.BatchNorm(in_channels=width), nn.Activation('relu'),
            resnet_block(width, width, 2, first_block=True),
            resnet_block(width, 2 * width, 2),
            resnet_block(2 * width, 4 * width, 2),
            resnet_block(4 * width, 8 * width, 2),
            nn.GlobalAvgPool2D(), nn.Dense(num_classes, in_units=8 * width))
    net.initialize(mx.init.Xavier(), ctx=cpu())
    return net


def fit(net, devices, batch_size, lr, num_epochs, num_train, num_test,
        warmup_epochs, report):
    """The training loop of `train_concise`. Each global batch of
    `batch_size` examples is cut into one shard per device; each device
    computes the loss of its shard and its gradient; the `Trainer` sums
    the gradients of all devices (its KVStore) and updates every copy of
    the parameters. After each epoch, ``report(epoch, test accuracy,
    seconds the epoch's training took)``."""
    X_train, y_train, _, _, _ = fashion_mnist_arrays(num_train, num_test)
    _, test_iter = load_data_fashion_mnist(256, num_train, num_test)
    steps_per_epoch = len(y_train) // batch_size
    total_steps = steps_per_epoch * num_epochs
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': lr})
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    step = 0
    for epoch in range(num_epochs):
        timer = Timer()
        for idx in epoch_shards(len(y_train), batch_size, seed=epoch):
            X_shards, y_shards = split_batch(
                np.array(X_train[idx]), np.array(y_train[idx]), devices)
            trainer.set_learning_rate(learning_rate(step, lr, warmup_steps,
                                                    total_steps))
            with autograd.record():
                ls = [loss(net(X_shard), y_shard)
                      for X_shard, y_shard in zip(X_shards, y_shards)]
            for l in ls:
                l.backward()
            trainer.step(batch_size)  # sum over devices, divide by batch
            step += 1
        npx.waitall()
        seconds = timer.stop()
        # Stop with a clear error if training has diverged (NaN or inf)
        check_finite([p.data(devices[0]) for p in
                      net.collect_params().values()], epoch, lr)
        # Outside autograd.record, batch norm uses its running statistics
        report(epoch, evaluate_accuracy(net, test_iter, devices[0]), seconds)


def train_concise(net, devices, batch_size, lr, num_epochs=10,
                  num_train=None, num_test=None, warmup_epochs=0,
                  plot=True):
    """Train the classifier `net` on Fashion-MNIST with data parallelism
    over `devices`, with the framework's own tools: a copy of the network
    on every context and a Gluon `Trainer` whose KVStore sums the
    gradients. `batch_size` is the global batch, cut into one shard per
    device; the learning rate warms up linearly from ``lr /
    warmup_steps`` over `warmup_epochs` epochs, then decays to 0 (cosine).
    Plots the test accuracy per epoch, leaves the trained parameters in
    `net` (the same on all `devices`; batch normalization's running
    statistics differ between devices, so evaluate on ``devices[0]``, as
    the reported accuracies are), and returns a `TrainResult`."""
    devices = _checks.check_concise(batch_size, devices, num_train,
                                    num_epochs, warmup_epochs, lr)

    def train(report):
        net.collect_params().reset_ctx(devices)  # a copy on every device
        net.hybridize()
        fit(net, devices, batch_size, lr, num_epochs, num_train, num_test,
            warmup_epochs, report)

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
    (the dist_sync KVStore with a scheduler and a server), each on its
    share of every global batch; print and return a `DistributedResult`
    with the times of every process. A crashed worker, a port in use or
    the `timeout` end the run with a RuntimeError, and no process is left
    behind; `crash_at_step` makes the last process fail on purpose.
    The processes train on GPUs when each can have one of its own, else
    on the CPU; `use_gpus` False puts them on the CPU in any case, True
    requires the GPUs. `sharded` True runs as many servers as workers,
    each holding the optimizer state of its part of the parameters
    (PyTorch: FSDP). `optimizer` is 'sgd' or 'adam'. `pipelined` raises
    NotImplementedError: MXNet has no pipeline tool (PyTorch's GPipe
    stages). Runs to be compared use the same kind of device. `checkpoint`,
    `fail_at_step`, `max_restarts`: checkpoints and restarts; `amp`:
    mixed precision; `accumulate`: micro-batches per step (see
    `d2lpar.distributed.train`)."""
    return _distributed.train('mxnet', num_workers, batch_size, lr,
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
    return _distributed.command_for_machines('mxnet', hosts,
                                             workers_per_host, port, out_dir)


# --------------------------------------------------------------------------
# Lesson 5: beyond data parallelism
# --------------------------------------------------------------------------
def reduce_scatter(data):
    """Sum the arrays of `data` (one per device, same shape) and leave
    shard i of the sum on device i: the rows that ``np.array_split`` gives
    shard i, added up in the order of the devices (as `allreduce` adds).
    The inputs are not changed."""
    check_collective(data, 'reduce_scatter', np.ndarray, _shape)
    b = shard_bounds(len(data[0]), len(data))
    shards = []
    for i, x in enumerate(data):  # device i adds up its rows
        shard = data[0][b[i]:b[i + 1]].copyto(x.ctx)
        for j in range(1, len(data)):
            shard = shard + data[j][b[i]:b[i + 1]].as_in_ctx(x.ctx)
        shards.append(shard)
    return shards


def all_gather(shards):
    """Give every device the whole array: the shards (shard i on device i)
    put back together in order. The shards are not changed."""
    check_collective(shards, 'all_gather', np.ndarray, _shape,
                     same_rows=False)
    return [np.concatenate([s.as_in_ctx(x.ctx) for s in shards])
            for x in shards]


def _shape(x):
    return x.shape


MLP_SHAPES = ((784, 256), (256,), (256, 10), (10,))


def mlp_params():
    """The parameters of an MLP with one hidden layer, in one flat vector:
    weights drawn with standard deviation sqrt(2 / inputs), zero biases."""
    W1 = np.random.normal(scale=(2 / 784) ** 0.5, size=(784, 256))
    W2 = np.random.normal(scale=(2 / 256) ** 0.5, size=(256, 10))
    return np.concatenate([W1.reshape(-1), np.zeros(256), W2.reshape(-1),
                           np.zeros(10)])


def mlp(X, flat):
    """The MLP of `mlp_params`, its parameters read from the flat vector."""
    ends = np.cumsum(np.array([math.prod(s) for s in MLP_SHAPES])).tolist()
    W1, b1, W2, b2 = [flat[int(e - math.prod(s)):int(e)].reshape(s)
                      for e, s in zip(ends, MLP_SHAPES)]
    H = npx.relu(np.dot(X.reshape(X.shape[0], -1), W1) + b1)
    return np.dot(H, W2) + b2


def adam(param, grad, moments, *, lr, step):
    """One Adam step (Kingma and Ba, 2015) on `param` in place, with its
    `moments` (m, v), also in place. Only elementwise operations: a shard
    of the vectors gets exactly the values of the whole."""
    m, v = moments
    m[:] = m * 0.9 + grad * 0.1
    v[:] = v * 0.999 + grad * grad * 0.001
    m_hat, v_hat = m / (1 - 0.9 ** step), v / (1 - 0.999 ** step)
    param[:] = param - lr * m_hat / (np.sqrt(v_hat) + 1e-8)


def zero_replicas(flat, devices, stage):
    """What each device keeps between steps, for data parallelism
    (`stage` 0) or ZeRO stage 1, 2 or 3: the parameters, the gradients and
    Adam's m and v, whole or only the device's shard."""
    b = shard_bounds(len(flat), len(devices))
    replicas = []
    for i, device in enumerate(devices):
        n = b[i + 1] - b[i]  # the length of this device's shard
        replicas.append({
            'params': (flat[b[i]:b[i + 1]] if stage >= 3 else flat).copyto(
                device),
            'grads': np.zeros(n if stage >= 2 else len(flat), ctx=device),
            'm': np.zeros(n if stage >= 1 else len(flat), ctx=device),
            'v': np.zeros(n if stage >= 1 else len(flat), ctx=device)})
    return replicas


def held_bytes(replica):
    """Bytes of the arrays that one device keeps between steps."""
    return sum(x.size * x.dtype.itemsize for x in replica.values())


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
        p = p.copy()
        p.attach_grad()
        with autograd.record():
            l = loss(mlp(X_i, p), y_i).sum() / X.shape[0]
        l.backward()
        grads.append(p.grad)
    if stage == 0:  # 3. Everyone sums everything and updates everything
        allreduce(grads)
        for r, g in zip(replicas, grads):
            r['grads'][:] = g
            adam(r['params'], r['grads'], (r['m'], r['v']), lr=lr, step=step)
        return
    # 3. ZeRO: device i sums only shard i of the gradient and updates only
    # shard i of the parameters, with its shard of m and v
    b = shard_bounds(len(full[0]), len(devices))
    for i, (r, g) in enumerate(zip(replicas, reduce_scatter(grads))):
        r['grads'][:] = grads[i] if stage == 1 else g  # ZeRO-1: whole
        mine = r['params'] if stage == 3 else r['params'][b[i]:b[i + 1]]
        adam(mine, g, (r['m'], r['v']), lr=lr, step=step)
    # 4. ZeRO-1 and 2: every device gets all the new parameters back
    if stage < 3:
        new = all_gather([r['params'][b[i]:b[i + 1]]
                          for i, r in enumerate(replicas)])
        for r, p in zip(replicas, new):
            r['params'][:] = p


def pipeline_params(width=512):
    """Two pipeline stages of an MLP, as lists of (weight, bias): stage 0
    784 -> width -> width, stage 1 width -> width -> 10."""
    def layer(n_in, n_out):
        W = np.random.normal(scale=(2 / n_in) ** 0.5, size=(n_in, n_out))
        return [W, np.zeros(n_out)]
    return [layer(784, width) + layer(width, width),
            layer(width, width) + layer(width, 10)]


def stage_forward(X, params, last=False):
    """One pipeline stage: its layers, each followed by a ReLU except the
    very last layer of the model."""
    X = X.reshape(X.shape[0], -1)
    for i in range(0, len(params), 2):
        X = np.dot(X, params[i]) + params[i + 1]
        if not (last and i == len(params) - 2):
            X = npx.relu(X)
    return X


def gpipe_step(X, y, stage_params, *, devices, num_microbatches,
               timeline=None):
    """Forward and backward passes of one batch through the stages (stage
    s on devices[s]) in `num_microbatches` micro-batches, in the order of
    `gpipe_schedule`; gradients add up in each parameter's ``.grad``
    (attach them with ``grad_req='add'``). Returns the summed loss. MXNet's
    engine runs each device's work on its own thread; `timeline` watches
    every result."""
    k, m = len(devices), num_microbatches
    b = shard_bounds(len(X), m)
    fwd = [[None] * m for _ in range(k)]  # (input, output) of each stage
    bwd = [[None] * m for _ in range(k)]  # gradient of each stage's input
    losses = []
    watch = timeline.watch if timeline else (lambda a, label: a)
    for tick in gpipe_schedule(k, m):
        for s, kind, j in tick:
            if kind == 'F':
                x = X[b[j]:b[j + 1]] if s == 0 else fwd[s - 1][j][1]
                x = x.copyto(devices[s])
                x.attach_grad()
                with autograd.record():
                    out = stage_forward(x, stage_params[s], last=s == k - 1)
                    if s == k - 1:  # the last stage ends with the loss
                        out = loss(out, y[b[j]:b[j + 1]].as_in_ctx(
                            devices[s])).sum() / len(X)
                fwd[s][j] = (x, watch(out, f'F{j}'))
            else:
                x, out = fwd[s][j]
                if s == k - 1:
                    out.backward()
                    losses.append(out)
                else:
                    out.backward(bwd[s + 1][j].as_in_ctx(devices[s]))
                bwd[s][j] = watch(x.grad, f'B{j}')
    return float(sum(float(l) for l in losses))


def split_columns(W, b, devices):
    """A linear layer split by columns (Megatron-LM): device i gets its
    columns of the weight `W` (inputs x outputs) and of the bias `b`."""
    c = shard_bounds(W.shape[1], len(devices))
    return [(W[:, c[i]:c[i + 1]].copyto(d), b[c[i]:c[i + 1]].copyto(d))
            for i, d in enumerate(devices)]


def split_rows(W, devices):
    """A linear layer split by rows: device i gets its rows of `W`."""
    r = shard_bounds(W.shape[0], len(devices))
    return [W[r[i]:r[i + 1]].copyto(d) for i, d in enumerate(devices)]


def tensor_parallel_mlp(X, columns, rows, *, b2):
    """relu(X W1 + b1) W2 + b2 with W1, b1 split by columns (`columns`)
    and W2 by rows (`rows`): each device computes its columns of the
    hidden layer and a partial sum of the output; one allreduce adds the
    partial sums. Returns the output on every device."""
    X, partial = X.reshape(X.shape[0], -1), []
    for (W1_i, b1_i), W2_i in zip(columns, rows):
        H_i = npx.relu(np.dot(X.as_in_ctx(W1_i.ctx), W1_i) + b1_i)
        partial.append(np.dot(H_i, W2_i))  # its share of the output
    allreduce(partial)
    return [Y + b2.as_in_ctx(Y.ctx) for Y in partial]
