"""The PyTorch glue of d2lpar.torch that no lesson shows."""
