"""PyTorch's array operations for the lessons' code that is written once
for both frameworks (cells #@tab all call them as ``d2l.name``), and the
private hooks of d2lpar/_backend.py; d2lpar/_mxnet/arrays.py defines the
same names for MXNet."""
import torch
from torch.nn import functional as F

from d2lpar.i18n import error_message
from d2lpar._torch.devices import _copy_into  # noqa: F401 (a hook)

concat = torch.cat  # tensors on one device, end to end along axis 0


def no_grad():
    """``torch.no_grad()``: inside ``with no_grad():`` autograd records
    nothing."""
    return torch.no_grad()


def relu(x):
    return F.relu(x)


def to_device(x, device, copy=False):
    """`x` on `device`: `x` itself when it is there already, unless `copy`
    asks for a new tensor in any case."""
    return x.to(device, copy=copy)


def device_of(x):
    return x.device


def zeros(n, device):
    return torch.zeros(n, device=device)


def grad_of(fn, x):
    """The gradient of the scalar tensor ``fn(x)`` with respect to `x`,
    from ``torch.autograd.grad``: `x` and its ``.grad`` are left as they
    are."""
    x = x.detach().requires_grad_()
    return torch.autograd.grad(fn(x), x)[0]


def astype(x, dtype):
    return x.to(dtype)


# The hooks of the code written once for both backends (d2lpar/_backend.py)
_FRAMEWORK, _ARRAY, _no_grad, _device_of = (
    'torch', torch.Tensor, no_grad, device_of)


def _memory(x):
    return (str(x.device), x.data_ptr()) if x.numel() else id(x)


def _all_finite(x):
    return bool(torch.isfinite(x).all())


def _flat(x):
    if not x.is_contiguous():
        raise ValueError(error_message(
            'ring_allreduce works on contiguous tensors: call .contiguous() '
            'on them first.'))
    return x.view(-1)


def _copy_like(src, dst):
    return src.to(dst.device, non_blocking=dst.device.type == 'cuda')
