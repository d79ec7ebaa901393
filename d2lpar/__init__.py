"""d2lpar: helpers for the lessons on automatic parallelism and multi-device
training from *Dive into Deep Learning*.

Pick a backend by import path, as with d2l itself::

    from d2lpar import torch as d2l   # PyTorch
    from d2lpar import mxnet as d2l   # MXNet

Importing ``d2lpar`` alone imports no deep learning framework.
"""

__version__ = '0.1.0'
