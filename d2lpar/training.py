"""What the training loops of both backends share: the result of a run
(`TrainResult`), the loop around `train_concise`, the learning-rate
schedule, and which examples each process takes in each step.
"""
import dataclasses
import math

import numpy as np

from d2lpar.data import fashion_mnist_arrays
from d2lpar.i18n import N_, _
from d2lpar.plots import Animator


@dataclasses.dataclass(kw_only=True)
class TrainResult:
    """What `train` returns: enough to print, tabulate or plot a run."""
    test_acc: float
    sec_per_epoch: float
    devices: list
    num_epochs: int
    num_examples: int
    test_accs: list

    @property
    def examples_per_sec(self):
        return self.num_examples / self.sec_per_epoch

    def __str__(self):
        return _('test acc: {test_acc:.2f}, {sec_per_epoch:.1f} sec/epoch '
                 'on {devices}').format(test_acc=self.test_acc,
                                        sec_per_epoch=self.sec_per_epoch,
                                        devices=self.devices)


def run_concise(devices, batch_size, num_epochs, num_train, num_test, plot,
                train):
    """What both backends' `train_concise` share: call ``train(report)``,
    which trains and calls ``report(epoch, test accuracy, seconds)`` after
    each epoch, plot the accuracy as it comes, then print and return the
    `TrainResult`."""
    # Load the data here first: its notice comes before the training, and
    # the processes of a multi-device run find it in the cache
    n = len(fashion_mnist_arrays(num_train, num_test)[1])
    animator = Animator(N_('epoch'), N_('test acc'), xlim=[1, num_epochs],
                        ylim=[0, 1]) if plot else None
    accs, seconds = [], []

    def report(epoch, acc, sec):
        accs.append(acc)
        seconds.append(sec)
        if animator:
            animator.add(epoch + 1, (acc,))

    train(report)
    result = TrainResult(test_acc=accs[-1],
                         sec_per_epoch=sum(seconds) / len(seconds),
                         devices=[str(d) for d in devices],
                         num_epochs=num_epochs,
                         num_examples=n // batch_size * batch_size,
                         test_accs=accs)
    print(result)
    return result


def learning_rate(step, lr, *, warmup_steps, total_steps):
    """The learning rate of step `step` (counted from 0) out of
    `total_steps`: a linear warm-up from ``lr / warmup_steps`` to `lr`
    over the first `warmup_steps` steps, then a cosine decay to 0."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return lr * 0.5 * (1 + math.cos(math.pi * progress))


def epoch_shards(num_examples, batch_size, *, rank=0, world_size=1,
                 seed=0):
    """The examples that process `rank` of `world_size` takes in each step
    of one epoch. Every process draws the same shuffled order (from
    `seed`), cuts it into global batches of `batch_size` (dropping a last,
    partial batch) and takes its own contiguous shard of each."""
    b = batch_size // world_size
    order = np.random.default_rng(seed).permutation(num_examples)
    for i in range(num_examples // batch_size):
        start = i * batch_size + rank * b
        yield order[start:start + b]
