"""MXNet devices for the lessons: GPUs, the CPU contexts as stand-ins,
`launch` and `synchronize`, and the measurements built on them."""
import mxnet as mx
from mxnet import np, npx

from d2lpar import _common
from d2lpar import standins as _standins
from d2lpar._common import check_devices, say_once
from d2lpar._mxnet import STAND_IN_THREADS
from d2lpar.i18n import error_message


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
    say_once(_common.fallback_notice(
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

    return _common.products_that_fit_with(free_bytes, num_products, shape,
                                          devices)


def launch(device, fn, *args, queue='compute'):
    """Queue ``fn(*args)`` on `device` and return a Future of its result;
    Futures among `args` (also in lists) are waited for first.

    MXNet's engine already queues every operator and returns at once, on
    the CPU too, and runs each context's operators on threads of its own:
    so `fn` is simply called now, inside `device`'s context, and the
    Future is done at once (its arrays may still be computing). On a GPU
    the engine copies on streams of its own. Between CPU contexts it copies
    on the thread of the source context, behind that context's work, so
    on CPU stand-ins the 'copy' queue cannot overlap the 'compute' one.
    `synchronize` waits for all of it."""
    _standins.check_queue(queue)
    with device:
        return _standins.done(fn(*_standins.resolve(args)))


def synchronize(devices=None):
    """Wait until all queued work is done. MXNet's engine runs every
    operator asynchronously, on the CPU too; ``npx.waitall()`` waits for
    all devices at once."""
    if devices is not None:
        check_devices(devices)
    npx.waitall()


class Benchmark(_common.Benchmark):
    __doc__ = _common.Benchmark.__doc__
    _synchronize = staticmethod(synchronize)


def _make_data(k, n):
    return [np.zeros(n, ctx=d) for d in try_devices(k)]  # no overflow


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
    x = np.ones(num_bytes // 4, ctx=device)
    y = np.empty_like(x)

    def copy():
        x.copyto(y)
        return num_bytes

    return _common.measure_copy_bandwidth_with(copy, synchronize)


def _to_arrays(X, y):
    return np.array(X), np.array(y.astype('int32'))


def load_data_fashion_mnist(batch_size, num_train=None, num_test=None):
    """Iterators over Fashion-MNIST (train, test), from the cache folder
    `data_dir()`, downloading it when the network allows; offline, over a
    synthetic stand-in with the same shapes, saying so once. `num_train`
    and `num_test` keep only the first examples, for quick CPU runs."""
    return _common.load_data_fashion_mnist_with(
        _to_arrays, batch_size, num_train, num_test)
