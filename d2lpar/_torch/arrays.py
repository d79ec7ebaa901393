"""A few array operations in PyTorch, public as ``d2l.name``
(``d2l.to_device``, ``d2l.grad_of``, ...) and kept for compatibility: no
lesson calls them any more, since each lesson shows each framework's own
code. BACKEND (backend.py) uses some of them; d2lpar/_mxnet/arrays.py
defines the same names for MXNet."""
import torch
from torch.nn import functional as F

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

