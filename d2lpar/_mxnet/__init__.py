"""The MXNet glue of d2lpar.mxnet that no lesson shows.

Importing this package sets the two environment variables that must be in
place before MXNet loads; every module of it imports MXNet after that."""
import os

from d2lpar import standins as _standins

# Every CPU stand-in cpu(i) computes with half of the CPU's threads (see
# d2lpar.standins): MXNet runs each context on an engine thread of its own,
# and each operator with OMP_NUM_THREADS threads, unless you set it.
if not os.environ.get('OMP_NUM_THREADS'):
    os.environ['OMP_NUM_THREADS'] = str(_standins.threads_per_stand_in(
        os.cpu_count() or 1))
STAND_IN_THREADS = int(os.environ['OMP_NUM_THREADS'])
# All CPU contexts share one pool of temporary workspaces (4 by default),
# handed out in turn; an operator holds its workspace while it runs. With
# too few, the 50 products queued on cpu(1) wait for those of cpu(0) that
# hold the same workspaces, and two stand-ins compute one after the other
# (measured: 0.88 of the sum of the parts with 16, 0.50 with 64, on 2
# cores); a LeNet step queues more operators than 64.
os.environ.setdefault('MXNET_CPU_TEMP_COPY', '256')

# MXNet itself, after its shims (numpy.bool, distutils on Python 3.12), or
# one sentence in the student's language where it is not installed, which
# stops the lesson's first cell (d2lpar.mxnet_reach).
from d2lpar.mxnet_reach import require_mxnet  # noqa: E402

require_mxnet()
