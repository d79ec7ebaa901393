"""A learning rate that is NaN, infinite or not above 0, and training that
diverges, stop with an error that says so and in which epoch, instead of
a silent test accuracy of 0.1."""
import math

import pytest

SMALL = dict(batch_size=64, num_epochs=2, num_train=256, num_test=128,
             plot=False)


@pytest.mark.parametrize('lr', [math.nan, math.inf, 0.0, -0.1])
def test_train_refuses_a_learning_rate_that_cannot_train(backend, lr):
    with pytest.raises(ValueError, match=r'The learning rate must be a '
                       r'finite number above 0, got (nan|inf|0\.0|-0\.1)'):
        backend.train(1, lr=lr, **SMALL)


def test_train_says_in_which_epoch_it_diverged(backend):
    backend.seed(0)
    with pytest.raises(FloatingPointError, match=r'Training diverged in '
                       r'epoch 1: .*learning rate 1000000.0 is too large'):
        backend.train(1, lr=1e6, **SMALL)


@pytest.mark.parametrize('lr', [math.nan, math.inf])
def test_train_concise_refuses_a_learning_rate_that_cannot_train(backend, lr):
    net = backend.resnet18(width=4)
    with pytest.raises(ValueError, match='The learning rate must be a finite '
                       'number above 0'):
        backend.train_concise(net, [backend.cpu()], lr=lr, **SMALL)


def test_check_finite_names_the_epoch(backend):
    import numpy as np
    good = backend.array(np.ones(3, np.float32))
    bad = backend.array(np.array([1, np.nan, 2], np.float32))
    backend.check_finite([good], 0, 0.1)  # nothing to say
    with pytest.raises(FloatingPointError, match='diverged in epoch 3'):
        backend.check_finite([good, bad], 2, 0.1)
