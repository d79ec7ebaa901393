"""The training loops of the lessons see the examples in a new order every
epoch (each epoch still sees every example once): a loop that repeats one
order learns worse, and no accuracy test would notice it in one epoch.
Lesson 4's scripts: tests/test_distributed.py."""
import numpy as np

NUM_TRAIN, BATCH = 96, 16


def _epochs(seen, steps_per_epoch):
    """The examples seen, cut into epochs."""
    return [np.concatenate(seen[i:i + steps_per_epoch])
            for i in range(0, len(seen), steps_per_epoch)]


def _check_new_order_every_epoch(epochs):
    assert len(epochs) == 3
    for order in epochs:  # every example once per epoch
        assert sorted(order) == sorted(epochs[0])
    orders = [tuple(order) for order in epochs]
    assert len(set(orders)) == 3, 'two epochs saw the examples in one order'


def _ids(X):
    """Tell examples apart by their pixels: the sum of each image."""
    return np.round(X.reshape(len(X), -1).sum(axis=1), 3)


def test_the_data_iterator_of_lesson_2_shuffles_every_epoch(backend):
    train_iter, _ = backend.load_data_fashion_mnist(BATCH, NUM_TRAIN, 32)
    seen = [_ids(backend.numpy(X)) for _ in range(3) for X, _ in train_iter]
    _check_new_order_every_epoch(_epochs(seen, NUM_TRAIN // BATCH))


def test_the_concise_training_loop_shuffles_every_epoch(backend):
    seen = []
    # A linear classifier that notes the examples each step gives it
    net = backend.recorder(lambda X: seen.append(_ids(X)))
    device = backend.cpu()
    args = dict(batch_size=BATCH, lr=0.1, num_epochs=3, num_train=NUM_TRAIN,
                num_test=32, warmup_epochs=0,
                report=lambda epoch, acc, seconds: None)
    backend.fit_on(net, device, **args)
    _check_new_order_every_epoch(_epochs(seen, NUM_TRAIN // BATCH))
