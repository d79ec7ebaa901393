"""The names of d2lpar/_torch/arrays.py, in MXNet: the operations that
the lessons' shared code (cells #@tab all) calls as ``d2l.name``, then the
private hooks of d2lpar/_backend.py."""
import contextlib
import ctypes

from mxnet import autograd, np, npx
from mxnet.base import _LIB, check_call

from d2lpar._mxnet.devices import _copy_into  # noqa: F401 (a hook)

concat = np.concatenate


def no_grad():
    """A context that does nothing: MXNet's autograd records only inside
    ``autograd.record()``, so outside it there is nothing to switch off."""
    return contextlib.nullcontext()


def relu(x):
    return npx.relu(x)


def to_device(x, device, copy=False):
    """`x` on `device` (MXNet's context): `x` itself when it is there
    already (``as_in_ctx``), unless `copy` asks for a new array in any
    case (``copyto``)."""
    return x.copyto(device) if copy else x.as_in_ctx(device)


def device_of(x):
    return x.ctx


def zeros(n, device):
    return np.zeros(n, ctx=device)


def grad_of(fn, x):
    """The gradient of the scalar ``fn(x)`` with respect to `x`: a copy of
    `x` gets a gradient buffer (``attach_grad``), ``fn`` runs inside
    ``autograd.record()``, and ``backward`` fills the buffer; `x` is left
    as it is."""
    x = x.copy()
    x.attach_grad()
    with autograd.record():
        y = fn(x)
    y.backward()
    return x.grad


def astype(x, dtype):
    return x.astype(dtype)


# The hooks of the code written once for both backends (d2lpar/_backend.py)
_FRAMEWORK, _ARRAY, _no_grad, _device_of = (
    'mxnet', np.ndarray, no_grad, device_of)


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


def _all_finite(x):
    return bool(np.isfinite(x).all())


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
