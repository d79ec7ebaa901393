"""The optimizers that ``d2lpar.distributed.kvstore_train`` hands to the
KVStore, and what they hold.

With the distributed KVStore, the optimizer runs on the servers: a worker
pickles it and sends it to each server, which creates the state of a key
(SGD's momentum, Adam's two moving averages) when it first updates that
key, for the part of the key that it holds. These subclasses of MXNet's
SGD and Adam do exactly what MXNet's do, and on a server (DMLC_ROLE
``server``, number D2LPAR_SERVER, given by ``d2lpar.distributed``) they
also write, each time they create a state, what the server holds so far
to ``<out_dir>/server<i>.json``: for each key, the bytes of its weights
and of its optimizer state. The servers import this module while MXNet
itself is still being imported (they serve inside ``import mxnet``), so
it needs nothing but ``mxnet.optimizer``.
"""
import json
import os

from d2lpar.mxnet_reach import shims as _shims  # noqa: E402

_shims()  # numpy.bool, distutils: before MXNet loads

import mxnet as mx
import numpy as onp


def state_bytes(state):
    """Bytes of an optimizer state: None, an array, or tuples of them."""
    if state is None:
        return 0
    if isinstance(state, (tuple, list)):
        return sum(state_bytes(s) for s in state)
    return int(state.size) * onp.dtype(state.dtype).itemsize


class _Counted:
    out_dir = None  # set by the worker before it sends the optimizer

    def create_state(self, index, weight):
        state = super().create_state(index, weight)
        server = os.environ.get('D2LPAR_SERVER')
        if os.environ.get('DMLC_ROLE') == 'server' and server is not None \
                and self.out_dir:
            held = self.__dict__.setdefault('_held', {})
            held[str(index)] = {'weight_bytes': state_bytes(weight),
                                'optimizer_bytes': state_bytes(state)}
            summary = {'server': int(server), 'keys': held,
                       'parameter_bytes': sum(
                           k['weight_bytes'] for k in held.values()),
                       'optimizer_bytes': sum(
                           k['optimizer_bytes'] for k in held.values())}
            path = os.path.join(self.out_dir, f'server{server}.json')
            with open(path + '.tmp', 'w') as f:
                json.dump(summary, f, indent=1)
            os.replace(path + '.tmp', path)  # never half a file
        return state

    def __getstate__(self):
        state = super().__getstate__()
        state.pop('_held', None)
        return state


class SGD(_Counted, mx.optimizer.SGD):
    pass


class Adam(_Counted, mx.optimizer.Adam):
    pass
