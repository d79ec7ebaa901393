"""MXNet devices for the lessons: GPUs, the CPU contexts as stand-ins,
`launch` and `synchronize`, and the measurements built on them."""
import mxnet as mx
from mxnet import np, npx

from d2lpar import _backend
from d2lpar import timing as _timing
from d2lpar import standins as _standins
from d2lpar.checks import check_devices
from d2lpar._mxnet import STAND_IN_THREADS
from d2lpar._mxnet.engine import _CopyEngine


def cpu():
    """The CPU context ``cpu(0)``."""
    return npx.cpu()


def num_gpus():
    """How many GPUs MXNet can see (0 with the CPU-only pip wheel)."""
    return npx.num_gpus()


def _free_bytes(device):
    if device.device_type != 'gpu':
        return None
    return mx.context.gpu_memory_info(device.device_id)[0]


def _gpu_device(i):
    return npx.gpu(i)


def _stand_in(i):
    return npx.cpu(i)


def _stand_in_label(i):
    return f'cpu({i})'


def _stand_in_threads():
    return STAND_IN_THREADS


# Written once for both backends (d2lpar/_backend.py)
(gpu, try_gpu, try_all_gpus, try_devices, copy_bandwidth, products_that_fit,
 measure_allreduce, load_data_fashion_mnist) = _backend.device_functions(
    __name__)


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


def synchronize(devices=None):
    """Wait until all queued work is done. MXNet's engine runs every
    operator asynchronously, on the CPU too; ``npx.waitall()`` waits for
    all devices at once."""
    if devices is not None:
        check_devices(devices)
    npx.waitall()


def _full(n, value, device):
    return np.full(n, value, ctx=device)


def _copy_into(src, dst):
    src.copyto(dst)


def _to_arrays(X, y):
    return np.array(X), np.array(y.astype('int32'))


class Benchmark(_timing.Benchmark):
    __doc__ = _timing.Benchmark.__doc__
    _synchronize = staticmethod(synchronize)
