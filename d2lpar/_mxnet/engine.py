"""Python work pushed to MXNet's engine, ordered by the arrays it reads
and writes: the copies of a CPU stand-in's 'copy' queue (`launch`) and the
moments `Timeline.watch` notes."""
import ctypes
import threading

import numpy as _numpy
from mxnet import np
from mxnet.base import _LIB, check_call


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
