"""Entry point for PyTorch's backend autoload (group ``torch.backends``).

``import torch`` calls :func:`load`, which imports torch_tpu and so makes the
``tpu`` device available. Set ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` to skip it.
"""


def load():
    import torch_tpu  # noqa: F401  (registration happens on import)
