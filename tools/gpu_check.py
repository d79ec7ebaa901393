"""Fail fast, with a clear message, when `make test-gpu` runs on a machine
whose GPUs the tests cannot use.

Usage::

    python3 tools/gpu_check.py --driver   # stdlib only, before the venv:
                                          # is there an NVIDIA GPU at all?
    .venv/bin/python tools/gpu_check.py   # what PyTorch and MXNet see

The second form requires at least one GPU visible to PyTorch (at least
``$D2LPAR_MIN_GPUS`` if set), and reports the GPUs MXNet sees: the MXNet
wheel from PyPI is CPU-only, so MXNet GPUs are required only when
``D2LPAR_REQUIRE_MXNET_GPU=1``. Exit status 0 when fine, 1 otherwise.

``D2LPAR_REHEARSAL=1`` (make test-gpu-rehearsal, on a machine with no
GPU) reports the same, says that no GPU is required, and passes: the
rehearsal runs the steps of make test-gpu on the CPU.
"""
import glob
import os
import shutil
import subprocess
import sys

NO_GPU = ('no GPU visible: make test-gpu needs a machine with GPUs; use '
          'make test on CPU')


def rehearsal():
    return os.environ.get('D2LPAR_REHEARSAL') == '1'


def rehearsal_note(what):
    print(f'gpu_check: rehearsal (D2LPAR_REHEARSAL=1): {what}; no GPU '
          f'required, the steps run on the CPU')


def fail(message, details=()):
    print(f'\nERROR: {message}', file=sys.stderr)
    for line in details:
        print(f'  {line}', file=sys.stderr)
    print(file=sys.stderr)
    sys.exit(1)


def driver_check():
    """No venv needed: look for the NVIDIA driver's devices (Linux, or
    WSL2's /dev/dxg) or a working `nvidia-smi`."""
    if glob.glob('/dev/nvidia[0-9]*') or os.path.exists('/dev/dxg'):
        print('gpu_check: NVIDIA device files found')
        return
    smi = shutil.which('nvidia-smi')
    if smi:
        try:
            out = subprocess.run([smi, '-L'], capture_output=True,
                                 text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ''
        if 'GPU' in out:
            print(f'gpu_check: nvidia-smi -L:\n{out.strip()}')
            return
    if rehearsal():
        return rehearsal_note('no NVIDIA driver or device found')
    fail(NO_GPU, ['no /dev/nvidia* device, no /dev/dxg, and '
                  + ('`nvidia-smi -L` lists no GPU' if smi else
                     'no nvidia-smi on the PATH')
                  + ': is the NVIDIA driver installed and the GPU passed '
                  'to this machine or container?'])


def framework_check():
    import numpy
    import torch
    n_torch = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(n_torch)]
    print(f'gpu_check: Python {sys.version.split()[0]} ({sys.executable}), '
          f'numpy {numpy.__version__} ({os.path.dirname(numpy.__file__)})')
    print(f'gpu_check: PyTorch {torch.__version__} (CUDA '
          f'{torch.version.cuda}, {os.path.dirname(torch.__file__)}) sees '
          f'{n_torch} GPU(s): {names}')
    if n_torch == 0 and rehearsal():
        rehearsal_note('PyTorch sees no GPU')
    elif n_torch == 0:
        details = [f'torch {torch.__version__}, built for CUDA '
                   f'{torch.version.cuda}',
                   f'CUDA_VISIBLE_DEVICES='
                   f'{os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)")}']
        if torch.version.cuda is None:
            details.append('this torch wheel is CPU-only: install a CUDA '
                           'build')
        else:
            details.append(f'the NVIDIA driver must support CUDA '
                           f'{torch.version.cuda} (see `nvidia-smi`)')
        fail(NO_GPU, details)
    wanted = int(os.environ.get('D2LPAR_MIN_GPUS', '1'))
    if n_torch < wanted and not rehearsal():
        fail(f'D2LPAR_MIN_GPUS={wanted}, but PyTorch sees only {n_torch} '
             f'GPU(s)')
    if n_torch == 1:
        print('gpu_check: only one GPU: the two-GPU checks of tests/gpu '
              'will be skipped (set D2LPAR_MIN_GPUS=2 to require two)')

    try:
        import mxnet
    except ImportError:
        if os.environ.get('D2LPAR_REQUIRE_MXNET_GPU') == '1':
            fail('D2LPAR_REQUIRE_MXNET_GPU=1, but MXNet is not installed '
                 'here')
        print('gpu_check: MXNet is not installed here: the PyTorch track '
              'only (tests/gpu lists the MXNet checks it did not run)')
        return
    try:
        n_mx = mxnet.npx.num_gpus()
        mx_info = f'MXNet {mxnet.__version__} sees {n_mx} GPU(s)'
    except Exception as e:  # a CUDA wheel without its libraries, ...
        n_mx, mx_info = 0, f'MXNet cannot count GPUs ({e})'
    if os.environ.get('D2LPAR_REQUIRE_MXNET_GPU') == '1' and n_mx == 0:
        fail(f'D2LPAR_REQUIRE_MXNET_GPU=1, but {mx_info}',
             ['the mxnet wheel from PyPI is CPU-only: install '
              'mxnet-cu112==1.9.1 (the cuXXX matching your CUDA) into the '
              'Python of make test-gpu (PYTHON=) instead'])
    note = '' if n_mx else (' (the PyPI mxnet wheel is CPU-only; MXNet '
                            'lessons use CPU stand-ins)')
    print(f'gpu_check: {mx_info}{note}')


if __name__ == '__main__':
    if sys.argv[1:] == ['--driver']:
        driver_check()
    elif not sys.argv[1:]:
        framework_check()
    else:
        fail(f'usage: {sys.argv[0]} [--driver]')
