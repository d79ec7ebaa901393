"""One way to join a framework (issue 31): the functions written once for
both frameworks (d2lpar/_backend.py) take a backend object, and each
backend module defines its own function around each of them."""
import ast
import importlib
import inspect
import pathlib

import pytest

from d2lpar import _backend

ROOT = pathlib.Path(__file__).resolve().parent.parent
BACKEND_OBJECTS = {'torch': ('d2lpar._torch.backend', 'TorchBackend'),
                   'mxnet': ('d2lpar._mxnet.backend', 'MXNetBackend')}


def _framework_free_functions():
    """The public functions of _backend.py that take a backend object."""
    return sorted(
        name for name, fn in vars(_backend).items()
        if inspect.isfunction(fn) and fn.__module__ == _backend.__name__
        and not name.startswith('_')
        and next(iter(inspect.signature(fn).parameters), None) == 'backend')


def _methods(cls):
    return {n for n in dir(cls) if not n.startswith('_')}


def test_there_are_framework_free_functions():
    assert {'try_devices', 'ring_allreduce', 'parameter_drift',
            'mlp_params'} <= set(_framework_free_functions())


@pytest.mark.parametrize('framework', ['torch', 'mxnet'])
@pytest.mark.parametrize('name', _framework_free_functions())
def test_each_backend_defines_the_function_itself(framework, name):
    """Defined in the backend module, where go-to-definition lands, with
    the docstring of the framework-free function and without its backend
    parameter."""
    d2l = importlib.import_module(f'd2lpar.{framework}')
    fn = getattr(d2l, name)
    assert fn.__module__ == d2l.__name__
    assert inspect.getsourcefile(fn) == d2l.__file__
    assert fn.__doc__ == getattr(_backend, name).__doc__
    assert not hasattr(fn, '__wrapped__')
    # The parameters of the framework-free function, without the backend
    # (and, for parameter_drift, the backend's own functions it is given)
    free = dict(inspect.signature(getattr(_backend, name)).parameters)
    for given in ('backend', 'get_params', 'train_batch', 'try_devices'):
        if given != name:
            free.pop(given, None)
    assert dict(inspect.signature(fn).parameters) == free


def test_both_backend_objects_have_the_same_methods():
    torch_cls, mxnet_cls = (
        getattr(importlib.import_module(module), cls)
        for module, cls in BACKEND_OBJECTS.values())
    assert _methods(torch_cls) == _methods(mxnet_cls)


def test_the_framework_free_code_asks_only_for_what_a_backend_has():
    """Every ``backend.name`` in d2lpar/_backend.py (and in nothing else:
    no ``d2l._hook`` found by name) is an attribute of the backend
    objects."""
    tree = ast.parse((ROOT / 'd2lpar' / '_backend.py').read_text(
        encoding='utf-8'))
    asked = {node.attr for node in ast.walk(tree)
             if isinstance(node, ast.Attribute)
             and isinstance(node.value, ast.Name)
             and node.value.id == 'backend'}
    receivers = {node.value.id for node in ast.walk(tree)
                        if isinstance(node, ast.Attribute)
                        and isinstance(node.value, ast.Name)}
    assert 'd2l' not in receivers
    module, cls = BACKEND_OBJECTS['torch']
    have = _methods(getattr(importlib.import_module(module), cls))
    assert asked and asked <= have, asked - have
