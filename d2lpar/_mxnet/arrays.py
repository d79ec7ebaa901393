"""The names of d2lpar/_torch/arrays.py, in MXNet: array operations
public as ``d2l.name`` and kept for compatibility (no lesson calls them
any more); BACKEND (backend.py) uses some of them."""
import contextlib

from mxnet import autograd, np, npx

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

