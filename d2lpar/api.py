"""The public names of ``d2lpar.torch`` and ``d2lpar.mxnet`` (their
``__all__``): `SHARED`, framework-free names that both import from here
as they are, each by name, and `BACKEND`, names that each defines in its
own framework. tests/test_api.py checks that both backends define every
one.
"""
from d2lpar.cost import (  # noqa: F401
    GPUS, LINKS, Gpu, Link, allreduce_time, compute_time, critical_batch,
    format_seconds, gpu_link, plot_cost_model, plot_step_time, step_time)
from d2lpar.data import (  # noqa: F401
    DataError, data_dir, data_source, fashion_mnist_arrays)
from d2lpar.distributed.runs import DistributedResult  # noqa: F401
from d2lpar.i18n import (  # noqa: F401
    fmt, pad, say_once, source_code, use_language)
from d2lpar.plots import (  # noqa: F401
    Animator, plot_allreduce, plot_drift, plot_processes, plot_scaling,
    plot_timings, print_processes)
from d2lpar.sharding import (  # noqa: F401
    bubble_fraction, collective_seconds, gpipe_schedule,
    interleaved_schedule, measured_bubble, plot_memory, shard_bounds,
    zero_memory)
from d2lpar.training import (  # noqa: F401
    TrainResult, epoch_shards, learning_rate)

# The names each backend re-exports as they are.
SHARED = ['Animator', 'DataError', 'TrainResult', 'data_dir', 'epoch_shards',
          'fashion_mnist_arrays', 'learning_rate', 'plot_allreduce',
          # the data the last load used, named beside every accuracy
          'data_source',
          'plot_scaling', 'plot_timings', 'say_once', 'source_code',
          'use_language',
          # a column of a table, counted in display columns (a CJK
          # character takes two); numbers as the lesson's language writes
          # them
          'pad', 'fmt',
          # the cost model of an allreduce (d2lpar.cost) and the drift
          # between runs on 1 and 2 devices
          'LINKS', 'Link', 'allreduce_time', 'format_seconds', 'gpu_link',
          'plot_cost_model', 'plot_drift',
          # a step's compute against its communication (d2lpar.cost)
          'GPUS', 'Gpu', 'compute_time', 'critical_batch', 'plot_step_time',
          'step_time',
          # lesson 5 (d2lpar/sharding.py)
          'bubble_fraction', 'collective_seconds', 'gpipe_schedule',
          'interleaved_schedule', 'measured_bubble', 'plot_memory',
          'shard_bounds', 'zero_memory',
          # lesson 4 (d2lpar/distributed/__init__.py, d2lpar/plots.py)
          'DistributedResult', 'plot_processes', 'print_processes']
# The public names that d2lpar.torch and d2lpar.mxnet each define in their
# own framework (tests/test_api.py checks that both define every one)
BACKEND = [
    'Benchmark', 'Timeline', 'Timer', 'allreduce',
    'check_finite', 'copy_bandwidth', 'cpu', 'direct_allreduce',
    'distributed_commands',
    'evaluate_accuracy', 'forward_backward', 'get_params', 'gpu', 'launch',
    'lenet', 'lenet_params', 'load_data_fashion_mnist', 'loss',
    'matmul_rate', 'measure_allreduce', 'num_gpus', 'parameter_drift',
    'products_that_fit', 'resnet18', 'ring_allreduce',
    'sgd', 'split_batch',
    'synchronize', 'train', 'train_batch', 'train_concise',
    'train_distributed', 'train_step_timeline', 'try_all_gpus',
    'try_devices', 'try_gpu',
    # lesson 5
    'adam', 'all_gather', 'gpipe_step', 'held_bytes', 'mlp', 'mlp_params',
    'pipeline_params', 'recomputation_step', 'reduce_scatter',
    'split_columns', 'split_rows',
    'stage_forward', 'tensor_parallel_mlp', 'zero_replicas', 'zero_step',
    # array operations that no lesson calls any more, kept for
    # compatibility (d2lpar/_torch/arrays.py, d2lpar/_mxnet/arrays.py)
    'astype', 'concat', 'device_of', 'grad_of', 'no_grad', 'relu',
    'to_device', 'zeros']
__all__ = SHARED
