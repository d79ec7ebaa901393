"""PyTorch's backend object, `BACKEND`: what the functions written once
for both frameworks (d2lpar/_backend.py) ask of PyTorch.
d2lpar/_mxnet/backend.py has the same methods for MXNet."""
import torch

from d2lpar.i18n import error_message
from d2lpar._torch import arrays as _arrays
from d2lpar._torch import devices as _devices


class TorchBackend:
    """PyTorch for the framework-free functions of d2lpar/_backend.py."""
    framework = 'torch'  # the name d2lpar.distributed knows it by
    array_type = torch.Tensor

    # Devices
    num_gpus = staticmethod(_devices.num_gpus)
    cpu = staticmethod(_devices.cpu)
    synchronize = staticmethod(_devices.synchronize)

    def gpu_device(self, i):
        """GPU `i` (unchecked: `_backend.gpu` checks it)."""
        return torch.device(f'cuda:{i}')

    def stand_in(self, i):
        """CPU stand-in `i`."""
        return torch.device('cpu', i)

    def stand_in_label(self, i):
        """CPU stand-in `i` as the lessons write it."""
        return f'cpu:{i}'

    def stand_in_threads(self):
        """The CPU threads each stand-in computes with."""
        return _devices._STAND_INS.num_threads

    def free_bytes(self, device):
        """The bytes free on `device` when it is a GPU, else None."""
        device = torch.device(device)
        if device.type != 'cuda':
            return None
        cached = (torch.cuda.memory_reserved(device)
                  - torch.cuda.memory_allocated(device))
        return torch.cuda.mem_get_info(device)[0] + cached

    def to_arrays(self, X, y):
        """NumPy examples `X` and labels `y` as tensors."""
        X, y = torch.from_numpy(X), torch.from_numpy(y)
        if torch.cuda.is_available():  # pinned: allows non_blocking copies
            X, y = X.pin_memory(), y.pin_memory()
        return X, y

    # Arrays
    no_grad = staticmethod(_arrays.no_grad)
    device_of = staticmethod(_arrays.device_of)
    relu = staticmethod(_arrays.relu)
    concat = staticmethod(_arrays.concat)

    def full(self, n, value, device):
        """A vector of `n` times `value` on `device`."""
        return torch.full((n,), value, device=device)

    def copy_into(self, src, dst):
        """Copy `src` into `dst` in place."""
        dst.copy_(src)

    def copy_like(self, src, dst):
        """`src` on the device of `dst`."""
        return src.to(dst.device, non_blocking=dst.device.type == 'cuda')

    def flat(self, x):
        """A 1-D view of `x` that shares its memory."""
        if not x.is_contiguous():
            raise ValueError(error_message(
                'ring_allreduce works on contiguous tensors: call '
                '.contiguous() on them first.'))
        return x.view(-1)

    def memory(self, x):
        """Where the data of `x` lives: views of one tensor share it."""
        return (str(x.device), x.data_ptr()) if x.numel() else id(x)

    def all_finite(self, x):
        """Whether `x` holds neither NaN nor infinite values."""
        return bool(torch.isfinite(x).all())

    def max_abs_diff(self, a, b):
        """The largest absolute difference between `a` and `b`."""
        return float((a.detach() - b.detach().to(a.device)).abs().max())

    # The small models' arrays, on the CPU
    def normal(self, shape, std):
        """Normal random numbers of `shape`, mean 0, deviation `std`."""
        return torch.randn(size=shape) * std

    def zeros(self, n):
        """A vector of `n` zeros."""
        return torch.zeros(n)

    def dot(self, X, W):
        """The matrix product of `X` and `W`."""
        return X @ W

    def nbytes(self, x):
        """The bytes of the data of `x`."""
        return x.numel() * x.element_size()


BACKEND = TorchBackend()
