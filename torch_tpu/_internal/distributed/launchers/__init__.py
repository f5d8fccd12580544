"""Launchers (``python -m torch_tpu._internal.distributed.launchers.singlehost_wrapper``)."""
