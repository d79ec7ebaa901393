"""MXNet's backend object, `BACKEND`: what the functions written once for
both frameworks (d2lpar/_backend.py) ask of MXNet; the methods of
d2lpar/_torch/backend.py, in MXNet."""
import ctypes

import mxnet as mx
from mxnet import np, npx
from mxnet.base import _LIB, check_call

from d2lpar._mxnet import STAND_IN_THREADS
from d2lpar._mxnet import arrays as _arrays
from d2lpar._mxnet import devices as _devices


class MXNetBackend:
    """MXNet for the framework-free functions of d2lpar/_backend.py."""
    framework = 'mxnet'  # the name d2lpar.distributed knows it by
    array_type = np.ndarray

    # Devices
    num_gpus = staticmethod(_devices.num_gpus)
    cpu = staticmethod(_devices.cpu)
    synchronize = staticmethod(_devices.synchronize)

    def gpu_device(self, i):
        """GPU `i` (unchecked: `_backend.gpu` checks it)."""
        return npx.gpu(i)

    def stand_in(self, i):
        """CPU stand-in `i`: the context ``cpu(i)``."""
        return npx.cpu(i)

    def stand_in_label(self, i):
        """CPU stand-in `i` as the lessons write it."""
        return f'cpu({i})'

    def stand_in_threads(self):
        """The CPU threads each stand-in computes with."""
        return STAND_IN_THREADS

    def free_bytes(self, device):
        """The bytes free on `device` when it is a GPU, else None."""
        if device.device_type != 'gpu':
            return None
        return mx.context.gpu_memory_info(device.device_id)[0]

    def to_arrays(self, X, y):
        """NumPy examples `X` and labels `y` as MXNet arrays."""
        return np.array(X), np.array(y.astype('int32'))

    # Arrays
    no_grad = staticmethod(_arrays.no_grad)
    device_of = staticmethod(_arrays.device_of)
    relu = staticmethod(_arrays.relu)
    concat = staticmethod(_arrays.concat)

    def full(self, n, value, device):
        """A vector of `n` times `value` on `device`."""
        return np.full(n, value, ctx=device)

    def copy_into(self, src, dst):
        """Copy `src` into `dst` in place."""
        src.copyto(dst)

    def copy_like(self, src, dst):
        """`src` for an operator on the device of `dst`.

        Between GPUs that is a copy. CPU contexts share one memory, and an
        MXNet operator on cpu(j) may read an array of cpu(i) where it lies
        (the engine still orders the two): so on CPU stand-ins nothing is
        copied, as in PyTorch, where every stand-in is the same 'cpu'. A
        copy would be a freshly allocated chunk at every step: MXNet's CPU
        memory has no pool, so each chunk comes from the kernel and is
        faulted in page by page, which made the ring about twice as slow
        on 4 stand-ins."""
        if src.ctx.device_type == 'cpu' and dst.ctx.device_type == 'cpu':
            return src
        return src.as_in_ctx(dst.ctx)

    def flat(self, x):
        """A 1-D view of `x` that shares its memory (NumPy-style reshape
        would copy in MXNet; the legacy NDArray reshape does not)."""
        return x.as_nd_ndarray().reshape((-1,)).as_np_ndarray()

    def memory(self, x):
        """Where the data of `x` lives: views of one array share it.

        MXNet allocates the output of a queued operation only when the
        engine runs it. Asking for the data pointer of an array not yet
        allocated allocates it on this thread, which races with the engine
        thread doing the same: the array can end up reading memory nobody
        wrote (about 0.2% of freshly computed arrays did). So wait for the
        array first. The check of `allreduce` asks this only of arrays
        that share a device, so one gradient per device is summed without
        waiting."""
        x.wait_to_read()
        pointer = ctypes.c_void_p()
        check_call(_LIB.MXNDArrayGetData(x.handle, ctypes.byref(pointer)))
        return (str(x.ctx), pointer.value) if x.size else id(x)

    def all_finite(self, x):
        """Whether `x` holds neither NaN nor infinite values."""
        return bool(np.isfinite(x).all())

    def max_abs_diff(self, a, b):
        """The largest absolute difference between `a` and `b`."""
        return float(np.abs(a - b.as_in_ctx(a.ctx)).max())

    # The small models' arrays, on the CPU
    def normal(self, shape, std):
        """Normal random numbers of `shape`, mean 0, deviation `std`."""
        return np.random.normal(scale=std, size=shape)

    def zeros(self, n):
        """A vector of `n` zeros."""
        return np.zeros(n)

    def dot(self, X, W):
        """The matrix product of `X` and `W`."""
        return np.dot(X, W)

    def nbytes(self, x):
        """The bytes of the data of `x`."""
        return x.size * x.dtype.itemsize


BACKEND = MXNetBackend()
