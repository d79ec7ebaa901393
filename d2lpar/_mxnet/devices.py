"""MXNet devices for the lessons: the CPU, the GPUs MXNet sees, `launch`
and `synchronize` (the CPU contexts as stand-ins are MXNet's backend
object's, d2lpar/_mxnet/backend.py)."""
from mxnet import npx

from d2lpar import timing as _timing
from d2lpar import standins as _standins
from d2lpar.checks import check_devices
from d2lpar._mxnet.engine import _CopyEngine


def cpu():
    """The CPU context ``cpu(0)``."""
    return npx.cpu()


def num_gpus():
    """How many GPUs MXNet can see (0 with the CPU-only pip wheel)."""
    return npx.num_gpus()


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


class Benchmark(_timing.Benchmark):
    __doc__ = _timing.Benchmark.__doc__
    _synchronize = staticmethod(synchronize)
