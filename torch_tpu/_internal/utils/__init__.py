"""Parity and tracing helpers; see :mod:`torch_tpu._internal.utils.utils`."""
from torch_tpu._internal.utils import utils  # noqa: F401
from torch_tpu._internal.utils.utils import CheckValueMode, OpTracer, assert_close, format_model

__all__ = ["CheckValueMode", "OpTracer", "assert_close", "format_model", "utils"]
